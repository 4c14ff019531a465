"""The group thread of a consumer-group member: join, heartbeat, rebalance,
commit, follow the coordinator, join again after expiry, overflow and release.

One ``liftbridge-group-<group id>`` thread per member runs everything here.
The assignment poll is also the heartbeat, so every step is bounded (one RPC
attempt with a deadline of at most a third of the consumer timeout) and slow
steps of a rebalance are interleaved with heartbeats that are due.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable

from liftbridge._consume._cursors import Cursors
from liftbridge._consume._subscription import Handler
from liftbridge._core._router import Router
from liftbridge._errors import (
    ClientClosedError,
    ConsumerGroupError,
    LiftbridgeError,
    NoSuchStreamError,
    Refusal,
)
from liftbridge._groups._commits import Commits
from liftbridge._groups._delivery import Delivery
from liftbridge._groups._heartbeat import JOIN_RETRY, Heartbeat
from liftbridge._groups._options import MemberOptions
from liftbridge._groups._partitions import Assigned, open_reading, plan_start, transient
from liftbridge._groups._pin import (
    PinElection,
    PinEvent,
    PinEvents,
    PinState,
    UnpinReason,
)
from liftbridge._groups._pull import PullBuffer
from liftbridge._groups._session import GroupSession
from liftbridge._groups._values import (
    Backlog,
    OverflowRule,
    StreamPartition,
    classify,
    new_consumer_id,
)
from liftbridge._locks import start_thread
from liftbridge_api import api_pb2

_log = logging.getLogger(__name__)

OVERFLOW_CHECK = 1.0
"""Seconds between two backlog measurements of an overflow member."""
_RETRY_SOON = 0.25
_HANDOVER_POLL = 0.05
"""Seconds between two looks at the cursor of a partition being handed over."""
_HANDOVER_MARGIN = 0.5
"""Seconds the hand-over wait allows, beyond a heartbeat period, for the
previous owner to stop reading and commit."""


class GroupMember:
    """One member's protocol state and its group thread.

    Thread-safety: ``start``, ``stop``, ``request_release``, ``checkpoint`` and
    the properties may be called from any thread; everything else runs on
    the group thread (or, for the first join, before it starts).
    """

    def __init__(
        self,
        router: Router,
        cursors: Cursors,
        options: MemberOptions,
        consumer_id: str,
        streams: tuple[str, ...],
        handler: Handler,
        pull: PullBuffer | None = None,
    ) -> None:
        self._router = router
        self._options = options
        self._group_id = options.group_id
        self._consumer_id = consumer_id
        self._streams = streams
        self._pull = pull
        self._session = GroupSession(router, cursors, options.group_id, streams)
        self._lock = threading.Lock()  # guards _held, _release_done
        self._held: dict[StreamPartition, Assigned] = {}
        self._release_done: threading.Event | None = None
        self._stop = threading.Event()  # the group thread must end
        self._wake = threading.Event()  # something for the group thread to look at
        self._delivery = Delivery(options.group_id, handler, pull, self._wake, self._held_entry)
        self._abandon = False
        self._thread = threading.Thread(
            target=self._run, name=f"liftbridge-group-{options.group_id}", daemon=True
        )
        self._heart = Heartbeat(self._session, options.group_id, router.rpc_timeout)
        self._commits = Commits(
            router,
            cursors,
            self._session,
            self._heart,
            options.group_id,
            options.auto_checkpoint,
            self._held_now,
        )
        self._overflow = options.overflow  # replaced whole by set_overflow(), read by the loop
        # Pin events for on_pin, on a thread the first one starts (group thread).
        self._events = None if options.on_pin is None else PinEvents(self._group_id, options.on_pin)
        self._pin = (
            PinElection(router, cursors, options.group_id, streams[0], self._emit)
            if options.pinned
            else None
        )
        # Group-thread state.
        self._want_member = options.overflow is None and not options.pinned
        self._abandoned: list[Assigned] = []  # dropped while a handler call was stuck
        self._next_join = 0.0
        self._next_backlog = 0.0
        self._join_failures = 0

    # ------------------------------------------------------ any thread --

    @property
    def consumer_id(self) -> str:
        """The id the member joins with (a new one after a release)."""
        return self._consumer_id

    @property
    def streams(self) -> tuple[str, ...]:
        """The streams the member reads."""
        return self._streams

    @property
    def member(self) -> bool:
        """True while in the group."""
        return self._heart.membership is not None

    @property
    def assignment(self) -> tuple[StreamPartition, ...]:
        """The partitions held, sorted."""
        with self._lock:
            return tuple(sorted(self._held))

    @property
    def alive(self) -> bool:
        """True while the group thread runs."""
        return self._thread.is_alive()

    def join_first(self, stopped: threading.Event) -> None:
        """Joins on the caller's thread, waiting out an old membership of this
        id (a restart after a crash) for at most ``join_timeout``.

        Raises:
            NoSuchStreamError: a stream does not exist.
            ConsumerGroupError: still refused after ``join_timeout``.
            ClientClosedError: ``stopped`` was set meanwhile.
            LiftbridgeError: another failure.
        """
        self._heart.join_first(
            self._consumer_id, self._streams, stopped, join_timeout=self._options.join_timeout
        )

    def start(self) -> None:
        """Starts the group thread, whole and once (called again: a no-op)."""
        start_thread(self._thread)

    def stop(self, *, abandon: bool, wait: float) -> None:
        """Ends the group thread: it stops reading, commits and leaves (or,
        abandoning, just stops, as a crash would). Waits at most ``wait``
        seconds, not at all from the group thread or a handler."""
        self._abandon = self._abandon or abandon
        self._stop.set()
        self._wake.set()
        if self.on_own_thread() or not self._thread.is_alive():
            return
        self._thread.join(wait)
        if self._thread.is_alive():
            _log.warning("group thread %s did not stop within %.0fs", self._thread.name, wait)

    def request_release(self) -> threading.Event:
        """Asks the group thread to hand the partitions over; the event is set when done."""
        done = threading.Event()
        with self._lock:
            self._release_done = done
        self._wake.set()
        if not self._thread.is_alive():
            done.set()
        return done

    def checkpoint(self, timeout: float | None) -> None:
        """Commits every held partition's progress (resilient RPCs, this thread).

        Raises:
            LiftbridgeError: a commit failed.
        """
        for entry in self._held_now():
            self._commits.durable(entry, timeout)

    def _held_now(self) -> list[Assigned]:
        with self._lock:
            return list(self._held.values())

    def _held_entry(self, tp: StreamPartition) -> Assigned | None:
        with self._lock:
            return self._held.get(tp)

    @property
    def pin(self) -> PinState | None:
        """The pin state of a pinned member; None otherwise."""
        return self._pin.state if self._pin is not None else None

    @property
    def overflow(self) -> OverflowRule | None:
        """The overflow rule in force; None for a regular member."""
        return self._overflow

    def set_overflow(self, rule: OverflowRule) -> None:
        """Replaces an overflow member's thresholds; the next backlog check
        (within a second) applies them."""
        self._overflow = rule
        self._next_backlog = 0.0
        self._wake.set()

    def backlog(self, timeout: float | None) -> Backlog:
        """The group's backlog (see overflow members); one attempt per RPC.

        Raises:
            LiftbridgeError: a partition's metadata or cursor could not be read.
        """
        return self._session.backlog(self._router.rpc_timeout if timeout is None else timeout)

    def on_own_thread(self) -> bool:
        """True on the group thread or in the handler, where waiting for the
        group thread could deadlock."""
        return (
            threading.current_thread() is self._thread
            or self._delivery.in_handler()
            or (self._events is not None and self._events.on_thread())
        )

    # ---------------------------------------------------------- the loop --

    def _run(self) -> None:
        """Thread ``liftbridge-group-<group id>``."""
        try:
            self._loop()
        except ClientClosedError:
            _log.debug("client closed under group %s", self._group_id)
        except BaseException:
            _log.exception("group thread of %s failed", self._group_id)
        finally:
            try:
                self._finish()
            except BaseException:
                _log.exception("group %s did not shut down cleanly", self._group_id)
            with self._lock:
                done, self._release_done = self._release_done, None
            if done is not None:
                done.set()
            if self._events is not None:
                self._events.close()

    def _loop(self) -> None:
        while not self._stop.is_set() and not self._router.closed:
            if self._release_done is not None:
                self._release()
            if self._pin is not None:
                self._tend_pin(self._pin)
            overflow = self._overflow
            if overflow is not None and time.monotonic() >= self._next_backlog:
                self._check_backlog(overflow)
            if self._heart.membership is None:
                if self._held:
                    self._revoke(self._held, final=False)
                if self._want_member and time.monotonic() >= self._next_join:
                    self._join()
            else:
                self._heart.keepalive()
                if self._heart.membership is not None:
                    self._reconcile()
                    self._tend()
                    self._commits.auto()
                    self._commits.report_positions()
            self._wake.wait(self._idle_time())
            self._wake.clear()

    def _idle_time(self) -> float:
        now = time.monotonic()
        wakeups = [now + 1.0]
        if self._heart.membership is not None:
            wakeups.append(self._heart.due)
            if self._options.auto_checkpoint is not None:
                wakeups.append(self._commits.next_checkpoint)
            with self._lock:
                wakeups.extend(e.retry_at for e in self._held.values() if not e.reading)
        elif self._want_member:
            wakeups.append(self._next_join)
        if self._overflow is not None:
            wakeups.append(self._next_backlog)
        if self._pin is not None:
            wakeups.append(self._pin.due)
            pin_timeout = self._options.pin_timeout
            if pin_timeout is not None:
                with self._lock:
                    since = [e.handling_since for e in self._held.values()]
                wakeups.extend(s + pin_timeout for s in since if s is not None)
                pull, pinned = self._pull, self._pin.pinned_since
                at = None if pull is None else pull.idle_at(pin_timeout, pinned)
                if at is not None:
                    wakeups.append(at)
        return max(0.01, min(wakeups) - now)

    def _finish(self) -> None:
        """The last work: stop reading, commit and leave (just stop when abandoned)."""
        if self._abandon or self._router.closed:
            for entry in self._drop(self._held):
                entry.revoked = True
                entry.stop(wait=not self._stuck(entry))
            self._heart.left()
            if self._pin is not None:
                self._pin.resign(UnpinReason.CLOSED, leave=False)
            return
        self._leave()
        if self._pin is not None:
            self._pin.resign(UnpinReason.CLOSED)

    # --------------------------------------------------------- membership --

    def _join(self) -> None:
        """One join attempt: after expiry or a release, or an overflow member."""
        error = self._heart.join(self._consumer_id)
        now = time.monotonic()
        if error is None:
            self._join_failures = 0
            return
        refusal = classify(error)
        if refusal in (Refusal.GROUP_EXISTS, Refusal.NO_GROUP):
            self._next_join = now + 0.05  # raced with the group's creation or deletion
            return
        self._join_failures += 1
        self._next_join = now + min(30.0, JOIN_RETRY * 2 ** (self._join_failures - 1))
        _log.warning("%s could not join group %s: %s", self._consumer_id, self._group_id, error)
        if refusal is Refusal.NO_STREAM and self._join_failures == 1:
            missing = NoSuchStreamError(f"a stream of {list(self._streams)} does not exist")
            self._delivery.notify(missing)

    def _leave(self) -> None:
        """Drops every partition (stop, on_revoked, commit) and leaves the group."""
        self._revoke(self._held, final=True)
        m = self._heart.left()
        if m is None or self._router.closed:
            return
        try:
            self._session.leave(m.consumer_id, self._router.rpc_timeout)
            _log.info("%s left group %s", m.consumer_id, self._group_id)
        except LiftbridgeError as e:
            if classify(e) not in (Refusal.NOT_MEMBER, Refusal.NO_GROUP):
                _log.warning("%s could not leave group %s: %s", m.consumer_id, self._group_id, e)

    def _release(self) -> None:
        """Leaves and joins again at once under a new generated id, which
        sorts after every member's: the partitions go to the others."""
        with self._lock:
            done = self._release_done
        try:
            if self._pin is not None:
                if self._pin.member:
                    self._give_up_pin(self._pin, UnpinReason.RELEASED)
            elif self._heart.membership is not None:
                self._leave()
                self._consumer_id = new_consumer_id(overflow=self._overflow is not None)
                self._join()
        finally:
            with self._lock:
                self._release_done = None
            if done is not None:
                done.set()

    # ---------------------------------------------------------------- pin --

    def _tend_pin(self, pin: PinElection) -> None:
        """Follows the pin election: joins the group when this member holds
        the pin, leaves it when not, and gives the pin up when a handler is
        stuck past ``pin_timeout`` or an operator asked for it."""
        if pin.state.pinned:
            with self._lock:
                stuck = [str(e.tp) for e in self._held.values() if self._stuck(e)]
            limit, pull, since = self._options.pin_timeout, self._pull, pin.pinned_since
            if stuck or (pull is not None and limit is not None and pull.idle_for(limit, since)):
                _log.warning(
                    "%s gives up the pin of group %s: %s within pin_timeout (%gs)",
                    self._consumer_id,
                    self._group_id,
                    f"the handler has not returned on {', '.join(stuck)}" if stuck else "no pull",
                    limit,
                )
                self._give_up_pin(pin, UnpinReason.TIMEOUT)
                return
        # A member that gave the pin up for a stuck handler waits for it to
        # return before it stands again.
        self._abandoned = [e for e in self._abandoned if e.handling_since is not None]
        reason = pin.tend(self._consumer_id, may_join=not self._abandoned)
        if reason is not None:
            _log.info(
                "%s gives up the pin of %s: %s", self._consumer_id, self._group_id, reason.value
            )
            self._give_up_pin(pin, reason)
            return
        want = pin.state.pinned
        if want != self._want_member:
            self._want_member = want
            if want:
                self._next_join = 0.0
            else:
                self._leave()

    def _give_up_pin(self, pin: PinElection, reason: UnpinReason) -> None:
        """Stops reading, commits, leaves the group and the election, and
        stands again under a new id, which sorts after every other member's."""
        self._want_member = False
        self._leave()
        pin.resign(reason)
        self._consumer_id = new_consumer_id()

    def _stuck(self, entry: Assigned) -> bool:
        """True when the entry's handler call has run for ``pin_timeout`` or more."""
        since, limit = entry.handling_since, self._options.pin_timeout
        return since is not None and limit is not None and time.monotonic() - since >= limit

    def _emit(self, event: PinEvent) -> None:
        if self._events is not None:
            self._events.emit(event)

    def _check_backlog(self, rule: OverflowRule) -> None:
        """An overflow member joins or leaves by the group's backlog."""
        self._next_backlog = time.monotonic() + OVERFLOW_CHECK
        if self._heart.membership is not None:
            self._commits.all()  # measure from this member's own latest progress
        try:
            backlog = self._session.backlog(self._heart.budget())
        except LiftbridgeError as e:
            _log.info("backlog of group %s unknown: %s", self._group_id, e)
            return
        want = rule.wants_membership(self._want_member, backlog)
        if want == self._want_member:
            return
        self._want_member = want
        _log.info(
            "group %s has %d pending and %d ack pending (%s): overflow member %s %s",
            self._group_id,
            backlog.pending,
            backlog.ack_pending,
            rule,
            self._consumer_id,
            "joins" if want else "leaves",
        )
        if want:
            self._next_join = 0.0
        else:
            self._leave()

    # -------------------------------------------------------- partitions --

    def _reconcile(self) -> None:
        """Brings the partitions held in line with the last assignment."""
        target = self._heart.target
        with self._lock:
            held = set(self._held)
        if held - target:
            self._revoke(held - target, final=False)
        gained = tuple(sorted(target - held))
        m = self._heart.membership
        if gained and m is not None:
            until = time.monotonic() + m.heartbeat_interval + _HANDOVER_MARGIN
            epoch, pulled = self._heart.target_epoch, self._pull is not None
            with self._lock:
                for tp in gained:
                    self._held[tp] = Assigned(
                        tp, handover_until=until, handover_epoch=epoch, pulled=pulled
                    )
            _log.info("%s assigned %s", self._consumer_id, [str(tp) for tp in gained])
            self._delivery.callback("on_assigned", self._options.on_assigned, gained)

    def _tend(self) -> None:
        """Starts reading the partitions held but not read: new ones, and
        readings that ended (after a pause growing while they make no progress)."""
        with self._lock:
            held = list(self._held.values())
        for entry in held:
            subscription = entry.subscription
            if subscription is not None and subscription.done:
                self._retired(entry)
            if not entry.reading and time.monotonic() >= entry.retry_at:
                self._heart.keepalive()
                if self._heart.membership is None or self._stop.is_set():
                    return
                if entry.tp in self._heart.target and self._held.get(entry.tp) is entry:
                    self._start(entry)

    def _retired(self, entry: Assigned) -> None:
        delay, error = entry.retire()
        if isinstance(error, ConsumerGroupError):
            # Fenced by a member with a newer epoch: learn the assignment first.
            self._heart.due = 0.0
            entry.retry_at = max(entry.retry_at, time.monotonic() + _RETRY_SOON)
        _log.info(
            "%s: reading %s ended after offset %s (%s); again in %.2fs",
            self._consumer_id,
            entry.tp,
            entry.carried,
            error,
            delay,
        )

    def _start(self, entry: Assigned) -> None:
        """Reads an assigned partition from the committed offset + 1 (or past
        this member's own progress, if later)."""
        tp, budget = entry.tp, self._heart.budget()
        try:
            committed = self._session.fetch_cursor(tp, budget)
            hw, marked = self._session.partition_offsets, self._session.released_epoch
            if not entry.handed_over(
                committed, lambda: hw(tp, budget)[0], lambda: marked(tp, budget), time.monotonic()
            ):
                entry.retry_at = time.monotonic() + _HANDOVER_POLL
                return
            entry.learn_cursor(committed)
            plan = plan_start(
                entry.committed,
                entry.carried,
                self._options.auto_offset,
                lambda: self._session.partition_offsets(tp, budget)[1],
                f"{tp} in group {self._group_id!r}",
            )
            self._heart.keepalive()
            m, epoch = self._heart.membership, self._heart.target_epoch
            if m is None or tp not in self._heart.target:
                return
            consumer = api_pb2.Consumer(
                groupId=self._group_id, groupEpoch=epoch, consumerId=m.consumer_id
            )
            subscription = open_reading(
                self._router, tp, plan.start, consumer, self._delivery.deliverer(entry), budget
            )
        except LiftbridgeError as e:
            if classify(e) is Refusal.FENCED:
                self._heart.due = 0.0  # a member with a newer epoch reads it
            delay = entry.start_failed()
            _log.info(
                "%s could not start reading %s (%s); again in %.2fs",
                self._consumer_id,
                tp,
                e,
                delay,
            )
            if not transient(e):
                self._delivery.report(entry, e)
            return
        if plan.pin is not None:
            # The policy's start counts as handled: committed now (and, should
            # that fail, with the reading's progress), only once the reading is
            # open, i.e. not fenced by a member with a newer epoch.
            entry.carried = plan.pin
        entry.started(subscription)
        self._delivery.reading(entry)
        _log.debug("%s reads %s from %s at epoch %d", self._consumer_id, tp, plan.start, epoch)
        if plan.pin is not None:
            self._commits.quietly(entry, final=False)

    def _drop(self, partitions: Iterable[StreamPartition]) -> list[Assigned]:
        with self._lock:
            return [self._held.pop(tp) for tp in sorted(partitions) if tp in self._held]

    def _revoke(self, partitions: Iterable[StreamPartition], *, final: bool) -> None:
        """Stops reading, calls ``on_revoked``, commits, and forgets the partitions.

        Args:
            partitions: the partitions to drop.
            final: the member is leaving (patient commits) rather than
                rebalancing (commits bounded by the heartbeat budget).
        """
        dropped = self._drop(list(partitions))
        if not dropped:
            return
        for entry in dropped:
            entry.revoked = True
            if self._stuck(entry):
                entry.stop(wait=False)  # the call keeps running; its offset is not committed
                self._abandoned.append(entry)
            else:
                entry.stop()
            if not final:
                self._heart.keepalive()
        lost = tuple(entry.tp for entry in dropped)
        _log.info("%s revoked %s", self._consumer_id, [str(tp) for tp in lost])
        self._delivery.callback("on_revoked", self._options.on_revoked, lost)
        for entry in dropped:
            self._commits.release(entry, final=final)
