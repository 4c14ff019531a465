"""The ack timer's in-order queue (:meth:`AckTimer.ordered`) on a lock lent by
its owner: appending under the owner's lock takes no lock of its own, and the
timer looks at the queue under the owner's lock."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from liftbridge._core._deadlines import AckTimer, OrderedDeadlines

TIMEOUT = 5.0


@dataclass(eq=False)
class _Due:
    deadline: float
    done: bool = False


class _OwnerLock:
    """A lock that names every thread that took it and refuses to be taken
    again by the thread holding it (a plain Lock would hang there)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holder: int | None = None
        self.takers: set[str] = set()

    def __enter__(self) -> bool:
        if self._holder == threading.get_ident():
            raise AssertionError("the lock was taken again by the thread holding it")
        self._lock.acquire()
        self._holder = threading.get_ident()
        self.takers.add(threading.current_thread().name)
        return True

    def __exit__(self, *exc: object) -> None:
        self._holder = None
        self._lock.release()


def test_a_queue_on_a_lent_lock_appends_under_it_and_is_expired_under_it() -> None:
    lock = _OwnerLock()
    expired: list[_Due] = []
    seen = threading.Event()

    def expire(item: _Due) -> None:
        expired.append(item)
        seen.set()

    timer = AckTimer()
    queue = timer.ordered(expire, wait=60.0, lock=lock)
    try:
        gone, due = _Due(0.0, done=True), _Due(time.monotonic() - 1.0)
        with lock:  # as its owner appends: holding the lock it lent
            queue.append(gone)
            queue.append(due)
        assert seen.wait(TIMEOUT)
        assert expired == [due]  # the resolved one dropped, the due one expired once
        assert "liftbridge-ack-timer" in lock.takers  # the timer looked under the owner's lock
        assert len(queue) == 0
    finally:
        timer.close(time.monotonic() + TIMEOUT)


def test_the_thread_that_resolved_the_front_items_lets_go_of_them_in_order() -> None:
    lock = threading.Lock()
    timer = AckTimer()
    queue: OrderedDeadlines[_Due] = timer.ordered(lambda item: None, wait=60.0, lock=lock)
    try:
        later = time.monotonic() + 60.0
        items = [_Due(later) for _ in range(5)]
        with lock:
            for item in items:
                queue.append_held(item)
        for i in (0, 1, 3):  # resolved; the fourth waits behind the third
            items[i].done = True
        with lock:  # as the acks thread does, holding the lock the queue was lent
            queue.drop_done_held()
        assert len(queue) == 3
        items[2].done = True
        with lock:
            queue.drop_done_held()
        assert len(queue) == 1  # the fourth went with the third; the fifth waits
    finally:
        timer.close(time.monotonic() + TIMEOUT)


def test_a_part_extended_at_once_queues_as_appending_each_would() -> None:
    """``extend_held`` (a ``publish_many_async`` part) drops the resolved
    items at the front, queues the part in order, and sweeps the resolved
    ones out once the queue outgrows the sweep mark, as ``append_held`` does."""
    lock = threading.Lock()
    timer = AckTimer()
    expired: list[_Due] = []
    queue: OrderedDeadlines[_Due] = timer.ordered(
        expired.append, wait=60.0, lock=lock, compact_at=8
    )
    try:
        later = time.monotonic() + 60.0
        with lock:
            queue.extend_held([_Due(later, done=True) for _ in range(3)])
            part = [_Due(later) for _ in range(4)]
            queue.extend_held(part)  # the resolved front goes first
        assert len(queue) == 4
        for item in part[1:]:  # resolved behind an unresolved one
            item.done = True
        with lock:
            queue.extend_held([_Due(later) for _ in range(4)])
        assert len(queue) == 8  # not past the mark: nothing swept
        with lock:
            queue.extend_held([_Due(later)])
        assert len(queue) == 6  # past it: the three resolved ones went
        assert expired == []
    finally:
        timer.close(time.monotonic() + TIMEOUT)
