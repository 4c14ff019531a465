"""Ctrl-C while a thread waits in the buffer between a subscription and its
reader (an iterated subscription, a pull consumer's ``fetch``, a group's
``fetch``): the wait lets go of the buffer's lock and takes it back, and an
interrupt anywhere in it must leave the lock held by the waiting thread, so
that its ``with`` block lets go of it once. ``threading.Condition.wait`` did
not (see :class:`liftbridge._locks.Waiters`): interrupted as it let go of the
lock or took it back, it raised with the lock not held, and the ``with`` raised
``RuntimeError`` (or, had another thread taken the lock meanwhile, let go of
that thread's hold). The same for a producer waiting for room.

The interrupt comes at each point of one wait where an interrupt's handler
runs, in the SDK's frames and in ``Condition``'s (:mod:`tests.unit.interrupts`),
each time on a fresh buffer.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import FrameType

import pytest

from liftbridge._consume._handoff import Empty, Handoff
from liftbridge._consume._pull import PullConsumer
from tests.unit.interrupts import in_sdk, sweep
from tests.unit.test_interrupted_wait import _waiting
from tests.unit.test_pull_unit import FakeSource, _consumer

MOST = 200  # interrupt points of one wait, at most
BOUND = 30.0  # seconds a wait may take (a loaded machine)


class _Helper:
    """Another thread that acts once this one waits in ``buffer`` (a taker
    for an item, a producer for room), then ends."""

    def __init__(self, buffer: Handoff[int], act: Callable[[Handoff[int]], object]) -> None:
        self.buffer = buffer
        self._act = act
        self._stop = threading.Event()
        # Started here, outside the sweep's action: Thread.start waits on a Condition.
        self._thread = threading.Thread(target=self._run, name="test-handoff-helper")
        self._thread.start()

    def _run(self) -> None:
        buffer = self.buffer
        while not self._stop.is_set():
            with buffer.mutex:
                waiting = bool(buffer._needs) or buffer._putters > 0
            if waiting:  # the main thread waits, having let go of the lock
                self._act(buffer)
                return
            time.sleep(0.001)

    def stop(self) -> None:
        """Ends the thread; the main thread's lock must be whole, and
        nothing of its wait left behind."""
        self._stop.set()
        self._thread.join(BOUND)
        assert not self._thread.is_alive()
        buffer = self.buffer
        assert buffer.mutex.acquire(False), "the lock was left held"
        try:
            # (_need may be left too high: a taker is woken early, and looks again.)
            assert buffer._needs == [] and buffer._putters == 0
        finally:
            buffer.mutex.release()


def _sweep(
    fresh: Callable[[], Handoff[int]],
    act: Callable[[Handoff[int]], object],
    wait: Callable[[Handoff[int]], object],
) -> set[str]:
    """Sweeps ``wait(buffer)`` on a fresh buffer each time, ``act(buffer)``
    on another thread once it waits."""
    helper = [_Helper(fresh(), act)]

    def check() -> None:
        helper[0].stop()
        helper[0] = _Helper(fresh(), act)

    try:
        return sweep(lambda: wait(helper[0].buffer), check, _waiting, MOST)
    finally:
        helper[0].stop()


def test_a_taker_waiting_for_an_item_interrupted_anywhere_keeps_the_lock_whole() -> None:
    interrupted = _sweep(
        lambda: Handoff(4), lambda buffer: buffer.put(1, BOUND), lambda buffer: buffer.get(BOUND)
    )
    assert {"wait_for", "wait"} <= interrupted


def _full() -> Handoff[int]:
    buffer: Handoff[int] = Handoff(1)
    assert buffer.put(0, 0)
    return buffer


def test_a_producer_waiting_for_room_interrupted_anywhere_keeps_the_lock_whole() -> None:
    interrupted = _sweep(_full, lambda buffer: buffer.get(0), lambda buffer: buffer.put(1, BOUND))
    assert {"put", "wait"} <= interrupted


def _waiting_or_entering(frame: FrameType, event: str, arg: object) -> bool:
    """A wait's points, and those of taking a Condition with ``with`` (not
    a generator's: one interrupted as it is dropped only warns)."""
    code = frame.f_code
    if code.co_name == "<genexpr>":
        return False
    return _waiting(frame, event, arg) or (
        event in ("call", "c_return")
        and code.co_filename == threading.__file__
        and code.co_name == "__enter__"
    )


