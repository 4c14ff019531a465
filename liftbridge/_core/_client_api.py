"""What the Client's methods stand on, and the cluster's administration.

:class:`ClientBase` holds the parts every family of :class:`~liftbridge.Client`
methods uses (the router, the client's state, one deadline per call);
:class:`AdminMethods` is the first family: streams and metadata. The other
families live with their feature (``_publish/_client_api.py``,
``_consume/_client_api.py``, ``_groups/_client_api.py``); ``_client.py``
composes them and owns the lifecycle.
"""

from __future__ import annotations

import enum
import threading
import weakref
from collections.abc import Iterable
from typing import Protocol, TypeVar

from liftbridge._core import _admin
from liftbridge._core import _validate as check
from liftbridge._core._admin import Admin
from liftbridge._core._metadata import Metadata, PartitionMetadata
from liftbridge._core._router import Deadline, Router
from liftbridge._errors import ArgumentTypeError, ClientClosedError


class ClientState(enum.Enum):
    """Where a client is in its life."""

    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"


class Closeable(Protocol):
    """Something made with a client that the client closes first."""

    def close(self) -> None:
        """Closes it (bounded, idempotent)."""
        ...


_C = TypeVar("_C", bound=Closeable)


class ClientBase:
    """The parts of a client every family of its methods uses; the
    :class:`~liftbridge.Client` sets them in its constructor."""

    _router: Router
    _admin: Admin
    # _state_lock guards _state and the sets of what the client closes
    _state_lock: threading.Lock
    _state: ClientState

    @property
    def state(self) -> ClientState:
        """OPEN, CLOSING or CLOSED."""
        return self._state

    @property
    def closed(self) -> bool:
        """True once :meth:`close` has finished. While it runs (CLOSING) the
        connections still work, so consumers can commit and leave."""
        return self._state is ClientState.CLOSED

    def _check_open(self) -> None:
        if self._state is not ClientState.OPEN:
            raise ClientClosedError("the client is closed")

    def _deadline_of(self, timeout: float | None) -> Deadline:
        self._check_open()
        if timeout is not None:
            timeout = check.seconds(timeout, arg="timeout")
        return self._router.deadline(timeout)

    def _keep(self, owned: weakref.WeakSet[_C], thing: _C, what: str) -> _C:
        """Adds ``thing`` to the set ``close()`` closes, or closes it and
        raises when the client was closed while it was made."""
        with self._state_lock:
            if self._state is ClientState.OPEN:
                owned.add(thing)
                return thing
        thing.close()
        raise ClientClosedError(f"the client was closed while {what}")


