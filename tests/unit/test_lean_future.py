"""LeanFuture: a Future that makes its condition and lists on first use.

It must behave as a Future whichever comes first, the outcome or a waiter,
on one thread or racing on two: result/exception with and without timeouts,
done-callbacks, concurrent.futures.wait and as_completed, one outcome only.
"""

from __future__ import annotations

import concurrent.futures
import gc
import threading
from concurrent.futures import Future

import pytest

from liftbridge._callbacks import LeanFuture


def test_a_future_nobody_waited_on_is_one_tracked_object() -> None:
    gc.collect()
    before = len(gc.get_objects())
    futures = [LeanFuture() for _ in range(1000)]
    for future in futures:
        future.set_result(1)
    # The futures themselves, their list and little else: no Condition, lock,
    # deque, lists or bound methods per future (a plain Future makes ten more).
    assert len(gc.get_objects()) - before < 1100
    assert all(f.result() == 1 and f.done() for f in futures)


def test_outcome_before_reading() -> None:
    future = LeanFuture()
    assert not future.done()
    future.set_result("x")
    assert future.done()
    assert future.result(0) == "x"
    assert future.exception(0) is None
    failed = LeanFuture()
    failed.set_exception(KeyError("k"))
    assert isinstance(failed.exception(0), KeyError)
    with pytest.raises(KeyError):
        failed.result(0)


def test_a_second_outcome_is_refused() -> None:
    future = LeanFuture()
    future.set_result(1)
    with pytest.raises(concurrent.futures.InvalidStateError):
        future.set_result(2)
    with pytest.raises(concurrent.futures.InvalidStateError):
        future.set_exception(ValueError())
    assert future.result() == 1


def test_a_waiter_before_the_outcome_is_woken() -> None:
    future = LeanFuture()
    with pytest.raises(concurrent.futures.TimeoutError):
        future.result(0.01)
    threading.Timer(0.05, future.set_result, (5,)).start()
    assert future.result(5) == 5


def test_callbacks_run_whether_added_before_or_after() -> None:
    calls: list[str] = []
    future = LeanFuture()
    future.add_done_callback(lambda f: calls.append(f"before {f.result()}"))
    future.set_result(3)
    future.add_done_callback(lambda f: calls.append(f"after {f.result()}"))
    assert calls == ["before 3", "after 3"]


def test_wait_and_as_completed() -> None:
    futures = [LeanFuture() for _ in range(3)]
    futures[0].set_result(0)
    threading.Timer(0.05, futures[2].set_exception, (ValueError("2"),)).start()
    done, not_done = concurrent.futures.wait(futures[1:], timeout=5, return_when="FIRST_COMPLETED")
    assert done == {futures[2]} and not_done == {futures[1]}
    futures[1].set_result(1)
    assert set(concurrent.futures.as_completed(futures, timeout=5)) == set(futures)


def test_racing_waiters_and_outcomes_never_miss_each_other() -> None:
    # Each round: one thread resolves while others wait on result(), wait()
    # and a callback, all starting together. A missed wake-up would time out.
    for _ in range(300):
        _race_once()


def _race_once() -> None:
    future: Future[int] = LeanFuture()
    start = threading.Barrier(4)
    seen: list[object] = []
    called = threading.Event()

    def waiter() -> None:
        start.wait()
        seen.append(future.result(5))

    def waits() -> None:
        start.wait()
        done, _ = concurrent.futures.wait([future], timeout=5)
        seen.append(len(done))

    def callback() -> None:
        start.wait()
        future.add_done_callback(lambda _: called.set())

    threads = [threading.Thread(target=t) for t in (waiter, waits, callback)]
    for thread in threads:
        thread.start()
    start.wait()
    future.set_result(9)
    for thread in threads:
        thread.join(10)
    assert sorted(seen, key=str) == [1, 9]
    assert called.wait(5)
