"""A member's hold on one assigned partition: the subscription reading it,
the progress it made, where a new reading starts, and its commits.

Progress is the offset of the last message whose handler returned. Each
reading starts right after the later of the group's committed offset and this
member's own progress, so offsets only ever cover messages that were handled:
nothing is skipped, and little is handled twice.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from liftbridge._consume._positions import Start, StartPosition, subscribe_request
from liftbridge._consume._subscription import Handler, Subscription, start_subscription
from liftbridge._core._router import Router
from liftbridge._errors import (
    ClientClosedError,
    DeadlineExceededError,
    LiftbridgeError,
    NoCursorError,
    ServerError,
    UnavailableError,
)
from liftbridge._groups._values import AutoOffset, StreamPartition
from liftbridge._locks import drop
from liftbridge_api import api_pb2

_log = logging.getLogger(__name__)

MAX_BACKOFF = 30.0
"""Longest pause before reading a failing partition again, in seconds."""


def backoff(failures: int) -> float:
    """Seconds to pause after ``failures`` failures in a row: 0.5, 1, 2 ... 30."""
    return 0.0 if failures <= 0 else min(MAX_BACKOFF, 0.25 * 2**failures)


def transient(error: BaseException | None) -> bool:
    """Failures the group thread cures by itself (retrying, rebalancing), which
    the handler is not told about."""
    if error is None or isinstance(error, ClientClosedError):
        return True
    if isinstance(error, ServerError):
        return error.code == "INTERNAL"
    return isinstance(error, (UnavailableError, DeadlineExceededError)) or (
        isinstance(error, LiftbridgeError) and error.retriable
    )


@dataclass(frozen=True, slots=True)
class StartPlan:
    """Where a reading of a partition starts.

    Attributes:
        start: the subscription's start position.
        pin: an offset to commit once the reading is open (the group's start
            under LATEST and NEW_ONLY), or None.
    """

    start: Start
    pin: int | None = None


def plan_start(
    committed: int,
    progress: int | None,
    auto_offset: AutoOffset,
    newest_offset: Callable[[], int],
    what: str,
) -> StartPlan:
    """Decides where to read a partition from.

    After the later of the committed offset and this member's progress, when
    there is either. Otherwise by ``auto_offset``: EARLIEST reads from the
    oldest message; LATEST and NEW_ONLY resolve to an offset that is then
    committed (pinned), so a member taking over later continues there rather
    than at the then-newest message. An empty partition cannot be pinned (a
    cursor cannot say "before offset 0").

    Args:
        committed: the group's cursor, -1 when none.
        progress: the last offset this member handled, None when none.
        auto_offset: the policy without either.
        newest_offset: fetches the partition's newest offset (-1 when empty).
        what: the partition, for the error message.

    Raises:
        NoCursorError: neither, and ``auto_offset`` is ERROR.
        LiftbridgeError: ``newest_offset`` failed.
    """
    position = max(committed, -1 if progress is None else progress)
    if position >= 0:
        return StartPlan(position + 1)
    if auto_offset is AutoOffset.EARLIEST:
        return StartPlan(StartPosition.EARLIEST)
    if auto_offset is AutoOffset.ERROR:
        raise NoCursorError(f"the group has no committed offset for {what} (AutoOffset.ERROR)")
    newest = newest_offset()
    position = newest if auto_offset is AutoOffset.NEW_ONLY else newest - 1
    if position < 0:
        return StartPlan(0)
    return StartPlan(position + 1, pin=position)


def open_reading(
    router: Router,
    tp: StreamPartition,
    start: Start,
    consumer: api_pb2.Consumer,
    handler: Handler,
    wait: float,
) -> Subscription:
    """Subscribes to a partition as a group member (fenced by the group epoch).

    ``wait`` bounds the opening and any re-subscription after a broker
    failure: the group thread (the heartbeat) waits for the opening, and
    restarts a reading that gave up from where it stopped. A give-up for a
    :func:`transient` failure (a leader down longer than ``wait``) is
    therefore logged at DEBUG, the restart at INFO; any other stays a WARNING
    (and reaches the handler).

    Raises:
        LiftbridgeError: the subscription could not be opened (a fencing
            refusal is a :class:`ConsumerGroupError`).
    """
    request = subscribe_request(tp.stream, tp.partition, start, None, False, False)
    request.consumer.CopyFrom(consumer)
    return start_subscription(
        router,
        request,
        handler,
        resubscribe_wait=wait,
        open_timeout=wait,
        owner_restarts=transient,
    )


@dataclass(eq=False)
class Assigned:
    """A partition assigned to this member, and the subscription reading it.

    Written by the group thread; ``commit`` may run on any thread.
    """

    tp: StreamPartition
    committed: int = -1
    """The group's cursor as this member last knew it (guarded by ``commit_lock``)."""
    subscription: Subscription | None = None
    carried: int | None = None
    """Progress of the earlier readings of this assignment."""
    started_from: int | None = None
    """Progress when the current reading started."""
    failures: int = 0
    """Readings in a row that failed without progress."""
    retry_at: float = 0.0
    """No new reading before this ``time.monotonic()``."""
    reported: bool = False
    """Whether the handler heard of the current run of failures."""
    commit_lock: threading.RLock = field(default_factory=threading.RLock)
    """Serializes commits of this partition; guards ``committed``. An RLock
    only so that a thread interrupted as it took it can let go of it
    (:mod:`liftbridge._locks`); nobody takes it twice."""
    delivered: int | None = None
    """The last offset given to the handler (it may still be running);
    written by the partition's thread."""
    handling_since: float | None = None
    """``time.monotonic()`` when the handler call in progress began; None
    between calls. Written by the partition's thread."""
    position_reported: int = -1
    """The last position written to the group's position cursor."""
    pulled: bool = False
    """Read for ``fetch``/``next``: progress is what the caller marked done."""
    handled: int | None = None
    """For a pulled partition, the last offset the caller finished with."""
    revoked: bool = False
    """Set once the member let the partition go (a pulled message of it is dropped)."""
    handover_until: float | None = None
    """While set, the first reading waits (until this ``time.monotonic()``
    at the latest) for the previous owner's final commit."""
    handover_epoch: int = 0
    """The group epoch of the assignment that gave this member the partition."""
    handover_checked: bool = False
    """Set after the first check of the hand-over."""

    def handed_over(
        self,
        committed: int,
        high_watermark: Callable[[], int],
        released: Callable[[], int],
        now: float,
    ) -> bool:
        """Whether the first reading may start: the previous owner, if any,
        has committed its last progress, or cannot have any left.

        The member losing a partition commits its last progress once it
        notices the rebalance (when the server ends its reading, or at its
        next heartbeat), which is after the gaining member learned of it;
        reading from the cursor at once would handle again everything the
        loser handled since its previous commit. The cursor moving is no
        sign of that final commit (the loser's periodic commits move it
        too), so the loser marks the partition released, with the epoch it
        did so in, after its final commit; the gainer waits for a mark of its
        own assignment's epoch or later, or for the cursor to cover every
        message (nothing to hand over), or for ``handover_until`` (no
        previous owner, or one that died or lagged an epoch behind: it left
        nothing newer, or its commit is in the cursor by then).

        Args:
            committed: the group's cursor, just fetched.
            high_watermark: fetches the partition's high watermark.
            released: fetches the epoch of the partition's last release mark.
            now: ``time.monotonic()``.
        """
        if self.handover_until is None:
            return True
        done = not self.handover_checked and committed >= high_watermark()
        self.handover_checked = True
        done = done or released() >= self.handover_epoch
        if done or now >= self.handover_until:
            self.handover_until = None
            return True
        return False

    def progress(self) -> int | None:
        """The last offset whose handler returned (for a pulled partition,
        that the caller finished with), None before the first."""
        if self.pulled:
            return self.handled if self.handled is not None else self.carried
        subscription = self.subscription
        last = subscription.last_offset if subscription is not None else None
        return last if last is not None else self.carried

    @property
    def reading(self) -> bool:
        """True while a subscription reads it."""
        return self.subscription is not None

    def started(self, subscription: Subscription) -> None:
        """Records a new reading."""
        self.subscription, self.started_from = subscription, self.carried

    def retire(self) -> tuple[float, BaseException | None]:
        """Forgets a reading that ended, keeping its progress.

        Returns:
            The pause before the next reading (growing while readings end
            without progress, e.g. a handler raising on the same message),
            and why it ended.
        """
        subscription = self.subscription
        assert subscription is not None
        last = self.progress()
        self.carried, self.subscription = last, None
        self.failures = 0 if last != self.started_from else self.failures + 1
        delay = backoff(self.failures)
        self.retry_at = time.monotonic() + delay
        return delay, subscription.error

    def start_failed(self) -> float:
        """Schedules the next attempt after a failed start; returns the pause."""
        self.failures += 1
        delay = backoff(self.failures)
        self.retry_at = time.monotonic() + delay
        return delay

    def stop(self, *, wait: bool = True) -> None:
        """Stops the reading, if any.

        Args:
            wait: False to leave a handler call in progress running (a
                handler stuck past ``pin_timeout``) instead of waiting for it.
        """
        if self.subscription is not None:
            self.subscription.close(None if wait else 0.0)

    def commit(self, store: Callable[[StreamPartition, int], None], *, wait: float = -1) -> bool:
        """Commits the progress if it is past the known cursor.

        Args:
            store: the RPC storing ``(partition, offset)``.
            wait: seconds to wait for a commit of this partition in progress
                on another thread; negative waits as long as it takes.

        Returns:
            False when skipped because another commit was in progress.

        Raises:
            LiftbridgeError: ``store`` failed.
        """
        commit_lock = self.commit_lock
        try:
            own = commit_lock.acquire(timeout=wait)
        except BaseException:  # an interrupt (Ctrl-C), maybe just after the lock was taken
            drop(commit_lock)
            raise
        if not own:
            return False
        try:
            last = self.progress()
            if last is not None and last > self.committed:
                store(self.tp, last)
                self.committed = last
                _log.debug("committed %s at offset %d", self.tp, last)
            return True
        finally:
            commit_lock.release()

    def learn_cursor(self, committed: int) -> None:
        """Records the group's cursor fetched before a new reading."""
        with self.commit_lock:
            self.committed = committed
