"""Senders handing what they queued to the thread that writes it: :class:`Handover`.

A thread that publishes back to back never lets go of the GIL, and every
system call of the writing thread (``select``, ``recv``, ``sendall``, a
blocking ``get``) does: that thread then waits for the GIL after each of
them until the publisher blocks on the in-flight window, or up to the
interpreter's switch interval (5 ms). So it wrote a window's requests at once
and the acks came at once: the server saw bursts of a whole window and
nothing between them, the client and the server took turns instead of
working at the same time, and a window of 1,024 took ~12 ms to come round.
Seen on ``liftbridge-nats-io`` (``NatsStreamPublisher.publish_async``, 100 B:
~80k msgs/s with client and server each under 0.8 of a core) and on
``liftbridge-h2-send`` (``Client.publish_async``: window waits of 4 ms at the
median, the sender writing 2.7 ms after the publisher woke).

Here a sender that has queued :attr:`Handover.frames` items while the
writing thread is busy waits until that thread has taken them: the GIL goes
to it then, and it writes them (and the acks that came are read), and the
sender goes on while it is in ``sendall``. Writes and acks then come in
quarters of the window, and the server works on one while the client makes
the next. (Waking an idle I/O thread keeps the GIL instead: ``_nowait``.)
"""

from __future__ import annotations

import collections
import contextlib
import threading
from collections.abc import Callable

HAND_OVER = 256
"""Items a sender queues for a busy writing thread before it waits (a
quarter of the default window; a smaller step costs client and server CPU:
at a window of 256, a step of 64 went 7 % faster for 0.7 µs a message more)."""

WAIT = 0.1
"""Seconds a sender waits at most for the I/O thread to take the frames."""


class Handover:
    """Senders waiting for the I/O thread to take what they queued. Thread-safe.

    Args:
        frames: items queued for a busy writing thread at which a sender waits.
        io: the writing thread (which never waits for itself), or None when
            no thread that may call :meth:`wait` ever writes.
        ended: set once the writing thread has ended (or its owner closed).
    """

    __slots__ = ("_ended", "_io", "_takers", "frames")

    def __init__(self, frames: int, io: threading.Thread | None, ended: threading.Event) -> None:
        self.frames = frames
        self._io = io
        self._ended = ended
        # Each a lock held, released by the I/O thread once it took the outbox.
        self._takers: collections.deque[threading.Lock] = collections.deque()

    def wait(self, queued: Callable[[], int]) -> None:
        """Waits (up to :data:`WAIT`) until the I/O thread calls :meth:`release`.
        Returns at once while a sender waits already or an earlier wait ran
        out (the I/O thread is held up: a write to a server that does not
        read), once the I/O thread ended, and on the I/O thread itself.

        ``queued()``: how many items the I/O thread has yet to take. It is read
        once this sender is in line: the I/O thread looks for waiting senders
        only after it took, so one that took everything between the caller's
        look at the queue and this line would release no one, and the sender
        would wait out :data:`WAIT` while the I/O thread slept."""
        takers = self._takers
        if takers or self._ended.is_set() or threading.current_thread() is self._io:
            return
        taken = threading.Lock()
        taken.acquire()
        takers.append(taken)
        if self._ended.is_set():  # it ended after the check above
            return
        if not queued():  # taken already: no release comes for this wait
            with contextlib.suppress(ValueError):  # unless it came just now
                takers.remove(taken)
            return
        taken.acquire(timeout=WAIT)

    def release(self) -> None:
        """Lets the waiting senders go on (the I/O thread took the outbox,
        or dropped it, or ended)."""
        takers = self._takers
        while takers:
            takers.popleft().release()

    @property
    def waiting(self) -> bool:
        """Whether a sender waits (or an earlier wait ran out) for :meth:`release`."""
        return bool(self._takers)
