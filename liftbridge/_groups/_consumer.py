"""Consumer groups: members that share a group's partitions and never lose work.

Built on Liftbridge's own group protocol (beta in the server): a member joins
with the streams it reads, polls FetchConsumerGroupAssignments on the group
coordinator (the poll is also its heartbeat), subscribes to the partitions it
is assigned with the group fields set (so the server fences a member with an
older epoch), and stores its offsets in cursors named ``__group:<group id>``,
the Go client's format, resuming each partition at the committed offset + 1.

This module is the public handle; the member's thread is in
:mod:`liftbridge._groups._member`. See :class:`Consumer` for the rules.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Iterator, Sequence
from dataclasses import replace

from liftbridge._consume._cursors import Cursors
from liftbridge._consume._subscription import Handler
from liftbridge._core import _validate as check
from liftbridge._core._display import Table
from liftbridge._core._messages import Message
from liftbridge._core._router import Router
from liftbridge._errors import (
    ArgumentTypeError,
    ClientClosedError,
    InvalidArgumentError,
)
from liftbridge._groups._member import GroupMember
from liftbridge._groups._options import AssignmentCallback, MemberOptions
from liftbridge._groups._pin import PinCallback, PinState
from liftbridge._groups._pull import PullBuffer, next_message, pull_errors
from liftbridge._groups._values import (
    GROUP_CURSOR_PREFIX,
    AutoOffset,
    Backlog,
    OverflowRule,
    StreamPartition,
    group_cursor_id,
    new_consumer_id,
    stream_list,
)

__all__ = ["AssignmentCallback", "AutoOffset", "Backlog", "Consumer", "StreamPartition"]

_log = logging.getLogger(__name__)

_WAIT = 30.0
"""Seconds ``close()`` and ``release()`` wait for the group thread."""
_ITER_WAIT = 1.0
"""Seconds an iteration waits for messages before looking again whether the
consumer closed."""


class _State(enum.Enum):
    NEW = "new"
    RUNNING = "running"
    CLOSING = "closing"
    CLOSED = "closed"


class Consumer:
    """A member of a consumer group. Thread-safe.

    Create it with :meth:`Client.create_consumer`, then call :meth:`subscribe`.
    The group's partitions are spread over its members; each partition is read
    by one member at a time and its offset is committed to the group's cursor
    (``__group:<group id>``, as the Go client does).

    **Delivery** is at least once and never skips. An offset is committed only
    once the handler returned for that message and for every earlier one the
    member read, so a member that takes a partition over resumes at the
    committed offset + 1 and may see again what an expired or killed member
    handled after its last commit. Commits happen every ``auto_checkpoint``
    seconds, on :meth:`checkpoint`, when a partition is revoked, and on
    :meth:`close`. A handler that raises is not skipped either: the partition
    is read again from that message after a pause that grows while it keeps
    failing (0.5 s, 1 s, ... 30 s).

    **Threads**: one ``liftbridge-group-<group id>`` thread runs the protocol
    (join, heartbeats, rebalances, commits, coordinator failover, joining again
    after being expired); each held partition has a
    ``liftbridge-sub-<stream>-<partition>`` thread calling the handler.

    **Rebalances**: every membership change bumps the group epoch and the
    server recomputes the assignment: each partition, in order, to the member
    holding the fewest, ties to the smallest consumer id. Members learn it
    within a third of the server's consumer timeout (their heartbeat period).
    The group thread then stops reading the partitions lost, calls
    ``on_revoked`` with them, commits them, calls ``on_assigned`` with the
    ones gained and starts reading those. A member that stops heartbeating is
    expired after the consumer timeout and its partitions move.

    **Duplicates on a clean rebalance**: the member losing a partition learns
    of the rebalance only at its next heartbeat (the server does not end its
    reading), reads on until then, and then commits what its handler
    finished. A member gaining the partition that read the cursor at once
    would handle again everything since the loser's previous commit. So
    before its first reading the gaining member waits for the loser's final
    commit: it starts once the group's cursor moves, or at once when the
    cursor already covers every message, and at the latest a heartbeat
    period + 0.5 s after it learned of the partition. Measured at 1,000
    messages/s over 4 partitions, a join gave 0 duplicates per moved
    partition with ``auto_checkpoint=5`` (580-1,083 without the wait) and 2
    with ``auto_checkpoint=0.5`` (122 without): a duplicate remains when the
    loser's periodic commit, rather than its final one, lands first. The
    price is paid after a crash: a partition taken over from an expired
    member, with messages past its committed offset, waits out that period
    for a final commit that never comes.

    **Pinned groups** (``pinned=True``; NATS ADR-42's ``pinned_client``): one
    member, the pinned one, reads every partition of every stream, however
    many; the others wait as hot standbys. Members stand in a pin election
    (the group ``__pin:<group id>``, in which the server gives partition 0 of
    the first stream to the smallest consumer id), and only the winner joins
    the group itself. Generated ids sort by join time, so the first to stand
    holds the pin and a member standing later never takes it. The pin moves
    to the next in line when its holder closes, dies (after the server's
    consumer timeout), calls :meth:`release`, is unpinned by an operator
    (:meth:`Client.unpin`, from any client, within about a heartbeat
    period), has a handler call running longer than ``pin_timeout`` (it then
    logs why, stops reading without waiting for that call, whose message the
    next holder handles again, and stands again, at the back, once the call
    returns), or, pulling, makes no ``fetch``/``next`` for ``pin_timeout``. A
    member giving the pin up stands again under a new generated id: it never
    takes the pin back and, pulling, pulls as a standby. :attr:`pin` tells
    whether this member holds the pin, its pin id and since when; ``on_pin``
    receives a :class:`PinEvent` each time it takes or gives up the pin, in
    order, on a ``liftbridge-pin-<group id>`` thread (never the group
    thread); it must not block. While the pin moves
    the old and new holder may briefly share the partitions; each partition
    is read by one member at a time and handed over at the final commit.

    Without ``pinned=True``, a group on a stream with one partition pins
    the same way through the group itself (without ``pin_timeout``, unpin or
    pin events): the partition goes to the member whose consumer id sorts
    first, and generated ids (``consumer_id=None``) sort by join time: the
    member that joined first is active, the others wait, connected and
    heartbeating, and a member joining later never takes over. When the
    active member closes (or dies and is expired), the next in join order
    takes the partition over at the committed offset + 1. :meth:`release`
    hands over on purpose: see there. Use generated ids for every member of
    a pinned group; with chosen ids the smallest takes the pin (or the
    partition) whenever it joins.

    **Overflow members** (``min_pending=N``, ``low_pending=L``, default
    ``N // 2``; and/or ``min_ack_pending=A``, low mark ``A // 2``) stay out of
    the group while its backlog is low, join when ``pending >= N`` or
    ``ack_pending >= A`` (either is enough, as in NATS ADR-42), and leave
    again, after committing, when ``pending <= L`` and ``ack_pending <=
    A // 2``. :meth:`set_overflow` changes the thresholds of a running member.
    The counts (:meth:`backlog`, measured every second) come from the server:
    each partition's high watermark, the group's committed offset, and the
    position the partition's reader last reported (every member writes the
    last offset it gave to its handler to the cursor
    ``__group-position:<group id>`` once per heartbeat period, when it moved).
    ``pending`` is what no member has been given, ``ack_pending`` what was
    given and not committed yet. **Regular members first**: generated ids of
    overflow members start with ``~overflow-``, which sorts after every
    generated regular id, so by the server's rule (fewest partitions, ties to
    the smaller id) an overflow member in the group takes a partition only
    when every regular member already holds as many as it would: never while
    there are no more partitions than regular members, whichever joined
    first. (A chosen ``consumer_id`` of an overflow member keeps its place in
    the order; choose one that sorts after the regular members'.)

    **Pulling** (NATS ADR-42's pull consumers): :meth:`subscribe` without a
    handler buffers the messages of the partitions held (1,000 at most over
    all of them) for :meth:`fetch`, :meth:`next` and iteration. A message
    counts as handled once the caller comes back for more (the next
    ``fetch``/``next``) or calls :meth:`checkpoint`, as Kafka's ``poll``;
    commits cover only those. A minimal version: the SDK's general pull API
    (``Client.pull``) was not on main yet when this was written.

    **User code**: ``on_assigned`` and ``on_revoked`` run on the group thread,
    which is also the heartbeat: they must return well within a third of the
    server's consumer timeout. The handler runs on the partition's thread,
    concurrently with other partitions' handlers; a call in progress delays a
    rebalance until it returns. Exceptions from callbacks are logged.
    """

    def __init__(
        self,
        router: Router,
        cursors: Cursors,
        group_id: str,
        *,
        consumer_id: str | None = None,
        auto_checkpoint: float | None = 5.0,
        auto_offset: AutoOffset = AutoOffset.EARLIEST,
        on_assigned: AssignmentCallback | None = None,
        on_revoked: AssignmentCallback | None = None,
        min_pending: int | None = None,
        low_pending: int | None = None,
        min_ack_pending: int | None = None,
        join_timeout: float = 60.0,
        pinned: bool = False,
        pin_timeout: float | None = None,
        on_pin: PinCallback | None = None,
    ) -> None:
        """Checks the options; nothing happens on the network until :meth:`subscribe`.

        Args: see :meth:`Client.create_consumer`.

        Raises:
            InvalidArgumentError, ArgumentTypeError: a bad option.
        """
        # The group's cursor id, __group:<group id>, must itself be a valid cursor id.
        check.identifier(
            group_id, arg="group_id", max_bytes=check.MAX_NAME_BYTES - len(GROUP_CURSOR_PREFIX)
        )
        if consumer_id is not None:
            check.identifier(consumer_id, arg="consumer_id")
        if auto_checkpoint is not None:
            auto_checkpoint = check.seconds(auto_checkpoint, arg="auto_checkpoint")
        if not isinstance(auto_offset, AutoOffset):
            raise ArgumentTypeError(
                f"auto_offset must be an AutoOffset, got {type(auto_offset).__name__}"
            )
        if not isinstance(pinned, bool):
            raise ArgumentTypeError(f"pinned must be a bool, got {type(pinned).__name__}")
        if pin_timeout is not None:
            pin_timeout = check.seconds(pin_timeout, arg="pin_timeout")
        if not pinned and (pin_timeout is not None or on_pin is not None):
            raise InvalidArgumentError("pin_timeout and on_pin need pinned=True")
        if pinned and (min_pending is not None or min_ack_pending is not None):
            raise InvalidArgumentError("a pinned member cannot be an overflow member")
        check.callback(on_assigned, arg="on_assigned", shape="(partitions)")
        check.callback(on_revoked, arg="on_revoked", shape="(partitions)")
        check.callback(on_pin, arg="on_pin", shape="(event)")
        self._router = router
        self._cursors = cursors
        self._options = MemberOptions(
            group_id=group_id,
            auto_checkpoint=auto_checkpoint,
            auto_offset=auto_offset,
            on_assigned=on_assigned,
            on_revoked=on_revoked,
            overflow=OverflowRule.from_options(min_pending, low_pending, min_ack_pending),
            join_timeout=check.seconds(join_timeout, arg="join_timeout"),
            pinned=pinned,
            pin_timeout=pin_timeout,
            on_pin=on_pin,
        )
        self._chosen_id = consumer_id is not None
        self._consumer_id = consumer_id or new_consumer_id(
            overflow=self._options.overflow is not None
        )
        self._lock = threading.Lock()  # guards _state and _member
        self._state = _State.NEW
        self._member: GroupMember | None = None
        self._pull: PullBuffer | None = None
        self._closing = threading.Event()  # close() was called

    # -------------------------------------------------------- properties --

    @property
    def group_id(self) -> str:
        """The group."""
        return self._options.group_id

    @property
    def consumer_id(self) -> str:
        """This member's id; a new generated one after :meth:`release`."""
        member = self._member
        return member.consumer_id if member is not None else self._consumer_id

    @property
    def cursor_id(self) -> str:
        """The cursor id of the group's offsets: ``__group:<group id>``."""
        return group_cursor_id(self._options.group_id)

    @property
    def assignment(self) -> tuple[StreamPartition, ...]:
        """The partitions this member holds now, sorted."""
        member = self._member
        return member.assignment if member is not None else ()

    @property
    def member(self) -> bool:
        """True while this member is in the group (an overflow member may not be)."""
        member = self._member
        return member is not None and member.member

    @property
    def closed(self) -> bool:
        """True once :meth:`close` has started (or :meth:`subscribe` failed)."""
        return self._state in (_State.CLOSING, _State.CLOSED)

    # ---------------------------------------------------------- operations --

    def subscribe(self, streams: str | Sequence[str], handler: Handler | None = None) -> None:
        """Joins the group for these streams and consumes in the background.

        Without a handler, messages wait in a buffer (1,000 at most; a full
        one slows the server down) for :meth:`fetch`, :meth:`next` or
        iteration.

        The first join happens on the caller's thread (an overflow member joins
        later, under backlog). While the server still lists this consumer id
        as a member (a restart after a crash with the same ``consumer_id``), it
        retries until that membership expires, for at most ``join_timeout``.

        Args:
            streams: a stream name or a list of them.
            handler: ``handler(message, error)``, as for :meth:`Client.subscribe`.
                Called for each message, in offset order per partition, on the
                partition's thread. Called with ``(None, error)`` (on the
                partition's or the group thread) when a partition cannot be
                read for a reason that needs attention (:class:`NoCursorError`,
                a deleted stream, a paused partition), once per run of
                failures; the member keeps retrying it. Transient failures and
                rebalances are handled quietly. None to pull messages instead.

        Raises:
            InvalidArgumentError, ArgumentTypeError: bad streams or handler, or
                ``subscribe`` was already called.
            NoSuchStreamError: a stream does not exist.
            ConsumerGroupError: the join was refused (for instance the id is
                still a member after ``join_timeout``).
            ClientClosedError: the consumer or the client was closed.
        """
        names = stream_list(streams)
        member: GroupMember | None = None
        check.callback(handler, arg="handler", shape="(message, error)")
        with self._lock:
            if self.closed or self._router.closed:
                raise ClientClosedError(
                    "the consumer is closed" if self.closed else "the client is closed"
                )
            if self._state is not _State.NEW:
                raise InvalidArgumentError(
                    "subscribe() was already called; use another consumer for other streams"
                )
            self._state = _State.RUNNING
        try:
            deadline = self._router.deadline(None)
            for name in names:
                self._router.partition_info(name, 0, deadline)  # NoSuchStreamError if missing
            pull = PullBuffer() if handler is None else None
            member = GroupMember(
                self._router,
                self._cursors,
                self._options,
                self._consumer_id,
                names,
                handler or pull_errors(pull),
                pull,
            )
            if self._options.overflow is None and not self._options.pinned:
                member.join_first(self._closing)
            with self._lock:
                self._member = member
                self._pull = pull
                member.start()
                closing = self._closing.is_set()
            if closing:  # close() came while joining: leave again
                member.stop(abandon=False, wait=_WAIT)
                raise ClientClosedError("the consumer was closed while subscribing")
        except BaseException:  # a failure or an interrupt (Ctrl-C): nothing is left
            with self._lock:
                self._state = _State.CLOSED
            if member is not None:  # joined maybe: its thread leaves (started if need be)
                member.start()
                member.stop(abandon=False, wait=_WAIT)
            raise

    def checkpoint(self, *, timeout: float | None = None) -> None:
        """Commits, for each partition held, the offset of the last message
        whose handler returned. Safe from any thread, including the handler.

        Args:
            timeout: seconds per RPC attempt; None for the client's ``rpc_timeout``.

        Raises:
            ClientClosedError: the consumer is closed.
            LiftbridgeError: a commit failed (others may have succeeded).
        """
        check.optional_seconds(timeout, arg="timeout")
        if self._state is _State.CLOSED:
            raise ClientClosedError("the consumer is closed")
        pull = self._pull
        if pull is not None:
            pull.done()
        member = self._member
        if member is not None:
            member.checkpoint(timeout)

    def fetch(self, max_messages: int = 100, *, timeout: float = 5.0) -> list[Message]:
        """Takes up to ``max_messages`` messages of the partitions this member
        holds, waiting up to ``timeout`` seconds for the first (an empty list
        when none came). Needs :meth:`subscribe` without a handler.

        The messages this member handed out before (by ``fetch``, ``next`` or
        iteration) count as handled from this call on, so they are committed
        with the next commit; call :meth:`checkpoint` to mark them handled
        and commit at once. Messages taken and not yet marked are handled
        again by the next owner after a rebalance or a crash (at least once,
        never skipped). One taker at a time; safe from any thread.

        Raises:
            InvalidArgumentError: not subscribed for pulling, or a bad argument.
            ClientClosedError: the consumer is closed.
            LiftbridgeError: a partition could not be read (raised once, as a
                handler would be told).
        """
        check.positive_int(max_messages, arg="max_messages")
        return self._pulling().fetch(max_messages, check.seconds(timeout, arg="timeout"))

    def next(self, timeout: float = 5.0) -> Message:
        """Takes one message, waiting up to ``timeout`` seconds (see :meth:`fetch`).

        Raises:
            DeadlineExceededError: none within ``timeout``.
            InvalidArgumentError, ClientClosedError, LiftbridgeError: as :meth:`fetch`.
        """
        return next_message(self._pulling(), check.seconds(timeout, arg="timeout"))

    def __iter__(self) -> Iterator[Message]:
        """Messages as they come (see :meth:`fetch`), until the consumer closes."""
        pull = self._pulling()
        while True:
            try:
                # One at a time: taking the next marks the one before handled,
                # so a loop left early never marks a message it did not see.
                yield from pull.fetch(1, _ITER_WAIT)
            except ClientClosedError:
                return

    def _pulling(self) -> PullBuffer:
        pull = self._pull
        if pull is None:
            if self._state is _State.CLOSED:
                raise ClientClosedError("the consumer is closed")
            raise InvalidArgumentError("pulling needs subscribe(streams) without a handler")
        return pull

    def backlog(self, *, timeout: float | None = None) -> Backlog:
        """The group's backlog over this member's streams (see overflow members).

        Returns:
            ``pending`` (high watermark minus the group's position, i.e. the
            later of the committed offset and the position the partition's
            reader last reported) and ``ack_pending`` (that position minus the
            committed offset), summed over every partition.

        Args:
            timeout: seconds per RPC attempt; None for the client's ``rpc_timeout``.

        Raises:
            InvalidArgumentError: called before :meth:`subscribe`.
            LiftbridgeError: a partition's metadata or cursor could not be read.
        """
        check.optional_seconds(timeout, arg="timeout")
        member = self._member
        if member is None:
            raise InvalidArgumentError("backlog() needs subscribe() first")
        return member.backlog(timeout)

    @property
    def pin(self) -> PinState | None:
        """Whether this member holds its group's pin, since when and under
        which pin id; None unless created with ``pinned=True``."""
        member = self._member
        if not self._options.pinned:
            return None
        state = member.pin if member is not None else None
        return state if state is not None else PinState(False, self.consumer_id)

    @property
    def overflow(self) -> OverflowRule | None:
        """The overflow thresholds in force; None for a regular member."""
        member = self._member
        return member.overflow if member is not None else self._options.overflow

    def set_overflow(
        self,
        *,
        min_pending: int | None = None,
        low_pending: int | None = None,
        min_ack_pending: int | None = None,
    ) -> None:
        """Replaces an overflow member's thresholds while it runs; the next
        backlog check (within a second) applies them, joining or leaving as
        they say. Arguments as for :meth:`Client.create_consumer`; at least
        one of ``min_pending`` and ``min_ack_pending``. Safe from any thread.

        Raises:
            InvalidArgumentError: not an overflow member, or bad thresholds.
            ClientClosedError: the consumer is closed.
        """
        if self._options.overflow is None:
            raise InvalidArgumentError(
                "set_overflow() needs an overflow member (min_pending or min_ack_pending)"
            )
        rule = OverflowRule.from_options(min_pending, low_pending, min_ack_pending)
        if rule is None:
            raise InvalidArgumentError("set_overflow() needs min_pending or min_ack_pending")
        with self._lock:
            if self.closed:
                raise ClientClosedError("the consumer is closed")
            self._options = replace(self._options, overflow=rule)
            member = self._member
        if member is not None:
            member.set_overflow(rule)

    def release(self) -> None:
        """Hands this member's partitions over: a pinned group's "unpin".

        The member stops reading, calls ``on_revoked``, commits, leaves the
        group, and joins again at once as a standby under a new generated
        consumer id. The new id sorts after every other member's, so the
        server gives the partition to the next member in join order, which
        resumes at the committed offset + 1, and this member waits at the back
        of the line. Alone in the group, it gets the partition straight back.
        A ``pinned=True`` member gives up the pin the same way (leaving the
        group and the pin election, then standing again), with an UNPINNED
        event of reason RELEASED. Blocks until that is done (at most 30 s),
        unless called from the handler or a callback.

        Raises:
            InvalidArgumentError: the member has a chosen ``consumer_id`` (its
                place in the order cannot move), or :meth:`subscribe` was not
                called.
            ClientClosedError: the consumer is closed.
        """
        if self._chosen_id:
            raise InvalidArgumentError(
                "release() needs a generated consumer id (consumer_id=None): the server "
                "gives the partition to the member whose id sorts first"
            )
        with self._lock:
            if self._state is not _State.RUNNING or self._member is None:
                if self.closed:
                    raise ClientClosedError("the consumer is closed")
                raise InvalidArgumentError("release() needs subscribe() first")
            member = self._member
        done = member.request_release()
        if not member.on_own_thread() and not done.wait(_WAIT):
            _log.warning("release of %s in group %s still running", self.consumer_id, self.group_id)

    def close(self) -> None:
        """Stops consuming, commits, and leaves the group. Idempotent; safe
        from any thread. From the handler or a callback it returns at once and
        the group thread finishes the work; elsewhere it waits (at most 30 s).
        ``Client.close()`` closes the client's consumers first, so they
        commit and leave while the connections still work.
        """
        self._stop(abandon=False)

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"<Consumer {self.consumer_id} of group {self.group_id} {self._state.value}"
            f" holding {[str(tp) for tp in self.assignment]}>"
        )

    def _repr_html_(self) -> str:
        """The member and the partitions it holds, as a table (notebooks)."""
        rows = tuple((tp.stream, str(tp.partition)) for tp in self.assignment)
        state = self._state.value + ("" if self.member or self.closed else ", not a member")
        title = f"consumer {self.consumer_id} of group {self.group_id} ({state})"
        return Table(title, ("stream", "partition"), rows)._repr_html_()

    def _abandon(self) -> None:
        """Stops as a crash would: no commit, no leave, no callbacks; the server
        expires the member after its consumer timeout. For tests."""
        self._stop(abandon=True)

    def _stop(self, *, abandon: bool) -> None:
        with self._lock:
            self._closing.set()
            if self._state is _State.RUNNING:
                self._state = _State.CLOSING
            elif self._state is _State.NEW:
                self._state = _State.CLOSED
            member = self._member
        if member is None:
            return
        member.stop(abandon=abandon, wait=_WAIT)
        if self._pull is not None:
            self._pull.close()
        if not member.alive:
            with self._lock:
                self._state = _State.CLOSED
