"""CallbackFuture: a Future in every use, ``Future``'s own state made only
when something waits on it (issue 29: a Future per pipelined publish)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import threading
import time
import weakref
from collections.abc import Iterator
from concurrent.futures import Future, InvalidStateError
from typing import Any

import pytest

from liftbridge._core._callbacks import CallbackRunner
from liftbridge._core._futures import Waiter

WAIT = 10.0


@pytest.fixture
def runner() -> Iterator[CallbackRunner]:
    runner = CallbackRunner()
    yield runner
    runner.close(time.monotonic() + WAIT)


def _later(seconds: float, fn: Any, *args: Any) -> threading.Timer:
    timer = threading.Timer(seconds, fn, args)
    timer.start()
    return timer


def test_a_resolved_future_reads_as_one_without_being_waited_on(runner: CallbackRunner) -> None:
    future = runner.future()
    assert isinstance(future, Future)
    assert future.running() and not future.done() and not future.cancelled()
    assert "state=running" in repr(future)
    future.set_result(7)
    assert future.done() and not future.running() and not future.cancelled()
    assert future.result() == 7 and future.result(timeout=0) == 7
    assert future.exception(timeout=0) is None
    assert not future.cancel()
    assert "state=finished returned int" in repr(future)
    with pytest.raises(InvalidStateError):
        future.set_result(8)
    with pytest.raises(InvalidStateError):
        future.set_exception(ValueError("late"))
    assert future.result() == 7


def test_a_failed_future_raises_its_error_and_is_freed_without_the_collector(
    runner: CallbackRunner,
) -> None:
    future = runner.future()
    error = ValueError("refused")
    future.set_exception(error)
    assert future.exception() is error
    with pytest.raises(ValueError, match="refused"):
        future.result()
    assert "state=finished raised ValueError" in repr(future)
    freed = weakref.ref(future)
    gc.disable()  # the traceback must not keep it in a cycle
    try:
        del future
        assert freed() is None
    finally:
        gc.enable()


def test_made_and_resolved_it_costs_the_collector_one_object(runner: CallbackRunner) -> None:
    """What the type is for: a concurrent.futures.Future is eleven tracked
    objects (its Condition, RLock, lists, deque); one made and resolved by the
    SDK and never waited on is one."""
    futures = [runner.future() for _ in range(10)]  # the runner's class, made once
    gc.collect()
    before = len(gc.get_objects())
    futures = [runner.future() for _ in range(1_000)]
    for index, future in enumerate(futures):
        future.set_result(index)
    made = len(gc.get_objects()) - before
    assert made < 1_100, made
    assert [future.result(0) for future in futures] == list(range(1_000))


def test_result_and_exception_wait_for_an_outcome_from_another_thread(
    runner: CallbackRunner,
) -> None:
    future = runner.future()
    _later(0.05, future.set_result, "ack")
    assert future.result(timeout=WAIT) == "ack"
    failing = runner.future()
    _later(0.05, failing.set_exception, KeyError("k"))
    assert isinstance(failing.exception(timeout=WAIT), KeyError)
    with pytest.raises(KeyError):
        failing.result(timeout=0)
    with pytest.raises(concurrent.futures.TimeoutError):
        runner.future().result(timeout=0.01)
    with pytest.raises(concurrent.futures.TimeoutError):
        runner.future().exception(timeout=0)


def test_no_outcome_is_lost_between_a_waiting_thread_and_the_resolving_one(
    runner: CallbackRunner,
) -> None:
    """The hand-over's two sides race: the outcome written as the waiter
    makes Future's state. Every waiter must wake, with its own outcome."""
    for _ in range(300):
        futures = [runner.future() for _ in range(8)]
        start = threading.Barrier(len(futures) + 1)
        got: list[object] = []
        waiters = [threading.Thread(target=_await, args=(start, future, got)) for future in futures]
        for thread in waiters:
            thread.start()
        start.wait()
        for index, future in enumerate(futures):
            future.set_result(index)
        for thread in waiters:
            thread.join(WAIT)
        assert sorted(got) == list(range(len(futures)))  # type: ignore[type-var]


def _await(start: threading.Barrier, future: Future[Any], got: list[object]) -> None:
    start.wait()
    got.append(future.result(timeout=WAIT))


def test_done_callbacks_run_on_the_callbacks_thread_before_and_after_the_outcome(
    runner: CallbackRunner,
) -> None:
    ran: list[tuple[str, object]] = []
    both = threading.Event()

    def callback(future: Future[Any]) -> None:
        ran.append((threading.current_thread().name, future.result(timeout=0)))
        if len(ran) == 2:
            both.set()

    future = runner.future()
    future.add_done_callback(callback)  # before: Future's state is made for it
    future.set_result(1)
    done = runner.future()
    done.set_result(2)
    done.add_done_callback(callback)  # after: straight to the callbacks thread
    assert both.wait(WAIT)
    assert sorted(ran) == [("liftbridge-callbacks", 1), ("liftbridge-callbacks", 2)]


