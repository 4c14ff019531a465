"""Subscriptions against a real server: positions, endings, threads, errors."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

import pytest

import liftbridge
from liftbridge import StartPosition, StopPosition
from liftbridge.testing import LocalServer
from liftbridge_api import api_pb2


class Collector:
    """A handler that records what it is given, and on which thread."""

    def __init__(self) -> None:
        self.messages: list[liftbridge.Message] = []
        self.errors: list[BaseException] = []
        self.threads: set[str] = set()
        self.changed = threading.Condition()

    def __call__(self, message: liftbridge.Message | None, error: BaseException | None) -> None:
        with self.changed:
            self.threads.add(threading.current_thread().name)
            if message is not None:
                self.messages.append(message)
            if error is not None:
                self.errors.append(error)
            self.changed.notify_all()

    def wait_for(self, count: int, timeout: float = 10.0) -> list[liftbridge.Message]:
        with self.changed:
            assert self.changed.wait_for(lambda: len(self.messages) >= count, timeout), (
                f"got {len(self.messages)} of {count} messages"
            )
            return list(self.messages)

    def values(self) -> list[bytes]:
        return [m.value for m in self.messages]


def _fill(client: liftbridge.Client, stream: str, count: int, partition: int = 0) -> None:
    for i in range(count):
        client.publish(stream, b"m%d" % i, partition=partition)


def test_new_only_is_the_default(client: liftbridge.Client, stream: str) -> None:
    _fill(client, stream, 3)
    seen = Collector()
    with client.subscribe(stream, seen) as sub:
        client.publish(stream, b"new")
        assert [m.value for m in seen.wait_for(1)] == [b"new"]
        assert seen.threads == {f"liftbridge-sub-{stream}-0"}
        assert sub.last_offset == 3


@pytest.mark.parametrize(
    ("start", "expected"),
    [
        (StartPosition.EARLIEST, [b"m0", b"m1", b"m2", b"m3"]),
        (StartPosition.LATEST, [b"m3"]),
        (2, [b"m2", b"m3"]),
    ],
)
def test_start_positions(
    client: liftbridge.Client,
    stream: str,
    start: liftbridge.StartPosition | int,
    expected: list[bytes],
) -> None:
    _fill(client, stream, 4)
    with client.subscribe(stream, start=start, stop=StopPosition.LATEST) as sub:
        assert [m.value for m in sub] == expected
        assert sub.stop_position_reached and sub.error is None


def test_start_at_time_and_time_delta(client: liftbridge.Client, stream: str) -> None:
    _fill(client, stream, 2)
    time.sleep(0.2)
    middle = datetime.now(UTC)
    time.sleep(0.2)
    client.publish(stream, b"late")
    with client.subscribe(stream, start=middle, stop=StopPosition.LATEST) as sub:
        assert [m.value for m in sub] == [b"late"]
    with client.subscribe(stream, start=timedelta(minutes=5), stop=StopPosition.LATEST) as sub:
        assert [m.value for m in sub] == [b"m0", b"m1", b"late"]
    with pytest.raises(liftbridge.InvalidArgumentError, match="timezone"):
        client.subscribe(stream, start=datetime.now())


def test_stop_at_offset_and_time(client: liftbridge.Client, stream: str) -> None:
    _fill(client, stream, 5)
    with client.subscribe(stream, start=1, stop=3) as sub:
        assert [m.offset for m in sub] == [1, 2, 3]
    with client.subscribe(stream, start=StartPosition.EARLIEST, stop=datetime.now(UTC)) as sub:
        assert [m.offset for m in sub] == [0, 1, 2, 3, 4]
    with pytest.raises(liftbridge.InvalidArgumentError, match="before start"):
        client.subscribe(stream, start=3, stop=1)


def test_stop_position_is_a_normal_end_for_handlers(client: liftbridge.Client, stream: str) -> None:
    _fill(client, stream, 3)
    seen = Collector()
    sub = client.subscribe(stream, seen, start=StartPosition.EARLIEST, stop=StopPosition.LATEST)
    assert sub.wait(10)
    assert seen.values() == [b"m0", b"m1", b"m2"]
    assert seen.errors == [] and sub.error is None and sub.stop_position_reached


def test_no_such_partition_raises_from_subscribe(client: liftbridge.Client, stream: str) -> None:
    with pytest.raises(liftbridge.NoSuchPartitionError):
        client.subscribe(stream, partition=1)
    with pytest.raises(liftbridge.NoSuchStreamError):
        client.subscribe("no-such-stream")


def test_stream_deleted_reaches_the_handler_once(client: liftbridge.Client, stream: str) -> None:
    seen = Collector()
    sub = client.subscribe(stream, seen)
    client.delete_stream(stream)
    assert sub.wait(10)
    assert len(seen.errors) == 1
    assert isinstance(seen.errors[0], liftbridge.NoSuchPartitionError)
    assert sub.error is seen.errors[0]


def test_paused_partition_ends_the_subscription(client: liftbridge.Client, stream: str) -> None:
    seen = Collector()
    sub = client.subscribe(stream, seen)
    client.pause_stream(stream)
    assert sub.wait(10)
    assert len(seen.errors) == 1 and isinstance(seen.errors[0], liftbridge.PartitionPausedError)


def test_subscribe_to_paused_partition_needs_resume(client: liftbridge.Client, stream: str) -> None:
    _fill(client, stream, 2)
    client.pause_stream(stream)
    with pytest.raises(liftbridge.PartitionPausedError, match="resume=True"):
        client.subscribe(stream, start=StartPosition.EARLIEST)
    with client.subscribe(
        stream, start=StartPosition.EARLIEST, stop=StopPosition.LATEST, resume=True
    ) as sub:
        assert [m.value for m in sub] == [b"m0", b"m1"]


def test_readonly_partition_is_read_to_its_end(client: liftbridge.Client, stream: str) -> None:
    _fill(client, stream, 3)
    client.set_stream_readonly(stream)
    seen = Collector()
    sub = client.subscribe(stream, seen, start=StartPosition.EARLIEST)
    assert sub.wait(10)
    assert seen.values() == [b"m0", b"m1", b"m2"]
    assert len(seen.errors) == 1 and isinstance(seen.errors[0], liftbridge.ReadonlyPartitionError)


def test_iterating_raises_the_terminal_error(client: liftbridge.Client, stream: str) -> None:
    _fill(client, stream, 1)
    client.set_stream_readonly(stream)
    with client.subscribe(stream, start=StartPosition.EARLIEST) as sub:
        got = []
        with pytest.raises(liftbridge.ReadonlyPartitionError):
            for message in sub:
                got.append(message.value)
        assert got == [b"m0"]


def test_handler_exception_stops_without_skipping(client: liftbridge.Client, stream: str) -> None:
    _fill(client, stream, 5)
    handled: list[int] = []

    def handler(message: liftbridge.Message | None, error: BaseException | None) -> None:
        assert message is not None
        if message.offset == 2:
            raise RuntimeError("cannot process")
        handled.append(message.offset)

    sub = client.subscribe(stream, handler, start=StartPosition.EARLIEST)
    assert sub.wait(10)
    assert handled == [0, 1]
    assert isinstance(sub.error, liftbridge.HandlerError)
    assert sub.error.offset == 2 and isinstance(sub.error.__cause__, RuntimeError)
    assert sub.last_offset == 1


def test_close_from_inside_the_handler(client: liftbridge.Client, stream: str) -> None:
    _fill(client, stream, 5)
    handled: list[int] = []
    holder: list[liftbridge.Subscription] = []
    ready = threading.Event()

    def handler(message: liftbridge.Message | None, error: BaseException | None) -> None:
        ready.wait(5)
        assert message is not None
        handled.append(message.offset)
        if message.offset == 1:
            holder[0].close()

    holder.append(client.subscribe(stream, handler, start=StartPosition.EARLIEST))
    ready.set()
    assert holder[0].wait(10)
    assert handled == [0, 1] and holder[0].error is None


def test_read_isr_replica(client: liftbridge.Client, stream: str) -> None:
    _fill(client, stream, 2)
    with client.subscribe(
        stream, start=StartPosition.EARLIEST, stop=StopPosition.LATEST, read_replica=True
    ) as sub:
        assert [m.value for m in sub] == [b"m0", b"m1"]


def test_client_close_ends_subscriptions(server: LocalServer, stream: str) -> None:
    c = liftbridge.Client(server.address)
    sub = c.subscribe(stream, lambda m, e: None)
    c.close()
    assert sub.wait(5)
    assert sub.error is None


def test_message_fields(client: liftbridge.Client, unique_name: str) -> None:
    client.create_stream(unique_name, subject=f"{unique_name}.in", partitions=2)
    client.publish(unique_name, b"v", key=b"k", partition=1)
    with client.subscribe(
        unique_name, partition=1, start=StartPosition.EARLIEST, stop=StopPosition.LATEST
    ) as sub:
        (message,) = list(sub)
    assert (message.stream, message.partition, message.offset) == (unique_name, 1, 0)
    assert message.subject == f"{unique_name}.in.1"
    assert abs(message.timestamp - datetime.now(UTC)) < timedelta(minutes=1)
    with pytest.raises(AttributeError):
        message.value = b"changed"  # type: ignore[misc]


def test_new_only_and_latest_are_pinned_to_offsets(client: liftbridge.Client, stream: str) -> None:
    """A resubscribe must not re-evaluate "new only" on a new leader (it would
    skip what was published meanwhile), so the subscription keeps the offset
    the position meant when it started."""
    _fill(client, stream, 3)
    with client.subscribe(stream) as sub:
        base = sub._request.base
        assert (base.startPosition, base.startOffset) == (api_pb2.OFFSET, 3)
    with client.subscribe(stream, start=StartPosition.LATEST) as sub:
        base = sub._request.base
        assert (base.startPosition, base.startOffset) == (api_pb2.OFFSET, 2)


def test_iterating_many_messages_gives_each_once_in_order(
    client: liftbridge.Client, stream: str
) -> None:
    # More messages than an iterated subscription buffers (1,024), so its
    # thread waits for room and hands them over in many batches.
    count = 5_000
    for i in range(count):
        client.publish_async(stream, b"m%d" % i)
    assert client.flush(30.0)
    with client.subscribe(stream, start=StartPosition.EARLIEST, stop=count - 1) as sub:
        offsets = [m.offset for m in sub]
    assert offsets == list(range(count))
    assert sub.stop_position_reached
    assert sub.last_offset == count - 1


def test_iteration_resumed_after_a_break_continues_where_it_left_off(
    client: liftbridge.Client, stream: str
) -> None:
    count = 300
    for i in range(count):
        client.publish_async(stream, b"m%d" % i)
    assert client.flush(30.0)
    with client.subscribe(stream, start=StartPosition.EARLIEST, stop=count - 1) as sub:
        first = []
        for message in sub:
            first.append(message.offset)
            if len(first) == 10:
                break
        assert sub.last_offset == 9
        # The messages the first loop's batch held are not lost with it.
        rest = [m.offset for m in sub]
    assert first + rest == list(range(count))
