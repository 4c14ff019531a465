"""The Client: a thin facade over the routing core.

It owns the client's lifecycle (connect, ordered close), checks every
argument, and hands each operation of the client guide to the module that
owns it: :mod:`liftbridge._core._admin` (streams, metadata), :mod:`liftbridge._consume._cursors`,
:mod:`liftbridge._publish._publisher` and :mod:`liftbridge._publish._lanes` (publishing),
:mod:`liftbridge._consume._subscription`, :mod:`liftbridge._groups._consumer` (groups). All of
them reach the cluster through one :class:`~liftbridge._core._router.Router`.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
import weakref
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Protocol, overload

from liftbridge._consume import _direct
from liftbridge._consume._cursors import Cursors
from liftbridge._consume._direct import Batch
from liftbridge._consume._pull import PullConsumer
from liftbridge._consume._pull_options import PullStart, StallCallback
from liftbridge._consume._subscription import (
    Handler,
    Start,
    StartPosition,
    Stop,
    StopPosition,
    Subscription,
    _Request,
    close_all,
    start_subscription,
    subscribe_request,
)
from liftbridge._core import _admin
from liftbridge._core import _validate as check
from liftbridge._core._admin import Admin
from liftbridge._core._callbacks import CallbackRunner
from liftbridge._core._deadlines import AckTimer
from liftbridge._core._messages import Ack, AckPolicy, Message
from liftbridge._core._metadata import Metadata, PartitionMetadata
from liftbridge._core._partitioner import Partitioner
from liftbridge._core._retry import DEFAULT_RETRY_POLICY, RetryPolicy
from liftbridge._core._router import Deadline, Router
from liftbridge._core._validate import BytesLike
from liftbridge._errors import (
    ArgumentTypeError,
    ClientClosedError,
    InvalidArgumentError,
)
from liftbridge._groups._consumer import AssignmentCallback, AutoOffset, Consumer
from liftbridge._groups._describe import GroupDescription, describe_group
from liftbridge._groups._pin import PinCallback, unpin_cursor
from liftbridge._publish._lanes import Lanes
from liftbridge._publish._publisher import AckHandler, Publisher
from liftbridge._publish._publishing import Publishing, check_future
from liftbridge._transport._channels import DEFAULT_MAX_MESSAGE, Keepalive, TLSConfig
from liftbridge_api import api_pb2

_log = logging.getLogger(__name__)

_MAX_LANES = 32
"""Threads per client whose ``publish`` calls get a PublishAsync stream of their own."""

_CLOSE_TIMEOUT = 10.0
"""Seconds ``close()`` waits in all for the SDK's threads (handlers finishing)."""


class Closeable(Protocol):
    """Something made with a client that the client closes first."""

    def close(self) -> None:
        """Closes it (bounded, idempotent)."""
        ...


@dataclass(frozen=True, slots=True)
class Core:
    """What a feature made with a client stands on: the client's router and
    its ``liftbridge-ack-timer``."""

    router: Router
    ack_timer: AckTimer


def attach(client: object, owner: Closeable) -> Core:
    """The core of ``client`` for ``owner``, a feature made with it (the NATS
    stream publisher), which the client's :meth:`~Client.close` closes before
    it stops the ack timer ``owner`` registers deadlines on.

    This is the one seam through which a feature built outside the client
    reaches the client's parts; it lives here so no other module touches the
    client's privates.

    Raises:
        ArgumentTypeError: ``client`` is not a :class:`Client`.
        ClientClosedError: the client is closing or closed.
    """
    if not isinstance(client, Client):
        raise ArgumentTypeError(f"client must be a liftbridge.Client, got {type(client).__name__}")
    with client._state_lock:
        client._check_open()
        client._attached.add(owner)
    return Core(client._router, client._timer)


