"""The Client: lifecycle, resilient RPCs, and the operations of the client guide."""

from __future__ import annotations

import enum
import logging
import random
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import grpc

from liftbridge import _retry
from liftbridge import _validate as check
from liftbridge._channels import Channels, TLSConfig
from liftbridge._errors import (
    ArgumentTypeError,
    ClientClosedError,
    InvalidArgumentError,
    LiftbridgeError,
    NoSuchPartitionError,
    NoSuchStreamError,
    NotLeaderError,
    UnavailableError,
    from_rpc_error,
)
from liftbridge._metadata import (
    Metadata,
    MetadataCache,
    PartitionMetadata,
    metadata_from_proto,
    partition_metadata_from_proto,
)
from liftbridge._retry import RetryPolicy
from liftbridge_api import api_pb2

_log = logging.getLogger(__name__)

T = TypeVar("T")

CURSORS_STREAM = "__cursors"


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
        ...     client.create_stream("orders", "orders")
    """

    def __init__(
        self,
        addresses: str | Sequence[str],
        *,
        tls: TLSConfig | None = None,
        connect_timeout: float = 5.0,
        rpc_timeout: float = 10.0,
        retry_policy: RetryPolicy | None = None,
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
        self._channels = Channels(tls)
        self._metadata = MetadataCache(seeds)
        self._state_lock = threading.Lock()  # guards _state and _broker_index
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
            raise InvalidArgumentError("addresses must be a 'host:port' str or a non-empty list of them")
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
        """Hook for the data path: stops publishers and subscriptions before channels close."""

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._state is not ClientState.OPEN:
            raise ClientClosedError("the client is closed")

    # ------------------------------------------------------- RPC machinery --

    def _invoke(self, address: str, method: str, request: Any, timeout: float) -> Any:
        """One unary RPC attempt on one broker, errors mapped to the SDK's."""
        self._check_open()
        rpc = getattr(self._channels.stub(address), method)
        try:
            return rpc(request, timeout=timeout)
        except grpc.RpcError as e:
            self._check_open()
            raise from_rpc_error(e) from e
        except ValueError as e:  # grpc raises it for a call on a channel closed meanwhile
            self._check_open()
            raise

    def _broker_address(self) -> str:
        addresses = self._metadata.addresses()
        with self._state_lock:
            return addresses[self._broker_index % len(addresses)]

    def _next_broker(self, error: BaseException) -> None:
        with self._state_lock:
            self._broker_index += 1
        _log.debug("switching broker after %r", error)

    def _rpc_any(self, method: str, request: Any, timeout: float | None) -> Any:
        """A resilient RPC for any broker: on UNAVAILABLE, the next broker is tried."""
        deadline = self._rpc_timeout if timeout is None else check.seconds(timeout, arg="timeout")
        return _retry.call(
            self._retry_policy,
            lambda: self._invoke(self._broker_address(), method, request, deadline),
            retry_if=lambda e: isinstance(e, UnavailableError) and self._state is ClientState.OPEN,
            before_retry=self._next_broker,
            describe=method,
        )

    def _refresh_quietly(self, error: BaseException) -> None:
        try:
            self.fetch_metadata()
        except LiftbridgeError as e:
            _log.debug("metadata refresh after %r failed: %s", error, e)

    def _leader_address(self, stream: str, partition: int) -> str:
        info = self._metadata.current.partition(stream, partition)
        if info is None:
            info = self.fetch_metadata().partition(stream, partition)
        if info is None:
            if self._metadata.current.get_stream(stream) is None:
                raise NoSuchStreamError(f"no such stream: {stream!r}")
            raise NoSuchPartitionError(f"stream {stream!r} has no partition {partition}")
        broker = self._metadata.current.broker(info.leader) if info.leader else None
        if broker is None:
            raise NotLeaderError(f"partition {partition} of {stream!r} has no known leader")
        return broker.address

    def _rpc_leader(
        self, method: str, request: Any, stream: str, partition: int, timeout: float | None
    ) -> Any:
        """A resilient RPC for a partition leader: refresh metadata and retry when
        the leader is unavailable or no longer the leader."""
        deadline = self._rpc_timeout if timeout is None else check.seconds(timeout, arg="timeout")
        return _retry.call(
            self._retry_policy,
            lambda: self._invoke(self._leader_address(stream, partition), method, request, deadline),
            retry_if=lambda e: self._state is ClientState.OPEN
            and (
                isinstance(e, UnavailableError)
                or (isinstance(e, NotLeaderError) and not self._is_paused(stream, partition))
            ),
            before_retry=self._refresh_quietly,
            describe=f"{method} for {stream}/{partition}",
        )

    def _is_paused(self, stream: str, partition: int) -> bool:
        """Whether the cached metadata says the partition is paused. A paused
        partition has no active leader, so "not leader" will not change by retrying."""
        info = self._metadata.current.partition(stream, partition)
        return info is not None and info.paused

    # ----------------------------------------------------------- operations --

    def create_stream(
        self,
        subject: str,
        name: str,
        *,
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

        Args:
            subject: NATS subject to attach to; ``*`` and ``>`` wildcards allowed.
            name: stream name, unique in the cluster.
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
        check.subject(subject, wildcards=True)
        check.stream_name(name, arg="name", allow_reserved=False)
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
        try:
            self._rpc_any("DeleteStream", api_pb2.DeleteStreamRequest(name=name), timeout)
        except NoSuchPartitionError as e:
            if isinstance(e, NoSuchStreamError):
                raise
            raise NoSuchStreamError(str(e)) from e

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
        response = self._rpc_any("FetchMetadata", api_pb2.FetchMetadataRequest(), timeout)
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
            response = self._rpc_leader("FetchPartitionMetadata", request, stream, partition, timeout)
        except NotLeaderError:
            # A paused partition's leader refuses this RPC; the cluster
            # metadata still describes it (offsets, paused flag, timestamps).
            cluster = self._rpc_any(
                "FetchMetadata", api_pb2.FetchMetadataRequest(streams=[stream]), timeout
            )
            for s in cluster.streamMetadata:
                if s.name == stream and partition in s.partitions and s.partitions[partition].paused:
                    return partition_metadata_from_proto(stream, s.partitions[partition])
            raise
        return partition_metadata_from_proto(stream, response.metadata)

    # ------------------------------------------------------ shared helpers --

    def _stream_metadata(self, stream: str) -> Metadata:
        """Metadata that knows the stream, refreshing the cache once if needed.

        Raises:
            NoSuchStreamError: the stream is unknown even after a refresh.
        """
        metadata = self._metadata.current
        if metadata.get_stream(stream) is None:
            metadata = self.fetch_metadata()
            if metadata.get_stream(stream) is None:
                raise NoSuchStreamError(f"no such stream: {stream!r}")
        return metadata

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
