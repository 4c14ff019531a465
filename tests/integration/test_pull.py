"""The pull consumer on a real server: fetch, next, iteration, consume with a
bounded pre-fetch buffer, drain vs stop, positions and cursors."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime

import pytest

import liftbridge

EARLIEST = liftbridge.StartPosition.EARLIEST


def _publish(client: liftbridge.Client, stream: str, count: int, size: int = 0) -> None:
    for i in range(count):
        value = f"{i:04d}".encode().ljust(size, b".")
        client.publish(stream, value, key=f"k{i}".encode())


def _until(condition: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} within {timeout}s"
        time.sleep(0.02)


def test_fetch_returns_at_the_message_limit(client: liftbridge.Client, stream: str) -> None:
    _publish(client, stream, 25)
    with client.pull(stream, start=EARLIEST) as consumer:
        first = consumer.fetch(10, timeout=10)
        second = consumer.fetch(max_messages=10, timeout=10)
        assert [m.offset for m in first + second] == list(range(20))
        assert consumer.position() == {0: 19}


def test_fetch_returns_what_came_at_the_timeout(client: liftbridge.Client, stream: str) -> None:
    _publish(client, stream, 3)
    with client.pull(stream, start=EARLIEST) as consumer:
        # All three read ahead first: reading them is not what the 1 s times
        # (on a loaded machine it can take longer than that).
        _until(lambda: consumer.buffered == 3, "the three were not read ahead")
        started = time.monotonic()
        assert [m.offset for m in consumer.fetch(10, timeout=1)] == [0, 1, 2]
        assert time.monotonic() - started >= 0.9  # it waited for the other seven
        assert consumer.fetch(timeout=0.2) == []


def test_fetch_by_bytes(client: liftbridge.Client, stream: str) -> None:
    _publish(client, stream, 10, size=100)  # 100-byte values, 2-3 byte keys
    with client.pull(stream, start=EARLIEST) as consumer:
        batch = consumer.fetch(max_bytes=350, timeout=10)
        assert [m.offset for m in batch] == [0, 1, 2]
        # A message larger than the limit still comes alone.
        assert [m.offset for m in consumer.fetch(max_bytes=1, timeout=10)] == [3]


def test_fetch_without_a_limit_takes_the_default(client: liftbridge.Client, stream: str) -> None:
    _publish(client, stream, 120)
    with client.pull(stream, start=EARLIEST, max_buffered_messages=200) as consumer:
        assert len(consumer.fetch(timeout=10)) == 100


def test_bad_options_fail_before_any_rpc(client: liftbridge.Client, stream: str) -> None:
    with pytest.raises(liftbridge.InvalidArgumentError, match="not both"):
        client.pull(stream, max_buffered_messages=10, max_buffered_bytes=10)
    with pytest.raises(liftbridge.InvalidArgumentError, match="refill_threshold"):
        client.pull(stream, max_buffered_messages=10, refill_threshold=11)
    with pytest.raises(liftbridge.InvalidArgumentError, match="max_buffered_messages"):
        client.pull(stream, max_buffered_messages=0)
    with pytest.raises(liftbridge.InvalidArgumentError, match="stop"):
        client.pull(stream, stop=-2)
    with pytest.raises(liftbridge.ArgumentTypeError, match="start"):
        client.pull("no-such-stream", start="earliest")  # type: ignore[arg-type]
    with pytest.raises(liftbridge.InvalidArgumentError, match="timezone"):
        client.pull("no-such-stream", start=datetime(2020, 1, 1))
    with pytest.raises(liftbridge.InvalidArgumentError, match="start offset"):
        client.pull("no-such-stream", start=liftbridge.FromCursor("c", otherwise=-1))
    with client.pull(stream) as consumer:
        with pytest.raises(liftbridge.InvalidArgumentError, match="not both"):
            consumer.fetch(1, max_bytes=1)
        with pytest.raises(liftbridge.InvalidArgumentError, match="max_messages"):
            consumer.fetch(0)


def test_a_partition_the_stream_lacks_is_no_such_partition(
    client: liftbridge.Client, stream: str
) -> None:
    with pytest.raises(liftbridge.NoSuchPartitionError, match="no partition 3"):
        client.pull(stream, partitions=[3])


def test_a_refill_threshold_equal_to_the_bound_refills_at_once(
    client: liftbridge.Client, stream: str
) -> None:
    # Record 002: a threshold may be as high as its bound (not higher).
    _publish(client, stream, 30)
    with client.pull(
        stream, start=EARLIEST, max_buffered_messages=10, refill_threshold=10
    ) as consumer:
        _until(lambda: consumer.buffered == 10, "the buffer did not fill")
        assert consumer.next(timeout=5).offset == 0
        _until(lambda: consumer.buffered == 10, "one taken did not refill one")
        assert [m.offset for m in consumer.fetch(29, timeout=10)] == list(range(1, 30))


def test_next_gives_one_message_or_a_typed_timeout(client: liftbridge.Client, stream: str) -> None:
    with client.pull(stream) as consumer:  # NEW_ONLY
        with pytest.raises(liftbridge.PullTimeoutError) as caught:
            consumer.next(timeout=0.2)
        assert isinstance(caught.value, liftbridge.DeadlineExceededError)
        assert isinstance(caught.value, TimeoutError)
        client.publish(stream, b"hello")
        assert consumer.next(timeout=10).value == b"hello"
        assert consumer.poll(timeout=0.2) is None
        client.publish(stream, b"again")
        polled = consumer.poll(timeout=10)
        assert polled is not None and polled.value == b"again"


def test_iteration_merges_partitions_and_ends_at_the_stop(
    client: liftbridge.Client, unique_name: str
) -> None:
    client.create_stream(unique_name, partitions=3)
    _publish(client, unique_name, 30)
    with client.pull(unique_name, start=EARLIEST, stop=liftbridge.StopPosition.LATEST) as consumer:
        messages = list(consumer)
        with pytest.raises(liftbridge.StopPositionReachedError):
            consumer.next(timeout=1)
    assert sorted(m.value for m in messages) == [f"{i:04d}".encode() for i in range(30)]
    for partition in range(3):
        offsets = [m.offset for m in messages if m.partition == partition]
        assert offsets == list(range(len(offsets))) and offsets
    with client.pull(unique_name, partitions=[1], start=EARLIEST, stop=1) as consumer:
        assert [(m.partition, m.offset) for m in consumer] == [(1, 0), (1, 1)]


def test_buffer_is_bounded_and_refills_at_the_threshold(
    client: liftbridge.Client, stream: str
) -> None:
    _publish(client, stream, 50)
    with client.pull(stream, start=EARLIEST, max_buffered_messages=6) as consumer:
        _until(lambda: consumer.buffered == 6, "the buffer did not fill")
        time.sleep(0.3)
        assert consumer.buffered == 6  # bounded: nothing more is read
        consumer.fetch(2, timeout=5)
        time.sleep(0.3)
        assert consumer.buffered == 4  # above the threshold (3): no refill yet
        consumer.fetch(1, timeout=5)
        _until(lambda: consumer.buffered == 6, "the buffer did not refill at the threshold")
        assert [m.offset for m in consumer.fetch(6, timeout=5)] == list(range(3, 9))


def test_buffer_bounded_by_bytes_with_a_custom_threshold(
    client: liftbridge.Client, stream: str
) -> None:
    _publish(client, stream, 30, size=98)  # 100 bytes with the key
    with client.pull(
        stream, start=EARLIEST, max_buffered_bytes=500, refill_threshold=100
    ) as consumer:
        _until(lambda: consumer.buffered_bytes == 500, "the buffer did not fill")
        time.sleep(0.3)
        assert consumer.buffered_bytes == 500
        consumer.fetch(3, timeout=5)
        time.sleep(0.3)
        assert consumer.buffered_bytes == 200  # above the 100-byte threshold
        consumer.fetch(1, timeout=5)
        _until(lambda: consumer.buffered_bytes == 500, "the buffer did not refill")


def test_consume_with_a_buffer_of_one_does_not_stall(
    client: liftbridge.Client, stream: str
) -> None:
    _publish(client, stream, 40)
    seen: list[int] = []
    threads: set[str] = set()
    all_in = threading.Event()

    def handler(message: liftbridge.Message) -> None:
        seen.append(message.offset)
        threads.add(threading.current_thread().name)
        if len(seen) == 40:
            all_in.set()

    consumer = client.pull(stream, start=EARLIEST, max_buffered_messages=1)
    with consumer.consume(handler) as handle:
        assert all_in.wait(20), f"only {len(seen)} of 40 arrived"
    assert handle.wait(5) and handle.error is None
    assert seen == list(range(40))
    assert threads == {f"liftbridge-pull-{stream}"}
    assert consumer.position() == {0: 39} and consumer.closed


def _blocked_consume(
    client: liftbridge.Client, stream: str
) -> tuple[liftbridge.PullConsumer, liftbridge.ConsumeHandle, list[int], threading.Event]:
    """A consumer whose handler holds offset 0 until released, with offsets
    1..5 buffered behind it."""
    _publish(client, stream, 30)
    seen: list[int] = []
    gate = threading.Event()

    def handler(message: liftbridge.Message) -> None:
        gate.wait(10)
        seen.append(message.offset)

    consumer = client.pull(stream, start=EARLIEST, max_buffered_messages=5, refill_threshold=4)
    handle = consumer.consume(handler)
    _until(lambda: consumer.buffered == 5, "the buffer did not fill")
    return consumer, handle, seen, gate


def _in_background(action: Callable[[], None]) -> threading.Thread:
    thread = threading.Thread(target=action, name="test-stopper")
    thread.start()
    return thread


def test_drain_delivers_what_is_buffered(client: liftbridge.Client, stream: str) -> None:
    consumer, handle, seen, gate = _blocked_consume(client, stream)
    stopper = _in_background(handle.drain)
    _until(lambda: consumer.closed, "drain did not close the consumer")
    gate.set()
    stopper.join(10)
    assert handle.wait(5)
    assert seen == list(range(6))
    assert consumer.position() == {0: 5}


@pytest.mark.parametrize("by_bytes", [False, True], ids=["messages", "bytes"])
def test_drain_delivers_no_more_than_the_bound(
    client: liftbridge.Client, stream: str, by_bytes: bool
) -> None:
    # A slow handler (so that the buffer is full and the handler thread takes
    # whole chunks) holds offset 100 while the consumer reads ahead: what
    # drain then still delivers (what was held) stays within the buffer's
    # bound, messages taken into the handler thread's chunk included.
    _publish(client, stream, 400, size=126)  # 128-130 bytes with the key
    seen: list[liftbridge.Message] = []
    gate = threading.Event()

    def handler(message: liftbridge.Message) -> None:
        seen.append(message)
        if message.offset == 100:
            gate.wait(10)
        time.sleep(0.002)

    if by_bytes:
        consumer = client.pull(stream, start=EARLIEST, max_buffered_bytes=8192)
    else:
        consumer = client.pull(stream, start=EARLIEST, max_buffered_messages=50)
    handle = consumer.consume(handler)
    _until(lambda: len(seen) == 101, "the handler did not reach offset 100")
    filled = -1
    while consumer.buffered != filled:  # until reading ahead stopped
        filled = consumer.buffered
        time.sleep(0.3)
    stopper = _in_background(handle.drain)
    _until(lambda: consumer.closed, "drain did not close the consumer")
    gate.set()
    stopper.join(10)
    assert handle.wait(5) and handle.error is None
    after = seen[101:]
    assert [m.offset for m in seen] == list(range(len(seen)))
    assert after, "drain delivered nothing"
    if by_bytes:
        assert sum(len(m.value) + len(m.key or b"") for m in after) <= 8192
    else:
        assert len(after) <= 50


def test_stop_discards_what_is_buffered(client: liftbridge.Client, stream: str) -> None:
    consumer, handle, seen, gate = _blocked_consume(client, stream)
    stopper = _in_background(handle.stop)
    _until(lambda: consumer.closed, "stop did not close the consumer")
    gate.set()
    stopper.join(10)
    assert handle.wait(5)
    assert seen == [0]
    assert consumer.position() == {0: 0}
    assert consumer.buffered == 0


def test_a_raising_handler_stops_without_skipping(client: liftbridge.Client, stream: str) -> None:
    _publish(client, stream, 5)
    errors: list[BaseException] = []

    def handler(message: liftbridge.Message) -> None:
        if message.offset == 2:
            raise RuntimeError("boom")

    with client.pull(stream, start=EARLIEST) as consumer:
        handle = consumer.consume(handler, on_error=errors.append)
        assert handle.wait(10)
        assert isinstance(handle.error, liftbridge.HandlerError) and handle.error.offset == 2
        assert errors == [handle.error]
        assert consumer.position() == {0: 1}
        # Consumption is over; the consumer can be read directly again.
        assert consumer.next(timeout=5).offset == 2


def test_commit_and_resume_from_a_cursor(client: liftbridge.Client, unique_name: str) -> None:
    client.create_stream(unique_name, partitions=2)
    _publish(client, unique_name, 20)
    cursor = f"{unique_name}-cursor"
    with client.pull(unique_name, start=liftbridge.FromCursor(cursor)) as consumer:
        first = consumer.fetch(7, timeout=10)
        stored = consumer.commit(cursor)
    assert stored == {p: o for p, o in consumer.position().items() if o is not None}
    with client.pull(
        unique_name, start=liftbridge.FromCursor(cursor), stop=liftbridge.StopPosition.LATEST
    ) as resumed:
        rest = list(resumed)
    values = sorted(m.value for m in first + rest)
    assert values == [f"{i:04d}".encode() for i in range(20)]  # no gap, no duplicate


def test_closing_the_client_ends_iteration(server_address: str, unique_name: str) -> None:
    client = liftbridge.Client(server_address)
    client.create_stream(unique_name)
    consumer = client.pull(unique_name)
    ended = threading.Event()

    def iterate() -> None:
        for _ in consumer:
            pass
        ended.set()

    reader = threading.Thread(target=iterate, name="test-iterate")
    reader.start()
    client.close()
    assert ended.wait(10)
    reader.join(5)
    consumer.close()
    with pytest.raises(liftbridge.ClientClosedError):
        client.pull(unique_name)


def test_closing_the_client_frees_a_subscription_held_by_a_full_buffer(
    server_address: str, unique_name: str
) -> None:
    client = liftbridge.Client(server_address)
    client.create_stream(unique_name)
    _publish(client, unique_name, 20)
    consumer = client.pull(unique_name, start=EARLIEST, max_buffered_messages=2)
    _until(lambda: consumer.buffered == 2, "the buffer did not fill")
    client.close()  # the subscription thread waits for room: close must free it
    readers = [t for t in threading.enumerate() if t.name == f"liftbridge-sub-{unique_name}-0"]
    for thread in readers:
        thread.join(5)
    assert not any(t.is_alive() for t in readers)
    assert consumer.closed  # the client closed its pull consumers
    assert [m.offset for m in consumer.fetch(5, timeout=0)] == [0, 1]  # what was buffered
    consumer.close()
