"""The Client: lifecycle, resilient RPCs, and the operations of the client guide."""

from __future__ import annotations

import enum
import logging
import random
import threading
import time
import weakref
import zlib
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any

import grpc

from liftbridge import _retry
from liftbridge import _validate as check
from liftbridge._channels import Channels, TLSConfig
from liftbridge._consumer import AssignmentCallback, AutoOffset, Consumer
from liftbridge._errors import (
    AckTimeoutError,
    ArgumentTypeError,
    ClientClosedError,
    DeadlineExceededError,
    InvalidArgumentError,
    LiftbridgeError,
    NoSuchPartitionError,
    NoSuchStreamError,
    NotLeaderError,
    ServerError,
    UnavailableError,
    from_rpc_error,
)
from liftbridge._lanes import Lanes
from liftbridge._messages import Ack, AckPolicy, ack_from_proto
from liftbridge._metadata import (
    Metadata,
    MetadataCache,
    PartitionInfo,
    PartitionMetadata,
    metadata_from_proto,
    partition_metadata_from_proto,
)
from liftbridge._partitioner import PartitionByKey, Partitioner
from liftbridge._publisher import AckHandler, Publisher
from liftbridge._retry import RetryPolicy
from liftbridge._subscription import (
    Handler,
    Start,
    StartPosition,
    Stop,
    Subscription,
    _Request,
    subscribe_request,
)
from liftbridge._validate import BytesLike
from liftbridge_api import api_pb2, api_pb2_grpc

_log = logging.getLogger(__name__)

CURSORS_STREAM = "__cursors"

_METADATA_SETTLE = 1.0
"""Seconds to keep looking for a stream or partition missing from fresh metadata."""

_MAX_LANES = 32
"""Threads per client whose ``publish`` calls get a PublishAsync stream of their own."""


_BY_KEY = PartitionByKey()


class ClientState(enum.Enum):
    """Where a client is in its life."""

    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"


def _ms(value: float | None, arg: str) -> api_pb2.NullableInt64 | None:
    if value is None:
        return None
    return api_pb2.NullableInt64(value=round(check.seconds(value, arg=arg, allow_zero=True) * 1000))


def _int64(value: int | None, arg: str) -> api_pb2.NullableInt64 | None:
    if value is None:
        return None
    return api_pb2.NullableInt64(value=check.positive_int(value, arg=arg, minimum=0))


def _int32(value: int | None, arg: str) -> api_pb2.NullableInt32 | None:
    if value is None:
        return None
    return api_pb2.NullableInt32(value=check.positive_int(value, arg=arg, minimum=1))


def _bool(value: bool | None, arg: str) -> api_pb2.NullableBool | None:
    if value is None:
        return None
    if not isinstance(value, bool):
        raise ArgumentTypeError(f"{arg} must be a bool or None, got {type(value).__name__}")
    return api_pb2.NullableBool(value=value)


