"""``Client.flush`` for the :class:`~liftbridge._publish._publisher.Publisher`
(whose state it uses).

What flush promises, as confluent-kafka's ``Producer.flush`` does for its
delivery callbacks: once it returns True, every publish accepted before the
call has its outcome, its Future is resolved, and its ack handler and its
Future's done-callbacks have been called and have returned. Three waits, in
that order, each under the one deadline:

1. claimed: each publish pending at the call is taken out of the pending
   table (by its ack, a timeout, a lost stream or leader, close, a
   withdrawal), in the publisher's lock;
2. settled: each claim holding one of them is settled (Futures resolved, the
   handlers and done-callbacks handed to ``liftbridge-callbacks``). A claim
   sits in ``Spent.unsettled`` from the lock round that claimed it until
   whoever settles it has; the claims open once all of step 1's publishes are
   claimed hold every one of them not settled yet (a later claim holds
   later publishes only), so flush waits for those to leave it;
3. served: the callbacks thread has run what was handed to it until then
   (:meth:`CallbackRunner.served`; skipped on that thread itself).

Whoever claims or settles wakes the flushing threads (``_claimed``, on the
publisher's lock), only while there are any: the acks thread pays an
attribute read a read of acks for it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Hashable

from liftbridge._core._callbacks import CallbackRunner
from liftbridge._locks import Waiters
from liftbridge._publish._pending import Pending, Spent

_monotonic = time.monotonic


class Flushing:
    """The publisher's ``flush``, and the wake-up its settlers give it."""

    _lock: threading.Lock  # the publisher's: guards _pending and _flushers
    _pending: dict[str, Pending]
    _flushers: int
    _claimed: Waiters  # on _lock: flushing threads wait on it for claims and settlings
    _spent: Spent  # its unsettled: claims not settled yet
    _callbacks: CallbackRunner

    def flush(self, timeout: float | None) -> bool:
        """Waits until every publish accepted before the call has its outcome
        and its handler and done-callbacks have returned (the module
        docstring's three steps; publishes accepted meanwhile, from other
        threads, are not waited for).

        Returns:
            True when all of that is done, False when the timeout passed first.
        """
        deadline = None if timeout is None else _monotonic() + timeout
        with self._lock:
            self._flushers += 1
            try:
                covered = list(self._pending.values())
                unsettled = self._spent.unsettled
                claims: list[Hashable] = [*unsettled.copy()]  # one C call: settlers take out
                for pending in covered:
                    while not pending.done:
                        if not self._wait(deadline):
                            return False
                claims += unsettled.copy()  # every claim of the covered not settled yet
                for claim in claims:
                    while claim in unsettled:
                        if not self._wait(deadline):
                            return False
            finally:
                self._flushers -= 1
        self._spent.clear()
        return self._callbacks.served(deadline)

    def _wait(self, deadline: float | None) -> bool:
        """Holding the lock: waits for the next claim or settling, until
        ``deadline``; False once it has passed."""
        if deadline is None:
            self._claimed.wait(None)
            return True
        left = deadline - _monotonic()
        if left <= 0:
            return False
        self._claimed.wait(left)
        return True

    def _settled(self) -> None:
        """Wakes the flushing threads, if any, after a claim left
        ``Spent.unsettled`` (called outside the publisher's lock, after the
        settling, in a ``finally`` where an interrupt may land)."""
        if self._flushers:
            with self._lock:
                self._claimed.notify_all()
