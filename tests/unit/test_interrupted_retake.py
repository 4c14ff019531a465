"""Ctrl-C while :meth:`liftbridge._locks.Waiters.wait` takes its lock back.

Woken (or timed out, or interrupted), a waiter takes the lock back; another
thread may hold it then, and the take blocks. A signal's handler raising
there (KeyboardInterrupt) makes the blocked take fail, the lock not taken:
``wait`` raised with the lock not held, and the caller's ``with`` then let
go of the other thread's hold (a plain lock has no owner to check): two
threads in the lock, and the other one's own release failing with
``RuntimeError``. Now the take is tried again until this thread holds the
lock, and the interrupt is raised then.
"""

from __future__ import annotations

import inspect
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any

import pytest

from liftbridge._locks import Waiters
from tests.unit.interrupts import Interrupted

BOUND = 10.0  # seconds any wait here may take

TraceFunction = Callable[[FrameType, str, Any], Any]


class _FailingTakes:
    """A lock whose takes after it was let go of fail ``fails`` times with an
    interrupt, the lock not taken: what a take blocked on a lock another
    thread holds does when a signal's handler raises (CPython's
    ``acquire_timed``: interrupted, it runs the handlers and gives up)."""

    def __init__(self, fails: int) -> None:
        self.real = threading.Lock()
        self.fails = fails
        self._let_go = False

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if self._let_go and self.fails:
            self.fails -= 1
            raise Interrupted
        return self.real.acquire(blocking, timeout)

    def release(self) -> None:
        self._let_go = True
        self.real.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, kind: object, error: object, traceback: TracebackType | None) -> None:
        self.release()


@pytest.mark.parametrize("fails", [1, 3])
def test_takes_back_interrupted_still_end_with_the_lock_held(fails: int) -> None:
    lock = _FailingTakes(fails)
    waiters = Waiters(lock)  # type: ignore[arg-type]  # a lock's acquire and release
    with pytest.raises(Interrupted), lock:
        waiters.wait(0.01)
        raise AssertionError("not interrupted")
    # Raised with the lock held: the with let go of it, once (no RuntimeError).
    assert lock.fails == 0 and not lock.real.locked()
    assert not waiters._waiting


@pytest.mark.skipif(not hasattr(signal, "pthread_kill"), reason="needs POSIX signals")
def test_a_signal_while_the_take_back_blocks_leaves_the_other_holder_alone() -> None:
    """A real signal, on the main thread, while its take back is blocked on
    the lock a helper thread holds; the helper lets go after it."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers run on the main thread only")
    lock = threading.Lock()
    waiters = Waiters(lock)
    main = threading.get_ident()
    helper_failed: list[BaseException] = []

    def blocked_in_wait() -> bool:
        frame: FrameType | None = sys._current_frames().get(main)
        return frame is not None and frame.f_code is Waiters.wait.__code__

    def helper() -> None:
        try:
            deadline = time.monotonic() + BOUND
            while not waiters._waiting:  # the main thread waits, the lock let go of
                assert time.monotonic() < deadline
                time.sleep(0.001)
            with lock:
                waiters.notify()
                while not blocked_in_wait():  # woken, it waits for this lock
                    assert time.monotonic() < deadline
                    time.sleep(0.001)
                time.sleep(0.1)  # into the take's blocking C call
                signal.pthread_kill(main, signal.SIGUSR1)
                time.sleep(0.1)  # the interrupted take tried again, or the with let go
        except BaseException as e:  # the with's exit: "release unlocked lock"
            helper_failed.append(e)

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise Interrupted

    previous = signal.signal(signal.SIGUSR1, interrupt)
    thread = threading.Thread(target=helper, name="test-retake-helper")
    try:
        thread.start()
        with pytest.raises(Interrupted), lock:
            waiters.wait(BOUND)
    finally:
        thread.join(BOUND)
        signal.signal(signal.SIGUSR1, previous)
    assert not thread.is_alive()
    assert helper_failed == []
    assert not lock.locked() and not waiters._waiting


def _retake_loop_line() -> int:
    """The line of ``Waiters.wait``'s first take-back loop (``while not taken``)."""
    code = Waiters.wait.__code__
    lines, start = inspect.getsourcelines(code)
    for offset, text in enumerate(lines):
        if text.strip() == "while not taken:":
            return start + offset
    raise AssertionError("no take-back loop in Waiters.wait")


def test_a_second_interrupt_as_the_take_back_loop_jumps_back_still_ends_with_the_lock_held() -> (
    None
):
    """The first interrupt fails a take (the lock not taken); a second lands
    as the loop jumps back for the next try, outside the try (where a
    pending signal's handler runs: raised here by a line trace at the loop's
    condition, where the jump lands). ``wait`` raised the second with the
    lock not held, and the caller's ``with`` then failed with RuntimeError
    (or let go of another thread's hold)."""
    lock = _FailingTakes(1)
    waiters = Waiters(lock)  # type: ignore[arg-type]  # a lock's acquire and release
    loop_line = _retake_loop_line()
    hits = 0

    def local(frame: FrameType, event: str, arg: object) -> TraceFunction:
        nonlocal hits
        if event == "line" and frame.f_lineno == loop_line:
            hits += 1
            if hits == 2:  # after the failed take: the jump back
                raise Interrupted
        return local

    def tracer(frame: FrameType, event: str, arg: object) -> TraceFunction | None:
        return local if frame.f_code is Waiters.wait.__code__ else None

    sys.settrace(tracer)
    try:
        with pytest.raises(Interrupted), lock:
            waiters.wait(0.01)
            raise AssertionError("not interrupted")
    finally:
        sys.settrace(None)
    assert hits == 2  # the second interrupt was raised
    # Raised with the lock held: the with let go of it, once (no RuntimeError).
    assert lock.fails == 0 and not lock.real.locked()
    assert not waiters._waiting
