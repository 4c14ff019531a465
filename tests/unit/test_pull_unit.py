"""PullConsumer without a network: a fake source hands out fake subscriptions
whose handlers the tests call, so stalls, failed resubscribes and the buffer's
thresholds play out exactly."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import cast

import pytest

import liftbridge
from liftbridge._consume._positions import StartPosition, StopPosition
from liftbridge._consume._pull import PullConsumer
from liftbridge._consume._pull_options import PullStart, Stall
from liftbridge._consume._subscription import Handler, Subscription
from liftbridge._core._metadata import EventTimestamps, Metadata, PartitionMetadata
from tests.unit.fake_router import metadata_with

STREAM = "orders"


class FakeSubscription:
    def __init__(self, handler: Handler, start: object, read_isr_replica: bool) -> None:
        self.handler = handler
        self.start = start
        self.read_isr_replica = read_isr_replica
        self.closed = False
        self.done = False
        self.last_broker: str | None = "127.0.0.1:1"

    def close(self) -> None:
        self.closed = self.done = True

    def deliver(self, offset: int, value: bytes = b"v") -> None:
        self.handler(liftbridge.Message(offset, value, stream=STREAM), None)


class FakeSource:
    """The client methods a pull consumer uses, answered from fields."""

    def __init__(self) -> None:
        self.metadata: Metadata = metadata_with({STREAM: 1})
        self.closed = False
        self.high_watermark = -1
        self.newest_offset = -1
        self.fail_subscribes = 0
        self.subscriptions: list[FakeSubscription] = []

    def fetch_metadata(self, *, timeout: float | None = None) -> Metadata:
        return self.metadata

    def fetch_partition_metadata(
        self, stream: str, partition: int = 0, *, timeout: float | None = None
    ) -> PartitionMetadata:
        none = EventTimestamps(0, 0)
        return PartitionMetadata(
            stream,
            partition,
            "a",
            ("a",),
            ("a",),
            self.high_watermark,
            self.newest_offset,
            False,
            False,
            none,
            none,
            none,
        )

    def subscribe(
        self,
        stream: str,
        handler: Handler | None = None,
        *,
        partition: int = 0,
        start: StartPosition | int | datetime | timedelta = StartPosition.NEW_ONLY,
        stop: StopPosition | int | datetime | None = None,
        read_replica: bool = False,
        resume: bool = False,
    ) -> Subscription:
        if self.fail_subscribes:
            self.fail_subscribes -= 1
            raise liftbridge.UnavailableError("the broker is down")
        assert handler is not None
        subscription = FakeSubscription(handler, start, read_replica)
        self.subscriptions.append(subscription)
        return cast(Subscription, subscription)

    def set_cursor(
        self,
        cursor_id: str,
        stream: str,
        partition: int,
        offset: int,
        *,
        timeout: float | None = None,
    ) -> None:
        raise AssertionError("not used here")

    def fetch_cursor(
        self, cursor_id: str, stream: str, partition: int, *, timeout: float | None = None
    ) -> int | None:
        return None


def _consumer(
    source: FakeSource,
    *,
    start: PullStart = StartPosition.NEW_ONLY,
    max_buffered_messages: int | None = None,
    max_buffered_bytes: int | None = None,
    refill_threshold: int | None = None,
    stall_timeout: float | None = None,
    on_stall: Callable[[Stall], None] | None = None,
    read_replica: bool = False,
) -> PullConsumer:
    return PullConsumer(
        source,
        STREAM,
        partitions=None,
        start=start,
        stop=None,
        read_replica=read_replica,
        max_buffered_messages=max_buffered_messages,
        max_buffered_bytes=max_buffered_bytes,
        refill_threshold=refill_threshold,
        stall_timeout=stall_timeout,
        on_stall=on_stall,
    )


def _until(condition: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} within {timeout}s"
        time.sleep(0.01)


def test_a_stall_whose_resubscribe_fails_is_retried_and_nothing_is_repeated() -> None:
    source = FakeSource()
    stalls: list[Stall] = []
    with _consumer(
        source, stall_timeout=0.2, on_stall=stalls.append, read_replica=True
    ) as consumer:
        first = source.subscriptions[0]
        assert first.start == 0 and first.read_isr_replica  # NEW_ONLY pinned to newest + 1
        first.deliver(0)
        assert consumer.next(timeout=5).offset == 0
        source.high_watermark = 3  # committed messages the frozen read never sends
        source.fail_subscribes = 1
        _until(lambda: bool(stalls), "no stall was reported")
        assert stalls[0].last_offset == 0 and stalls[0].high_watermark == 3
        assert isinstance(stalls[0].error, liftbridge.UnavailableError)
        assert stalls[0].resumed_from is None
        assert first.closed
        _until(lambda: len(source.subscriptions) == 2, "the failed resubscribe was not retried")
        second = source.subscriptions[1]
        assert second.start == 1 and not second.read_isr_replica  # from the leader now
        first.deliver(1, b"late")  # the replaced subscription: dropped
        second.deliver(1)
        second.deliver(2)
        assert [(m.offset, m.value) for m in consumer.fetch(5, timeout=0.5)] == [
            (1, b"v"),
            (2, b"v"),
        ]


def test_no_stall_while_the_buffer_is_full() -> None:
    source = FakeSource()
    stalls: list[Stall] = []
    with _consumer(
        source, max_buffered_messages=1, stall_timeout=0.1, on_stall=stalls.append
    ) as consumer:
        source.subscriptions[0].deliver(0)
        source.high_watermark = 10  # much more is waiting, but there is no room for it
        time.sleep(0.5)
        assert stalls == []
        assert consumer.buffered == 1


def test_a_buffer_of_one_refills_when_it_empties() -> None:
    source = FakeSource()
    with _consumer(source, max_buffered_messages=1) as consumer:
        subscription = source.subscriptions[0]
        subscription.deliver(0)
        producer = threading.Thread(target=subscription.deliver, args=(1,), name="test-producer")
        producer.start()  # waits: the buffer is full
        producer.join(0.3)
        assert producer.is_alive() and consumer.buffered == 1
        assert consumer.next(timeout=5).offset == 0  # empty: at the threshold (0)
        producer.join(5)
        assert not producer.is_alive()
        assert consumer.next(timeout=5).offset == 1
        assert consumer.position() == {0: 1}


def test_byte_bound_lets_one_large_message_in_and_waits_for_the_threshold() -> None:
    source = FakeSource()
    with _consumer(source, max_buffered_bytes=100, refill_threshold=10) as consumer:
        subscription = source.subscriptions[0]
        subscription.deliver(0, b"x" * 500)  # larger than the bound: alone, it fits
        assert consumer.buffered_bytes == 500
        producer = threading.Thread(
            target=subscription.deliver, args=(1, b"y" * 50), name="test-producer"
        )
        producer.start()
        producer.join(0.3)
        assert producer.is_alive()  # full until it falls to 10 bytes
        assert consumer.next(timeout=5).offset == 0
        producer.join(5)
        assert consumer.buffered_bytes == 50


def test_bad_options_are_refused_before_any_call() -> None:
    source = FakeSource()
    with pytest.raises(liftbridge.InvalidArgumentError, match="refill_threshold"):
        _consumer(source, max_buffered_messages=4, refill_threshold=5)
    with pytest.raises(liftbridge.ArgumentTypeError, match="FromCursor"):
        _consumer(source, start=liftbridge.FromCursor("c", otherwise="x"))  # type: ignore[arg-type]
    with pytest.raises(liftbridge.InvalidArgumentError, match="stall_timeout"):
        _consumer(source, stall_timeout=0)
    assert source.subscriptions == []


def _filled(source: FakeSource, consumer: PullConsumer, count: int) -> None:
    for offset in range(count):
        source.subscriptions[0].deliver(offset)
    assert consumer.buffered == count


def test_breaking_off_an_iteration_leaves_the_rest_of_its_chunk_buffered_in_order() -> None:
    source = FakeSource()
    with _consumer(source) as consumer:
        _filled(source, consumer, 10)
        taken: list[int] = []
        for message in consumer:
            taken.append(message.offset)
            assert consumer.position() == {0: message.offset}  # as each one is handed out
            if len(taken) == 3:
                break
        assert taken == [0, 1, 2]
        assert consumer.buffered == 7
        assert [m.offset for m in consumer.fetch(10, timeout=0)] == list(range(3, 10))
        assert consumer.position() == {0: 9}


def test_an_iteration_takes_no_more_than_the_bound_minus_the_threshold_at_once() -> None:
    source = FakeSource()
    with _consumer(source, max_buffered_messages=8, refill_threshold=5) as consumer:
        _filled(source, consumer, 8)
        for message in consumer:
            assert message.offset == 0
            assert consumer.buffered == 5  # a chunk of 3 left the buffer
            break
        assert consumer.buffered == 7  # the 2 not handed out came back
    source = FakeSource()
    with _consumer(source, max_buffered_bytes=10, refill_threshold=6) as consumer:
        _filled(source, consumer, 10)  # one byte each
        for message in consumer:
            assert message.offset == 0
            assert consumer.buffered == 6  # a chunk of 4 bytes left the buffer
            break
        assert consumer.buffered == 9


@pytest.mark.parametrize(("discard", "rest"), [(True, []), (False, list(range(1, 10)))])
def test_close_drops_or_keeps_what_an_iteration_has_taken(discard: bool, rest: list[int]) -> None:
    source = FakeSource()
    consumer = _consumer(source)
    _filled(source, consumer, 10)
    iterator = iter(consumer)
    assert next(iterator).offset == 0
    consumer.close(discard=discard)
    assert [m.offset for m in iterator] == rest


def test_a_handler_failing_mid_chunk_leaves_that_message_and_the_rest_buffered() -> None:
    source = FakeSource()
    with _consumer(source) as consumer:
        _filled(source, consumer, 10)
        seen: list[int] = []

        def handler(message: liftbridge.Message) -> None:
            if message.offset == 4:
                raise RuntimeError("boom")
            seen.append(message.offset)

        handle = consumer.consume(handler)
        assert handle.wait(5)
        assert isinstance(handle.error, liftbridge.HandlerError) and handle.error.offset == 4
        assert seen == [0, 1, 2, 3] and consumer.position() == {0: 3}
        assert [m.offset for m in consumer.fetch(10, timeout=0)] == list(range(4, 10))


@pytest.mark.parametrize(("drain", "expected"), [(False, [0, 1, 2]), (True, list(range(10)))])
def test_stop_from_the_handler_drops_its_chunk_and_drain_delivers_it(
    drain: bool, expected: list[int]
) -> None:
    source = FakeSource()
    consumer = _consumer(source)
    _filled(source, consumer, 10)
    seen: list[int] = []
    started = threading.Event()
    handles: list[liftbridge.ConsumeHandle] = []

    def handler(message: liftbridge.Message) -> None:
        started.wait(5)
        seen.append(message.offset)
        if message.offset == 2:
            handle = handles[0]
            handle.drain() if drain else handle.stop()

    handles.append(consumer.consume(handler))
    started.set()
    assert handles[0].wait(5) and handles[0].error is None
    assert seen == expected and consumer.closed
    assert consumer.position() == {0: expected[-1]}
    assert consumer.buffered == 0


def test_after_a_chunk_an_iteration_still_takes_single_messages_as_they_come() -> None:
    source = FakeSource()
    with _consumer(source) as consumer:
        iterator = iter(consumer)
        for offset in range(5):  # each one alone: lingering for a chunk must not hold it
            source.subscriptions[0].deliver(offset)
            assert next(iterator).offset == offset
        assert consumer.position() == {0: 4}
