"""Pinned consumer groups: one member reads every partition, the others wait.

Liftbridge has no pin of its own, so a pinned member takes part in two groups.
In the *pin election* group ``__pin:<group id>`` every member subscribes to
the first of its streams only; the server gives partition 0 of a stream to the
member with the fewest partitions, ties to the smallest consumer id, and in
that group all have none, so partition 0 goes to the smallest id: that member
holds the pin. It alone joins the real group and is given every partition of
every stream, however many there are. The election group's heartbeats make
the pin move when its holder dies (expiry); a holder gives it up on purpose
by leaving the election and joining it again under a new id, which sorts
last (:meth:`Consumer.release`, an operator's :meth:`Client.unpin`, or a
handler that did not return within ``pin_timeout``). A holder whose election
membership expired (frozen past the consumer timeout, cut off) does the same
once the group confirms the expiry: it never rejoins under its old id, which
would take the pin back from the member that took over.

An operator's unpin is a counter in the cursor ``__pin:<group id>`` of the
``__cursors`` stream's partition 0 (a stream every server with cursors has):
the pinned member reads it when it takes the pin and once per heartbeat
period, and gives the pin up when it grew.

Pin events go to the user's callback on a ``liftbridge-pin-<group id>``
thread, in the order they happened, never on the group thread.
"""

from __future__ import annotations

import enum
import logging
import queue
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from liftbridge._consume._cursors import CURSORS_STREAM, Cursors
from liftbridge._core import _validate as check
from liftbridge._core._router import Deadline, Router
from liftbridge._errors import LiftbridgeError, Refusal
from liftbridge._groups._heartbeat import Heartbeat
from liftbridge._groups._session import GroupSession
from liftbridge._groups._values import StreamPartition, classify

_log = logging.getLogger(__name__)

PIN_PREFIX = "__pin:"
"""The pin election group of group G is ``__pin:G``; its unpin counter is the
cursor ``__pin:G`` of ``__cursors`` partition 0."""

_JOIN_RETRY = 0.5
_EVENTS_JOIN = 5.0
"""Seconds ``close`` waits for the pin-event thread to deliver what is queued."""


def pin_group_id(group_id: str) -> str:
    """The id of a group's pin election group."""
    return PIN_PREFIX + group_id


def unpin_cursor(group_id: str) -> tuple[str, str, int]:
    """``(cursor id, stream, partition)`` of a group's unpin counter."""
    return PIN_PREFIX + group_id, CURSORS_STREAM, 0


class PinEventKind(enum.Enum):
    """What happened to a member's pin."""

    PINNED = "pinned"
    """The member took the pin: it reads every partition of the group."""
    UNPINNED = "unpinned"
    """The member gave the pin up or lost it (see :attr:`PinEvent.reason`)."""


class UnpinReason(enum.Enum):
    """Why a member no longer holds the pin."""

    RELEASED = "released"
    """:meth:`Consumer.release` was called."""
    ADMIN = "admin"
    """An operator called :meth:`Client.unpin`."""
    TIMEOUT = "timeout"
    """A handler call did not return within ``pin_timeout``, or a pulling
    member did not pull within it."""
    LOST = "lost"
    """The member fell out of the pin election (expired, or the group was deleted)."""
    CLOSED = "closed"
    """The consumer was closed."""


@dataclass(frozen=True, slots=True)
class PinState:
    """Whether a member holds its group's pin. Immutable.

    Attributes:
        pinned: True while this member holds the pin.
        consumer_id: the member's id in the pin election.
        pin_id: an id given to each taking of the pin (16 hex digits); None
            while not pinned.
        pinned_at: when the pin was taken (an aware UTC datetime, this
            machine's clock); None while not pinned.
    """

    pinned: bool
    consumer_id: str
    pin_id: str | None = None
    pinned_at: datetime | None = None

    @property
    def since(self) -> float | None:
        """Deprecated: :attr:`pinned_at` as ``time.time()`` seconds; kept for one release."""
        check.deprecated("PinState.since", "PinState.pinned_at")
        return None if self.pinned_at is None else self.pinned_at.timestamp()


