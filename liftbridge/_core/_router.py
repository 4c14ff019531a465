"""The routing core: the one object that owns the cluster.

A :class:`Router` holds the per-broker channels, the metadata cache and the
broker rotation, and answers every routing question the SDK asks: any broker,
a partition's leader, a random in-sync replica, a broker by id. Every feature
(the client's operations, the publisher, subscriptions, consumer groups,
cursors) reaches the cluster through its public methods:

- :meth:`Router.call`: a unary RPC with retries, under one :class:`Deadline`
  for the whole call (attempts, backoff and metadata refreshes included);
- :meth:`Router.invoke`: one attempt on one broker;
- :meth:`Router.open_stream`: a streaming RPC on the broker a target names;
- :meth:`Router.refresh`: fresh metadata, one refresh at a time, never older
  than what the cache holds.

Deadlines: ``timeout=None`` on a public call means the retry policy's
``total_timeout``; each attempt gets at most ``rpc_timeout`` of what remains.
A refresh made while retrying spends the same deadline, in one pass over the
brokers, so a call never outlives its deadline by more than a scheduling delay.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from liftbridge._core import _retry
from liftbridge._core._liveness import BrokerWatch, DownListener
from liftbridge._core._metadata import Metadata, MetadataCache, PartitionInfo, metadata_from_proto
from liftbridge._core._retry import RetryPolicy
from liftbridge._core._targets import ANY as ANY
from liftbridge._core._targets import AnyBroker as AnyBroker
from liftbridge._core._targets import BrokerId as BrokerId
from liftbridge._core._targets import Deadline as Deadline
from liftbridge._core._targets import Leader as Leader
from liftbridge._core._targets import Replica as Replica
from liftbridge._core._targets import Target as Target
from liftbridge._errors import (
    ClientClosedError,
    DeadlineExceededError,
    LiftbridgeError,
    NoSuchPartitionError,
    NoSuchStreamError,
    NotLeaderError,
    UnavailableError,
    unreached,
)
from liftbridge._locks import drop
from liftbridge._transport._channels import DEFAULT_KEEPALIVE, Channels
from liftbridge._transport._channels import DEFAULT_MAX_MESSAGE as DEFAULT_MAX_MESSAGE
from liftbridge._transport._channels import Keepalive as Keepalive  # a Client's options: the
from liftbridge._transport._channels import TLSConfig as TLSConfig  # layers above import them here
from liftbridge._transport._stream import Stream as Stream  # what it opens
from liftbridge_api import api_pb2

_log = logging.getLogger(__name__)

METADATA_SETTLE = 1.0
"""Seconds to keep looking for a stream or partition missing from fresh metadata:
brokers learn of a new stream at slightly different times."""

_MIN_REFRESH_ATTEMPT = 0.25
"""Seconds a metadata refresh gives a broker at least (within its deadline)
before it moves on to the next."""
_LEADERS_KEPT = 4096
"""At most this many partitions' leaders are remembered (see leader_address)."""

SUSPECT_FOR = 10.0
"""Seconds a broker that refused a connection, or let an attempt run out of
time, is passed over when any broker will do (and asked last for metadata),
unless it answers meanwhile. A seed that is down must not pin the client:
without this, the rotation stays on it until some other failure moves it."""


def _default_total(policy: RetryPolicy, rpc_timeout: float) -> float:
    if policy.total_timeout is not None:
        return policy.total_timeout
    return rpc_timeout * policy.max_attempts


