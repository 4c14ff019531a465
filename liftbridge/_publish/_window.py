"""The client's ``max_inflight`` window: how many ``publish_async`` calls may
await their outcome at once, whichever way they travel (the shared
PublishAsync stream, or the unary Publish of a publish naming an ack inbox).

A count, not a semaphore: the :class:`~liftbridge._publish._publisher.Publisher`
already holds its lock for every publish it registers and resolves, so the
window is counted under that same lock at no extra cost per message.
"""

from __future__ import annotations

import threading
import time

from liftbridge._errors import ClientClosedError, PublishWindowFullError
from liftbridge._locks import Waiters

RESUME_FRACTION = 8
"""A full window lets a blocked producer go once 1/RESUME_FRACTION of it is free."""


class Window:
    """``size`` slots. Not thread-safe by itself: every method is called
    holding ``lock`` (the owner's), which the waits release.

    Args:
        lock: the owner's lock; it guards ``used`` and the waiters' count.
        size: the slots (the client's ``max_inflight``).
        resume_free: slots that must be free before a producer blocked on a
            full window goes on; None for 1/:data:`RESUME_FRACTION` of it.
    """

    def __init__(self, lock: threading.Lock, size: int, resume_free: int | None = None) -> None:
        self.size = size
        self.used = 0
        # A producer blocked on a full window resumes at this size: woken once
        # per eighth of the window (or resume_free), not once per ack (see
        # _publisher, "Speed").
        if resume_free is None:
            resume_free = max(1, size // RESUME_FRACTION)
        self._resume_at = size - resume_free
        # Notified as slots free up, and on close; interrupt-safe (Condition is not).
        self._free = Waiters(lock)
        self._waiters = 0
        self._closed = False

    def take(self, wait: float) -> bool:
        """Takes a slot; while the window is full, waits until it is down to
        the resume mark, or takes any free slot at the deadline. Returns
        whether it had to wait (the window was full).

        Raises:
            PublishWindowFullError: no slot freed up within ``wait`` seconds.
            ClientClosedError: the window closed meanwhile.
        """
        full = self.used >= self.size
        if full:
            self._wait(wait)
        self.used += 1
        return full

    def room(self, wait: float) -> int:
        """The free slots, at least one: waits as :meth:`take` does while the
        window is full, taking none. A batch's part takes what it registers,
        a slot with each publish (``BatchSubmit._admit_part``).

        Raises:
            PublishWindowFullError, ClientClosedError: as :meth:`take`.
        """
        if self.used >= self.size:
            self._wait(wait)
        return self.size - self.used

    def give(self, count: int = 1) -> None:
        """Frees ``count`` slots taken by :meth:`take` (a run of acks frees
        its slots at once), waking a waiter for each slot freed at or below
        the resume mark, as freeing them one by one would."""
        self.used -= count
        if self._waiters and self.used <= self._resume_at:
            self._free.notify(min(count, self._resume_at - self.used + 1))

    def wake(self, count: int) -> None:
        """Wakes the waiters :meth:`give` would for ``count`` slots about to
        be freed without it (the caller then lowers ``used``, with no call
        between: an interrupt, Ctrl-C, lands only at a call)."""
        if self._waiters and self.used - count <= self._resume_at:
            self._free.notify(min(count, self._resume_at - self.used + count + 1))

    def close(self) -> None:
        """Wakes every waiter with :class:`ClientClosedError`."""
        self._closed = True
        self._free.notify_all()

    def _wait(self, wait: float) -> None:
        deadline = time.monotonic() + wait
        self._waiters += 1
        try:
            while self.used > self._resume_at:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    if self.used < self.size:
                        return  # fewer outcomes came than a resume needs, but a slot is free
                    raise PublishWindowFullError(
                        f"{self.size} publishes are awaiting acks and none completed "
                        f"within {wait:g}s; raise max_inflight or slow down"
                    )
                self._free.wait(remaining)
                if self._closed:
                    raise ClientClosedError("the client is closed; the publish was not sent")
        finally:
            self._waiters -= 1
