"""Property-based: every public call, given a generated bad argument, raises
only :class:`LiftbridgeError` subclasses (or succeeds, when the generated value
happens to be valid); generated good names, subjects and options are never
refused, and the server stores them.

These tests run against a server of their own (module scope), not the shared
session server: if a generated value ever slipped past the SDK's checks and
crashed the server, only this module would notice. Generation avoids values
that are valid but expensive (thousands of partitions, timeouts of hours) and
addresses other than 127.0.0.1.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import liftbridge
from liftbridge._core import _validate
from liftbridge.testing import LocalServer

BAD_EXAMPLES = 60
"""Examples per public call with a bad argument; the whole module takes about
40 seconds on a busy two-core machine (most bad values fail before any RPC)."""

GOOD_EXAMPLES = 25

PROPERTY_SETTINGS = settings(
    max_examples=BAD_EXAMPLES,
    deadline=timedelta(seconds=30),  # one example makes a few RPCs of at most 3 s
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    database=None,  # no example database left in the checkout
    derandomize=False,
)

STREAM = "property-stream-7c1f"  # a name generation will not hit by chance
RESULT_WAIT = 15.0
LONGEST_WAIT = 2.0
"""A generated valid timeout above this is not used: publishing to a subject
no stream listens on, or waiting on a running subscription, takes it all."""


@pytest.fixture(scope="module")
def own_server() -> Iterator[LocalServer]:
    with LocalServer() as local:
        with liftbridge.Client(local.address, rpc_timeout=3.0) as setup:
            setup.create_stream(STREAM, partitions=2)
        yield local


@pytest.fixture
def client(own_server: LocalServer) -> Iterator[liftbridge.Client]:
    """A client per test, closed before the thread check: an example that
    breaks its publish lane (a tiny timeout) makes the next publish open a new
    one, whose sending thread lives as long as the client."""
    with liftbridge.Client(own_server.address, rpc_timeout=3.0, ack_wait=3.0) as c:
        yield c


# -------------------------------------------------------------- bad values --

_text_with_surrogate = st.builds(
    lambda a, b: f"{a}\ud800{b}", st.text(max_size=3), st.text(max_size=3)
)

_edge_ints = st.sampled_from(
    [-(2**64), -(2**63) - 1, -(2**31) - 1, -1, 0, 2**31, 2**32, 2**63, 2**64, 10**30]
)

_odd_objects = st.sampled_from(
    [
        object(),
        liftbridge.PartitionByKey,  # the class, not an instance
        "bykey",
        liftbridge.AckPolicy.NONE,
        liftbridge.StartPosition.EARLIEST,
        liftbridge.StopPosition.LATEST,
        datetime(2024, 1, 1),  # naive
        datetime(9999, 1, 1, tzinfo=UTC),
        datetime(1, 1, 1, tzinfo=UTC),
        timedelta(days=10**8),
        timedelta(seconds=-1),
        "..",
        "a\x00b",
        "x" * 300,
        "a" * 5000,
        {"\ud800": b"x"},
        {"k": "text"},
        {1: b"x"},
        [2**40],
        ["a", 1],
        (lambda *args: None),
    ]
)

ANY_VALUE: st.SearchStrategy[Any] = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    _edge_ints,
    st.floats(),  # NaN and the infinities included
    st.text(max_size=8),
    _text_with_surrogate,
    st.binary(max_size=8),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.binary(max_size=3), max_size=2),
    _odd_objects,
)
"""Anything: most of it is invalid for any given argument."""

BAD_ADDRESSES = st.sampled_from(
    [
        "127.0.0.1:70000",
        "127.0.0.1:0",
        "127.0.0.1:-1",
        "127.0.0.1",
        ":9292",
        "127.0.0.1:\u0661",
        "bad host:1",
        "\ud800:1",
        "",
        [],
        ["127.0.0.1:x"],
        [1],
        None,
        5,
        b"127.0.0.1:1",
    ]
)
"""Addresses are drawn from this list only: nothing but 127.0.0.1 is dialled."""


def _expensive(call: str, arg: str, value: Any) -> bool:
    """Valid values this test does not spend time or memory on."""
    if call == "Subscription.wait" and value is None:
        return True  # waits until the subscription ends: never, here
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if "timeout" in arg or arg in ("wait", "join_timeout", "ack_wait", "rpc_timeout"):
        return LONGEST_WAIT < value <= _validate.MAX_SECONDS
    if arg in ("partitions", "max_inflight"):
        return 2 <= value <= 10**5
    return False


# ------------------------------------------------------------ the calls --


@dataclass(frozen=True)
class Env:
    client: liftbridge.Client
    server: LocalServer


@dataclass(frozen=True)
class Call:
    """One public call: its good arguments, and how to run it and dispose of
    what it returns."""

    name: str
    good: dict[str, Any]
    run: Callable[[Env, dict[str, Any]], Any]
    special: dict[str, st.SearchStrategy[Any]] | None = None


def _dispose(result: Any) -> None:
    if isinstance(result, (liftbridge.Subscription, liftbridge.Consumer, liftbridge.PullConsumer)):
        result.close()
    elif hasattr(result, "result"):
        with contextlib.suppress(liftbridge.LiftbridgeError):
            result.result(timeout=RESULT_WAIT)


def _with_subscription(env: Env, kwargs: dict[str, Any]) -> Any:
    with env.client.subscribe(STREAM, start=liftbridge.StartPosition.EARLIEST) as sub:
        return sub.wait(**kwargs)


def _closing_subscription(env: Env, kwargs: dict[str, Any]) -> Any:
    sub = env.client.subscribe(STREAM, start=liftbridge.StartPosition.EARLIEST)
    try:
        sub.close(**kwargs)
    finally:
        sub.close()
        sub.wait(RESULT_WAIT)  # a generated timeout may have been too short to see it end


def _with_pull_consumer(env: Env, kwargs: dict[str, Any]) -> Any:
    with env.client.pull(STREAM, start=liftbridge.StartPosition.EARLIEST) as consumer:
        return consumer.fetch(**kwargs)


def _consumer_subscribe(env: Env, kwargs: dict[str, Any]) -> Any:
    with env.client.create_consumer("property-group", join_timeout=LONGEST_WAIT) as consumer:
        consumer.subscribe(**kwargs)


def _module_function(name: str) -> Callable[[Env, dict[str, Any]], Any]:
    return lambda env, kwargs: getattr(liftbridge, name)(**kwargs)


def _with_consumer(method: str) -> Callable[[Env, dict[str, Any]], Any]:
    def run(env: Env, kwargs: dict[str, Any]) -> Any:
        with env.client.create_consumer("property-group") as consumer:
            return getattr(consumer, method)(**kwargs)

    return run


def _new_client(env: Env, kwargs: dict[str, Any]) -> Any:
    if kwargs["addresses"] == "<server>":
        kwargs["addresses"] = env.server.address
    liftbridge.Client(**kwargs).close()


def _method(name: str) -> Callable[[Env, dict[str, Any]], Any]:
    return lambda env, kwargs: getattr(env.client, name)(**kwargs)


def _new_nats_publisher(env: Env, kwargs: dict[str, Any]) -> Any:
    if kwargs["url"] == "<server>":
        kwargs["url"] = env.server.nats_url
    liftbridge.NatsPublisher(**kwargs).close()


def _nats_publish(env: Env, kwargs: dict[str, Any]) -> Any:
    with liftbridge.NatsPublisher(env.server.nats_url, ack_wait=3.0) as publisher:
        return publisher.publish(**kwargs)


LEADER = liftbridge.AckPolicy.LEADER
PUBLISH_ARGS: dict[str, Any] = {
    "stream": STREAM,
    "value": b"v",
    "key": None,
    "headers": None,
    "partition": None,
    "partitioner": None,
    "ack_policy": LEADER,
    "expected_offset": None,
    "correlation_id": None,
    "ack_inbox": None,
    "timeout": None,
}

CALLS = [
    Call(
        "create_stream",
        {
            "name": "property-created",
            "subject": None,
            "group": None,
            "replication_factor": None,
            "max_replication": False,
            "partitions": 1,
            "retention_max_bytes": None,
            "retention_max_messages": None,
            "retention_max_age": None,
            "cleaner_interval": None,
            "segment_max_bytes": None,
            "segment_max_age": None,
            "compact_enabled": None,
            "compact_max_goroutines": None,
            "auto_pause_time": None,
            "auto_pause_disable_if_subscribers": None,
            "min_isr": None,
            "optimistic_concurrency_control": None,
            "encryption": None,
            "timeout": None,
        },
        _method("create_stream"),
    ),
    Call("delete_stream", {"name": "property-missing", "timeout": None}, _method("delete_stream")),
    Call(
        "pause_stream",
        {"name": "property-missing", "partitions": None, "resume_all": False, "timeout": None},
        _method("pause_stream"),
    ),
    Call(
        "set_stream_readonly",
        {"name": "property-missing", "partitions": None, "readonly": True, "timeout": None},
        _method("set_stream_readonly"),
    ),
    Call("fetch_metadata", {"timeout": None}, _method("fetch_metadata")),
    Call(
        "fetch_partition_metadata",
        {"stream": STREAM, "partition": 0, "timeout": None},
        _method("fetch_partition_metadata"),
    ),
    Call("publish", PUBLISH_ARGS, _method("publish")),
    Call("publish_async", {**PUBLISH_ARGS, "ack_handler": None}, _method("publish_async")),
    Call(
        "publish_to_subject",
        {
            "subject": STREAM,
            "value": b"v",
            "key": None,
            "headers": None,
            "ack_inbox": None,
            "correlation_id": None,
            "ack_policy": LEADER,
            "timeout": None,
        },
        _method("publish_to_subject"),
    ),
    Call(
        "subscribe",
        {
            "stream": STREAM,
            "handler": None,
            "partition": 0,
            "start": liftbridge.StartPosition.EARLIEST,
            "stop": None,
            "read_replica": False,
            "resume": False,
        },
        _method("subscribe"),
    ),
    Call(
        "set_cursor",
        {"cursor_id": "c", "stream": STREAM, "partition": 0, "offset": 1, "timeout": None},
        _method("set_cursor"),
    ),
    Call(
        "fetch_cursor",
        {"cursor_id": "c", "stream": STREAM, "partition": 0, "timeout": None},
        _method("fetch_cursor"),
    ),
    Call(
        "create_consumer",
        {
            "group_id": "g",
            "consumer_id": None,
            "auto_checkpoint": 5.0,
            "auto_offset": liftbridge.AutoOffset.EARLIEST,
            "on_assigned": None,
            "on_revoked": None,
            "min_pending": None,
            "low_pending": None,
            "min_ack_pending": None,
            "join_timeout": 60.0,
            "pinned": False,
            "pin_timeout": None,
            "on_pin": None,
        },
        _method("create_consumer"),
    ),
    Call("flush", {"timeout": None}, _method("flush")),
    Call(
        "get",
        {"stream": STREAM, "offset": 0, "partition": 0, "read_replica": False, "timeout": None},
        _method("get"),
    ),
    Call(
        "get_batch",
        {
            "stream": STREAM,
            "start": 0,
            "partition": 0,
            "max_messages": None,
            "max_bytes": None,
            "read_replica": False,
            "timeout": None,
        },
        _method("get_batch"),
    ),
    Call(
        "get_last_by_key",
        {
            "stream": STREAM,
            "keys": None,
            "prefix": None,
            "up_to_offset": None,
            "up_to_time": None,
            "read_replica": False,
            "timeout": None,
        },
        _method("get_last_by_key"),
    ),
    Call(
        "pull",
        {
            "stream": STREAM,
            "partitions": None,
            "start": liftbridge.StartPosition.EARLIEST,
            "stop": None,
            "read_replica": False,
            "max_buffered_messages": None,
            "max_buffered_bytes": None,
            "refill_threshold": None,
            "stall_timeout": 30.0,
            "on_stall": None,
        },
        _method("pull"),
    ),
    Call(
        "PullConsumer.fetch",
        {"max_messages": None, "max_bytes": None, "timeout": 0.01},
        _with_pull_consumer,
    ),
    Call("describe_group", {"group_id": "g", "timeout": None}, _method("describe_group")),
    Call("unpin", {"group_id": "g", "timeout": None}, _method("unpin")),
    Call("Subscription.wait", {"timeout": 0.01}, _with_subscription),
    Call("Subscription.close", {"timeout": 1.0}, _closing_subscription),
    Call(
        "Consumer.subscribe",
        {"streams": STREAM, "handler": lambda message, error: None},
        _consumer_subscribe,
    ),
    Call(
        "Message",
        {
            "offset": 0,
            "value": b"v",
            "key": None,
            "timestamp_ns": 0,
            "stream": "s",
            "partition": 0,
            "subject": "s",
            "reply_subject": "",
            "headers": None,
        },
        lambda env, kwargs: liftbridge.Message(**kwargs),
    ),
    Call(
        "Ack",
        {
            "stream": "s",
            "partition_subject": "s",
            "message_subject": "s.1",
            "offset": 0,
            "ack_inbox": "",
            "correlation_id": "c",
            "ack_policy": LEADER,
            "reception_timestamp_ns": 0,
            "commit_timestamp_ns": 0,
            "error": None,
        },
        lambda env, kwargs: liftbridge.Ack(**kwargs).partition,
    ),
    Call("messages_table", {"messages": [], "limit": 5}, _module_function("messages_table")),
    Call("messages_to_pandas", {"messages": []}, _module_function("messages_to_pandas")),
    Call("messages_to_arrow", {"messages": []}, _module_function("messages_to_arrow")),
    Call("Consumer.checkpoint", {"timeout": None}, _with_consumer("checkpoint")),
    Call("Consumer.backlog", {"timeout": None}, _with_consumer("backlog")),
    Call("Consumer.fetch", {"max_messages": 10, "timeout": 0.01}, _with_consumer("fetch")),
    Call("Consumer.next", {"timeout": 0.01}, _with_consumer("next")),
    Call(
        "Consumer.set_overflow",
        {"min_pending": None, "low_pending": None, "min_ack_pending": None},
        _with_consumer("set_overflow"),
    ),
    Call(
        "Client",
        {
            "addresses": "<server>",
            "tls": None,
            "connect_timeout": 2.0,
            "rpc_timeout": 2.0,
            "retry_policy": None,
            "ack_wait": 2.0,
            "max_inflight": 16,
            "resubscribe_wait": 5.0,
            "max_message_size": 1 << 20,
        },
        _new_client,
        special={"addresses": BAD_ADDRESSES},
    ),
    Call(
        "RetryPolicy",
        {
            "max_attempts": 3,
            "initial_backoff": 0.1,
            "max_backoff": 1.0,
            "multiplier": 2.0,
            "jitter": 0.1,
            "total_timeout": 5.0,
        },
        lambda env, kwargs: liftbridge.RetryPolicy(**kwargs),
    ),
    Call(
        "NatsPublisher",
        {
            "url": "<server>",
            "ack_inbox": None,
            "ack_wait": 2.0,
            "connect_timeout": 2.0,
            "crc": False,
        },
        _new_nats_publisher,
        special={"url": BAD_ADDRESSES.map(lambda a: f"nats://{a}" if isinstance(a, str) else a)},
    ),
    Call(
        "NatsPublisher.publish",
        {
            "subject": STREAM,
            "value": b"v",
            "key": None,
            "headers": None,
            "ack_policy": LEADER,
            "expected_offset": None,
            "correlation_id": None,
            "timeout": None,
        },
        _nats_publish,
    ),
]


@pytest.mark.parametrize("call", CALLS, ids=[c.name for c in CALLS])
@PROPERTY_SETTINGS
@given(data=st.data())
def test_bad_arguments_raise_only_typed_errors(
    client: liftbridge.Client, own_server: LocalServer, call: Call, data: st.DataObject
) -> None:
    arg = data.draw(st.sampled_from(sorted(call.good)), label="argument")
    strategy = (call.special or {}).get(arg, ANY_VALUE)
    value = data.draw(strategy, label=arg)
    assume(not _expensive(call.name, arg, value))
    kwargs = dict(call.good)
    kwargs[arg] = value
    with contextlib.suppress(liftbridge.LiftbridgeError):
        _dispose(call.run(Env(client, own_server), kwargs))
    assert own_server.running, own_server.log_tail()


# ------------------------------------------------------------- good values --

_name_chars = st.characters(
    codec="utf-8",
    exclude_categories=("Cc", "Cs"),
    exclude_characters="./*>,",
).filter(lambda c: not c.isspace())

_tokens = st.lists(st.text(_name_chars, min_size=1, max_size=12), min_size=1, max_size=4)
GOOD_NAMES = _tokens.map(lambda tokens: "good." + ".".join(tokens)).filter(
    lambda n: len(n.encode()) <= _validate.MAX_NAME_BYTES
)
"""Stream names the SDK must accept and the server must store."""

GOOD_HEADERS = st.dictionaries(
    st.text(max_size=8).filter(lambda k: k not in ("subject", "reply")),  # the server's own
    st.binary(max_size=8),
    max_size=3,
)

GOOD_IDS = st.text(_name_chars, min_size=1, max_size=40)
GOOD_SECONDS = st.floats(min_value=0.0, max_value=_validate.MAX_SECONDS)


@settings(PROPERTY_SETTINGS, max_examples=GOOD_EXAMPLES)
@given(
    name=GOOD_NAMES,
    subject=GOOD_NAMES,
    partitions=st.integers(min_value=1, max_value=3),
    retention_max_age=GOOD_SECONDS,
    segment_max_age=GOOD_SECONDS,
    headers=GOOD_HEADERS,
    key=st.binary(max_size=8),
    cursor_id=GOOD_IDS,
    timeout=st.floats(min_value=LONGEST_WAIT, max_value=_validate.MAX_SECONDS),
)
def test_good_values_are_never_refused(
    client: liftbridge.Client,
    own_server: LocalServer,
    name: str,
    subject: str,
    partitions: int,
    retention_max_age: float,
    segment_max_age: float,
    headers: dict[str, bytes],
    key: bytes,
    cursor_id: str,
    timeout: float,
) -> None:
    stream = name
    with contextlib.suppress(liftbridge.StreamExistsError):  # drawn again while shrinking
        client.create_stream(
            stream,
            subject=subject,
            partitions=partitions,
            retention_max_age=retention_max_age,
            segment_max_age=segment_max_age,
            timeout=timeout,
        )
    partition = partitions - 1
    ack = client.publish(
        stream, b"v", key=key, headers=headers, partition=partition, timeout=timeout
    )
    assert ack is not None
    assert (ack.stream, ack.partition) == (stream, partition)
    client.set_cursor(cursor_id, stream, partition, ack.offset, timeout=timeout)
    assert client.fetch_cursor(cursor_id, stream, partition, timeout=timeout) == ack.offset
    with client.subscribe(stream, partition=partition, start=ack.offset, stop=ack.offset) as sub:
        (message,) = list(sub)
    assert (message.value, message.key or b"") == (b"v", key)
    assert {k: v for k, v in message.headers.items() if k in headers} == headers
    client.delete_stream(stream, timeout=timeout)
    assert own_server.running, own_server.log_tail()
