"""Ctrl-C on a publishing thread, for the
:class:`~liftbridge._publish._publisher.Publisher` (whose state it uses).

A signal's handler (KeyboardInterrupt's) runs on the main thread at the
start of a Python function, as a C call returns or at a loop's jump, so an
interrupt can cut a publish short at any call it makes. Whatever call it
lands on, each publish is left out (its window slot given back, its outcome
an error: a ``flush`` may wait on it) or in (queued or sent, with its
deadline), never half: a slot taken for good shrinks the ``max_inflight``
window, a publish registered but never queued nor timed makes ``flush()``
wait forever. ``Publisher.submit`` and ``submit_many`` register a publish
with no call between taking its slot and registering it, and hand whatever
they raise to :meth:`Interrupts._withdraw` and :meth:`Interrupts._withdraw_rest`.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError

from liftbridge._core._acks import Ack
from liftbridge._core._deadlines import AckTimer
from liftbridge._errors import LiftbridgeError
from liftbridge._locks import Waiters
from liftbridge._publish._pending import Claim, Pending, Spent, settle_gathered
from liftbridge._publish._window import Window


class Interrupts:
    """Withdrawing what an interrupted submit left half done."""

    _timer: AckTimer
    _pending: dict[str, Pending]
    _handover_lock: threading.Lock
    _complete: Callable[[Pending, Ack | None, LiftbridgeError | None], None]
    _expire: Callable[[Pending], None]
    _lock: threading.Lock  # the publisher's: guards _pending, _window and _flushers
    _window: Window
    _flushers: int
    _claimed: Waiters  # on _lock: a flush waits on it for claims
    _spent: Spent  # its unsettled: claimed, for flush() until settled
    _settled: Callable[[], None]  # Flushing._settled: wakes flushers after a settling

    def _withdraw(self, pending: Pending) -> None:
        """After ``submit`` raised (say an interrupt, Ctrl-C, anywhere in it): a
        publish registered but not handed to a sender is withdrawn, its slot
        freed, its outcome an error (a flush may wait on it); one handed over
        stays, with its deadline, and its outcome comes as usual.

        A second interrupt (Ctrl-C pressed twice) may land here too: the
        withdrawal is claimed with no call between its steps (out of the
        table, its slot freed, done), and its Future, kept for ``flush()``
        from then on, fails even if the interrupt cuts its settling short
        (its handler may then miss its call, as in ``fail_all``)."""
        future, withdrawn = pending.future, False
        claim = future if future is not None else pending  # its key in Spent.unsettled
        error = LiftbridgeError(
            f"publish {pending.correlation_id} was interrupted and withdrawn; "
            "not sent, or as it was"
        )
        try:
            with self._handover_lock, self._lock:  # no sender hands it over meanwhile
                registered, window = self._pending, self._window
                if registered.get(pending.correlation_id) is not pending or pending.done:
                    return  # resolved, or never registered (and no slot taken)
                if pending.generation < 0:
                    # The calls first: an interrupt among them changes nothing
                    # (a waiter woken early waits again).
                    self._spent.unsettled[claim] = claim  # for flush() until settled (_complete)
                    if self._flushers:
                        self._claimed.notify_all()
                    window.wake(1)
                    # Then no call, where an interrupt lands, to the end of the claim.
                    del registered[pending.correlation_id]
                    window.used -= 1
                    pending.done = withdrawn = True
            if withdrawn:
                self._complete(pending, None, error)
            else:  # sent, its deadline maybe not set yet (set twice: the second finds it done)
                self._timer.schedule(pending.deadline, functools.partial(self._expire, pending))
        except BaseException:  # interrupted again: the Future claimed still ends
            if withdrawn and future is not None and not future.done():
                with contextlib.suppress(InvalidStateError):  # settled meanwhile
                    future.set_exception(error)
            self._spent.unsettled.pop(claim, None)
            self._settled()
            raise

    def _withdraw_rest(self, rest: list[Pending], error: LiftbridgeError) -> None:
        """After ``submit_many`` raised (the window stayed full, the publisher
        closed, an interrupt: Ctrl-C) as it admitted the part ``rest`` starts
        with: of ``rest``, a publish registered but not handed to a sender is
        withdrawn (its slot freed), one never registered is out too, both
        settling the batch with ``error``; one handed over stays, with its
        deadline, and one resolved is left alone."""
        out: list[Pending] = []
        sent: list[Pending] = []
        gathered: Future[None] = Future()  # set once they are settled: flush() waits for it
        with self._handover_lock, self._lock:  # no sender hands one over meanwhile
            registered, window = self._pending, self._window
            for pending in rest:
                if pending.done:
                    continue
                if registered.get(pending.correlation_id) is pending:
                    if pending.generation >= 0:
                        sent.append(pending)
                        continue
                    del registered[pending.correlation_id]
                    window.give()
                pending.done = True
                out.append(pending)
            if out:
                self._spent.unsettled[gathered] = gathered
                if self._flushers:
                    self._claimed.notify_all()
        if out:
            failed: list[Claim] = [(pending, None, error) for pending in out]
            try:
                settle_gathered(failed, gathered, self._spent.unsettled)
            finally:
                self._settled()
        if sent:  # their deadline maybe not scheduled yet (twice: the second finds them done)
            expire = functools.partial(expire_each, self._expire, sent)
            self._timer.schedule(sent[0].deadline, expire)


def expire_each(expire: Callable[[Pending], None], part: list[Pending]) -> None:
    """On liftbridge-ack-timer: a part of a batch with a timeout of its own
    reached its deadline (one timer entry per part, not per message)."""
    for pending in part:
        expire(pending)
