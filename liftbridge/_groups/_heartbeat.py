"""The membership half of a member's group thread: joining, the heartbeat
(the assignment poll on the coordinator), following epoch and coordinator
changes, reporting a silent coordinator, and noticing expiry.

The other half, acting on the assignment, is :mod:`liftbridge._groups._member`.
"""

from __future__ import annotations

import logging
import threading
import time

from liftbridge._errors import (
    ClientClosedError,
    ConsumerGroupError,
    LiftbridgeError,
    NoSuchStreamError,
    Refusal,
)
from liftbridge._groups._session import GroupSession, Membership
from liftbridge._groups._values import StreamPartition, classify

_log = logging.getLogger(__name__)

_RETRY_SOON = 0.25
JOIN_RETRY = 0.5
"""Seconds between join attempts while an old membership of the id lingers
(and the first delay of the member's re-join backoff)."""
_JOIN_GRACE = 1.0
"""Seconds after a join during which "not a member" means a lagging broker."""


class Heartbeat:
    """A member's standing in its group, kept by the group thread.

    Attributes:
        membership: the current membership, None while out of the group.
        target: the partitions the last successful poll assigned.
        target_epoch: the epoch of that assignment (for fencing).
        due: ``time.monotonic()`` of the next poll.

    Thread-safety: group thread only (``membership`` may be read anywhere).
    """

    def __init__(self, session: GroupSession, group_id: str, rpc_timeout: float) -> None:
        self._session = session
        self._group_id = group_id
        self._rpc_timeout = rpc_timeout
        self.membership: Membership | None = None
        self._last: Membership | None = None
        self.target: frozenset[StreamPartition] = frozenset()
        self.target_epoch = 0
        self.due = 0.0

    def budget(self) -> float:
        """Deadline of one RPC of the group thread: at most a third of the
        consumer timeout, so a failed one still leaves time to heartbeat."""
        m = self.membership or self._last
        if m is None:
            return min(self._rpc_timeout, 5.0)
        return max(0.2, min(self._rpc_timeout, m.heartbeat_interval))

    def joined(self, membership: Membership) -> None:
        """Records a successful join; the first poll is due at once."""
        self.membership = self._last = membership
        self.due = 0.0
        _log.info(
            "%s joined group %s (coordinator %s, epoch %d)",
            membership.consumer_id,
            self._group_id,
            membership.coordinator,
            membership.epoch,
        )

    def join_first(
        self,
        consumer_id: str,
        streams: tuple[str, ...],
        stopped: threading.Event,
        *,
        join_timeout: float,
    ) -> None:
        """The first join, on the caller's thread: waits out an old membership
        of this id (a restart after a crash) for at most ``join_timeout``.

        Raises:
            NoSuchStreamError: a stream does not exist.
            ConsumerGroupError: still refused after ``join_timeout``.
            ClientClosedError: ``stopped`` was set meanwhile.
            LiftbridgeError: another failure.
        """
        deadline = time.monotonic() + join_timeout
        while True:
            try:
                self.joined(self._session.join(consumer_id, self._rpc_timeout))
                return
            except LiftbridgeError as e:
                refusal = classify(e)
                if refusal is Refusal.NO_STREAM:
                    raise NoSuchStreamError(f"a stream of {list(streams)} does not exist") from e
                waiting = refusal in (
                    Refusal.ALREADY_MEMBER,
                    Refusal.GROUP_EXISTS,
                    Refusal.NO_GROUP,
                )
                if not waiting and not e.retriable:
                    raise
                if time.monotonic() >= deadline:
                    raise ConsumerGroupError(
                        f"could not join group {self._group_id!r} as {consumer_id!r} "
                        f"within {join_timeout:g}s: {e}"
                    ) from e
                _log.info("join of group %s failed (%s); retrying", self._group_id, e)
                if stopped.wait(JOIN_RETRY if refusal is Refusal.ALREADY_MEMBER else 0.05):
                    raise ClientClosedError("the consumer was closed while joining") from e
            except BaseException:  # interrupted (Ctrl-C): the join may have been taken
                if self.membership is None:  # else the member's thread leaves
                    try:
                        self._session.leave(consumer_id, self._rpc_timeout)
                    except LiftbridgeError as e:
                        _log.debug("leaving group %s after an interrupt: %s", self._group_id, e)
                raise

    def join(self, consumer_id: str) -> LiftbridgeError | None:
        """One join attempt.

        "Already a member" for the id this member last joined with means the
        membership was never lost (a lagging broker made it look expired):
        it is taken up again.

        Returns:
            None once joined, else the error.
        """
        try:
            self.joined(self._session.join(consumer_id, self.budget()))
            return None
        except LiftbridgeError as e:
            error = e
        last = self._last
        if classify(error) is Refusal.ALREADY_MEMBER and last and last.consumer_id == consumer_id:
            info = self._group_info(None)
            if info is not None:
                timeouts = last.consumer_timeout, last.coordinator_timeout
                self.joined(Membership(consumer_id, *info, *timeouts))
                return None
        return error

    def still_member(self) -> bool | None:
        """After the membership was forgotten on "not a member", asks the
        group's coordinator once more whether it stands (a lagging broker can
        say "not a member" of a member the group still has).

        Returns:
            True when it stands (it is taken up again); False when the group
            confirms the member is gone (expired, or the group deleted); None
            when that is unknown for now (no answer).
        """
        last = self._last
        if last is None:
            return False
        try:
            info = self._session.group_info(self.budget(), last.coordinator)
        except LiftbridgeError as e:
            _log.debug("group metadata of %s unavailable: %s", self._group_id, e)
            return None
        if info is None:
            return False
        timeouts = last.consumer_timeout, last.coordinator_timeout
        m = Membership(last.consumer_id, *info, *timeouts)
        try:
            target, epoch = self._session.fetch_assignments(m, self.budget())
        except LiftbridgeError as e:
            if classify(e) in (Refusal.NOT_MEMBER, Refusal.NO_GROUP):
                return False
            _log.debug("membership check in group %s failed: %s", self._group_id, e)
            return None
        m.epoch = epoch
        self.joined(m)
        self.target, self.target_epoch = target, epoch
        self.due = time.monotonic() + m.heartbeat_interval
        return True

    def left(self) -> Membership | None:
        """Forgets the membership (after leaving or expiry); returns it."""
        m, self.membership = self.membership, None
        self.target = frozenset()
        return m

    def keepalive(self) -> None:
        """Polls if a poll is due: called between slow steps of the thread."""
        if self.membership is not None and time.monotonic() >= self.due:
            self.beat()

    def beat(self) -> None:
        """Polls the coordinator for the assignment (the heartbeat).

        Follows a new epoch or coordinator at once; after
        "not a member" (past a short grace after joining) the membership is
        forgotten; a silent coordinator is reported and replaced.
        """
        m = self.membership
        assert m is not None
        for attempt in (1, 2):
            try:
                target, epoch = self._session.fetch_assignments(m, self.budget())
            except LiftbridgeError as e:
                refusal = classify(e)
                now = time.monotonic()
                if refusal in (Refusal.STALE_EPOCH, Refusal.NOT_COORDINATOR) and attempt == 1:
                    ask = m.coordinator if refusal is Refusal.STALE_EPOCH else None
                    if self._follow(m, ask):
                        continue
                elif refusal in (Refusal.NOT_MEMBER, Refusal.NO_GROUP):
                    if now - m.joined_at > min(_JOIN_GRACE, m.heartbeat_interval):
                        _log.warning(
                            "%s is no longer a member of group %s (%s)",
                            m.consumer_id,
                            self._group_id,
                            e,
                        )
                        self.left()
                        return
                elif refusal is None:
                    self._coordinator_silent(m, e)
                self.due = now + min(_RETRY_SOON, m.heartbeat_interval / 4)
                return
            now = time.monotonic()
            m.last_contact, m.epoch = now, epoch
            self.due = now + m.heartbeat_interval
            if target != self.target:
                _log.debug(
                    "group %s epoch %d assigns %s to %s",
                    self._group_id,
                    epoch,
                    sorted(map(str, target)),
                    m.consumer_id,
                )
            self.target, self.target_epoch = target, epoch
            return

    def _group_info(self, ask: str | None) -> tuple[str, int] | None:
        try:
            return self._session.group_info(self.budget(), ask)
        except LiftbridgeError as e:
            _log.debug("group metadata of %s unavailable: %s", self._group_id, e)
            return None

    def _follow(self, m: Membership, ask: str | None) -> bool:
        """Learns the group's coordinator and epoch; True when they changed."""
        info = self._group_info(ask)
        if info is None or info == (m.coordinator, m.epoch):
            return False
        if info[0] != m.coordinator:
            _log.info("group %s coordinator: %s -> %s", self._group_id, m.coordinator, info[0])
        m.coordinator, m.epoch = info
        return True

    def _coordinator_silent(self, m: Membership, error: LiftbridgeError) -> None:
        """The coordinator did not answer. Once it has been silent for the
        coordinator timeout, report it (reports from a majority of members
        elect another); and look for a new one, which another member's
        reports may have had elected already."""
        now = time.monotonic()
        silent = now - m.last_contact
        _log.debug("poll of group %s failed, silent %.1fs: %s", self._group_id, silent, error)
        if silent >= m.coordinator_timeout and now >= m.next_report:
            m.next_report = now + m.coordinator_timeout / 3
            try:
                self._session.report_coordinator(m, self.budget())
                _log.warning(
                    "%s reported coordinator %s of group %s, silent for %.1fs",
                    m.consumer_id,
                    m.coordinator,
                    self._group_id,
                    silent,
                )
            except LiftbridgeError as e:
                _log.info("report of coordinator %s failed: %s", m.coordinator, e)
        if self._follow(m, None):
            self.due = 0.0
