"""Taking a lock, waiting on one, or starting a thread, where an interrupt
may land: :func:`drop`, :class:`Waiters`, :func:`start_thread`.

A signal handler's exception (Ctrl-C's KeyboardInterrupt) is raised on the
main thread right after the call that was running returns: after
``lock.acquire()`` too, before the ``try`` that would let go of the lock, so
the lock stays held and every thread that takes it later waits forever
(~20 % of interrupts landing in that pattern did so, measured; none with
``with lock``). A blocking take without a timeout is a ``with``. A take that
may fail (``acquire(False)``, ``acquire(timeout=...)``) cannot be one: its
lock is an RLock, the call to take it sits in a ``try`` whose ``except
BaseException`` calls :func:`drop`, and the ``try`` that lets go of it
follows with no call in between. The RLock only tells its holder apart;
nobody takes such a lock twice.
"""

from __future__ import annotations

import _thread
import collections
import logging
import threading

_log = logging.getLogger(__name__)
_starting = threading.Lock()  # held by a starter thread (start_thread) while it starts one
_BLOCKING = (True,)  # lock.acquire's argument, for map (Waiters.wait)


def drop(lock: threading.RLock) -> bool:
    """Lets go of ``lock`` if this thread holds it: after an exception that
    may have been raised just as a try to take it succeeded, on a thread that
    cannot tell whether it got the lock. Returns whether it let go."""
    try:
        lock.release()
    except RuntimeError:  # not ours: nothing to let go of
        return False
    return True


def start_thread(thread: threading.Thread) -> None:
    """Starts ``thread`` where an interrupt may land, whole or not at all.

    Interrupted in ``Thread.start`` (its call, its ``with`` block's exit, its
    wait for the thread to run), a caller cannot tell whether the thread was
    started, nor start it again safely: a flag set before the call is left
    set over a thread never started, one set after it is left unset over a
    started one. So the calling thread makes one C call, which starts a
    short-lived starter thread: an interrupt lands before it (nothing
    started: call again) or after it (the start under way). The starter
    starts ``thread``: Python runs signal handlers on the main thread only,
    so nothing interrupts it there. Calling this again for the same thread
    (the caller's flag was left unset) starts it once, not twice. Then waits,
    as ``Thread.start`` does, until ``thread`` runs (:data:`START_WAIT` at most).
    """
    started = threading.Lock()  # a one-shot signal: the starter lets go of it
    started.acquire()
    _thread.start_new_thread(_start_once, (thread, started))
    started.acquire(True, START_WAIT)


START_WAIT = 10.0
"""Seconds :func:`start_thread` waits for the thread to run, at most (its
start goes on beyond: a machine that slow)."""


def _start_once(thread: threading.Thread, started: threading.Lock) -> None:
    """The starter thread's: starts ``thread`` unless a starter did already."""
    try:
        with _starting:  # ident is set before start() returns
            if thread.ident is None:
                thread.start()
    except Exception:  # no thread of its own to fail on: say so
        _log.exception("could not start thread %s", thread.name)
    finally:
        started.release()


class Waiters:
    """``threading.Condition``'s wait and notify over a plain lock, for a
    thread an interrupt (Ctrl-C) may cut short while it waits.

    ``Condition.wait`` lets go of the lock before its ``try``
    (``_release_save``, a Python call whose ``release`` returns where a
    signal's handler runs) and takes it back in its ``finally`` through
    another Python call (``_acquire_restore``): an interrupt at either leaves
    the caller, inside its ``with lock``, not holding the lock, and the
    ``with`` then lets go of a lock it does not hold (``RuntimeError``, or
    another thread's hold let go of: two threads in the lock). Here the lock
    is let go of inside the ``try`` and taken back in its ``finally``, and
    the waiter leaves the list whatever happens.

    Taking it back is where an owner-blind lock bites: an interrupt landing
    while that take blocks on a lock another thread holds makes the take
    fail (the lock not taken), and one landing as it returns leaves it taken,
    and a plain lock cannot tell its holder which. So the take records its
    own success in the same C call (``taken.extend(map(lock.acquire, ...))``:
    nothing runs between the lock taken and ``taken`` growing), and is tried
    again until ``taken`` says so; the first interrupt is raised once the
    lock is held. A signal landing as the loop jumps back after a failed
    take (where a pending signal's handler runs, outside the ``try``) is
    caught around the loop, which runs once more. Left: a third signal at
    that second loop's jump back, within a microsecond of the second (a
    pure-Python retry always has such a point: every function start and
    loop jump runs pending handlers).

    Args:
        lock: the owner's lock, held by every caller of these methods.
    """

    __slots__ = ("_lock", "_waiting")

    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock
        self._waiting: collections.deque[threading.Lock] = collections.deque()  # oldest first

    def wait(self, timeout: float | None) -> None:
        """Lets go of the lock until notified or ``timeout`` seconds (None:
        no bound) passed, then takes it back (also when interrupted: the
        interrupt is raised with the lock held)."""
        waiter = threading.Lock()  # a one-shot signal: notify lets go of it
        waiter.acquire()
        waiting, lock = self._waiting, self._lock
        try:
            waiting.append(waiter)
            try:
                lock.release()
                if timeout is None:
                    waiter.acquire()
                else:
                    waiter.acquire(True, max(0.0, timeout))
            finally:
                # Written out here: a call to a function of its own could be
                # interrupted as it starts, before its try.
                taken: list[bool] = []  # [True] once this thread holds the lock again
                interrupt: BaseException | None = None
                try:
                    while not taken:
                        try:
                            taken.extend(map(lock.acquire, _BLOCKING))
                        except BaseException as e:  # not taken, or taken as the call returned
                            if interrupt is None:
                                interrupt = e
                except BaseException as e:  # at the loop's jump back, after a failed take
                    if interrupt is None:
                        interrupt = e
                    while not taken:  # once more (a signal in this jump back gets through)
                        try:  # noqa: SIM105 (suppress: a Python __exit__, a point more)
                            taken.extend(map(lock.acquire, _BLOCKING))
                        except BaseException:  # the first interrupt is raised below
                            pass
                if interrupt is not None:
                    raise interrupt
        finally:
            if waiter in waiting:  # not notified (no call between: the lock is held)
                waiting.remove(waiter)

    def notify(self, count: int = 1) -> None:
        """Wakes up to ``count`` waiters, oldest first."""
        waiting = self._waiting
        while count > 0 and waiting:
            waiting.popleft().release()
            count -= 1

    def notify_all(self) -> None:
        """Wakes every waiter."""
        self.notify(len(self._waiting))
