"""How a consumer-group member's progress reaches the server.

Commits write the last offset handled per partition to the group's cursor
(``__group:<group id>``): patiently, through the resilient cursor RPC, when
the member checkpoints or leaves; bounded by the heartbeat budget, one
attempt, while it rebalances or commits on its own every
``auto_checkpoint`` seconds (a failure is logged: the next reader then
starts from the previous commit, so more is handled twice and nothing is
lost). Position reports write how far each partition was given to the
handler, once per heartbeat period, to the group's position cursor, which
overflow members measure the backlog from.

Everything here runs on the member's ``liftbridge-group-<group id>``
thread, except :meth:`Commits.durable` (any thread).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from liftbridge._consume._cursors import Cursors
from liftbridge._core._router import Router
from liftbridge._errors import LiftbridgeError
from liftbridge._groups._heartbeat import Heartbeat
from liftbridge._groups._partitions import Assigned
from liftbridge._groups._session import GroupSession
from liftbridge._groups._values import StreamPartition, group_cursor_id

_log = logging.getLogger(__name__)


class Commits:
    """The commits and position reports of one member.

    Args:
        router: the client's router.
        cursors: cursor routing and RPCs.
        session: the member's bounded group RPCs.
        heart: the member's heartbeat (membership, budget, keepalive).
        group_id: the group.
        auto_checkpoint: seconds between automatic commits; None for none.
        held: the entries the member holds now (a snapshot).
    """

    def __init__(
        self,
        router: Router,
        cursors: Cursors,
        session: GroupSession,
        heart: Heartbeat,
        group_id: str,
        auto_checkpoint: float | None,
        held: Callable[[], list[Assigned]],
    ) -> None:
        self._router = router
        self._cursors = cursors
        self._session = session
        self._heart = heart
        self._group_id = group_id
        self._cursor_id = group_cursor_id(group_id)
        self._auto_checkpoint = auto_checkpoint
        self._held = held
        self.next_checkpoint = 0.0  # time.monotonic() of the next automatic commit
        self._next_position = 0.0

    def durable(self, entry: Assigned, timeout: float | None) -> None:
        """Commits an entry through the resilient ``set_cursor``, retried
        within ``timeout`` (None: the retry policy's ``total_timeout``).

        Raises:
            LiftbridgeError: the commit failed.
        """

        def store(tp: StreamPartition, offset: int) -> None:
            self._cursors.set(
                self._cursor_id, tp.stream, tp.partition, offset, self._router.deadline(timeout)
            )

        entry.commit(store)

    def quietly(self, entry: Assigned, *, final: bool) -> None:
        """A group-thread commit: patient when ``final`` (leaving), else
        bounded by the heartbeat budget; a failure is logged."""
        if self._router.closed:
            return
        budget = self._heart.budget()
        try:
            self._commit(entry, final=final, budget=budget)
        except LiftbridgeError as e:
            _log.warning("commit of %s in group %s failed: %s", entry.tp, self._group_id, e)

    def _commit(self, entry: Assigned, *, final: bool, budget: float) -> None:
        """Commits ``entry``: patiently when ``final``, else within ``budget``."""
        if final:
            self.durable(entry, None)
        else:
            entry.commit(
                lambda tp, offset: self._session.set_cursor(tp, offset, budget), wait=budget
            )

    def release(self, entry: Assigned, *, final: bool) -> None:
        """A partition let go: commits (as :meth:`quietly`), then marks it
        released at the group epoch that gave it on, which ends the gaining
        member's wait for this final commit (see :meth:`Assigned.handed_over`).
        No mark when the commit failed: the gainer then waits its bound."""
        if self._router.closed:
            return
        budget = self._heart.budget()
        try:
            self._commit(entry, final=final, budget=budget)
            # Leaving makes the next epoch, the one that gives the partition on.
            epoch = self._heart.target_epoch + (1 if final else 0)
            self._session.mark_released(entry.tp, epoch, budget)
        except LiftbridgeError as e:
            _log.warning("commit of %s in group %s failed: %s", entry.tp, self._group_id, e)

    def all(self) -> None:
        """Commits every held partition, heartbeating between them."""
        for entry in self._held():
            self.quietly(entry, final=False)
            self._heart.keepalive()

    def auto(self) -> None:
        """Commits everything when ``auto_checkpoint`` says it is time."""
        every = self._auto_checkpoint
        if every is None or time.monotonic() < self.next_checkpoint:
            return
        self.next_checkpoint = time.monotonic() + every
        self.all()

    def report_positions(self) -> None:
        """Once per heartbeat period, writes how far each held partition was
        given to the handler to the group's position cursor, so that overflow
        members measure the backlog from it rather than from commits that lag
        by up to ``auto_checkpoint``."""
        m = self._heart.membership
        if m is None or time.monotonic() < self._next_position:
            return
        self._next_position = time.monotonic() + m.heartbeat_interval
        for entry in self._held():
            position = entry.delivered
            if position is None or position <= entry.position_reported:
                continue
            try:
                self._session.set_cursor(entry.tp, position, self._heart.budget(), position=True)
                entry.position_reported = position
            except LiftbridgeError as e:
                _log.debug("position of %s not reported: %s", entry.tp, e)
            self._heart.keepalive()