class ClientState(enum.Enum):
    """Where a client is in its life."""

    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"


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
        max_message_size: int = check.SERVER_MAX_MESSAGE,
        max_receive_message_size: int = DEFAULT_MAX_MESSAGE,
        keepalive_interval: float | None = 300.0,
        keepalive_timeout: float = 20.0,
    ) -> None:
        """Connects to the cluster.

        Args:
            addresses: one ``"host:port"`` or several seed addresses; any one
                that answers is enough.
            tls: TLS settings; ``None`` for plaintext.
            connect_timeout: seconds to connect in all: every seed is tried,
                in turn and again, until one answers.
            rpc_timeout: the longest one attempt of an RPC may take. A call's
                own ``timeout`` is for the whole call, retries included;
                without one, the retry policy's ``total_timeout`` is.
            retry_policy: how resilient RPCs are retried; ``None`` for
                :data:`DEFAULT_RETRY_POLICY`.
            ack_wait: default seconds a publish waits for its ack.
            max_inflight: most publishes awaiting acks at once. A publish
                beyond it blocks until an eighth of the window has completed
                (at its timeout it takes any free slot, else raises
                :class:`PublishWindowFullError`), which bounds memory.
            resubscribe_wait: seconds a subscription keeps trying to
                re-establish itself after its broker fails.
            max_message_size: the server's limit on one message in bytes
                (default 1 MiB, its ``clustering.replication.max.bytes`` and
                NATS ``max_payload``); a publish whose serialized request plus
                1200 bytes for the server's envelope exceeds it raises
                :class:`MessageTooLargeError` before sending. At most 4 MiB
                (the server's gRPC limit); raise it only with the server's.
            max_receive_message_size: the largest message a broker may send
                the client, in bytes (default 64 MiB, grpcio's). A stream whose
                next message says it is larger ends with a typed error before
                any of it is kept, on every transport.
            keepalive_interval: seconds a long-lived stream (subscriptions,
                publish streams) may hear nothing from its broker before the
                client sends an HTTP/2 PING; ``None``: no pings. The server
                answers pings more often than every 5 minutes with GOAWAY
                unless it sends data in between (Liftbridge v1.9.0's default
                gRPC keepalive policy): lower it only for servers that allow it.
            keepalive_timeout: seconds a PING's answer may take; past that
                the stream ends with :class:`UnavailableError` (a broker that
                hangs though its kernel still answers TCP) and subscriptions
                resubscribe.

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
        connect_timeout = check.seconds(connect_timeout, arg="connect_timeout")
        self._ack_wait = check.seconds(ack_wait, arg="ack_wait")
        self._resubscribe_wait = check.seconds(resubscribe_wait, arg="resubscribe_wait")
        max_inflight = check.positive_int(max_inflight, arg="max_inflight")
        self._max_message_size = check.message_size_limit(max_message_size)
        max_receive = check.int32(
            max_receive_message_size, arg="max_receive_message_size", minimum=1 << 16
        )
        keepalive = None
        if keepalive_interval is not None:
            keepalive = Keepalive(
                interval=check.seconds(keepalive_interval, arg="keepalive_interval"),
                timeout=check.seconds(keepalive_timeout, arg="keepalive_timeout"),
            )
        self._router = Router(
            seeds,
            tls=tls,
            rpc_timeout=check.seconds(rpc_timeout, arg="rpc_timeout"),
            retry_policy=retry_policy or DEFAULT_RETRY_POLICY,
            max_receive=max_receive,
            keepalive=keepalive,
        )
        self._callbacks = CallbackRunner()
        self._timer = AckTimer()
        self._admin = Admin(self._router)
        self._cursors = Cursors(self._router)
        self._publisher = Publisher(
            self._router,
            self._callbacks,
            self._timer,
            ack_wait=self._ack_wait,
            max_inflight=max_inflight,
        )
        self._lanes = Lanes(
            self._router, self._timer, ack_wait=self._ack_wait, max_lanes=_MAX_LANES
        )
        self._publishing = Publishing(
            self._router,
            self._publisher,
            self._lanes,
            self._callbacks,
            ack_wait=self._ack_wait,
            max_message_size=self._max_message_size,
        )
        # _state_lock guards _state, _subscriptions, _consumers, _pulls and _attached; _closed is
        # set once close() has finished (a second close() waits for it).
        self._state_lock = threading.Lock()
        self._state = ClientState.OPEN
        self._closed = threading.Event()
        self._subscriptions: weakref.WeakSet[Subscription] = weakref.WeakSet()
        self._consumers: weakref.WeakSet[Consumer] = weakref.WeakSet()
        self._pulls: weakref.WeakSet[PullConsumer] = weakref.WeakSet()
        self._attached: weakref.WeakSet[Closeable] = weakref.WeakSet()  # see attach()
        try:
            self._router.connect(connect_timeout)
        except BaseException:
            self._state = ClientState.CLOSED
            self._router.close()
            self._closed.set()
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
            check.address(a)
        return tuple(dict.fromkeys(addresses))

    # ------------------------------------------------------------ lifecycle --

    @property
    def state(self) -> ClientState:
        """OPEN, CLOSING or CLOSED."""
        return self._state

    @property
    def closed(self) -> bool:
        """True once :meth:`close` has finished. While it runs (CLOSING) the
        connections still work, so consumers can commit and leave."""
        return self._state is ClientState.CLOSED

    def close(self) -> None:
        """Closes everything the client opened, in order: consumers (they
        commit and leave their groups), the :class:`NatsStreamPublisher` objects
        made with it, publishes (unacked ones fail with
        :class:`ClientClosedError`), subscriptions, then the connections.

        Every thread is told to stop first, then all are waited for together,
        10 seconds at most in all. Idempotent and safe from any thread; a
        second call waits for the first to finish. Operations called
        afterwards raise :class:`ClientClosedError`.
        """
        with self._state_lock:
            first = self._state is ClientState.OPEN
            if first:
                self._state = ClientState.CLOSING
        if not first:
            if not self._callbacks.on_callback_thread:
                self._closed.wait(_CLOSE_TIMEOUT)
            return
        deadline = time.monotonic() + _CLOSE_TIMEOUT
        try:
            self._router.stop_retrying()
            with self._state_lock:
                consumers = list(self._consumers)
                pulls = list(self._pulls)
                subscriptions = list(self._subscriptions)
                attached = list(self._attached)
            for consumer in consumers:
                consumer.close()
            for pull in pulls:
                pull.close(discard=False)  # what is buffered can still be fetched
            for owner in attached:  # NATS stream publishers: their deadlines are on _timer
                owner.close()
            self._publisher.close(deadline)
            self._lanes.close()
            self._timer.close(deadline)
            close_all(subscriptions, deadline)
            self._callbacks.close(deadline)
        finally:
            with self._state_lock:
                self._state = ClientState.CLOSED
            self._router.close()
            self._closed.set()

    def flush(self, timeout: float | None = None) -> bool:
        """Waits until every publish accepted before this call has its outcome
        (publishes other threads make meanwhile are not waited for).

        Args:
            timeout: seconds to wait at most; None to wait as long as it takes
                (each publish has its own ack timeout, so this ends).

        Returns:
            True when all of them have their outcome, False on timeout.
        """
        if timeout is not None:
            timeout = check.seconds(timeout, arg="timeout", allow_zero=True)
        return self._publisher.flush(timeout)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        brokers = ", ".join(f"{b.id}@{b.address}" for b in self._router.metadata.brokers)
        return f"<liftbridge.Client {self._state.value} brokers=[{brokers}]>"

    def _check_open(self) -> None:
        if self._state is not ClientState.OPEN:
            raise ClientClosedError("the client is closed")

    def _deadline_of(self, timeout: float | None) -> Deadline:
        self._check_open()
        if timeout is not None:
            timeout = check.seconds(timeout, arg="timeout")
        return self._router.deadline(timeout)

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

    # ------------------------------------------------------------ publishing --

    @overload
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
        ack_inbox: str | None = None,
        timeout: float | None = None,
        future: Literal[True] = True,
    ) -> Future[Ack | None]: ...

    @overload
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
        ack_inbox: str | None = None,
        timeout: float | None = None,
        future: Literal[False],
    ) -> None: ...

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
        ack_inbox: str | None = None,
        timeout: float | None = None,
        future: bool = True,
    ) -> Future[Ack | None] | None:
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
                (not for AckPolicy.NONE). It runs on the client's
                ``liftbridge-callbacks`` thread, one handler at a time, as do
                the done-callbacks of the returned Future; it should not
                block for long (later callbacks wait for it); exceptions it
                raises are logged. It may publish.
            key: message key (compaction; alone, it also picks the partition).
            headers: header name to bytes.
            partition: explicit partition; wins over ``partitioner``.
            partitioner: e.g. :class:`PartitionByKey`.
            ack_policy: LEADER (default), ALL, or NONE.
            expected_offset: optimistic concurrency: the offset the message must
                get, else :class:`IncorrectOffsetError`. None: no check.
            correlation_id: id matching the ack; generated when None.
            ack_inbox: a NATS subject (no wildcards) the server also publishes
                the ack to, as an envelope (:func:`unmarshal_ack` decodes it).
                Such a publish goes by the unary Publish RPC, one at a time
                (the server ignores ack inboxes on PublishAsync streams); for
                ``publish_async`` on a ``liftbridge-inbox-publish`` thread of
                its own.
            timeout: seconds to wait for the ack; None for ``ack_wait``.
            future: False to get no Future: the outcome then goes to
                ``ack_handler`` alone (required unless AckPolicy.NONE). A
                Future is a dozen objects for Python's garbage collector; with
                a window of publishes in flight, its collections cost about as
                much client CPU as the rest of a pipelined publish.

        Returns:
            A Future of the :class:`Ack` (None for AckPolicy.NONE, once sent);
            None with ``future=False``.

        Raises:
            InvalidArgumentError, ArgumentTypeError: bad input (nothing sent).
            MessageTooLargeError: larger than ``max_message_size`` (nothing sent).
            NoSuchStreamError: a partitioner needs metadata of a missing stream.
            PublishWindowFullError: the in-flight window stayed full.
            ClientClosedError: the client is closed.
        """
        if ack_handler is not None and not callable(ack_handler):
            raise ArgumentTypeError("ack_handler must be callable or None")
        check_future(future, ack_handler, ack_policy)
        self._check_open()
        request = self._publishing.request(
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
            ack_inbox,
        )
        return self._publishing.publish_async(request, ack_handler, timeout, future)

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
        ack_inbox: str | None = None,
        timeout: float | None = None,
    ) -> Ack | None:
        """Publishes a message and waits for its ack (arguments as for
        :meth:`publish_async`).

        Each thread that calls this gets a PublishAsync stream of its own and
        reads its ack itself, which saves a thread hop per publish (up to
        32 threads per client; beyond that, and for AckPolicy.NONE, publishes
        go through the client's shared stream). A stream found broken before
        sending is replaced; the message was not sent on it.

        Ordering: publishes from one thread through ``publish`` are stored in
        the order they were made, and so are that thread's ``publish_async``
        calls among themselves; a ``publish`` and a ``publish_async`` travel
        on different streams, so between the two kinds only an awaited
        outcome orders them (wait for the future before a ``publish`` that
        must come after it).

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
        self._check_open()
        request = self._publishing.request(
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
            ack_inbox,
        )
        return self._publishing.publish(request, timeout)

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
        return self._publishing.publish_to_subject(
            subject,
            value,
            key=key,
            headers=headers,
            ack_inbox=ack_inbox,
            correlation_id=correlation_id,
            ack_policy=ack_policy,
            timeout=timeout,
        )

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
        subscription = start_subscription(
            self._router,
            _Request(stream, partition, request),
            handler,
            resubscribe_wait=self._resubscribe_wait,
            open_timeout=self._router.rpc_timeout,
        )
        with self._state_lock:
            if self._state is ClientState.OPEN:
                self._subscriptions.add(subscription)
                return subscription
        subscription.close()
        raise ClientClosedError("the client was closed while subscribing")

    # ---------------------------------------------------------------- cursors --

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
        """
        check.identifier(cursor_id, arg="cursor_id")
        check.stream_name(stream)
        check.partition(partition)
        check.int64(offset, arg="offset", minimum=-1)
        self._cursors.set(cursor_id, stream, partition, offset, self._deadline_of(timeout))

    def fetch_cursor(
        self, cursor_id: str, stream: str, partition: int, *, timeout: float | None = None
    ) -> int | None:
        """Fetches a cursor's offset: the last offset processed, so resume at
        the returned value + 1. None when no cursor is stored."""
        check.identifier(cursor_id, arg="cursor_id")
        check.stream_name(stream)
        check.partition(partition)
        return self._cursors.fetch(cursor_id, stream, partition, self._deadline_of(timeout))

    # -------------------------------------------------------- consumer groups --
    # (owned by liftbridge/_groups/_consumer.py; this method only constructs it)

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
            pin_timeout: seconds a handler call may run before this member
                gives the pin up (logging why); None for no limit.
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

    # ------------------------------------------------ pull and direct reads --
    # (owned by liftbridge/_consume/_pull.py and liftbridge/_consume/_direct.py; thin delegations)

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
                buffer has fallen to this level (same unit as the bound;
                default half the bound; 0 means empty).
            stall_timeout: seconds without a message, while the partition's
                high watermark says there is one, before the partition is
                resubscribed from its leader; None turns the check off.
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
        with self._state_lock:
            if self._state is ClientState.OPEN:
                self._pulls.add(consumer)
                return consumer
        consumer.close()
        raise ClientClosedError("the client was closed while the pull consumer started")

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

        Raises:
            InvalidArgumentError: both limits given, or a bad value.
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