class Router:
    """Channels, metadata, routing and deadlines for one client. Thread-safe.

    Args:
        seeds: ``host:port`` addresses to connect through.
        tls: TLS settings, or None for plaintext.
        rpc_timeout: the longest one attempt of an RPC may take.
        retry_policy: attempts and backoff of resilient calls.
        max_receive: the largest message a broker may send, in bytes.
        keepalive: PINGs on streams the broker is silent on, or None.
    """

    def __init__(
        self,
        seeds: tuple[str, ...],
        *,
        tls: TLSConfig | None,
        rpc_timeout: float,
        retry_policy: RetryPolicy,
        max_receive: int = DEFAULT_MAX_MESSAGE,
        keepalive: Keepalive | None = DEFAULT_KEEPALIVE,
    ) -> None:
        self._channels = Channels(tls, max_receive=max_receive, keepalive=keepalive)
        self._watch = BrokerWatch(self._channels.open_probe)
        # Whether a watched broker (see leader_address) is known down: by address, and
        # any at all (a look per run of publishes, not per publish). Bound: a call the less.
        self.broker_down: Callable[[str], bool] = self._watch.is_down
        self.any_broker_down: Callable[[], bool] = self._watch.any_down
        self._cache = MetadataCache(seeds)
        self._rpc_timeout = rpc_timeout
        self._retry_policy = retry_policy
        self._default_total = _default_total(retry_policy, rpc_timeout)
        # _lock guards _broker_index, _suspects, _retrying and _closed.
        self._lock = threading.Lock()
        self._broker_index = 0
        # address -> time.monotonic() when it last failed to connect or answer in time.
        self._suspects: dict[str, float] = {}
        self._retrying = True
        self._closed = False
        # Held by the one refresh under way, others waiting (refresh()). An RLock: see _locks.
        self._refresh_lock = threading.RLock()
        self._generation = 0  # bumped by every completed refresh (under _refresh_lock)
        # (stream, partition) -> (metadata snapshot, its leader's address): leader_address
        # answers every publish, from its snapshot's answer while that is current.
        self._leaders: dict[tuple[str, int], tuple[Metadata, str | None]] = {}

    # ------------------------------------------------------------ settings --

    @property
    def rpc_timeout(self) -> float:
        """The longest one attempt of an RPC may take, in seconds."""
        return self._rpc_timeout

    @property
    def retry_policy(self) -> RetryPolicy:
        """How resilient calls are retried."""
        return self._retry_policy

    def deadline(self, timeout: float | None) -> Deadline:
        """The deadline of a call given its (already validated) ``timeout``:
        None means the retry policy's ``total_timeout``."""
        return Deadline(self._default_total if timeout is None else timeout)

    # ------------------------------------------------------------ lifecycle --

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran: every call raises ClientClosedError."""
        return self._closed

    @property
    def retrying(self) -> bool:
        """False once the owner started closing: failures are no longer retried."""
        return self._retrying

    def stop_retrying(self) -> None:
        """Calls still work, but fail at their first failure (used while closing,
        so consumers can commit and leave without waiting out retries)."""
        with self._lock:
            self._retrying = False

    def close(self) -> None:
        """Closes every channel; calls in flight end with CANCELLED. Idempotent."""
        with self._lock:
            self._retrying = False
            self._closed = True
        self._watch.close()
        self._channels.close()

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosedError("the client is closed")

    # ------------------------------------------------------------- metadata --

    @property
    def metadata(self) -> Metadata:
        """The cached metadata, without an RPC."""
        return self._cache.current

    def connect(self, timeout: float) -> Metadata:
        """Starts the broker watch, then fetches the first metadata through
        any seed, retrying every seed in turn until ``timeout`` seconds have
        passed; :meth:`close` ends what it started, whatever it raised.

        A seed that is down answers at once (connection refused); one whose
        cluster just lost a node may stall its FetchMetadata, so each attempt
        gets a share of the time and the next seed is tried.

        Raises:
            UnavailableError: no seed answered in time.
        """
        self._watch.start()
        deadline = Deadline(timeout)
        seeds = self._cache.addresses()
        per_attempt = max(0.5, timeout / (2 * len(seeds)))
        failures: dict[str, str] = {}
        rounds = 0
        while True:
            for seed in seeds:
                try:
                    attempt = deadline.attempt(per_attempt)
                except DeadlineExceededError:
                    break
                try:
                    response = self.invoke(
                        seed, "FetchMetadata", api_pb2.FetchMetadataRequest(), attempt
                    )
                except LiftbridgeError as e:
                    if isinstance(e, ClientClosedError):
                        raise
                    _log.info("seed %s did not answer: %s", seed, e)
                    failures[seed] = str(e)
                    continue
                _log.debug("connected through %s", seed)
                return self._store(metadata_from_proto(response))
            rounds += 1
            if deadline.expired:
                break
            time.sleep(min(deadline.remaining(), 0.1 * rounds))
        detail = "; ".join(f"{seed}: {why}" for seed, why in failures.items())
        raise UnavailableError(f"could not reach {', '.join(seeds)} within {timeout:g}s: {detail}")

    def _store(self, metadata: Metadata) -> Metadata:
        self._generation += 1
        return self._cache.replace(metadata)

    def refresh(self, deadline: Deadline | None = None, *, shared: bool = True) -> Metadata:
        """Fetches the whole cluster's metadata and caches it.

        One refresh runs at a time: a caller that waited for another's refresh
        takes its result instead of asking again (unless ``shared`` is False:
        then the metadata returned was asked for after the call began). Each
        broker is asked in turn (on a failure, the next one; brokers known
        down last) until one answers or the deadline passes; every broker
        but the last is given at most half of the time left.

        Raises:
            DeadlineExceededError, UnavailableError: no broker answered in time.
        """
        deadline = deadline or self.deadline(None)
        generation = self._generation
        try:
            if not self._refresh_lock.acquire(timeout=deadline.remaining()):
                raise DeadlineExceededError("timed out waiting for a metadata refresh")
        except BaseException:  # an interrupt (Ctrl-C), maybe just after the lock was taken
            drop(self._refresh_lock)
            raise
        try:
            if shared and self._generation != generation:
                return self._cache.current  # refreshed while we waited
            addresses = self._cache.addresses()
            start = self._rotation()
            order = [addresses[(start + i) % len(addresses)] for i in range(len(addresses))]
            # Brokers known down last, then those that failed lately (a stable sort).
            order.sort(key=lambda a: (self._watch.is_down(a), self.suspect(a)))
            last: LiftbridgeError | None = None
            for i, address in enumerate(order):
                cap = self._rpc_timeout
                if i < len(order) - 1:
                    # Leave the brokers after this one half of what remains:
                    # a hung broker must not take the whole deadline.
                    cap = min(cap, max(deadline.remaining() / 2, _MIN_REFRESH_ATTEMPT))
                try:
                    response = self.invoke(
                        address,
                        "FetchMetadata",
                        api_pb2.FetchMetadataRequest(),
                        deadline.attempt(cap),
                    )
                except (UnavailableError, DeadlineExceededError) as e:
                    if isinstance(e, ClientClosedError):
                        raise
                    last = e
                    self.failed(address, e)
                    continue
                self.answered(address)
                return self._store(metadata_from_proto(response))
            assert last is not None
            raise unreached(last, "FetchMetadata", dict.fromkeys(order, last)) from last.__cause__
        finally:
            self._refresh_lock.release()

    def refresh_quietly(self, deadline: Deadline | None = None) -> None:
        """:meth:`refresh`, logging a failure instead of raising it."""
        try:
            self.refresh(deadline)
        except LiftbridgeError as e:
            _log.debug("metadata refresh failed: %s", e)

    def partition_info(self, stream: str, partition: int, deadline: Deadline) -> PartitionInfo:
        """The partition from the cache, else from fresh metadata, looked for
        up to ``METADATA_SETTLE`` seconds (within the deadline).

        Raises:
            NoSuchStreamError, NoSuchPartitionError: still missing after that.
        """
        info = self._cache.current.partition(stream, partition)
        if info is not None:
            return info
        settle = min(deadline.expires, time.monotonic() + METADATA_SETTLE)
        wait = 0.02
        while True:
            metadata = self.refresh(deadline)
            info = metadata.partition(stream, partition)
            if info is not None:
                return info
            if time.monotonic() + wait >= settle:
                if metadata.get_stream(stream) is None:
                    raise NoSuchStreamError(f"no such stream: {stream!r}")
                raise NoSuchPartitionError(f"stream {stream!r} has no partition {partition}")
            time.sleep(wait)
            wait = min(wait * 2, 0.2)

    def is_paused(self, stream: str, partition: int) -> bool:
        """Whether the cached metadata says the partition is paused (a paused
        partition has no active leader: "not leader" will not change by retrying)."""
        info = self._cache.current.partition(stream, partition)
        return info is not None and info.paused

    # -------------------------------------------------------------- routing --

    def _rotation(self) -> int:
        with self._lock:
            return self._broker_index

    def next_broker(self, error: BaseException) -> None:
        """Moves the rotation to the next broker after a failure."""
        with self._lock:
            self._broker_index += 1
        _log.debug("switching broker after %r", error)

    def failed(self, address: str, error: BaseException) -> None:
        """A broker refused a connection or did not answer in time: it is
        passed over by :class:`AnyBroker` targets for ``SUSPECT_FOR`` seconds
        (unless every broker is), and the rotation moves on if it was there."""
        with self._lock:
            self._suspects[address] = time.monotonic()
            addresses = self._cache.addresses()
            if addresses[self._broker_index % len(addresses)] == address:
                self._broker_index += 1
        _log.debug("broker %s failed: %r", address, error)

    def answered(self, address: str) -> None:
        """A broker answered: it is no longer passed over."""
        if address in self._suspects:
            with self._lock:
                self._suspects.pop(address, None)

    def suspect(self, address: str) -> bool:
        """True while a broker is passed over after a failure (see :meth:`failed`)."""
        failed_at = self._suspects.get(address)
        return failed_at is not None and time.monotonic() - failed_at < SUSPECT_FOR

    def _any_address(self) -> str:
        """The rotation's broker, or the first after it neither known down
        nor suspect (the rotation's own when every broker is)."""
        addresses = self._cache.addresses()
        start = self._rotation()
        for i in range(len(addresses)):
            address = addresses[(start + i) % len(addresses)]
            if not self.suspect(address) and not self._watch.is_down(address):
                return address
        return addresses[start % len(addresses)]

    def address(self, target: Target, deadline: Deadline) -> str:
        """The address of the broker ``target`` names right now.

        Raises:
            NotLeaderError: the partition has no leader known.
            NoSuchStreamError, NoSuchPartitionError: the partition is unknown.
            UnavailableError: the broker id is not in the metadata.
        """
        if isinstance(target, AnyBroker):
            return self._any_address()
        if isinstance(target, BrokerId):
            broker = self._cache.current.broker(target.broker_id)
            if broker is None:
                broker = self.refresh(deadline).broker(target.broker_id)
            if broker is None:
                raise UnavailableError(
                    f"broker {target.broker_id!r} is not in the cluster metadata"
                )
            return broker.address
        info = self.partition_info(target.stream, target.partition, deadline)
        metadata = self._cache.current
        if isinstance(target, Replica):
            isr = [b.address for b in map(metadata.broker, info.isr) if b is not None]
            if isr:
                return random.choice(isr)
        leader = metadata.broker(info.leader) if info.leader else None
        if leader is None:
            raise NotLeaderError(
                f"partition {target.partition} of {target.stream!r} has no known leader"
            )
        return leader.address

    def leader_address(self, stream: str, partition: int) -> str | None:
        """The address of the partition's leader in the cached metadata (no
        RPC), or None when the cache names none; the broker is watched from
        then on, so :meth:`on_broker_down` listeners hear if it goes down.

        Raises:
            ClientClosedError: after :meth:`close`.
        """
        metadata = self._cache.current
        known = self._leaders.get((stream, partition))
        if known is not None and known[0] is metadata:  # asked of this snapshot before
            return known[1]
        info = metadata.partition(stream, partition)
        broker = metadata.broker(info.leader) if info is not None and info.leader else None
        address = None if broker is None else broker.address
        if address is not None:
            self._watch.watch(address)
        if len(self._leaders) >= _LEADERS_KEPT:
            self._leaders.clear()
        self._leaders[stream, partition] = (metadata, address)
        return address

    def on_broker_down(self, listener: DownListener) -> None:
        """Calls ``listener(address)`` when a broker watched (see
        :meth:`leader_address`) is found down: its connection closed and a
        new one is refused. The listener runs on liftbridge-broker-watch and must
        only hand the work on."""
        self._watch.add_listener(listener)

    def off_broker_down(self, listener: DownListener) -> None:
        """Stops calling a listener added by :meth:`on_broker_down`."""
        self._watch.remove_listener(listener)

    # ---------------------------------------------------------------- calls --

    def invoke(self, address: str, method: str, request: Any, timeout: float) -> Any:
        """One unary RPC attempt on one broker, errors mapped to the SDK's.

        Raises:
            ClientClosedError: the router is closed (also when it closed
                during the call).
            LiftbridgeError: the mapped gRPC failure.
        """
        self._check_open()
        try:
            return self._channels.invoke(address, method, request, timeout)
        except (LiftbridgeError, ValueError):  # grpc's ValueError: a channel closed meanwhile
            self._check_open()
            raise

    def call(
        self,
        method: str,
        request: Any,
        *,
        deadline: Deadline,
        target: Target = ANY,
        idempotent: bool = False,
        retry: bool = True,
        retry_if: Callable[[LiftbridgeError], bool] | None = None,
        on_retry: Callable[[BaseException], None] | None = None,
    ) -> Any:
        """A unary RPC on the broker ``target`` names, retried within ``deadline``.

        Retried (while ``retry`` and the router is not closing): UNAVAILABLE on
        any target (the next broker is tried); a missed attempt deadline for
        idempotent calls; "not leader" for partition targets, unless the
        partition is paused. Before retrying a partition target the metadata
        is refreshed within the same deadline. ``retry_if`` adds more
        retriable failures; ``on_retry`` is told of each failure retried.
        With ``retry=False``: one attempt, after whose routing failure
        (unavailable, not leader) the metadata is refreshed for the next call.

        Raises:
            DeadlineExceededError: the deadline passed (the last attempt's
                error when it was one).
            LiftbridgeError: the first failure not worth retrying, or the last.
        """
        partition_target = isinstance(target, (Leader, Replica))
        tried: list[str] = []  # the address of the last attempt
        unreachable: dict[str, BaseException] = {}  # brokers that could not be reached

        def attempt() -> Any:
            address = self.address(target, deadline)
            tried[:] = [address]
            result = self.invoke(address, method, request, deadline.attempt(self._rpc_timeout))
            self.answered(address)
            return result

        def rotate(error: BaseException) -> None:
            if tried and isinstance(error, (UnavailableError, DeadlineExceededError)):
                unreachable.update({tried[0]: error} if type(error) is UnavailableError else {})
                self.failed(tried[0], error)
            else:
                self.next_broker(error)

        def worth_retrying(error: BaseException) -> bool:
            if not isinstance(error, LiftbridgeError) or not self._retrying:
                return False
            if isinstance(error, UnavailableError) and not isinstance(error, ClientClosedError):
                return True
            if isinstance(error, DeadlineExceededError) and idempotent:
                return True
            if isinstance(error, NotLeaderError) and partition_target:
                assert isinstance(target, (Leader, Replica))
                return not self.is_paused(target.stream, target.partition)
            return retry_if is not None and retry_if(error)

        def before_retry(error: BaseException) -> None:
            if on_retry is not None:
                on_retry(error)
            rotate(error)
            if partition_target or isinstance(target, BrokerId):
                # Half of what remains at most: the retry needs the rest.
                self.refresh_quietly(Deadline(min(deadline.remaining() / 2, self._rpc_timeout)))

        if not retry:
            try:
                return attempt()
            except (UnavailableError, NotLeaderError) as e:
                if not isinstance(e, ClientClosedError):
                    rotate(e)
                    if partition_target or isinstance(target, BrokerId):
                        self.refresh_quietly(Deadline(deadline.remaining()))
                raise
        try:
            return _retry.call(
                self._retry_policy,
                attempt,
                retry_if=worth_retrying,
                before_retry=before_retry,
                describe=method,
                deadline=deadline.expires,
            )
        except (UnavailableError, DeadlineExceededError) as e:
            raise unreached(e, method, unreachable, tried[0] if tried else None) from e.__cause__

    def open_stream(
        self,
        method: str,
        request: Any,
        *,
        target: Target,
        deadline: Deadline,
        shared: bool = False,
    ) -> tuple[str, Stream[Any]]:
        """Starts a streaming RPC (Subscribe, PublishAsync) on the broker
        ``target`` names, connecting within ``deadline``. Without ``shared``
        the call has no deadline of its own: the caller owns its lifetime
        (and cancels it). ``shared`` (short reads) puts it on the broker's
        shared channel, ending at ``deadline``.

        Returns:
            The broker's address and the stream.

        A broker that cannot be reached was sent nothing: it is marked (see
        :meth:`failed`) and, for an :class:`AnyBroker` target, the next live
        broker is tried within the deadline.

        Raises:
            UnavailableError: the broker could not be reached (a call on a
                connection of its own connects here; a channel's call fails
                on its first read instead); for AnyBroker, no broker could be.
        """
        tried: set[str] = set()
        while True:
            self._check_open()
            address = self.address(target, deadline)
            try:
                stream = self._channels.open_stream(
                    address,
                    method,
                    request,
                    connect_timeout=max(0.05, deadline.remaining()),
                    shared=shared,
                    timeout=max(0.0, deadline.remaining()) if shared else None,
                )
            except UnavailableError as error:
                self.failed(address, error)
                tried.add(address)
                if (
                    not isinstance(target, AnyBroker)
                    or deadline.expired
                    or tried.issuperset(self._cache.addresses())
                ):
                    raise
                continue
            return address, stream

    def broker_failed(
        self, error: BaseException, deadline: Deadline | None = None, *, address: str | None = None
    ) -> None:
        """A stream's broker failed: rotate (passing ``address`` over for a
        while, when given), and refresh the metadata quietly."""
        if address is not None:
            self.failed(address, error)
        else:
            self.next_broker(error)
        self.refresh_quietly(deadline or Deadline(min(self._rpc_timeout, 5.0)))