def test_a_fetch_interrupted_anywhere_keeps_the_pull_buffers_lock_whole() -> None:
    """Also where ``with`` takes the lock: through a Condition, an interrupt
    as its ``__enter__`` took the lock left it held for good."""
    opened: list[tuple[PullConsumer, FakeSource, threading.Thread]] = []
    stop = threading.Event()

    def deliver(consumer: PullConsumer, source: FakeSource) -> None:
        """Delivers a message once the main thread waits in ``fetch``."""
        queue = consumer._buffer._queue
        while not stop.is_set():
            with queue.mutex:
                waiting = bool(queue._needs)
            if waiting:
                source.subscriptions[0].deliver(0)
                return
            time.sleep(0.001)

    def open_one() -> None:
        source = FakeSource()
        consumer = _consumer(source)
        thread = threading.Thread(target=deliver, args=(consumer, source), name="test-deliver")
        thread.start()
        opened.append((consumer, source, thread))

    def check() -> None:
        consumer, _, thread = opened[-1]
        stop.set()
        thread.join(BOUND)
        stop.clear()
        assert not thread.is_alive()
        mutex = consumer._buffer._mutex
        assert mutex.acquire(False), "the lock was left held"
        mutex.release()
        consumer.close()
        open_one()

    open_one()
    try:
        interrupted = sweep(
            lambda: opened[-1][0].fetch(1, timeout=BOUND), check, _waiting_or_entering, MOST
        )
    finally:
        stop.set()
        opened[-1][2].join(BOUND)
        opened[-1][0].close()
    assert {"fetch", "take", "wait_for"} <= interrupted, interrupted


# ------------------------------------------------- items and level whole --
#
# An interrupt anywhere in taking must leave every item either handed out or
# still in the buffer, once and in order, and the level equal to what is held
# (a level left too high shrinks the bound for good, and a subscription whose
# buffer stays full stalls; one too low lets the bound be passed). get() used
# to lose the item whose popleft() had just returned, the items a chunk's
# move had popped when its comprehension was interrupted, and to leave a
# refilled batch uncounted (interrupted as _move returned) or a settled one
# counted twice (interrupted as settle_weight returned).

WHOLE_CASES: dict[str, tuple[Callable[[], Handoff[int]], int]] = {
    # name: (a fresh buffer, the items put in, its bound in items of weight 1)
    "by count": (lambda: Handoff(6, refill_at=3), 6),
    "by weight": (lambda: Handoff(6, refill_at=2, weigh=lambda item: 1), 6),
    "default threshold": (lambda: Handoff(5), 5),
}


def _filled(fresh: Callable[[], Handoff[int]], count: int) -> Handoff[int]:
    buffer = fresh()
    for i in range(count):
        assert buffer.put(i, 0)
    return buffer


def _check_whole(buffer: Handoff[int], taken: list[int], count: int) -> None:
    left: list[int] = []
    while True:
        try:
            left.append(buffer.get(0))
        except Empty:
            break
    assert taken + left == list(range(count)), (taken, left)
    assert buffer.level == 0 and not buffer.full
    assert all(buffer.put(i, 0) for i in range(count))  # the whole bound, and no more
    assert not buffer.put(count, 0)


def _sweep_whole_taking(take: Callable[[Handoff[int], list[int]], object], case: str) -> set[str]:
    fresh, count = WHOLE_CASES[case]
    state: list[tuple[Handoff[int], list[int]]] = [(_filled(fresh, count), [])]

    def check() -> None:
        _check_whole(*state[0], count)
        state[0] = (_filled(fresh, count), [])

    interrupted = sweep(lambda: take(*state[0]), check, in_sdk, MOST)
    check()  # and the run that went through whole
    return interrupted


def _get_four(buffer: Handoff[int], taken: list[int]) -> None:
    for _ in range(4):  # a batch emptied and settled, the next one moved
        taken.append(buffer.get(0))


@pytest.mark.parametrize("case", sorted(WHOLE_CASES))
def test_get_interrupted_anywhere_loses_nothing_and_keeps_the_level(case: str) -> None:
    interrupted = _sweep_whole_taking(_get_four, case)
    assert {"get", "_settle_batch", "_measure"} <= interrupted, interrupted


def _pop_three(buffer: Handoff[int], taken: list[int]) -> None:
    with buffer.mutex:
        buffer.pop_into(taken, 3)


@pytest.mark.parametrize("case", sorted(WHOLE_CASES))
def test_pop_into_interrupted_anywhere_loses_nothing_and_keeps_the_level(case: str) -> None:
    interrupted = _sweep_whole_taking(_pop_three, case)
    assert "pop_into" in interrupted, interrupted