class Client:
    """A connection to a Liftbridge cluster. Thread-safe; share one per process.

    The client connects through the first seed address that answers, learns
    every broker from the cluster metadata, and keeps one gRPC channel per
    broker. Every RPC carries a deadline. Calls that may go to any broker are
    retried on another broker when one is unavailable; calls that need a
    partition leader refresh the metadata and retry when leadership moved.

    Use it as a context manager, or call :meth:`close`.

    Example:
        >>> with liftbridge.Client(["127.0.0.1:9292"]) as client:
        ...     client.create_stream("orders")
    """

    def __init__(
        self,
        addresses: str | Sequence[str],
        *,
        tls: TLSConfig | None = None,
        connect_timeout: float = 5.0,
        rpc_timeout: float = 10.0,
        retry_policy: RetryPolicy | None = None,
        ack_wait: float = 5.0,
        max_inflight: int = 1024,
        resubscribe_wait: float = 30.0,
    ) -> None:
        """Connects to the cluster.

        Args:
            addresses: one ``"host:port"`` or several seed addresses; any one
                that answers is enough.
            tls: TLS settings; ``None`` for plaintext.
            connect_timeout: seconds to wait for each seed while connecting.
            rpc_timeout: deadline in seconds of each RPC attempt unless a call
                passes its own ``timeout``.
            retry_policy: how resilient RPCs are retried; ``None`` for
                :data:`DEFAULT_RETRY_POLICY`.
            ack_wait: default seconds a publish waits for its ack.
            max_inflight: most publishes awaiting acks at once. A publish
                beyond it blocks until an eighth of the window has completed
                (at its timeout it takes any free slot, else raises
                :class:`PublishWindowFullError`), which bounds memory.
            resubscribe_wait: seconds a subscription keeps trying to
                re-establish itself after its broker fails.

        Raises:
            InvalidArgumentError: an option is out of range.
            UnavailableError: no seed answered.
        """
        seeds = self._seed_list(addresses)
        if tls is not None and not isinstance(tls, TLSConfig):
            raise ArgumentTypeError(f"tls must be a TLSConfig or None, got {type(tls).__name__}")
        if retry_policy is not None and not isinstance(retry_policy, RetryPolicy):
            raise ArgumentTypeError(
                f"retry_policy must be a RetryPolicy or None, got {type(retry_policy).__name__}"
            )
        self._connect_timeout = check.seconds(connect_timeout, arg="connect_timeout")
        self._rpc_timeout = check.seconds(rpc_timeout, arg="rpc_timeout")
        self._retry_policy = retry_policy or _retry.DEFAULT_RETRY_POLICY
        self._ack_wait = check.seconds(ack_wait, arg="ack_wait")
        self._resubscribe_wait = check.seconds(resubscribe_wait, arg="resubscribe_wait")
        self._publisher = Publisher(
            self,
            ack_wait=self._ack_wait,
            max_inflight=check.positive_int(max_inflight, arg="max_inflight"),
            retry_policy=self._retry_policy,
        )
        self._lanes = Lanes(self, ack_wait=self._ack_wait, max_lanes=_MAX_LANES)
        # Guarded by _state_lock; closed with the client.
        self._subscriptions: weakref.WeakSet[Subscription] = weakref.WeakSet()
        self._consumers: weakref.WeakSet[Consumer] = weakref.WeakSet()
        self._channels = Channels(tls)
        self._metadata = MetadataCache(seeds)
        # guards _state, _broker_index, _subscriptions and _consumers
        self._state_lock = threading.Lock()
        self._state = ClientState.OPEN
        self._broker_index = 0
        try:
            self._connect(seeds)
        except BaseException:
            self._channels.close()
            self._state = ClientState.CLOSED
            raise

    @staticmethod
    def _seed_list(addresses: str | Sequence[str]) -> tuple[str, ...]:
        if isinstance(addresses, str):
            addresses = [addresses]
        if not isinstance(addresses, Sequence) or not addresses:
            raise InvalidArgumentError(
                "addresses must be a 'host:port' str or a non-empty list of them"
            )
        for a in addresses:
            if not isinstance(a, str):
                raise ArgumentTypeError(f"addresses must hold str, got {type(a).__name__}")
            host, sep, port = a.rpartition(":")
            if not sep or not host or not port.isdigit():
                raise InvalidArgumentError(f"address {a!r} is not of the form 'host:port'")
        return tuple(dict.fromkeys(addresses))

    def _connect(self, seeds: tuple[str, ...]) -> None:
        failures: list[str] = []
        for seed in seeds:
            try:
                response = self._invoke(
                    seed, "FetchMetadata", api_pb2.FetchMetadataRequest(), self._connect_timeout
                )
            except LiftbridgeError as e:
                _log.info("seed %s did not answer: %s", seed, e)
                failures.append(f"{seed}: {e}")
                continue
            self._metadata.replace(metadata_from_proto(response))
            _log.debug("connected through %s", seed)
            return
        raise UnavailableError("no Liftbridge broker answered: " + "; ".join(failures))

    # ------------------------------------------------------------ lifecycle --

    @property
    def state(self) -> ClientState:
        """OPEN, CLOSING or CLOSED."""
        return self._state

    def close(self) -> None:
        """Closes every connection. Idempotent; safe from any thread.

        Operations called afterwards raise :class:`ClientClosedError`.
        """
        with self._state_lock:
            if self._state is not ClientState.OPEN:
                return
            self._state = ClientState.CLOSING
        try:
            self._close_resources()
        finally:
            self._channels.close()
            self._state = ClientState.CLOSED

    def _close_resources(self) -> None:
        """Closes consumers first (they commit and leave their groups while the
        connections still work), then the publisher (failing unacked
        publishes) and every subscription."""
        with self._state_lock:
            consumers = list(self._consumers)
        for consumer in consumers:
            try:
                consumer.close()
            except LiftbridgeError as e:
                _log.warning("closing consumer %s failed: %s", consumer, e)
        self._publisher.close()
        self._lanes.close()
        with self._state_lock:
            subscriptions = list(self._subscriptions)
        for subscription in subscriptions:
            subscription.close()

    def flush(self, timeout: float | None = None) -> bool:
        """Waits until every publish accepted so far has its outcome.

        Args:
            timeout: seconds to wait at most; None to wait as long as it takes
                (each publish has its own ack timeout, so this ends).

        Returns:
            True when nothing is in flight any more, False on timeout.
        """
        return self._publisher.flush(timeout)

    def __enter__(self) -> Client:
        return self

    def __repr__(self) -> str:
        brokers = ", ".join(f"{b.id}@{b.address}" for b in self._metadata.current.brokers)
        return f"<liftbridge.Client {self._state.value} brokers=[{brokers}]>"

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._state is not ClientState.OPEN:
            raise ClientClosedError("the client is closed")

    # ------------------------------------------------------- RPC machinery --

    def _invoke(self, address: str, method: str, request: Any, timeout: float) -> Any:
        """One unary RPC attempt on one broker, errors mapped to the SDK's.

        Works while the client is CLOSING, so consumers can commit and leave
        their groups during ``close()``; public operations check for OPEN.
        """
        self._check_not_closed()
        rpc = getattr(self._channels.stub(address), method)
        try:
            return rpc(request, timeout=timeout)
        except grpc.RpcError as e:
            self._check_not_closed()
            raise from_rpc_error(e) from e
        except ValueError:  # grpc raises it for a call on a channel closed meanwhile
            self._check_not_closed()
            raise

    def _check_not_closed(self) -> None:
        if self._state is ClientState.CLOSED:
            raise ClientClosedError("the client is closed")

    def _broker_address(self) -> str:
        addresses = self._metadata.addresses()
        with self._state_lock:
            return addresses[self._broker_index % len(addresses)]

    def _next_broker(self, error: BaseException) -> None:
        with self._state_lock:
            self._broker_index += 1
        _log.debug("switching broker after %r", error)

    def _rpc_any(
        self, method: str, request: Any, timeout: float | None, *, idempotent: bool = False
    ) -> Any:
        """A resilient RPC for any broker: on UNAVAILABLE the next broker is
        tried; for idempotent calls, also after a missed deadline."""
        deadline = self._rpc_timeout if timeout is None else check.seconds(timeout, arg="timeout")
        retriable = (UnavailableError, DeadlineExceededError) if idempotent else (UnavailableError,)
        return _retry.call(
            self._retry_policy,
            lambda: self._invoke(self._broker_address(), method, request, deadline),
            retry_if=lambda e: isinstance(e, retriable) and self._state is ClientState.OPEN,
            before_retry=self._next_broker,
            describe=method,
        )

    def _refresh_quietly(self, error: BaseException) -> None:
        try:
            self.fetch_metadata()
        except LiftbridgeError as e:
            _log.debug("metadata refresh after %r failed: %s", error, e)

    def _leader_address(self, stream: str, partition: int) -> str:
        info = self._partition_info(stream, partition)
        broker = self._metadata.current.broker(info.leader) if info.leader else None
        if broker is None:
            raise NotLeaderError(f"partition {partition} of {stream!r} has no known leader")
        return broker.address

    def _partition_info(self, stream: str, partition: int) -> PartitionInfo:
        """The partition from the cache, else from fresh metadata.

        Brokers learn of a new stream at slightly different times, so a
        partition missing from fresh metadata is looked for again for up to
        ``_METADATA_SETTLE`` seconds before it is declared missing.

        Raises:
            NoSuchStreamError, NoSuchPartitionError: still missing after that.
        """
        info = self._metadata.current.partition(stream, partition)
        deadline = time.monotonic() + _METADATA_SETTLE
        wait = 0.02
        while info is None:
            metadata = self.fetch_metadata()
            info = metadata.partition(stream, partition)
            if info is not None:
                break
            if time.monotonic() >= deadline:
                if metadata.get_stream(stream) is None:
                    raise NoSuchStreamError(f"no such stream: {stream!r}")
                raise NoSuchPartitionError(f"stream {stream!r} has no partition {partition}")
            time.sleep(wait)
            wait = min(wait * 2, 0.2)
        return info

    def _rpc_leader(
        self, method: str, request: Any, stream: str, partition: int, timeout: float | None
    ) -> Any:
        """A resilient RPC for a partition leader: refresh metadata and retry when
        the leader is unavailable, slow past the deadline, or no longer the
        leader. Only for idempotent RPCs (partition metadata, cursors)."""
        deadline = self._rpc_timeout if timeout is None else check.seconds(timeout, arg="timeout")
        return _retry.call(
            self._retry_policy,
            lambda: self._invoke(
                self._leader_address(stream, partition), method, request, deadline
            ),
            retry_if=lambda e: (
                self._state is ClientState.OPEN
                and (
                    isinstance(e, (UnavailableError, DeadlineExceededError))
                    or (isinstance(e, NotLeaderError) and not self._is_paused(stream, partition))
                )
            ),
            before_retry=self._refresh_quietly,
            describe=f"{method} for {stream}/{partition}",
        )

    def _is_paused(self, stream: str, partition: int) -> bool:
        """Whether the cached metadata says the partition is paused. A paused
        partition has no active leader, so "not leader" will not change by retrying."""
        info = self._metadata.current.partition(stream, partition)
        return info is not None and info.paused

    # ------------------------------------- seams for the data-path threads --

    def stream_stub(self) -> tuple[str, api_pb2_grpc.APIStub]:
        """For the publisher: the broker to open the PublishAsync stream on."""
        address = self._broker_address()
        return address, self._channels.stub(address)

    def next_broker(self, error: BaseException) -> None:
        """For the publisher: move on to the next broker after a failure."""
        self._next_broker(error)
        self._refresh_quietly(error)

    def subscription_stub(
        self, stream: str, partition: int, read_isr_replica: bool
    ) -> tuple[str, api_pb2_grpc.APIStub]:
        """For subscriptions: the partition leader, or a random ISR replica."""
        self._check_open()
        if read_isr_replica:
            address = self._random_isr_address(stream, partition)
        else:
            address = self._leader_address(stream, partition)
        return address, self._channels.stub(address)

    def refresh_metadata(self) -> None:
        """For subscriptions: refresh the cache, logging rather than raising."""
        self._refresh_quietly(LiftbridgeError("refresh requested"))

    def is_paused(self, stream: str, partition: int) -> bool:
        """For subscriptions: whether the cache says the partition is paused."""
        return self._is_paused(stream, partition)

    @property
    def closed(self) -> bool:
        """True once :meth:`close` has finished. While it runs (CLOSING) the
        connections still work, so consumers can commit and leave."""
        return self._state is ClientState.CLOSED

    # ----------------------------------------------------------- operations --

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
            timeout: seconds per attempt; ``None`` for the client's ``rpc_timeout``.

        Raises:
            InvalidArgumentError: a bad name, subject or option (before any RPC,
                or from the server).
            StreamExistsError: a stream with this name exists.
            UnavailableError: no broker could be reached.
        """
        check.stream_name(name, arg="name", allow_reserved=False)
        if subject is None:
            subject = name
        check.subject(subject, wildcards=True)
        check.positive_int(partitions, arg="partitions")
        if not isinstance(max_replication, bool):
            raise ArgumentTypeError("max_replication must be a bool")
        if group is not None:
            check.stream_name(group, arg="group")
        if max_replication:
            rf = -1
        elif replication_factor is None:
            rf = 1
        elif replication_factor == -1:
            rf = -1
        else:
            rf = check.positive_int(replication_factor, arg="replication_factor")
        request = api_pb2.CreateStreamRequest(
            subject=subject,
            name=name,
            group=group or "",
            replicationFactor=rf,
            partitions=partitions,
            retentionMaxBytes=_int64(retention_max_bytes, "retention_max_bytes"),
            retentionMaxMessages=_int64(retention_max_messages, "retention_max_messages"),
            retentionMaxAge=_ms(retention_max_age, "retention_max_age"),
            cleanerInterval=_ms(cleaner_interval, "cleaner_interval"),
            segmentMaxBytes=_int64(segment_max_bytes, "segment_max_bytes"),
            segmentMaxAge=_ms(segment_max_age, "segment_max_age"),
            compactMaxGoroutines=_int32(compact_max_goroutines, "compact_max_goroutines"),
            compactEnabled=_bool(compact_enabled, "compact_enabled"),
            autoPauseTime=_ms(auto_pause_time, "auto_pause_time"),
            autoPauseDisableIfSubscribers=_bool(
                auto_pause_disable_if_subscribers, "auto_pause_disable_if_subscribers"
            ),
            minIsr=_int32(min_isr, "min_isr"),
            optimisticConcurrencyControl=_bool(
                optimistic_concurrency_control, "optimistic_concurrency_control"
            ),
            encryption=_bool(encryption, "encryption"),
        )
        self._rpc_any("CreateStream", request, timeout)

    def delete_stream(self, name: str, *, timeout: float | None = None) -> None:
        """Deletes a stream, all its partitions and their data.

        Raises:
            NoSuchStreamError: the stream does not exist.
        """
        check.stream_name(name, arg="name")
        self._rpc_any("DeleteStream", api_pb2.DeleteStreamRequest(name=name), timeout)

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
            timeout: seconds per attempt.

        Raises:
            NoSuchPartitionError: the stream or a partition does not exist
                (:class:`NoSuchStreamError` when the stream is missing).
        """
        check.stream_name(name, arg="name")
        if not isinstance(resume_all, bool):
            raise ArgumentTypeError("resume_all must be a bool")
        request = api_pb2.PauseStreamRequest(
            name=name, partitions=check.partitions(partitions), resumeAll=resume_all
        )
        self._rpc_any("PauseStream", request, timeout)

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
            timeout: seconds per attempt.

        Raises:
            NoSuchPartitionError: the stream or a partition does not exist.
        """
        check.stream_name(name, arg="name")
        if not isinstance(readonly, bool):
            raise ArgumentTypeError("readonly must be a bool")
        request = api_pb2.SetStreamReadonlyRequest(
            name=name, partitions=check.partitions(partitions), readonly=readonly
        )
        self._rpc_any("SetStreamReadonly", request, timeout)

    def fetch_metadata(self, *, timeout: float | None = None) -> Metadata:
        """Fetches the cluster's metadata from the server (never from the cache)
        and refreshes the client's cache with it.

        Returns:
            An immutable :class:`Metadata` snapshot of brokers, streams and
            partitions (leaders, replicas, ISR).
        """
        response = self._rpc_any(
            "FetchMetadata", api_pb2.FetchMetadataRequest(), timeout, idempotent=True
        )
        return self._metadata.replace(metadata_from_proto(response))

    @property
    def metadata(self) -> Metadata:
        """The cached metadata from the last refresh, without an RPC."""
        return self._metadata.current

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
        request = api_pb2.FetchPartitionMetadataRequest(stream=stream, partition=partition)
        try:
            response = self._rpc_leader(
                "FetchPartitionMetadata", request, stream, partition, timeout
            )
        except NotLeaderError:
            # A paused partition's leader refuses this RPC; the cluster
            # metadata still describes it (offsets, paused flag, timestamps).
            cluster = self._rpc_any(
                "FetchMetadata", api_pb2.FetchMetadataRequest(streams=[stream]), timeout
            )
            for s in cluster.streamMetadata:
                if (
                    s.name == stream
                    and partition in s.partitions
                    and s.partitions[partition].paused
                ):
                    return partition_metadata_from_proto(stream, s.partitions[partition])
            raise
        return partition_metadata_from_proto(stream, response.metadata)

    # ------------------------------------------------------ shared helpers --

    def _stream_metadata(self, stream: str) -> Metadata:
        """Metadata that knows the stream (see :meth:`_partition_info`).

        Raises:
            NoSuchStreamError: the stream is unknown even after refreshing.
        """
        self._partition_info(stream, 0)
        return self._metadata.current

    def _random_isr_address(self, stream: str, partition: int) -> str:
        info = self._metadata.current.partition(stream, partition)
        candidates = [
            b.address
            for b in (self._metadata.current.broker(i) for i in (info.isr if info else ()))
            if b is not None
        ]
        if not candidates:
            return self._leader_address(stream, partition)
        return random.choice(candidates)

    # ------------------------------------------------------------ publishing --

    def _publish_request(
        self,
        stream: str,
        value: BytesLike,
        key: BytesLike | None,
        headers: Mapping[str, BytesLike] | None,
        partition: int | None,
        partitioner: Partitioner | None,
        ack_policy: AckPolicy,
        expected_offset: int | None,
        correlation_id: str | None,
        timeout: float | None,
    ) -> api_pb2.PublishRequest:
        """The request for publish and publish_async, every argument checked."""
        self._check_open()
        if timeout is not None:
            check.seconds(timeout, arg="timeout")
        check.stream_name(stream)
        value = check.data(value)
        key = check.optional_bytes(key, arg="key")
        header_map = check.headers(headers)
        if not isinstance(ack_policy, AckPolicy):
            raise ArgumentTypeError(
                f"ack_policy must be an AckPolicy, got {type(ack_policy).__name__}"
            )
        if expected_offset is not None:
            check.positive_int(expected_offset, arg="expected_offset", minimum=0)
            if ack_policy is AckPolicy.NONE:
                raise InvalidArgumentError(
                    "expected_offset needs an ack (ack_policy LEADER or ALL): the server refuses "
                    "optimistic-concurrency publishes with AckPolicy.NONE"
                )
        if correlation_id is None:
            correlation_id = self._publisher.next_correlation_id()
        elif not isinstance(correlation_id, str) or not correlation_id:
            raise InvalidArgumentError("correlation_id must be a non-empty str or None")
        if partition is not None:
            check.partition(partition)
        elif partitioner is not None:
            if not isinstance(partitioner, Partitioner):
                raise ArgumentTypeError(
                    f"partitioner must implement partition(stream, key, value, metadata), "
                    f"got {type(partitioner).__name__}"
                )
            metadata = self._stream_metadata(stream)
            partition = partitioner.partition(stream, key, value, metadata)
            count = metadata.partition_count(stream)
            if (
                isinstance(partition, bool)
                or not isinstance(partition, int)
                or not 0 <= partition < count
            ):
                raise InvalidArgumentError(
                    f"{partitioner!r} chose partition {partition!r}; stream {stream!r} has {count}"
                )
        elif key:
            # A key alone places the message the way Kafka users expect, with
            # the Go client's PartitionByKey formula (so both languages agree).
            partition = _BY_KEY.partition(stream, key, value, self._stream_metadata(stream))
        else:
            partition = 0
        request = api_pb2.PublishRequest(
            stream=stream,
            partition=partition,
            value=value,
            correlationId=correlation_id,
            ackPolicy=ack_policy.value,
            expectedOffset=-1 if expected_offset is None else expected_offset,
        )
        # Set only when present: filling an empty map field is surprisingly slow.
        if key:
            request.key = key
        if header_map:
            request.headers.update(header_map)
        return request

    def publish_async(
        self,
        stream: str,
        value: BytesLike,
        ack_handler: AckHandler | None = None,
        *,
        key: BytesLike | None = None,
        headers: Mapping[str, BytesLike] | None = None,
        partition: int | None = None,
        partitioner: Partitioner | None = None,
        ack_policy: AckPolicy = AckPolicy.LEADER,
        expected_offset: int | None = None,
        correlation_id: str | None = None,
        timeout: float | None = None,
    ) -> Future[Ack | None]:
        """Publishes a message on the client's PublishAsync stream without waiting.

        The partition is ``partition`` when given, else the ``partitioner``'s
        choice, else the key's partition (:class:`PartitionByKey`, the Go
        client's formula) when there is a key, else 0. Blocks only when
        ``max_inflight`` publishes await acks, until an eighth of that window
        has freed up (or, at ``timeout``, any slot has). The SDK never re-sends a publish: on
        :class:`AckTimeoutError` or :class:`ConnectionLostError` the message
        may or may not be stored, so retry only if duplicates are acceptable
        (or use ``expected_offset``).

        Args:
            stream: the stream.
            value: the payload.
            ack_handler: ``handler(ack, error)``, called once with the outcome
                (not for AckPolicy.NONE). It runs on the ``liftbridge-acks``
                thread (``liftbridge-ack-timer`` for timeouts, the closing
                thread on close) and must not block; exceptions it raises are
                logged. It may publish: ``publish`` works there, and
                ``publish_async`` raises :class:`PublishWindowFullError` at
                once rather than wait on a full window.
            key: message key (compaction; alone, it also picks the partition).
            headers: header name to bytes.
            partition: explicit partition; wins over ``partitioner``.
            partitioner: e.g. :class:`PartitionByKey`.
            ack_policy: LEADER (default), ALL, or NONE.
            expected_offset: optimistic concurrency: the offset the message must
                get, else :class:`IncorrectOffsetError`. None: no check.
            correlation_id: id matching the ack; generated when None.
            timeout: seconds to wait for the ack; None for ``ack_wait``.

        Returns:
            A Future of the :class:`Ack` (None for AckPolicy.NONE, once sent).

        Raises:
            InvalidArgumentError, ArgumentTypeError: bad input (nothing sent).
            NoSuchStreamError: a partitioner needs metadata of a missing stream.
            PublishWindowFullError: the in-flight window stayed full.
            ClientClosedError: the client is closed.
        """
        if ack_handler is not None and not callable(ack_handler):
            raise ArgumentTypeError("ack_handler must be callable or None")
        request = self._publish_request(
            stream,
            value,
            key,
            headers,
            partition,
            partitioner,
            ack_policy,
            expected_offset,
            correlation_id,
            timeout,
        )
        return self._publisher.submit(request, ack_handler, timeout)

    def publish(
        self,
        stream: str,
        value: BytesLike,
        *,
        key: BytesLike | None = None,
        headers: Mapping[str, BytesLike] | None = None,
        partition: int | None = None,
        partitioner: Partitioner | None = None,
        ack_policy: AckPolicy = AckPolicy.LEADER,
        expected_offset: int | None = None,
        correlation_id: str | None = None,
        timeout: float | None = None,
    ) -> Ack | None:
        """Publishes a message and waits for its ack (arguments as for
        :meth:`publish_async`).

        Each thread that calls this gets a PublishAsync stream of its own and
        reads its ack itself, which saves a thread hop per publish (up to
        32 threads per client; beyond that, and for AckPolicy.NONE, publishes
        go through the client's shared stream). A stream found broken before
        sending is replaced; the message was not sent on it.

        Returns:
            The :class:`Ack`, or None for AckPolicy.NONE (once sent).

        Raises:
            AckTimeoutError: no ack within the timeout (maybe stored).
            ConnectionLostError: the stream broke after sending (maybe stored).
            NoSuchPartitionError, ReadonlyPartitionError, IncorrectOffsetError,
            MessageTooLargeError: the server refused the message.
            InvalidArgumentError, ArgumentTypeError: bad input (nothing sent).
            ClientClosedError: the client is closed.
        """
        request = self._publish_request(
            stream,
            value,
            key,
            headers,
            partition,
            partitioner,
            ack_policy,
            expected_offset,
            correlation_id,
            timeout,
        )
        if ack_policy is not AckPolicy.NONE:
            ack = self._lanes.publish(request, timeout)
            if ack is not None:
                return ack
        return self._publisher.submit(request, None, timeout).result()

    def publish_to_subject(
        self,
        subject: str,
        value: BytesLike,
        *,
        key: BytesLike | None = None,
        headers: Mapping[str, BytesLike] | None = None,
        ack_inbox: str | None = None,
        correlation_id: str | None = None,
        ack_policy: AckPolicy = AckPolicy.LEADER,
        timeout: float | None = None,
    ) -> Ack | None:
        """Publishes a message to a NATS subject: every stream attached to it
        stores it. Waits for the first ack. Not retried (it is not idempotent).

        Args:
            subject: a NATS subject without wildcards.
            value: the payload.
            key: message key.
            headers: header name to bytes (carried, unlike the Go client).
            ack_inbox: NATS subject the server also publishes the ack to.
            correlation_id: id set on the ack.
            ack_policy: LEADER (default), ALL, or NONE.
            timeout: seconds to wait for the ack; None for ``ack_wait``.

        Returns:
            The first :class:`Ack`, or None for AckPolicy.NONE.

        Raises:
            AckTimeoutError: no ack within the timeout (maybe stored).
        """
        self._check_open()
        check.subject(subject)
        if not isinstance(ack_policy, AckPolicy):
            raise ArgumentTypeError(
                f"ack_policy must be an AckPolicy, got {type(ack_policy).__name__}"
            )
        if ack_inbox is not None:
            check.subject(ack_inbox, arg="ack_inbox")
        request = api_pb2.PublishToSubjectRequest(
            subject=subject,
            key=check.optional_bytes(key, arg="key") or b"",
            value=check.data(value),
            headers=check.headers(headers),
            ackInbox=ack_inbox or "",
            correlationId=correlation_id or "",
            ackPolicy=ack_policy.value,
        )
        wait = self._ack_wait if timeout is None else check.seconds(timeout, arg="timeout")
        try:
            response = self._invoke(self._broker_address(), "PublishToSubject", request, wait)
        except DeadlineExceededError as e:
            raise AckTimeoutError(
                f"no ack for the publish to {subject!r} within {wait:g}s; "
                "the message may or may not have been stored"
            ) from e
        except UnavailableError:
            self._next_broker(LiftbridgeError("publish_to_subject failed"))
            raise
        if ack_policy is AckPolicy.NONE or not response.HasField("ack"):
            return None
        ack = ack_from_proto(response.ack)
        if ack.error is not None:
            raise ack.error
        return ack

    # ----------------------------------------------------------- subscribing --

    def subscribe(
        self,
        stream: str,
        handler: Handler | None = None,
        *,
        partition: int = 0,
        start: Start = StartPosition.NEW_ONLY,
        stop: Stop | None = None,
        read_isr_replica: bool = False,
        resume: bool = False,
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
            read_isr_replica: read from a random in-sync replica instead of the leader.
            resume: resume the partition if it is paused.

        Returns:
            The running :class:`Subscription`.

        Raises:
            NoSuchPartitionError: the stream or partition does not exist.
            PartitionPausedError: the partition is paused and ``resume`` is False.
            InvalidArgumentError: bad positions.
        """
        return self._subscribe(
            stream, handler, partition, start, stop, read_isr_replica, resume, None
        )

    def _subscribe(
        self,
        stream: str,
        handler: Handler | None,
        partition: int,
        start: Start,
        stop: Stop | None,
        read_isr_replica: bool,
        resume: bool,
        consumer: api_pb2.Consumer | None,
    ) -> Subscription:
        self._check_open()
        check.stream_name(stream)
        check.partition(partition)
        if handler is not None and not callable(handler):
            raise ArgumentTypeError("handler must be callable or None")
        for name, flag in (("read_isr_replica", read_isr_replica), ("resume", resume)):
            if not isinstance(flag, bool):
                raise ArgumentTypeError(f"{name} must be a bool")
        request = subscribe_request(stream, partition, start, stop, read_isr_replica, resume)
        if start in (StartPosition.NEW_ONLY, StartPosition.LATEST):
            # Pin "new only" / "latest" to an offset now, so that a resubscribe
            # after a failover before the first message resumes exactly there
            # instead of at the new leader's "new only", which would skip what
            # was published meanwhile.
            newest = self.fetch_partition_metadata(stream, partition).newest_offset
            offset = newest + 1 if start is StartPosition.NEW_ONLY else max(newest, 0)
            if request.stopPosition == api_pb2.STOP_OFFSET and request.stopOffset < offset:
                raise InvalidArgumentError(
                    f"stop offset {request.stopOffset} is before the start position "
                    f"(offset {offset} now)"
                )
            request.startPosition = api_pb2.OFFSET
            request.startOffset = offset
        if consumer is not None:
            request.consumer.CopyFrom(consumer)
        subscription = Subscription(
            self,
            _Request(stream, partition, request),
            handler,
            resubscribe_wait=self._resubscribe_wait,
            open_timeout=self._rpc_timeout,
        )
        with self._state_lock:
            self._check_open()
            self._subscriptions.add(subscription)
        subscription.open_first()
        return subscription

    # ---------------------------------------------------------------- cursors --

    def _cursor_partition(self, cursor_id: str, stream: str, partition: int) -> int:
        metadata = self._metadata.current
        if metadata.partition_count(CURSORS_STREAM) == 0:
            metadata = self.fetch_metadata()
        count = metadata.partition_count(CURSORS_STREAM)
        if count == 0:
            raise ServerError(
                "the server has no cursors stream; enable it with cursors.stream.partitions > 0",
                "FAILED_PRECONDITION",
            )
        return zlib.crc32(f"{cursor_id},{stream},{partition}".encode()) % count

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
        """
        check.stream_name(cursor_id, arg="cursor_id")
        check.stream_name(stream)
        check.partition(partition)
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < -1:
            raise InvalidArgumentError(f"offset must be an int >= -1, got {offset!r}")
        cursors_partition = self._cursor_partition(cursor_id, stream, partition)
        request = api_pb2.SetCursorRequest(
            stream=stream, partition=partition, cursorId=cursor_id, offset=offset
        )
        self._rpc_leader("SetCursor", request, CURSORS_STREAM, cursors_partition, timeout)

    def fetch_cursor(
        self, cursor_id: str, stream: str, partition: int, *, timeout: float | None = None
    ) -> int | None:
        """Fetches a cursor's offset: the last offset processed, so resume at
        the returned value + 1. None when no cursor is stored."""
        check.stream_name(cursor_id, arg="cursor_id")
        check.stream_name(stream)
        check.partition(partition)
        cursors_partition = self._cursor_partition(cursor_id, stream, partition)
        request = api_pb2.FetchCursorRequest(stream=stream, partition=partition, cursorId=cursor_id)
        response = self._rpc_leader(
            "FetchCursor", request, CURSORS_STREAM, cursors_partition, timeout
        )
        offset = int(response.offset)
        return None if offset < 0 else offset

    # -------------------------------------------------------- consumer groups --
    # (owned by liftbridge/_consumer.py; this method only constructs it)

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
        join_timeout: float = 60.0,
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
                the group's backlog is at least this many messages.
            low_pending: an overflow member leaves once the backlog is at most
                this (default ``min_pending // 2``).
            join_timeout: seconds ``subscribe`` keeps retrying while the server
                still lists ``consumer_id`` as a member (a restart after a
                crash); keep it above the server's ``groups.consumer.timeout``.

        Raises:
            InvalidArgumentError, ArgumentTypeError: a bad option.
            ClientClosedError: the client is closed.
        """
        self._check_open()
        consumer = Consumer(
            self,
            group_id,
            consumer_id=consumer_id,
            auto_checkpoint=auto_checkpoint,
            auto_offset=auto_offset,
            on_assigned=on_assigned,
            on_revoked=on_revoked,
            min_pending=min_pending,
            low_pending=low_pending,
            join_timeout=join_timeout,
        )
        with self._state_lock:
            self._check_open()
            self._consumers.add(consumer)
        return consumer
