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
they raise to :meth:`Interrupts._withdraw`.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable

from liftbridge._core._acks import Ack
from liftbridge._core._deadlines import AckTimer
from liftbridge._errors import LiftbridgeError
from liftbridge._publish._pending import Pending


class Interrupts:
    """Withdrawing what an interrupted submit left half done."""

    _timer: AckTimer
    _pending: dict[str, Pending]
    _handover_lock: threading.Lock
    _claim: Callable[[Pending], bool]
    _complete: Callable[[Pending, Ack | None, LiftbridgeError | None], None]
    _expire: Callable[[Pending], None]

    def _withdraw(self, pending: Pending) -> None:
        """After ``submit`` raised (say an interrupt, Ctrl-C, anywhere in it): a
        publish registered but not handed to a sender is withdrawn, its slot
        freed, its outcome an error (a flush may wait on it); one handed over
        stays, with its deadline, and its outcome comes as usual."""
        with self._handover_lock:  # no sender hands it over meanwhile
            if self._pending.get(pending.correlation_id) is not pending:
                return  # resolved, or never registered (and no slot taken)
            withdrawn = pending.generation < 0 and self._claim(pending)  # frees its slot
        if withdrawn:
            error = f"publish {pending.correlation_id} was interrupted and withdrawn"
            self._complete(pending, None, LiftbridgeError(f"{error}; not sent, or as it was"))
        else:  # sent, its deadline maybe not set yet (set twice: the second finds it done)
            self._timer.schedule(pending.deadline, functools.partial(self._expire, pending))
