"""Ctrl-C while a publishing thread waits for room in a full ``max_inflight``
window (or, in ``flush``, for publishes to resolve): the wait lets go of the
publisher's lock and takes it back, and an interrupt anywhere in it must
leave the lock held by the waiting thread, so that its ``with`` block lets
go of it once. ``threading.Condition.wait`` did not: interrupted as its
``_release_save`` let go of the lock (before its ``try``) or as its
``finally`` called ``_acquire_restore``, it raised with the lock not held,
and the ``with`` raised ``RuntimeError`` (or, had another thread taken the
lock meanwhile, let go of that thread's hold).

The interrupt comes at each point of one wait where an interrupt's handler
runs, in the SDK's frames and in ``Condition``'s (:mod:`tests.unit.interrupts`).
"""

from __future__ import annotations

import threading
import time
from types import FrameType

from liftbridge._publish._window import Window
from tests.unit.interrupts import in_sdk, sweep

MOST = 200  # interrupt points of one wait, at most
BOUND = 30.0  # seconds a wait may take (a loaded machine)
SIZE = 2

_CONDITION = {"wait", "_release_save", "_acquire_restore", "_is_owned"}
"""threading.Condition's functions a wait runs (where it lets go of its lock and takes it back)."""


def _waiting(frame: FrameType, event: str, arg: object) -> bool:
    """A point where an interrupt's handler runs in the SDK's or Condition's frames."""
    if in_sdk(frame, event, arg):
        return True
    code = frame.f_code
    return (
        event in ("call", "c_return")
        and code.co_filename == threading.__file__
        and code.co_name in _CONDITION
    )


def test_a_wait_for_window_room_interrupted_anywhere_keeps_the_lock_whole() -> None:
    lock = threading.Lock()
    window = Window(lock, SIZE, 1)
    window.used = SIZE  # full
    stop = threading.Event()

    def free_a_slot() -> None:
        """Frees a slot once the main thread waits for one (not if it never does)."""
        while not stop.is_set():
            with lock:
                if window._waiters:  # the main thread waits, having let go of the lock
                    window.give()
                    return
            time.sleep(0.001)

    freer: list[threading.Thread] = []

    def start_freer() -> None:  # outside the sweep's action: Thread.start waits on a Condition
        freer.append(threading.Thread(target=free_a_slot, name="test-freer"))
        freer[-1].start()

    def take() -> None:
        with lock:
            window.take(BOUND)

    def check() -> None:
        stop.set()
        freer[-1].join(BOUND)
        stop.clear()
        assert not freer[-1].is_alive()
        assert lock.acquire(False), "the lock was left held"
        try:
            assert window._waiters == 0
            assert window.used in (SIZE - 1, SIZE), window.used
            window.used = SIZE  # full again for the next wait
        finally:
            lock.release()
        start_freer()

    start_freer()
    try:
        interrupted = sweep(take, check, _waiting, MOST)
    finally:
        stop.set()
        freer[-1].join(BOUND)
    assert {"_wait", "wait"} <= interrupted
