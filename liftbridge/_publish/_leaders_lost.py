"""The shared PublishAsync stream's side of a partition leader found down
(the policy is :mod:`liftbridge._publish._leaders`'s), for the
:class:`~liftbridge._publish._publisher.Publisher` (whose state it uses),
which listens for brokers found down and hands its suspect publishes to
``liftbridge-leader-check``.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable

from liftbridge._core._acks import Ack
from liftbridge._core._deadlines import AckTimer
from liftbridge._errors import LiftbridgeError
from liftbridge._publish._leaders import LeaderCheck, leader_lost
from liftbridge._publish._pending import Pending

_log = logging.getLogger(__name__)


class LeadersLost:
    """Failing the publishes whose leader went down, and listing the suspect ones."""

    _timer: AckTimer
    _lock: threading.Lock  # the publisher's: guards _pending and _closed
    _handover_lock: threading.Lock
    _closed: bool
    _pending: dict[str, Pending]
    _leader_check: LeaderCheck[Pending]
    _finish: Callable[[Pending, Ack | None, LiftbridgeError | None], None]

    def _broker_down(self, address: str) -> None:
        """Broker-down listener (liftbridge-broker-watch); works on the timer and leader-check."""
        self._timer.schedule(time.monotonic(), functools.partial(self._fail_led_by, address))
        with self._lock:
            closed = self._closed
        if not closed:
            self._leader_check.start()

    def _fail_led_by(self, address: str) -> None:
        """On liftbridge-ack-timer: fails the publishes sent to partitions the
        broker at ``address`` led while it was believed up, now that it is
        down: their acks can no longer come. Publishes not sent yet are left
        to go out (by then the partition may have a new leader); those sent
        after it was known down are left to liftbridge-leader-check."""
        with self._handover_lock, self._lock:
            lost = [
                p
                for p in self._pending.values()
                if p.leader == address
                and p.generation >= 0
                and p.expects_ack
                and not p.suspect
                and not p.done
            ]
        if lost:
            _log.warning(
                "partition leader %s is down; failing %d publish(es) awaiting its acks",
                address,
                len(lost),
            )
        for pending in lost:
            self._leader_lost(pending, address)

    def _leader_lost(self, pending: Pending, address: str) -> None:
        self._finish(pending, None, leader_lost(pending.request, address, pending.correlation_id))

    def _suspects(self) -> list[Pending]:
        """For liftbridge-leader-check: publishes sent to a leader known down, undecided."""
        with self._lock:
            return [p for p in self._pending.values() if p.suspect and not p.done]
