"""A sweep of named bad calls over the public API: each must raise a typed
error (:class:`liftbridge.InvalidArgumentError`) whose text names the argument,
before the client sends any RPC, and leave the server healthy.

Where :mod:`test_bad_input_property` draws random bad values and only asks for
*some* :class:`LiftbridgeError`, this table pins one case per argument and
kind of mistake, so a message that stops naming its argument, or a check that
moves behind an RPC, fails by name. RPCs are counted on the client's
channels (unary calls and streams); a constructor's check is counted on the
router's first metadata fetch.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

import liftbridge
from liftbridge.testing import LocalServer

STREAM = "sweep-stream-5d2a"
GROUP = "sweep-group"
EARLIEST = liftbridge.StartPosition.EARLIEST


@dataclass
class Counter:
    """RPCs the client started (unary calls, streams, stubs asked for): on
    any thread, and on the test's own thread (an open subscription or pull
    consumer makes RPCs of its own on its threads meanwhile)."""

    count: int = 0
    mine: int = 0
    in_handle: int | None = None
    """RPCs the bad call made on an open handle (None: not a handle call)."""


@dataclass(frozen=True)
class Env:
    client: liftbridge.Client
    server: LocalServer
    rpcs: Counter
    tmp: Path


@pytest.fixture(scope="module")
def own_server() -> Iterator[LocalServer]:
    with LocalServer() as local:
        with liftbridge.Client(local.address, rpc_timeout=3.0) as setup:
            setup.create_stream(STREAM, partitions=2)
            setup.publish(STREAM, b"v", partition=0)
        yield local


def _count(rpcs: Counter, real: Callable[..., Any]) -> Callable[..., Any]:
    def counted(*args: Any, **kwargs: Any) -> Any:
        rpcs.count += 1
        if threading.current_thread() is threading.main_thread():
            rpcs.mine += 1
        return real(*args, **kwargs)

    return counted


@pytest.fixture(scope="module")
def env(own_server: LocalServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    rpcs = Counter()
    with liftbridge.Client(own_server.address, rpc_timeout=3.0, ack_wait=3.0) as client:
        channels = client._router._channels  # the one place RPCs start
        for name in ("invoke", "open_stream"):
            setattr(channels, name, _count(rpcs, getattr(channels, name)))
        # The client's long-lived threads (acks, timer, a publish lane) start
        # here, not in the first test that would start them.
        client.publish(STREAM, b"warm-up")
        future = client.publish_async(STREAM, b"warm-up")
        assert future is not None
        future.result(timeout=10)
        yield Env(client, own_server, rpcs, tmp_path_factory.mktemp("sweep"))


class _Handler:
    """A handler whose arity is wrong for a subscription (one argument)."""

    def __call__(self, message: liftbridge.Message) -> None:
        pass


def _garbage(env: Env, name: str) -> Path:
    path = env.tmp / name
    path.write_bytes(b"this is not a PEM certificate\n")
    return path


def _subscription(env: Env, method: str, **kwargs: Any) -> Any:
    sub = env.client.subscribe(STREAM, start=EARLIEST)
    mark = env.rpcs.mine
    try:
        return getattr(sub, method)(**kwargs)
    finally:
        env.rpcs.in_handle = env.rpcs.mine - mark  # before closing it
        sub.close()


def _pull(env: Env, method: str, *args: Any, **kwargs: Any) -> Any:
    consumer = env.client.pull(STREAM, start=EARLIEST)
    mark = env.rpcs.mine
    try:
        return getattr(consumer, method)(*args, **kwargs)
    finally:
        env.rpcs.in_handle = env.rpcs.mine - mark  # before closing it
        consumer.close()


def _group(env: Env, method: str, *args: Any, **kwargs: Any) -> Any:
    consumer = env.client.create_consumer(GROUP, join_timeout=2.0)
    if method != "subscribe":
        consumer.subscribe(STREAM)
    mark = env.rpcs.mine
    try:
        return getattr(consumer, method)(*args, **kwargs)
    finally:
        env.rpcs.in_handle = env.rpcs.mine - mark  # before closing it
        consumer.close()


def _nats(env: Env, method: str, *args: Any, **kwargs: Any) -> Any:
    with liftbridge.NatsPublisher(env.server.nats_url, ack_wait=2.0) as publisher:
        return getattr(publisher, method)(*args, **kwargs)


def _nats_stream(env: Env, method: str, *args: Any, **kwargs: Any) -> Any:
    with liftbridge.NatsStreamPublisher(env.client, env.server.nats_url) as publisher:
        mark = env.rpcs.mine
        try:
            return getattr(publisher, method)(*args, **kwargs)
        finally:
            env.rpcs.in_handle = env.rpcs.mine - mark


Run = Callable[[Env], Any]
CASES: list[tuple[str, str, Run]] = []
"""(case id, the argument the error must name, the call)."""


def case(arg: str, run: Run, label: str = "") -> None:
    CASES.append((f"{label}-{len(CASES)}", arg, run))


def client_cases(method: str, good: dict[str, Any], bad: list[tuple[str, Any]]) -> None:
    for arg, value in bad:
        kwargs = {**good, arg: value}

        def run(env: Env, method: str = method, kwargs: dict[str, Any] = kwargs) -> Any:
            return getattr(env.client, method)(**kwargs)

        case(arg, run, f"{method}.{arg}")


# ---------------------------------------------------------------- admin --

client_cases(
    "create_stream",
    {"name": "sweep-created"},
    [
        ("name", ""),
        ("name", "a..b"),
        ("name", "a/b"),
        ("name", "x" * 300),
        ("name", 5),
        ("name", "a b"),
        ("name", "__cursors"),
        ("subject", "a..b"),
        ("subject", "a b"),
        ("subject", 3),
        ("group", 3),
        ("replication_factor", 0),
        ("replication_factor", "1"),
        ("partitions", 0),
        ("partitions", -1),
        ("partitions", 1.5),
        ("partitions", True),
        ("retention_max_bytes", -1),
        ("retention_max_messages", "10"),
        ("retention_max_age", -1.0),
        ("retention_max_age", float("nan")),
        ("cleaner_interval", float("inf")),
        ("segment_max_bytes", 2**70),
        ("segment_max_age", "1h"),
        ("compact_enabled", "yes"),
        ("compact_max_goroutines", -2),
        ("auto_pause_time", -5.0),
        ("auto_pause_disable_if_subscribers", 1),
        ("min_isr", 0),
        ("optimistic_concurrency_control", "true"),
        ("encryption", 1),
        ("max_replication", "no"),
        ("timeout", -1.0),
        ("timeout", "5"),
    ],
)
client_cases("delete_stream", {"name": STREAM}, [("name", ""), ("name", None), ("timeout", -1)])
client_cases(
    "pause_stream",
    {"name": STREAM},
    [("name", "a..b"), ("partitions", [-1]), ("partitions", 3), ("resume_all", "yes")],
)
client_cases(
    "set_stream_readonly",
    {"name": STREAM},
    [("name", b"x"), ("partitions", ["0"]), ("readonly", None)],
)
client_cases("fetch_metadata", {}, [("timeout", float("nan")), ("timeout", -3)])
client_cases(
    "fetch_partition_metadata",
    {"stream": STREAM},
    [("stream", ""), ("partition", -1), ("partition", "0"), ("timeout", -1)],
)

# -------------------------------------------------------------- publish --

client_cases(
    "publish",
    {"stream": STREAM, "value": b"v"},
    [
        ("stream", ""),
        ("stream", 7),
        ("value", "text"),
        ("value", 5),
        ("value", None),
        ("key", "text"),
        ("key", 1),
        ("headers", {"k": "text"}),
        ("headers", {1: b"x"}),
        ("headers", [("k", b"v")]),
        ("partition", -1),
        ("partition", 2**40),
        ("partition", "0"),
        ("partitioner", "bykey"),
        ("partitioner", liftbridge.PartitionByKey),
        ("ack_policy", "leader"),
        ("ack_policy", 7),
        ("expected_offset", "3"),
        ("expected_offset", -5),
        ("correlation_id", 5),
        ("ack_inbox", "a b"),
        ("timeout", -1),
        ("timeout", float("inf")),
    ],
)
client_cases(
    "publish_async",
    {"stream": STREAM, "value": b"v"},
    [
        ("stream", "a..b"),
        ("value", [1, 2]),
        ("ack_handler", "callback"),
        ("ack_handler", 5),
        ("key", 3.5),
        ("partition", -2),
        ("headers", {"k": 5}),
        ("future", "yes"),
        ("timeout", -1),
    ],
)
client_cases(
    "publish_many_async",
    {"stream": STREAM, "values": [b"v"]},
    [
        ("stream", "a..b"),
        ("values", b"vv"),
        ("values", [b"v", 5]),
        ("values", 7),
        ("ack_policy", liftbridge.AckPolicy.NONE),
        ("ack_policy", "all"),
        ("correlation_id", "c"),
        ("ack_inbox", "inbox"),
        ("timeout", -1),
    ],
)
client_cases(
    "publish_to_subject",
    {"subject": STREAM, "value": b"v"},
    [
        ("subject", ""),
        ("subject", "a b"),
        ("subject", "a.*"),
        ("value", "text"),
        ("key", "k"),
        ("headers", {"k": None}),
        ("ack_inbox", "a..b"),
        ("correlation_id", b"c"),
        ("ack_policy", None),
        ("timeout", "1"),
    ],
)
client_cases("flush", {}, [("timeout", -1), ("timeout", "1")])

# -------------------------------------------------------------- consume --

client_cases(
    "subscribe",
    {"stream": STREAM},
    [
        ("stream", ""),
        ("stream", None),
        ("handler", "print"),
        ("handler", _Handler()),
        ("handler", lambda message: None),
        ("partition", -1),
        ("partition", "0"),
        ("start", "earliest"),
        ("start", -1),
        ("start", datetime(2024, 1, 1)),
        ("stop", "latest"),
        ("stop", -4),
        ("read_replica", "yes"),
        ("resume", 1),
        ("timeout", -1),
    ],
)
client_cases(
    "get",
    {"stream": STREAM, "offset": 0},
    [
        ("stream", ""),
        ("offset", -1),
        ("offset", "0"),
        ("offset", 2**64),
        ("partition", -1),
        ("read_replica", "no"),
        ("timeout", -1),
    ],
)
client_cases(
    "get_batch",
    {"stream": STREAM, "start": 0},
    [
        ("stream", 1),
        ("start", -1),
        ("start", 1.5),
        ("partition", "1"),
        ("max_messages", 0),
        ("max_messages", -1),
        ("max_bytes", -1),
        ("read_replica", 1),
        ("timeout", float("nan")),
    ],
)
client_cases(
    "get_last_by_key",
    {"stream": STREAM, "keys": [b"k"]},
    [
        ("stream", ""),
        ("keys", b"k"),
        ("keys", [1]),
        ("keys", "k"),
        ("prefix", 5),
        ("up_to_offset", -1),
        ("up_to_offset", {0: -1}),
        ("up_to_time", "yesterday"),
        ("up_to_time", datetime(2024, 1, 1)),
        ("read_replica", "x"),
    ],
)
client_cases(
    "pull",
    {"stream": STREAM},
    [
        ("stream", ""),
        ("partitions", [-1]),
        ("partitions", "0"),
        ("partitions", []),
        ("start", "earliest"),
        ("stop", "latest"),
        ("read_replica", 1),
        ("max_buffered_messages", 0),
        ("max_buffered_bytes", -1),
        ("refill_threshold", -1),
        ("stall_timeout", -1),
        ("on_stall", "warn"),
        ("on_stall", lambda: None),
    ],
)
client_cases(
    "read_stream",
    {"stream": STREAM},
    [("stream", ""), ("start", "earliest"), ("stop", -1), ("partitions", [5.0])],
)

# -------------------------------------------------------------- cursors --

client_cases(
    "set_cursor",
    {"cursor_id": "c", "stream": STREAM, "partition": 0, "offset": 0},
    [
        ("cursor_id", ""),
        ("cursor_id", "a,b"),
        ("cursor_id", 5),
        ("stream", ""),
        ("partition", -1),
        ("offset", -2),
        ("offset", "1"),
        ("timeout", -1),
    ],
)
client_cases(
    "fetch_cursor",
    {"cursor_id": "c", "stream": STREAM, "partition": 0},
    [("cursor_id", "a b"), ("stream", None), ("partition", 1.0), ("timeout", "x")],
)

# --------------------------------------------------------------- groups --

client_cases(
    "create_consumer",
    {"group_id": GROUP, "join_timeout": 2.0},
    [
        ("group_id", ""),
        ("group_id", "a,b"),
        ("group_id", 3),
        ("consumer_id", "a b"),
        ("auto_checkpoint", -1),
        ("auto_offset", "earliest"),
        ("on_assigned", "print"),
        ("on_revoked", 3),
        ("min_pending", -1),
        ("low_pending", "3"),
        ("min_ack_pending", -1),
        ("join_timeout", -1),
        ("pinned", "yes"),
        ("pin_timeout", -1),
        ("on_pin", 5),
        ("on_pin", lambda: None),
        ("on_assigned", lambda a, b: None),
        ("on_revoked", lambda: None),
    ],
)
client_cases("describe_group", {"group_id": GROUP}, [("group_id", ""), ("timeout", -1)])
client_cases("unpin", {"group_id": GROUP}, [("group_id", "a,b"), ("timeout", "1")])

# ------------------------------------------------- handles (after opening) --

Handle = Callable[..., Any]
Row = tuple[str, str, tuple[Any, ...], dict[str, Any]]
"""(the argument named, the method, its positional and keyword arguments)."""


def _rows(rows: list[Row]) -> list[Row]:
    return rows


def _options(rows: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    return rows


def _on(handle: Handle, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Run:
    return lambda env: handle(env, method, *args, **kwargs)


for arg, method, args, kwargs in _rows(
    [
        ("timeout", "wait", (), {"timeout": -1}),
        ("timeout", "wait", (), {"timeout": "1"}),
        ("timeout", "close", (), {"timeout": -1}),
    ]
):
    case(arg, _on(_subscription, method, args, kwargs), f"Subscription.{method}")

for arg, method, args, kwargs in _rows(
    [
        ("max_messages", "fetch", (), {"max_messages": 0}),
        ("max_messages", "fetch", (), {"max_messages": "5"}),
        ("max_bytes", "fetch", (), {"max_bytes": -1}),
        ("timeout", "fetch", (), {"timeout": -1}),
        ("timeout", "next", (), {"timeout": float("nan")}),
        ("timeout", "poll", (), {"timeout": "1"}),
        ("cursor_id", "commit", ("a,b",), {}),
        ("timeout", "commit", ("c",), {"timeout": -1}),
        ("handler", "consume", ("print",), {}),
        ("on_error", "consume", (lambda m: None,), {"on_error": 5}),
    ]
):
    case(arg, _on(_pull, method, args, kwargs), f"PullConsumer.{method}")

for arg, method, args, kwargs in _rows(
    [
        ("streams", "subscribe", ("",), {}),
        ("streams", "subscribe", ([STREAM, 5],), {}),
        ("handler", "subscribe", (STREAM, "print"), {}),
        ("handler", "subscribe", (STREAM, lambda message: None), {}),
        ("max_messages", "fetch", (), {"max_messages": 0}),
        ("timeout", "fetch", (), {"timeout": -1}),
        ("timeout", "next", (), {"timeout": "x"}),
        ("timeout", "checkpoint", (), {"timeout": -1}),
        ("timeout", "backlog", (), {"timeout": float("nan")}),
        ("min_pending", "set_overflow", (), {"min_pending": -1}),
    ]
):
    case(arg, _on(_group, method, args, kwargs), f"Consumer.{method}")

# ------------------------------------------------------------ publishers --

for arg, method, args, kwargs in _rows(
    [
        ("subject", "publish", ("a b", b"v"), {}),
        ("value", "publish", ("s", "text"), {}),
        ("key", "publish", ("s", b"v"), {"key": "k"}),
        ("headers", "publish", ("s", b"v"), {"headers": {"k": "v"}}),
        ("ack_policy", "publish", ("s", b"v"), {"ack_policy": "all"}),
        ("expected_offset", "publish", ("s", b"v"), {"expected_offset": "1"}),
        ("timeout", "publish", ("s", b"v"), {"timeout": -1}),
        ("subject", "publish_async", ("", b"v"), {}),
        ("values", "publish_many", ("s", b"vv"), {}),
        ("values", "publish_many", ("s", ["text"]), {}),
    ]
):
    case(arg, _on(_nats, method, args, kwargs), f"NatsPublisher.{method}")

for arg, method, args, kwargs in _rows(
    [
        ("stream", "publish", ("", b"v"), {}),
        ("value", "publish", (STREAM, "text"), {}),
        ("partition", "publish", (STREAM, b"v"), {"partition": -1}),
        ("ack_handler", "publish_async", (STREAM, b"v", "cb"), {}),
        ("values", "publish_many_async", (STREAM, [b"v", "text"]), {}),
        ("correlation_id", "publish_many_async", (STREAM, [b"v"]), {"correlation_id": "c"}),
        ("timeout", "flush", (), {"timeout": -1}),
    ]
):
    case(arg, _on(_nats_stream, method, args, kwargs), f"NatsStreamPublisher.{method}")

# ---------------------------------------------------------- constructors --


def _client(kwargs: dict[str, Any]) -> Run:
    def run(env: Env) -> Any:
        liftbridge.Client(kwargs.pop("addresses", env.server.address), **kwargs).close()

    return run


for arg, kwargs in _options(
    [
        ("addresses", {"addresses": b"127.0.0.1:9292"}),
        ("addresses", {"addresses": ""}),
        ("addresses", {"addresses": "http://127.0.0.1:9292"}),
        ("addresses", {"addresses": "127.0.0.1:70000"}),
        ("addresses", {"addresses": [5]}),
        ("tls", {"tls": "yes"}),
        ("connect_timeout", {"connect_timeout": -1}),
        ("rpc_timeout", {"rpc_timeout": 0}),
        ("retry_policy", {"retry_policy": 3}),
        ("ack_wait", {"ack_wait": -1}),
        ("max_inflight", {"max_inflight": 0}),
        ("resubscribe_wait", {"resubscribe_wait": "30"}),
        ("max_message_size", {"max_message_size": -1}),
        ("max_receive_message_size", {"max_receive_message_size": 0}),
        ("keepalive_interval", {"keepalive_interval": -1}),
        ("keepalive_timeout", {"keepalive_timeout": "20"}),
    ]
):
    case(arg, _client(kwargs), "Client")

for arg, make in [
    ("ca", lambda env: liftbridge.TLSConfig(ca=_garbage(env, "ca.pem"))),
    (
        "cert",
        lambda env: liftbridge.TLSConfig(
            cert=_garbage(env, "cert.pem"), key=_garbage(env, "k.pem")
        ),
    ),
    ("ca", lambda env: liftbridge.TLSConfig(ca=env.tmp / "missing.pem")),
    ("ca", lambda env: liftbridge.TLSConfig(ca=5)),  # type: ignore[arg-type]
    ("server_name", lambda env: liftbridge.TLSConfig(server_name=5)),  # type: ignore[arg-type]
    ("max_attempts", lambda env: liftbridge.RetryPolicy(max_attempts=0)),
    ("initial_backoff", lambda env: liftbridge.RetryPolicy(initial_backoff=-1)),
    ("multiplier", lambda env: liftbridge.RetryPolicy(multiplier="2")),  # type: ignore[arg-type]
    ("jitter", lambda env: liftbridge.RetryPolicy(jitter=-0.5)),
    ("total_timeout", lambda env: liftbridge.RetryPolicy(total_timeout=-1)),
    ("cursor_id", lambda env: liftbridge.FromCursor("a,b")),
    ("otherwise", lambda env: liftbridge.FromCursor("c", otherwise="earliest")),  # type: ignore[arg-type]
    ("url", lambda env: liftbridge.NatsPublisher("http://127.0.0.1:1")),
    ("ack_wait", lambda env: liftbridge.NatsPublisher(env.server.nats_url, ack_wait=-1)),
    ("ack_inbox", lambda env: liftbridge.NatsPublisher(env.server.nats_url, ack_inbox="a b")),
    (
        "max_inflight",
        lambda env: liftbridge.NatsStreamPublisher(env.client, env.server.nats_url, max_inflight=0),
    ),
    ("client", lambda env: liftbridge.NatsStreamPublisher("client", env.server.nats_url)),  # type: ignore[arg-type]
    ("offset", lambda env: liftbridge.Message(offset="0", value=b"v")),  # type: ignore[arg-type]
    ("value", lambda env: liftbridge.Message(offset=0, value="v")),  # type: ignore[arg-type]
    ("headers", lambda env: liftbridge.Message(offset=0, value=b"v", headers={"k": "v"})),  # type: ignore[dict-item]
    ("value", lambda env: liftbridge.encode_message("text")),  # type: ignore[arg-type]
    ("expected_offset", lambda env: liftbridge.encode_message(b"v", expected_offset="1")),  # type: ignore[arg-type]
    ("data", lambda env: liftbridge.decode_message("text")),  # type: ignore[arg-type]
    ("data", lambda env: liftbridge.decode_ack(5)),  # type: ignore[arg-type]
    ("data", lambda env: liftbridge.decode_activity_event("x")),  # type: ignore[arg-type]
    ("message", lambda env: liftbridge.activity_event_from_message(b"x")),  # type: ignore[arg-type]
    ("limit", lambda env: liftbridge.messages_table([], limit=-1)),
    ("messages", lambda env: liftbridge.messages_table(5)),  # type: ignore[arg-type]
    ("messages", lambda env: liftbridge.messages_to_pandas([1])),  # type: ignore[list-item]
]:
    case(arg, make, "value")


# ------------------------------------------------------------------ test --


@pytest.mark.parametrize(
    ("arg", "run"), [(a, r) for _, a, r in CASES], ids=[c for c, _, _ in CASES]
)
def test_bad_call_names_its_argument_before_any_rpc(env: Env, arg: str, run: Run) -> None:
    env.rpcs.in_handle = None
    before = env.rpcs.count
    with pytest.raises(liftbridge.InvalidArgumentError) as caught:
        run(env)
    assert arg in str(caught.value), f"{type(caught.value).__name__}: {caught.value}"
    made = env.rpcs.count - before if env.rpcs.in_handle is None else env.rpcs.in_handle
    assert made == 0, f"{made} RPC(s) before the refusal"
    assert env.server.running, env.server.log_tail()


def test_sweep_is_wide_and_the_server_still_serves(env: Env) -> None:
    assert len(CASES) >= 150
    assert len({(c.rsplit("-", 1)[0], a) for c, a, _ in CASES}) >= 100  # not one call repeated
    ack = env.client.publish(STREAM, b"after", partition=1)
    assert ack is not None
    assert env.client.get(STREAM, ack.offset, partition=1).value == b"after"
