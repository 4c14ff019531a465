"""The Client's consumer-group methods (owned by :mod:`liftbridge._groups._consumer`,
``_describe`` and ``_pin``; these construct and delegate)."""

from __future__ import annotations

import weakref

from liftbridge._consume._cursors import Cursors
from liftbridge._core import _validate as check
from liftbridge._core._client_api import ClientBase
from liftbridge._groups._consumer import AssignmentCallback, AutoOffset, Consumer
from liftbridge._groups._describe import GroupDescription, describe_group
from liftbridge._groups._pin import PinCallback, unpin_cursor


class GroupMethods(ClientBase):
    """``create_consumer``, ``describe_group`` and ``unpin``."""

    _cursors: Cursors
    _consumers: weakref.WeakSet[Consumer]

    def create_consumer(
        self,
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
    ) -> Consumer:
        """Creates a member of a consumer group; see :class:`Consumer` for the
        rules (rebalances, at-least-once delivery, pinned groups, overflow).

        Nothing happens on the network until ``consumer.subscribe(streams, handler)``.

        Args:
            group_id: the group; members with the same id share its partitions
                and its offsets (cursor ``__group:<group_id>``).
            consumer_id: this member's id, unique in the group; None for a
                generated one that sorts by join time (needed by
                :meth:`Consumer.release`). Reusing an id after a crash waits
                until the server expires the old membership.
            auto_checkpoint: seconds between automatic commits of handled
                offsets; None to commit only on :meth:`Consumer.checkpoint`,
                on revocation and on close.
            auto_offset: where to start on a partition without a committed
                offset: EARLIEST (default), LATEST, NEW_ONLY, or ERROR (the
                handler gets :class:`NoCursorError`).
            on_assigned: ``callback(partitions)`` after a rebalance, with the
                :class:`StreamPartition` values gained, before they are read.
            on_revoked: ``callback(partitions)`` in a rebalance, with those
                lost, once they are no longer read and before their offsets
                are committed. Both run on the ``liftbridge-group-<group_id>``
                thread and must return well within the server's consumer
                timeout; exceptions are logged.
            min_pending: makes this an overflow member: it joins only while
                the group's pending messages (not yet given to a member's
                handler) are at least this many, or ``min_ack_pending`` holds.
            low_pending: an overflow member leaves once the pending messages
                are at most this (default ``min_pending // 2``) and the ack
                pending ones at most ``min_ack_pending // 2``.
            min_ack_pending: makes this an overflow member: it joins only
                while the group's ack pending messages (given to a handler,
                not committed) are at least this many, or ``min_pending``
                holds. Both thresholds can be changed on a running member with
                :meth:`Consumer.set_overflow`.
            join_timeout: seconds ``subscribe`` keeps retrying while the server
                still lists ``consumer_id`` as a member (a restart after a
                crash); keep it above the server's ``groups.consumer.timeout``.
            pinned: makes this a member of a pinned group: one member (the
                first to stand) reads every partition of every stream, the
                others wait (see :class:`Consumer`).
            pin_timeout: seconds a handler call may run, or a pulling
                member may go without a ``fetch``/``next``, before this
                member gives the pin up (logging why); None for no limit.
            on_pin: ``callback(event)`` with a :class:`PinEvent` each time
                this member takes or gives up the pin, in order, on the
                ``liftbridge-pin-<group_id>`` thread; it must not block.

        Raises:
            InvalidArgumentError, ArgumentTypeError: a bad option.
            ClientClosedError: the client is closed.
        """
        self._check_open()
        consumer = Consumer(
            self._router,
            self._cursors,
            group_id,
            consumer_id=consumer_id,
            auto_checkpoint=auto_checkpoint,
            auto_offset=auto_offset,
            on_assigned=on_assigned,
            on_revoked=on_revoked,
            min_pending=min_pending,
            low_pending=low_pending,
            min_ack_pending=min_ack_pending,
            join_timeout=join_timeout,
            pinned=pinned,
            pin_timeout=pin_timeout,
            on_pin=on_pin,
        )
        with self._state_lock:
            self._check_open()
            self._consumers.add(consumer)
        return consumer

    def describe_group(
        self, group_id: str, *, timeout: float | None = None
    ) -> GroupDescription | None:
        """Describes a consumer group from outside: its coordinator and epoch
        (from the server), its members with the streams they joined with and
        the partitions each holds, and for a pinned group who holds the pin.

        Liftbridge's API tells only the coordinator and epoch; the members
        are replayed from the activity stream (``__activity``: the server
        needs ``activity.stream.enabled``, otherwise ``members`` is None),
        every join and leave since the stream began, through the server's
        assignment rule (see :class:`GroupDescription`). The read is the
        whole activity stream, so it costs more on a server with a long
        history; the members may trail the epoch by the moment the server
        takes to publish a change.

        Args:
            group_id: the group.
            timeout: seconds for the whole call; ``None`` for the retry
                policy's ``total_timeout``.

        Returns:
            The description, or None when the server does not know the group
            (no members).

        Raises:
            InvalidArgumentError, ArgumentTypeError: a bad ``group_id``.
            DeadlineExceededError: not within ``timeout``.
            LiftbridgeError: the metadata or the activity stream could not be read.
        """
        check.identifier(group_id, arg="group_id")
        return describe_group(self._router, group_id, self._deadline_of(timeout))

    def unpin(self, group_id: str, *, timeout: float | None = None) -> None:
        """Moves a pinned group's pin away from whichever member holds it, as
        NATS ADR-42's UNPIN: that member stops reading, commits, and stands
        again at the back of the line, so the next member in line takes every
        partition over at the committed offsets + 1. Works from any client,
        member or not.

        The request is a counter the pinned member checks once per heartbeat
        period (a third of the server's ``groups.consumer.timeout``), so the
        pin moves within about that. Two unpins in the same period may count
        as one. A group of one member gets the pin straight back.

        Args:
            group_id: the group (created with ``pinned=True`` members).
            timeout: seconds for the whole call, retries included; ``None``
                for the retry policy's ``total_timeout``.

        Raises:
            InvalidArgumentError, ArgumentTypeError: a bad ``group_id``.
            ClientClosedError: the client is closed.
            LiftbridgeError: the counter could not be read or written.
        """
        check.identifier(group_id, arg="group_id")
        deadline = self._deadline_of(timeout)
        cursor_id, stream, partition = unpin_cursor(group_id)
        count = self._cursors.fetch(cursor_id, stream, partition, deadline) or 0
        self._cursors.set(cursor_id, stream, partition, count + 1, deadline)
