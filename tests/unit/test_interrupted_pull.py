"""Ctrl-C in the thread taking from a pull consumer (``fetch``, ``next``,
iteration; often the main thread): an interrupt anywhere in the call must
lose no message taken from the buffer and not handed to the caller, and must
not move the position past one. Each message is either handed out (returned,
yielded) with the position moved to it, or comes again on the next call.

``PullBuffer.take`` used to mark its batch delivered and then let go of the
lock, where an interrupt dropped the batch with the position moved; the
iterator dropped the message between its chunk's ``popleft()`` and
``hand_out`` (and one ``hand_out`` had settled); ``next_chunk``'s chunk was
lost as the lock was let go of on its way back.

The interrupt comes at each point of the call where a signal's handler runs,
in the SDK's frames (:mod:`tests.unit.interrupts`), each time on a fresh
consumer holding ``COUNT`` messages, by message count and by bytes, over one
partition and over two.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import cast

import pytest

import liftbridge
from liftbridge._consume._pull import PullConsumer
from tests.unit.fake_router import metadata_with
from tests.unit.interrupts import in_sdk, sweep
from tests.unit.test_pull_unit import STREAM, FakeSource, _consumer

MOST = 400  # interrupt points of one action, at most
COUNT = 8  # messages buffered (the bound: none waits for room)

Key = tuple[int, int]  # (partition, offset)

CASES = ["count/1", "count/2", "bytes/1", "bytes/2"]


class _State:
    """A fresh consumer holding COUNT messages, and what was handed out."""

    def __init__(self, case: str) -> None:
        by, partitions = case.split("/")
        self.by_bytes = by == "bytes"
        source = FakeSource()
        if partitions == "2":
            source.metadata = metadata_with({STREAM: 2})
        if self.by_bytes:
            self.consumer: PullConsumer = _consumer(
                source, max_buffered_bytes=COUNT, refill_threshold=COUNT - 3
            )
        else:
            self.consumer = _consumer(
                source, max_buffered_messages=COUNT, refill_threshold=COUNT - 3
            )
        self.order: list[Key] = []
        count = len(source.subscriptions)
        for i in range(COUNT):
            partition, offset = i % count, i // count
            self.order.append((partition, offset))
            message = liftbridge.Message(
                offset=offset, value=b"v", stream=STREAM, partition=partition
            )
            source.subscriptions[partition].handler(message, None)
        assert self.consumer.buffered == COUNT
        self.handed: list[liftbridge.Message] = []
        self.iterator: Generator[liftbridge.Message, None, None] | None = None

    def take(self, messages: list[liftbridge.Message]) -> None:
        # Kept as they are: reading a Message's fields calls SDK code, where
        # the sweep would interrupt the test's own bookkeeping.
        self.handed.extend(messages)

    def check(self) -> None:
        """The position is that of what was handed out; the rest comes next,
        once and in order; then nothing is held."""
        consumer = self.consumer
        if self.iterator is not None:
            self.iterator.close()  # (uninterrupted) gives back what it holds
        self.taken = [(m.partition, m.offset) for m in self.handed]
        expected: dict[int, int | None] = dict.fromkeys(consumer.partitions)
        for partition, offset in self.taken:
            expected[partition] = offset
        assert consumer.position() == expected, (self.taken, consumer.position())
        rest = [(m.partition, m.offset) for m in consumer.fetch(COUNT, timeout=0)]
        assert self.taken + rest == self.order, (self.taken, rest)
        assert consumer.position() == dict(self.order)
        queue = consumer._buffer._queue
        assert queue.level == 0 and not queue.full and queue.cap == queue.capacity
        consumer.close()


def _sweep(case: str, action: Callable[[_State], object]) -> set[str]:
    state = [_State(case)]

    def check() -> None:
        state[0].check()
        state[0] = _State(case)

    interrupted = sweep(lambda: action(state[0]), check, in_sdk, MOST)
    check()  # and the run that went through whole
    state[0].consumer.close()
    return interrupted


def _fetch_twice(state: _State) -> None:
    for _ in range(2):
        if state.by_bytes:
            state.take(state.consumer.fetch(max_bytes=3, timeout=0))
        else:
            state.take(state.consumer.fetch(3, timeout=0))


@pytest.mark.parametrize("case", CASES)
def test_fetch_interrupted_anywhere_loses_nothing_and_keeps_the_position(case: str) -> None:
    interrupted = _sweep(case, _fetch_twice)
    assert {"fetch", "take", "_mark_delivered", "pop_into"} <= interrupted, interrupted


def _next_three(state: _State) -> None:
    for _ in range(3):
        state.take([state.consumer.next(timeout=0)])


@pytest.mark.parametrize("case", CASES)
def test_next_interrupted_anywhere_loses_nothing_and_keeps_the_position(case: str) -> None:
    interrupted = _sweep(case, _next_three)
    assert {"next", "take"} <= interrupted, interrupted


def _iterate_five(state: _State) -> None:
    """Five messages: a chunk (3) emptied, the next one taken."""
    if state.iterator is None:
        state.iterator = cast(Generator[liftbridge.Message, None, None], iter(state.consumer))
    for _ in range(5):
        state.take([next(state.iterator)])


@pytest.mark.parametrize("case", CASES)
def test_iteration_interrupted_anywhere_loses_nothing_and_keeps_the_position(
    case: str,
) -> None:
    interrupted = _sweep(case, _iterate_five)
    assert {"__iter__", "next_chunk", "take_chunk", "hand_out", "settle"} <= interrupted, (
        interrupted
    )
