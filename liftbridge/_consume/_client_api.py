"""The Client's read methods: subscriptions, cursors, pull consumers and
direct reads (owned by ``_subscription``, ``_cursors``, ``_pull`` and
``_direct``; these are thin delegations)."""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime

from liftbridge._consume import _direct
from liftbridge._consume._cursors import Cursors
from liftbridge._consume._direct import Batch
from liftbridge._consume._positions import (
    Start,
    StartPosition,
    Stop,
    StopPosition,
    subscribe_request,
)
from liftbridge._consume._pull import PullConsumer
from liftbridge._consume._pull_options import PullStart, StallCallback
from liftbridge._consume._subscription import Handler, Subscription, start_subscription
from liftbridge._core import _validate as check
from liftbridge._core._client_api import AdminMethods, ClientState
from liftbridge._core._messages import Message
from liftbridge._core._router import Deadline
from liftbridge._errors import ArgumentTypeError, InvalidArgumentError, NoSuchStreamError
from liftbridge_api import api_pb2


class ReadMethods(AdminMethods):
    """``subscribe``, ``set_cursor``/``fetch_cursor``, ``pull`` and ``get*``; they
    stand on the metadata operations (a pull consumer reads them)."""

    _cursors: Cursors
    _resubscribe_wait: float
    _subscriptions: weakref.WeakSet[Subscription]
    _pulls: weakref.WeakSet[PullConsumer]

    def subscribe(
        self,
        stream: str,
        handler: Handler | None = None,
        *,
        partition: int = 0,
        start: Start = StartPosition.NEW_ONLY,
        stop: Stop | None = None,
        read_replica: bool = False,
        resume: bool = False,
        timeout: float | None = None,
        read_isr_replica: bool | None = None,
    ) -> Subscription:
        """Subscribes to one partition of a stream.

        The subscription runs on its own thread (``liftbridge-sub-<stream>-<partition>``).
        After a broker failure it re-subscribes from the last delivered offset
        + 1 within ``resubscribe_wait``, so failover neither skips nor repeats.

        Args:
            stream: the stream.
            handler: ``handler(message, error)``. Called for each message, in
                offset order, on the subscription's thread; it must not block
                for long (it holds up the partition). Called once with
                ``(None, error)`` when the subscription fails; not called at a
                normal end (stop position, close). If it raises, the
                subscription stops (see :class:`Subscription`). None: iterate
                the returned subscription instead.
            partition: the partition, default 0.
            start: StartPosition.NEW_ONLY (default), EARLIEST or LATEST; an int
                offset; a timezone-aware datetime; or a timedelta before now.
            stop: None (run until closed), StopPosition.LATEST, an int offset
                (inclusive) or a datetime.
            read_replica: read from a random in-sync replica instead of the
                leader (the name ``get``, ``get_batch`` and ``pull`` use).
            read_isr_replica: the deprecated name of ``read_replica``
                (go-liftbridge's ``ReadISRReplica``).
            resume: resume the partition if it is paused.
            timeout: seconds ``subscribe`` may take to open the subscription
                (its first handshake, retries included); None means the
                client's default for a call (the retry policy's
                ``total_timeout``, else ``rpc_timeout`` times its attempts)
                or ``resubscribe_wait``, whichever is shorter. Once open,
                re-subscribing after a failure is bounded by
                ``resubscribe_wait`` instead.

        Returns:
            The running :class:`Subscription`. If the client is closed while
            ``subscribe`` runs after the subscription opened (its handler
            closed the client, say), the subscription is returned closed.

        Raises:
            NoSuchPartitionError: the stream or partition does not exist.
            PartitionPausedError: the partition is paused and ``resume`` is False.
            DeadlineExceededError, UnavailableError: not open within ``timeout``.
            InvalidArgumentError: bad positions.
        """
        self._check_open()
        if timeout is not None:
            check.seconds(timeout, arg="timeout")
        deadline = (
            self._router.deadline(timeout)
            if timeout is not None
            else Deadline(min(self._resubscribe_wait, self._router.deadline(None).remaining()))
        )
        check.stream_name(stream)
        check.partition(partition)
        check.callback(handler, arg="handler", shape="(message, error)")
        read_replica = check.renamed(
            read_replica, read_isr_replica, arg="read_replica", old="read_isr_replica"
        )
        for name, flag in (("read_replica", read_replica), ("resume", resume)):
            if not isinstance(flag, bool):
                raise ArgumentTypeError(f"{name} must be a bool")
        request = subscribe_request(stream, partition, start, stop, read_replica, resume)
        if start in (StartPosition.NEW_ONLY, StartPosition.LATEST):
            # Pin "new only" / "latest" to an offset now, so that a resubscribe
            # after a failover before the first message resumes exactly there
            # instead of at the new leader's "new only", which would skip what
            # was published meanwhile.
            newest = self.fetch_partition_metadata(
                stream, partition, timeout=max(0.001, deadline.remaining())
            ).newest_offset
            offset = newest + 1 if start is StartPosition.NEW_ONLY else max(newest, 0)
            if request.stopPosition == api_pb2.STOP_OFFSET and request.stopOffset < offset:
                raise InvalidArgumentError(
                    f"stop offset {request.stopOffset} is before the start position "
                    f"(offset {offset} now)"
                )
            request.startPosition = api_pb2.OFFSET
            request.startOffset = offset
        subscription = start_subscription(
            self._router,
            request,
            handler,
            resubscribe_wait=self._resubscribe_wait,
            open_timeout=self._router.rpc_timeout,
            first_wait=deadline.remaining(),
        )
        with self._state_lock:
            if self._state is ClientState.OPEN:
                self._subscriptions.add(subscription)
                return subscription
        # Closed meanwhile, after the subscription opened (e.g. by its own
        # handler): it existed, so it is returned, closed, not denied.
        subscription.close()
        return subscription

    def read_stream(
        self,
        stream: str,
        *,
        start: Start = StartPosition.EARLIEST,
        stop: Stop = StopPosition.LATEST,
        partitions: Sequence[int] | None = None,
    ) -> list[Message]:
        """Reads a whole stream, every partition, from ``start`` to ``stop``, into a
        list: the one call a notebook or a script needs (``subscribe`` reads one
        partition, 0 unless told).

        Each partition is read by a subscription of its own, one after the other;
        messages come partition by partition, each in offset order. For a
        DataFrame, ``liftbridge.messages_to_pandas(client.read_stream(name))``.

        Args:
            stream: the stream.
            start: where each partition starts, as for :meth:`subscribe`; default
                the earliest message.
            stop: where each partition stops, as for :meth:`subscribe`; default its
                newest message when the read begins. Required: a read that never
                stops would never return.
            partitions: the partitions to read; default all of them.

        Returns:
            The messages.

        Raises:
            NoSuchStreamError: the stream does not exist (naming it).
            InvalidArgumentError, ArgumentTypeError: a bad argument, naming it.
            LiftbridgeError: a subscription failed.
        """
        check.stream_name(stream, arg="stream")
        if stop is None:
            raise InvalidArgumentError(
                "read_stream's stop must not be None (it would never return): use "
                "StopPosition.LATEST, an offset or a time, or subscribe() to follow a stream"
            )
        subscribe_request(stream, 0, start, stop, False, False)  # checks both, sends nothing
        if partitions is None:
            info = self.fetch_metadata().get_stream(stream)
            if info is None:
                raise NoSuchStreamError(f"no such stream: {stream!r}")
            chosen = sorted(info.partitions)
        else:
            chosen = check.partitions(partitions)
        messages: list[Message] = []
        for partition in chosen:
            with self.subscribe(stream, partition=partition, start=start, stop=stop) as sub:
                messages.extend(sub)
        return messages

    def set_cursor(
        self,
        cursor_id: str,
        stream: str,
        partition: int,
        offset: int,
        *,
        timeout: float | None = None,
    ) -> None:
        """Durably stores a cursor: the offset of the last message processed.

        Resume at ``fetch_cursor(...) + 1``. Routed to the leader of the cursor's
        ``__cursors`` partition (same key and hash as the Go client), retried
        when leadership moves.

        Args:
            cursor_id: the cursor's name.
            stream: the stream it tracks.
            partition: the partition it tracks.
            offset: the last offset processed (-1: nothing yet).
            timeout: seconds for the whole call, retries included; ``None`` for
                the retry policy's ``total_timeout``.

        Raises:
            NoSuchStreamError: the stream does not exist, naming it (the server
                itself stores a cursor of any stream name). Checked against the
                cached metadata, refreshed once when it does not know the
                partition: no extra RPC for a stream the client has seen.
            NoSuchPartitionError: the stream has no such partition.
        """
        check.identifier(cursor_id, arg="cursor_id")
        check.stream_name(stream)
        check.partition(partition)
        check.int64(offset, arg="offset", minimum=-1)
        deadline = self._deadline_of(timeout)
        self._cursors.require(stream, partition, deadline)
        self._cursors.set(cursor_id, stream, partition, offset, deadline)

    def fetch_cursor(
        self, cursor_id: str, stream: str, partition: int, *, timeout: float | None = None
    ) -> int | None:
        """Fetches a cursor's offset: the last offset processed, so resume at
        the returned value + 1. None when no cursor is stored.

        Raises:
            NoSuchStreamError, NoSuchPartitionError: as :meth:`set_cursor`.
        """
        check.identifier(cursor_id, arg="cursor_id")
        check.stream_name(stream)
        check.partition(partition)
        deadline = self._deadline_of(timeout)
        self._cursors.require(stream, partition, deadline)
        return self._cursors.fetch(cursor_id, stream, partition, deadline)

    def pull(
        self,
        stream: str,
        *,
        partitions: Sequence[int] | None = None,
        start: PullStart = StartPosition.NEW_ONLY,
        stop: StopPosition | int | None = None,
        read_replica: bool = False,
        max_buffered_messages: int | None = None,
        max_buffered_bytes: int | None = None,
        refill_threshold: int | None = None,
        stall_timeout: float | None = 30.0,
        on_stall: StallCallback | None = None,
    ) -> PullConsumer:
        """A pull consumer over one stream: take messages when you want them
        (``fetch``, ``next``, iteration) or feed a handler (``consume``).

        Args:
            stream: the stream.
            partitions: the partitions to read; None for all of them. Order:
                offset order within a partition, arrival order across them.
            start: as in :meth:`subscribe` (default NEW_ONLY), or
                ``FromCursor(cursor_id)`` to resume after a committed position.
            stop: None (run until closed), StopPosition.LATEST (the newest
                offset of each partition now) or an int offset (inclusive,
                every partition).
            read_replica: read from random in-sync replicas instead of the
                leaders (no read-after-write guarantee).
            max_buffered_messages: bound of the pre-fetch buffer in messages
                (default 512); give this or ``max_buffered_bytes``, not both.
            max_buffered_bytes: bound of the buffer in bytes of values and keys.
            refill_threshold: reading from the server resumes once a full
                buffer has fallen to this level (same unit as the bound, at
                most the bound; default half the bound; 0 means empty; equal
                to the bound: as soon as anything was handed out).
            stall_timeout: seconds without a message, while the partition's
                high watermark says there is one (or its leader does not
                answer), before the partition is resubscribed from its
                leader; None turns the check off.
            on_stall: ``on_stall(stall)`` with a :class:`Stall` after each
                such resubscribe; runs on ``liftbridge-pull-<stream>-calls``
                and should return quickly.

        Raises:
            NoSuchPartitionError: the stream or a partition does not exist.
            InvalidArgumentError: a bad option.
        """
        self._check_open()
        consumer = PullConsumer(
            self,
            stream,
            partitions=partitions,
            start=start,
            stop=stop,
            read_replica=read_replica,
            max_buffered_messages=max_buffered_messages,
            max_buffered_bytes=max_buffered_bytes,
            refill_threshold=refill_threshold,
            stall_timeout=stall_timeout,
            on_stall=on_stall,
        )
        return self._keep(self._pulls, consumer, "the pull consumer started")

    def get(
        self,
        stream: str,
        offset: int,
        *,
        partition: int = 0,
        read_replica: bool = False,
        timeout: float | None = None,
    ) -> Message:
        """Reads one message by offset.

        Answered at once when the partition still holds a later message
        (the offset was removed: not found), when the offset is beyond the
        newest, and on a readonly partition. Only a writable partition whose
        every message retention removed leaves the read waiting: for the
        next publish (then not found) or until ``timeout``.

        Args:
            stream: the stream.
            offset: the message's offset.
            partition: the partition, default 0.
            read_replica: read from a random in-sync replica instead of the
                leader (spreads load; no read-after-write guarantee: a
                follower may not have the newest messages yet).
            timeout: seconds for the whole call; None for the retry policy's
                ``total_timeout``.

        Returns:
            The message.

        Raises:
            OffsetNotFoundError: the offset was removed by retention or
                compaction, or is beyond the newest offset.
            OffsetUnavailableError: the partition was written past the
                offset but no message at or after it arrived within
                ``timeout``: retention may have removed it and every later
                one (Liftbridge v1.9.0 cannot tell that log from a held one
                without reading), or the leader is slow. A
                :class:`DeadlineExceededError`.
            NotLeaderError: the partition has no leader.
            DeadlineExceededError: the read did not finish within ``timeout``.
            NoSuchPartitionError: the stream or partition does not exist.
        """
        return _direct.get(
            self._router,
            self._admin,
            stream,
            offset,
            partition=partition,
            read_replica=read_replica,
            deadline=self._deadline_of(timeout),
        )

    def get_batch(
        self,
        stream: str,
        start: int,
        *,
        partition: int = 0,
        max_messages: int | None = None,
        max_bytes: int | None = None,
        read_replica: bool = False,
        timeout: float | None = None,
    ) -> Batch:
        """Reads a page of a partition from offset ``start``: up to
        ``max_messages`` messages (default 100) or up to ``max_bytes`` bytes
        of values and keys (at least one message), never past the high
        watermark. Offsets removed by compaction are skipped.

        Page through a partition with ``start = batch.last_offset + 1``
        while ``batch.pending``. ``read_replica`` and ``timeout`` as in
        :meth:`get`.

        Offsets retention removed are skipped too: the page starts at the
        oldest message held. A readonly partition with nothing left at or
        after ``start`` gives an empty page (``pending`` 0) at once.

        Raises:
            InvalidArgumentError: both limits given, or a bad value.
            OffsetUnavailableError: nothing at or after ``start`` arrived
                within ``timeout`` although ``start`` is not past the high
                watermark (as in :meth:`get`).
            NotLeaderError, DeadlineExceededError, NoSuchPartitionError: as in :meth:`get`.
        """
        return _direct.get_batch(
            self._router,
            self._admin,
            stream,
            start,
            partition=partition,
            max_messages=max_messages,
            max_bytes=max_bytes,
            read_replica=read_replica,
            deadline=self._deadline_of(timeout),
        )

    def get_last_by_key(
        self,
        stream: str,
        *,
        keys: Iterable[bytes | str] | None = None,
        prefix: bytes | str | None = None,
        up_to_offset: int | Mapping[int, int] | None = None,
        up_to_time: datetime | None = None,
        read_replica: bool = False,
        timeout: float | None = None,
    ) -> dict[bytes, Message]:
        """The latest message per key as of a point, across the stream's
        partitions: a point-in-time, multi-key read for keyed (typically
        compacted) streams. Reads each partition involved from its oldest
        offset, so it suits compacted streams rather than long logs.

        Args:
            stream: the stream.
            keys: only these keys; their partitions are found with the Go
                client's key partitioner (:class:`PartitionByKey`) and only
                those are read. None: every key.
            prefix: only keys starting with it (not with ``keys``).
            up_to_offset: ignore messages after this offset: one int for every
                partition, or a mapping of partition to offset.
            up_to_time: ignore messages received after this timezone-aware time.
            read_replica, timeout: as in :meth:`get` (one deadline for all partitions).

        Returns:
            Key to its latest :class:`Message`; keys without a message are absent.
        """
        return _direct.get_last_by_key(
            self._router,
            self._admin,
            stream,
            keys=keys,
            prefix=prefix,
            up_to_offset=up_to_offset,
            up_to_time=up_to_time,
            read_replica=read_replica,
            deadline=self._deadline_of(timeout),
        )
