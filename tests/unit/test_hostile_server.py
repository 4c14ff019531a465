"""The SDK against a broker that breaks the protocol (tests/unit/hostile_server.py).

What must hold whatever the broker sends: no SDK thread dies, no call
outlives its deadline (plus slack for a busy machine), and nothing malformed
reaches user code: it comes as a typed LiftbridgeError or is dropped with a
log line.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

import pytest

import liftbridge
from tests.unit.fake_broker import serving
from tests.unit.hostile_server import STREAM, HostileBroker, elapsed_since, mute_listener

SLACK = 5.0
"""Seconds a call may overrun its deadline on a busy machine before it counts as hung."""


@pytest.fixture
def thread_deaths() -> Iterator[list[threading.ExceptHookArgs]]:
    """Every exception that ended a thread during the test; the test asserts it empty."""
    deaths: list[threading.ExceptHookArgs] = []
    previous = threading.excepthook
    threading.excepthook = deaths.append
    try:
        yield deaths
    finally:
        threading.excepthook = previous


@pytest.fixture
def broker() -> Iterator[HostileBroker]:
    hostile = HostileBroker()  # type: ignore[abstract]  # the RPCs the SDK uses here
    with serving(hostile) as served:
        try:
            yield served
        finally:
            hostile.stop.set()


def _client(broker: HostileBroker, **options: float) -> liftbridge.Client:
    return liftbridge.Client(f"127.0.0.1:{broker.port}", **options)  # type: ignore[arg-type]


def _acks_thread_alive() -> bool:
    return any(t.name == "liftbridge-acks" and t.is_alive() for t in threading.enumerate())


def test_an_unknown_ack_policy_fails_one_publish_not_the_stream(
    broker: HostileBroker, thread_deaths: list[threading.ExceptHookArgs]
) -> None:
    with _client(broker, ack_wait=30.0) as client:
        before = [client.publish_async(STREAM, b"ok-%d" % i) for i in range(25)]
        poisoned = client.publish_async(STREAM, b"policy-7")
        after = [client.publish_async(STREAM, b"ok-%d" % i) for i in range(25, 50)]
        error = poisoned.exception(timeout=10)
        assert isinstance(error, liftbridge.ServerError), repr(error)
        assert error.code == "UNKNOWN_ACK_POLICY_7"
        assert "most likely stored" in str(error)
        for future in before + after:
            assert isinstance(future.result(timeout=10), liftbridge.Ack)
        assert broker.streams == 1  # one bad ack did not tear the stream down
        assert _acks_thread_alive()
        # publish (its own lane) gets the same typed error.
        with pytest.raises(liftbridge.ServerError, match="ack policy 7"):
            client.publish(STREAM, b"policy-7", timeout=10)
    assert not thread_deaths


@pytest.mark.parametrize("value", [b"code-99", b"async-99"])
def test_an_unknown_error_code_is_a_typed_server_error(
    broker: HostileBroker, value: bytes, thread_deaths: list[threading.ExceptHookArgs]
) -> None:
    with _client(broker, ack_wait=30.0) as client:
        bystanders = [client.publish_async(STREAM, b"ok-%d" % i) for i in range(10)]
        error = client.publish_async(STREAM, value).exception(timeout=10)
        assert isinstance(error, liftbridge.ServerError), repr(error)
        assert error.code == "UNKNOWN_99"
        assert all(isinstance(f.result(timeout=10), liftbridge.Ack) for f in bystanders)
        assert broker.streams == 1
        with pytest.raises(liftbridge.ServerError):
            client.publish(STREAM, value, timeout=10)  # on a lane of its own
    assert not thread_deaths


def test_acks_for_unknown_ids_and_duplicates_are_dropped_with_a_log_line(
    broker: HostileBroker,
    thread_deaths: list[threading.ExceptHookArgs],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="liftbridge")
    with _client(broker, ack_wait=30.0) as client:
        stray = client.publish_async(STREAM, b"stray-then-ok")
        dup = client.publish_async(STREAM, b"dup")
        assert stray.result(timeout=10).correlation_id != "nobody-sent-this"  # type: ignore[union-attr]
        first = dup.result(timeout=10)
        assert first is not None
        # The duplicate resolved nothing else: the next publish gets its own ack.
        follow = client.publish_async(STREAM, b"ok").result(timeout=10)
        assert follow is not None and follow.correlation_id != first.correlation_id
        assert client.publish(STREAM, b"dup", timeout=10) is not None  # on a lane too
    assert "nobody-sent-this" in caplog.text
    assert not thread_deaths


def test_a_publish_whose_only_ack_has_another_id_times_out_at_its_deadline(
    broker: HostileBroker, thread_deaths: list[threading.ExceptHookArgs]
) -> None:
    with _client(broker, ack_wait=30.0) as client:
        start = time.monotonic()
        error = client.publish_async(STREAM, b"unknown-id", timeout=1.0).exception(
            timeout=1.0 + SLACK
        )
        assert isinstance(error, liftbridge.AckTimeoutError), repr(error)
        assert elapsed_since(start) < 1.0 + SLACK
        start = time.monotonic()
        with pytest.raises(liftbridge.AckTimeoutError):
            client.publish(STREAM, b"unknown-id", timeout=1.0)
        assert elapsed_since(start) < 1.0 + SLACK
    assert not thread_deaths


def test_a_publish_stream_closed_at_once_fails_typed_within_the_deadline(
    broker: HostileBroker, thread_deaths: list[threading.ExceptHookArgs]
) -> None:
    broker.close_publish = True
    with _client(broker, ack_wait=30.0) as client:
        start = time.monotonic()
        error = client.publish_async(STREAM, b"x", timeout=2.0).exception(timeout=2.0 + SLACK)
        assert isinstance(error, liftbridge.LiftbridgeError), repr(error)
        assert elapsed_since(start) < 2.0 + SLACK
        start = time.monotonic()
        with pytest.raises(liftbridge.LiftbridgeError):
            client.publish(STREAM, b"y", timeout=2.0)
        assert elapsed_since(start) < 2.0 + SLACK
        assert broker.streams >= 2  # it kept trying, with backoff
    assert not thread_deaths


def test_repeated_and_decreasing_offsets_never_reach_the_handler(
    broker: HostileBroker, thread_deaths: list[threading.ExceptHookArgs]
) -> None:
    broker.subscribe_offsets = [5, 6, 6, 3, 7]
    with _client(broker) as client:
        subscription = client.subscribe(STREAM, start=0)
        received = []
        for message in subscription:
            received.append(message.offset)
            if message.offset == 7:
                break
        subscription.close()
    assert received == [5, 6, 7]
    assert not thread_deaths


def test_a_message_labelled_with_another_partition_is_dropped_with_a_warning(
    broker: HostileBroker,
    thread_deaths: list[threading.ExceptHookArgs],
    caplog: pytest.LogCaptureFixture,
) -> None:
    broker.subscribe_offsets = [0, 1, 2]
    broker.foreign_label = True  # offset 1 claims to be elsewhere/3
    with _client(broker) as client:
        subscription = client.subscribe(STREAM, start=0)
        received = []
        for message in subscription:
            assert (message.stream, message.partition) == (STREAM, 0)
            received.append(message.offset)
            if message.offset == 2:
                break
        subscription.close()
    assert received == [0, 2]
    assert "dropped a message of elsewhere/3 at offset 1" in caplog.text
    assert not thread_deaths


def test_a_leader_missing_from_the_broker_list_is_a_typed_error_in_time(
    broker: HostileBroker, thread_deaths: list[threading.ExceptHookArgs]
) -> None:
    broker.ghost_leader = True
    with _client(broker, resubscribe_wait=2.0) as client:
        start = time.monotonic()
        with pytest.raises(liftbridge.NotLeaderError, match="no known leader"):
            client.subscribe(STREAM, start=0)
        assert elapsed_since(start) < 2.0 + SLACK
        # Publishing does not need the leader: any broker takes it.
        assert client.publish(STREAM, b"ok", timeout=10) is not None
    assert not thread_deaths


def test_a_server_that_accepts_and_never_answers_fails_the_connect_in_time(
    thread_deaths: list[threading.ExceptHookArgs],
) -> None:
    with mute_listener() as port:
        start = time.monotonic()
        with pytest.raises(liftbridge.LiftbridgeError):
            liftbridge.Client(f"127.0.0.1:{port}", connect_timeout=1.0, rpc_timeout=1.0)
        assert elapsed_since(start) < 2.0 + SLACK
    assert not thread_deaths


def test_a_silent_broker_times_out_publishes_and_a_quiet_subscription_closes_promptly(
    broker: HostileBroker, thread_deaths: list[threading.ExceptHookArgs]
) -> None:
    with _client(broker, ack_wait=30.0) as client:
        start = time.monotonic()
        error = client.publish_async(STREAM, b"silent", timeout=1.0).exception(timeout=1.0 + SLACK)
        assert isinstance(error, liftbridge.AckTimeoutError), repr(error)
        assert elapsed_since(start) < 1.0 + SLACK
        # A Subscribe stream that sends its handshake and then nothing.
        subscription = client.subscribe(STREAM, start=0)
        start = time.monotonic()
        subscription.close()
        assert subscription.wait(SLACK)
        assert subscription.error is None
        assert elapsed_since(start) < SLACK
    assert not thread_deaths