@dataclass(frozen=True, slots=True)
class PinEvent:
    """A pinned or unpinned event, as NATS ADR-42's advisories. Immutable.

    Attributes:
        kind: :attr:`PinEventKind.PINNED` or :attr:`PinEventKind.UNPINNED`.
        group_id: the group.
        consumer_id: the member.
        pin_id: the pin taken or given up.
        reason: why it was given up (None for PINNED).
        timestamp: when (an aware UTC datetime, this machine's clock).
    """

    kind: PinEventKind
    group_id: str
    consumer_id: str
    pin_id: str
    reason: UnpinReason | None
    timestamp: datetime

    @property
    def at(self) -> float:
        """Deprecated: :attr:`timestamp` as ``time.time()`` seconds; kept for one release."""
        check.deprecated("PinEvent.at", "PinEvent.timestamp")
        return self.timestamp.timestamp()


PinCallback = Callable[[PinEvent], None]
"""``callback(event)`` for pin events; runs on ``liftbridge-pin-<group id>``."""


class PinEvents:
    """Delivers pin events to a callback on a thread of their own, in order.

    Thread-safety: ``emit`` and ``close`` are the group thread's; ``on_thread``
    may be called from any thread.
    """

    def __init__(self, group_id: str, callback: PinCallback) -> None:
        self._callback = callback
        self._queue: queue.SimpleQueue[PinEvent | None] = queue.SimpleQueue()
        # Started by the first event, on the group thread (no interrupt, Ctrl-C,
        # lands there): made as a subscribe starts the member, this takes nothing.
        self._thread = threading.Thread(
            target=self._run, name=f"liftbridge-pin-{group_id}", daemon=True
        )

    def emit(self, event: PinEvent) -> None:
        """Queues an event for the callback (its thread started first)."""
        if self._thread.ident is None:
            self._thread.start()
        self._queue.put(event)

    def on_thread(self) -> bool:
        """True on the event thread (inside the callback)."""
        return threading.current_thread() is self._thread

    def close(self) -> None:
        """Delivers what is queued, then ends the thread (waits at most 5 s,
        not at all from the callback)."""
        self._queue.put(None)
        if self.on_thread() or self._thread.ident is None:  # or never started: no event
            return
        self._thread.join(_EVENTS_JOIN)
        if self._thread.is_alive():
            _log.warning("pin event thread %s did not stop", self._thread.name)

    def _run(self) -> None:
        """Thread ``liftbridge-pin-<group id>``."""
        while True:
            event = self._queue.get()
            if event is None:
                return
            try:
                self._callback(event)
            except Exception:
                _log.exception("pin callback of group %s raised", event.group_id)