def test_wait_and_as_completed_take_resolved_and_unresolved_ones(runner: CallbackRunner) -> None:
    resolved = [runner.future() for _ in range(3)]
    for index, future in enumerate(resolved):
        future.set_result(index)
    later = [runner.future() for _ in range(3)]
    done, not_done = concurrent.futures.wait(resolved + later, timeout=0)
    assert done == set(resolved) and not_done == set(later)
    _later(0.05, later[1].set_result, "first")
    done, not_done = concurrent.futures.wait(
        later, timeout=WAIT, return_when=concurrent.futures.FIRST_COMPLETED
    )
    assert done == {later[1]}
    _later(0.05, later[0].set_exception, ValueError("x"))
    done, _ = concurrent.futures.wait(
        later, timeout=WAIT, return_when=concurrent.futures.FIRST_EXCEPTION
    )
    assert later[0] in done
    _later(0.05, later[2].set_result, "last")
    completed = list(concurrent.futures.as_completed(resolved + later, timeout=WAIT))
    assert sorted(map(id, completed)) == sorted(map(id, resolved + later))
    assert later[2].result(timeout=0) == "last"


def test_asyncio_wrap_future(runner: CallbackRunner) -> None:
    async def gather() -> list[Any]:
        futures = [runner.future() for _ in range(3)]
        futures[0].set_result("a")
        loop = asyncio.get_running_loop()
        loop.call_later(0.02, futures[1].set_result, "b")
        loop.call_later(0.02, futures[2].set_exception, KeyError("c"))
        wrapped = [asyncio.wrap_future(future) for future in futures]
        return await asyncio.wait_for(asyncio.gather(*wrapped, return_exceptions=True), WAIT)

    a, b, c = asyncio.run(gather())
    assert (a, b) == ("a", "b") and isinstance(c, KeyError)


def test_made_on_read_a_raw_result_reads_as_what_is_made_of_it_once(
    runner: CallbackRunner,
) -> None:
    """The publisher's Futures are resolved with a wire ack and make the Ack
    when first read: every way of reading one (result, repr, a waiter, a
    done-callback) reads the one value made, made once; any other result
    reads as itself."""
    made: list[bytes] = []

    def make(raw: bytes) -> str:
        made.append(raw)
        return raw.decode()

    new = runner.future_made_on_read(bytes, make)
    future = new()
    assert isinstance(future, Future)
    future.set_result(b"ack")
    assert future.done() and made == []
    assert "state=finished returned str" in repr(future)
    first = future.result(timeout=0)
    assert first == "ack" and future.result(timeout=0) is first and made == [b"ack"]
    plain = new()
    plain.set_result(7)
    assert plain.result(timeout=0) == 7 and made == [b"ack"]
    waited = new()
    _later(0.05, waited.set_result, b"late")
    assert waited.result(timeout=WAIT) == "late"  # handed on to Future's own state, made
    got: list[object] = []
    read = threading.Event()

    def callback(done: Future[Any]) -> None:
        got.append(done.result(timeout=0))
        read.set()

    called = new()
    called.add_done_callback(callback)
    called.set_result(b"called")
    assert read.wait(WAIT) and got == ["called"]
    assert made == [b"ack", b"late", b"called"]


def test_set_running_or_notify_cancel_as_for_a_future(runner: CallbackRunner) -> None:
    future = runner.future()
    assert future.set_running_or_notify_cancel()
    assert future.running()
    future.set_result(None)
    assert future.result(timeout=0) is None
    with pytest.raises(RuntimeError):
        future.set_running_or_notify_cancel()


def test_attributes_it_lacks_raise(runner: CallbackRunner) -> None:
    future = runner.future()
    with pytest.raises(AttributeError, match="no_such"):
        future.no_such  # type: ignore[attr-defined]  # noqa: B018
    assert not future.done()  # looking for one made no outcome


class _Refused(Exception):
    pass


def test_a_waiter_gives_its_one_outcome_to_the_thread_waiting_for_it() -> None:
    """Waiter: what a blocking ``publish`` waits on instead of a Future."""
    waiter = Waiter()
    _later(0.05, waiter.set_result, "ack")
    assert waiter.result(WAIT) == "ack"
    with pytest.raises(InvalidStateError):
        waiter.set_result("again")
    with pytest.raises(InvalidStateError):
        waiter.set_exception(ValueError("late"))
    failing = Waiter()
    _later(0.05, failing.set_exception, KeyError("k"))
    with pytest.raises(KeyError):
        failing.result(WAIT)
    error = _Refused("refused")  # a subclass: builtin exceptions take no weak references
    freed = weakref.ref(error)
    refused = Waiter()
    refused.set_exception(error)
    del error
    gc.disable()  # the traceback must not keep the error (and the waiter) in a cycle
    try:
        with pytest.raises(_Refused, match="refused"):
            refused.result(0)
        del refused
        assert freed() is None
    finally:
        gc.enable()
    with pytest.raises(concurrent.futures.TimeoutError):
        Waiter().result(0.01)
    done_at_once = Waiter()
    done_at_once.set_result(None)
    assert done_at_once.result(0) is None