class AdminMethods(ClientBase):
    """The client's stream and metadata operations (owned by
    :mod:`liftbridge._core._admin`)."""

    def create_stream(
        self,
        name: str,
        *,
        subject: str | None = None,
        group: str | None = None,
        replication_factor: int | None = None,
        max_replication: bool = False,
        partitions: int = 1,
        retention_max_bytes: int | None = None,
        retention_max_messages: int | None = None,
        retention_max_age: float | None = None,
        cleaner_interval: float | None = None,
        segment_max_bytes: int | None = None,
        segment_max_age: float | None = None,
        compact_enabled: bool | None = None,
        compact_max_goroutines: int | None = None,
        auto_pause_time: float | None = None,
        auto_pause_disable_if_subscribers: bool | None = None,
        min_isr: int | None = None,
        optimistic_concurrency_control: bool | None = None,
        encryption: bool | None = None,
        timeout: float | None = None,
    ) -> None:
        """Creates a stream attached to a NATS subject.

        Partition N of the stream reads the NATS subject ``subject`` (N = 0) or
        ``subject.N``. Options left as ``None`` take the server's default.
        Durations are float seconds (sent to the server in milliseconds).

        The name comes first and the subject is keyword-only (unlike the Go
        client's ``CreateStream(ctx, subject, name)``), so the two strings
        cannot be swapped by accident.

        Args:
            name: stream name, unique in the cluster.
            subject: NATS subject to attach to; ``*`` and ``>`` wildcards
                allowed. ``None`` (the default) uses the stream's name.
            group: load-balance group; streams in one group share the subject's
                messages at random.
            replication_factor: replicas per partition (server default 1).
            max_replication: replicate on every broker (overrides
                ``replication_factor``).
            partitions: number of partitions, at least 1.
            retention_max_bytes: drop old segments past this log size; 0 = no limit.
            retention_max_messages: drop old segments past this many messages; 0 = no limit.
            retention_max_age: seconds after which segments are deleted; 0 = no TTL.
            cleaner_interval: seconds between retention/compaction checks.
            segment_max_bytes: size of one segment file.
            segment_max_age: seconds before a segment is rolled; 0 = by size only.
            compact_enabled: keep only the last message per key.
            compact_max_goroutines: compaction parallelism (set
                ``compact_enabled`` too, or the server default decides).
            auto_pause_time: seconds idle before a partition pauses itself; 0 = never.
            auto_pause_disable_if_subscribers: never auto-pause while subscribed.
            min_isr: replicas that must store a write before it commits.
            optimistic_concurrency_control: enable ``expected_offset`` checks on
                publish (publishes then need an ack policy other than NONE).
            encryption: encrypt data at rest (the server must have a key).
            timeout: seconds for the whole call, retries included; ``None`` for
                the retry policy's ``total_timeout``.

        Raises:
            InvalidArgumentError: a bad name, subject or option (before any RPC,
                or from the server).
            StreamExistsError: a stream with this name exists.
            UnavailableError: no broker could be reached.
        """
        request = _admin.create_stream_request(
            name,
            subject=subject,
            group=group,
            replication_factor=replication_factor,
            max_replication=max_replication,
            partitions=partitions,
            retention_max_bytes=retention_max_bytes,
            retention_max_messages=retention_max_messages,
            retention_max_age=retention_max_age,
            cleaner_interval=cleaner_interval,
            segment_max_bytes=segment_max_bytes,
            segment_max_age=segment_max_age,
            compact_enabled=compact_enabled,
            compact_max_goroutines=compact_max_goroutines,
            auto_pause_time=auto_pause_time,
            auto_pause_disable_if_subscribers=auto_pause_disable_if_subscribers,
            min_isr=min_isr,
            optimistic_concurrency_control=optimistic_concurrency_control,
            encryption=encryption,
        )
        self._admin.create_stream(request, self._deadline_of(timeout))

    def delete_stream(self, name: str, *, timeout: float | None = None) -> None:
        """Deletes a stream, all its partitions and their data.

        Args:
            name: the stream.
            timeout: seconds for the whole call, retries included; ``None`` for
                the retry policy's ``total_timeout``.

        Raises:
            NoSuchStreamError: the stream does not exist.
        """
        check.stream_name(name, arg="name")
        self._admin.delete_stream(name, self._deadline_of(timeout))

    def pause_stream(
        self,
        name: str,
        *,
        partitions: Iterable[int] | None = None,
        resume_all: bool = False,
        timeout: float | None = None,
    ) -> None:
        """Pauses some or all partitions of a stream, releasing their resources.

        A paused partition resumes when it is published to; with
        ``resume_all``, publishing to any partition resumes them all.

        Args:
            name: the stream.
            partitions: partitions to pause; ``None`` for all.
            resume_all: resume every partition when any one is published to.
            timeout: seconds for the whole call, retries included; ``None`` for
                the retry policy's ``total_timeout``.

        Raises:
            NoSuchPartitionError: the stream or a partition does not exist
                (:class:`NoSuchStreamError` when the stream is missing).
        """
        check.stream_name(name, arg="name")
        if not isinstance(resume_all, bool):
            raise ArgumentTypeError("resume_all must be a bool")
        self._admin.pause_stream(
            name, check.partitions(partitions), resume_all, self._deadline_of(timeout)
        )

    def set_stream_readonly(
        self,
        name: str,
        *,
        partitions: Iterable[int] | None = None,
        readonly: bool = True,
        timeout: float | None = None,
    ) -> None:
        """Makes some or all partitions of a stream readonly (or writable again).

        Publishing to a readonly partition fails with
        :class:`ReadonlyPartitionError`; subscriptions read to its end, then
        end with that error.

        Args:
            name: the stream.
            partitions: partitions to change; ``None`` for all.
            readonly: True to make readonly, False to make writable.
            timeout: seconds for the whole call, retries included; ``None`` for
                the retry policy's ``total_timeout``.

        Raises:
            NoSuchPartitionError: the stream or a partition does not exist.
        """
        check.stream_name(name, arg="name")
        if not isinstance(readonly, bool):
            raise ArgumentTypeError("readonly must be a bool")
        self._admin.set_stream_readonly(
            name, check.partitions(partitions), readonly, self._deadline_of(timeout)
        )

    def fetch_metadata(self, *, timeout: float | None = None) -> Metadata:
        """Fetches the cluster's metadata from the server (never from the cache)
        and refreshes the client's cache with it.

        Returns:
            An immutable :class:`Metadata` snapshot of brokers, streams and
            partitions (leaders, replicas, ISR).
        """
        return self._admin.fetch_metadata(self._deadline_of(timeout))

    @property
    def metadata(self) -> Metadata:
        """The cached metadata from the last refresh, without an RPC."""
        return self._router.metadata

    def fetch_partition_metadata(
        self, stream: str, partition: int = 0, *, timeout: float | None = None
    ) -> PartitionMetadata:
        """Fetches a partition's state from its leader: high watermark, newest
        offset, paused and readonly flags, event timestamps.

        Raises:
            NoSuchPartitionError: the stream or partition does not exist.
        """
        check.stream_name(stream)
        check.partition(partition)
        return self._admin.fetch_partition_metadata(stream, partition, self._deadline_of(timeout))