class PinElection:
    """A member's part in its group's pin election. Group thread only
    (``state`` may be read anywhere: it is replaced whole)."""

    def __init__(
        self,
        router: Router,
        cursors: Cursors,
        group_id: str,
        stream: str,
        emit: Callable[[PinEvent], None],
    ) -> None:
        self._router = router
        self._cursors = cursors
        self._group_id = group_id
        self._token = StreamPartition(stream, 0)
        election = pin_group_id(group_id)
        self._session = GroupSession(router, cursors, election, [stream])
        self._heart = Heartbeat(self._session, election, router.rpc_timeout)
        self._emit = emit
        self.state = PinState(False, "")
        self.pinned_since: float | None = None  # time.monotonic() of the taking; group thread
        self._baseline = 0
        self._next_join = 0.0
        self._next_unpin_check = 0.0

    @property
    def member(self) -> bool:
        """True while in the election."""
        return self._heart.membership is not None

    @property
    def due(self) -> float:
        """``time.monotonic()`` of the next turn that has work."""
        if self._heart.membership is None:
            return self._next_join
        return min(self._heart.due, self._next_unpin_check if self.state.pinned else 1e18)

    def tend(self, consumer_id: str, may_join: bool) -> UnpinReason | None:
        """One turn: joins (when ``may_join``), heartbeats, and follows the pin.

        Returns:
            ADMIN when an operator asked for an unpin; LOST when this member
            held the pin and the group confirms its election membership is
            gone (it expired: frozen, cut off). Either way the caller gives
            the pin up and stands again under a new id, which sorts after
            the member that took the pin over (record 003: the old client
            clears its id and pulls as a standby). None otherwise.
        """
        now = time.monotonic()
        heart = self._heart
        idle = heart.membership is None and not self.state.pinned
        if idle and may_join and now >= self._next_join:
            self._join(consumer_id, now)
        heart.keepalive()
        if heart.membership is None and self.state.pinned:
            return self._confirm_loss(consumer_id, now)
        holds = heart.membership is not None and self._token in heart.target
        if holds and not self.state.pinned:
            try:
                self._baseline = self._unpin_count()
            except LiftbridgeError as e:
                _log.info("unpin counter of group %s unreadable (%s); later", self._group_id, e)
                return None
            self._pinned(consumer_id)
        elif not holds and self.state.pinned:
            # Still a member, but the server gave partition 0 to another.
            _log.warning("%s lost the pin of group %s", consumer_id, self._group_id)
            self._unpinned(UnpinReason.LOST)
        elif holds and now >= self._next_unpin_check:
            m = heart.membership
            assert m is not None
            self._next_unpin_check = now + m.heartbeat_interval
            try:
                if self._unpin_count() > self._baseline:
                    return UnpinReason.ADMIN
            except LiftbridgeError as e:
                _log.debug("unpin counter of group %s unreadable: %s", self._group_id, e)
        return None

    def _join(self, consumer_id: str, now: float) -> None:
        error = self._heart.join(consumer_id)
        if error is not None:
            self._next_join = now + _JOIN_RETRY
            if classify(error) not in (Refusal.GROUP_EXISTS, Refusal.NO_GROUP):
                _log.warning("%s could not join the pin election: %s", consumer_id, error)

    def _confirm_loss(self, consumer_id: str, now: float) -> UnpinReason | None:
        """The pinned member heard "not a member": LOST once the group
        confirms it (never rejoining under the old id, which sorts first and
        would take the pin back); the membership taken up again when it
        stands; asked again later when unknown."""
        if now < self._next_join:
            return None
        stands = self._heart.still_member()
        if stands is None:
            self._next_join = now + _JOIN_RETRY
            return None
        if stands:
            return None
        _log.warning(
            "%s lost the pin of group %s: its membership expired; it stands again as a standby",
            consumer_id,
            self._group_id,
        )
        return UnpinReason.LOST

    def resign(self, reason: UnpinReason, *, leave: bool = True) -> None:
        """Gives the pin up (if held) and leaves the election.

        Args:
            reason: why, for the event.
            leave: False to just forget the membership (a crash, a closed
                client): the server expires it.
        """
        if self.state.pinned:
            self._unpinned(reason)
        m = self._heart.left()
        if m is None or not leave or self._router.closed:
            return
        try:
            self._session.leave(m.consumer_id, self._heart.budget())
        except LiftbridgeError as e:
            if classify(e) not in (Refusal.NOT_MEMBER, Refusal.NO_GROUP):
                _log.warning("%s could not leave the pin election: %s", m.consumer_id, e)

    def _unpin_count(self) -> int:
        cursor_id, stream, partition = unpin_cursor(self._group_id)
        deadline = Deadline(self._heart.budget())
        count = self._cursors.fetch(cursor_id, stream, partition, deadline, retry=False)
        return count or 0

    def _pinned(self, consumer_id: str) -> None:
        self.state = PinState(True, consumer_id, secrets.token_hex(8), datetime.now(UTC))
        self.pinned_since = time.monotonic()
        _log.info("%s holds the pin of group %s", consumer_id, self._group_id)
        self._event(PinEventKind.PINNED, None)

    def _unpinned(self, reason: UnpinReason) -> None:
        self._event(PinEventKind.UNPINNED, reason)
        self.state = PinState(False, self.state.consumer_id)
        self.pinned_since = None

    def _event(self, kind: PinEventKind, reason: UnpinReason | None) -> None:
        state, now = self.state, datetime.now(UTC)
        self._emit(
            PinEvent(kind, self._group_id, state.consumer_id, state.pin_id or "", reason, now)
        )
