"""Taking a lock, or starting a thread, where an interrupt may land:
:func:`drop`, :func:`start_thread`.

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
import logging
import threading

_log = logging.getLogger(__name__)
_starting = threading.Lock()  # held by a starter thread (start_thread) while it starts one


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
