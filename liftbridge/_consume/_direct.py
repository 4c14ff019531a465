"""Direct reads: messages by offset, pages of a partition, and the latest
value per key, each a short Subscribe stream read on the calling thread
under the call's one deadline (no thread is started).

Liftbridge has no "get" RPC; a read here is a Subscribe with a start offset
that ends as soon as the wanted messages arrived. Three server facts shape it:

* the server ends a subscription at its stop offset only when a message with
  exactly that offset is sent, so a stop offset removed by compaction would
  never end the read. Reads stop at an offset known to exist (the newest or
  the high watermark) and are cut on the client;
* a start offset that was removed (compaction, retention) is served from the
  next offset the partition holds, which tells a removed offset apart;
* a stop offset before the start offset is refused (INVALID_ARGUMENT), which
  tells an offset beyond the newest apart without another RPC;
* a partition whose every message was removed (its log is one empty active
  segment) makes a read wait for the next publish, with no sign of why. A
  readonly partition ends that read at once ("End of readonly partition"),
  which says no message at or after the start is left. On a writable one the
  wait is undecidable on v1.9.0: every request short of reading answers alike
  for that log and for a log whose one sealed segment still starts at offset 0
  behind an empty active one (the oldest offset of an empty log is reported
  as 0, and a timestamp lookup over two segments always meets the empty
  active segment's index). Such reads end at the deadline, typed
  (:class:`OffsetUnavailableError`), or at the next publish, which the read
  then receives and reports as the next held offset.

``read_replica=True`` reads from a random in-sync replica instead of the
leader. A follower may not have every committed message yet: there is no
read-after-write guarantee.

Thread-safety: every function is safe to call from any thread.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from liftbridge._consume._positions import (
    Start,
    StartPosition,
    Stop,
    StopPosition,
    subscribe_request,
)
from liftbridge._core import _validate as check
from liftbridge._core._admin import Admin
from liftbridge._core._messages import Message, message_from_proto
from liftbridge._core._partitioner import PartitionByKey
from liftbridge._core._router import Deadline, Leader, Replica, Router
from liftbridge._errors import (
    ArgumentTypeError,
    ClientClosedError,
    ConnectionLostError,
    DeadlineExceededError,
    InvalidArgumentError,
    LiftbridgeError,
    NotLeaderError,
    OffsetNotFoundError,
    OffsetUnavailableError,
    PartitionPausedError,
    ReadonlyPartitionError,
    ServerError,
    StopPositionReached,
    UnavailableError,
    resubscribable,
)
from liftbridge_api import api_pb2

_log = logging.getLogger(__name__)

_BY_KEY = PartitionByKey()
_REFRESH_WAIT = 2.0
"""Deadline of one metadata refresh between attempts."""


@dataclass(frozen=True)
class Batch:
    """One page of a partition read by :meth:`Client.get_batch`.

    Attributes:
        messages: the messages, in offset order; offsets removed by
            compaction are simply absent.
        pending: offsets left after ``last_offset`` up to the partition's
            high watermark when the read started (an upper bound of the
            messages left on a compacted stream); 0 when the page reached it.
        last_offset: offset of the last message returned; None when the page
            is empty. Read the next page from ``last_offset + 1``.
        broker: address of the broker that served the read.
    """

    messages: tuple[Message, ...]
    pending: int
    last_offset: int | None
    broker: str | None


_NO_TIME_LEFT = DeadlineExceededError("the read did not finish within its deadline")


def _left(deadline: Deadline) -> float:
    left = deadline.remaining()
    if left <= 0:
        raise DeadlineExceededError(*_NO_TIME_LEFT.args)
    return left


@dataclass
class _Scan:
    broker: str | None = None
    stop_reached: bool = False


def _scan(
    router: Router,
    stream: str,
    partition: int,
    *,
    start: Start,
    stop: Stop,
    read_replica: bool,
    deadline: Deadline,
    take: Callable[[Message], bool],
    opened: list[str] | None = None,
) -> _Scan:
    """Reads a partition from ``start`` on the calling thread until
    ``take(message)`` returns False or the stop position is reached. The gRPC
    stream carries the call's deadline, so nothing waits past it; a broker
    failure is retried from the last offset read + 1 within it.

    Raises:
        DeadlineExceededError: the read did not end within the deadline.
        NotLeaderError: the partition has no leader within the deadline.
        PartitionPausedError: the partition is paused.

    ``opened``, when given, gets the broker of each read the server took
    (its handshake came back).
    """
    base = subscribe_request(stream, partition, start, stop, read_replica, False)
    target = Replica(stream, partition) if read_replica else Leader(stream, partition)
    # Nothing below the start offset, and no offset twice (see Subscription).
    floor = base.startOffset - 1 if base.startPosition == api_pb2.OFFSET else -1
    request = base
    broker: str | None = None
    unreachable: UnavailableError | None = None  # the last failure to reach a broker
    attempt = 0
    while True:
        try:
            _left(deadline)  # none left: no new read
            broker, call = router.open_stream(
                "Subscribe", request, target=target, deadline=deadline, shared=True
            )
            try:
                next(call)  # the empty handshake; errors arrive here
                if opened is not None:
                    opened.append(broker)  # the server took the start position
                for pb in call:
                    offset = pb.offset
                    if offset <= floor:
                        continue
                    floor = offset
                    if not take(message_from_proto(pb, offset)):
                        call.cancel()
                        return _Scan(broker, False)
                error: LiftbridgeError = ConnectionLostError("the server ended the read")
            except StopIteration:
                error = ConnectionLostError("the server ended the read during the handshake")
            except BaseException:  # an interrupt (Ctrl-C) too: the read's call ends with it
                call.cancel()  # (a no-op on a call that failed)
                raise
        except LiftbridgeError as e:
            error = e
        if type(error) is UnavailableError:
            unreachable = error
        if isinstance(error, StopPositionReached):
            return _Scan(broker, True)
        if router.closed:
            raise ClientClosedError("the client is closed") from error
        if isinstance(error, DeadlineExceededError) or deadline.expired:
            about = f"the read of {stream!r} partition {partition}"
            if unreachable is not None and isinstance(
                error, (DeadlineExceededError, UnavailableError)
            ):
                where = broker or router.leader_address(stream, partition) or "its leader"
                # The same class (a deadline stays a deadline), saying where and why.
                raise type(error)(f"{about}: could not reach {where}: {unreachable}") from error
            if isinstance(error, (DeadlineExceededError, UnavailableError, ServerError)):
                # An inner text that already says "deadline" would say it twice.
                said = error.args == _NO_TIME_LEFT.args or "deadline" in str(error)
                why = "" if said else f" ({error})"
                raise DeadlineExceededError(
                    f"{about} did not finish within its deadline{why}"
                ) from error
            raise error
        if not (resubscribable(error) or isinstance(error, ConnectionLostError)):
            raise error
        attempt += 1
        _log.debug("read of %s/%s failed (%s); retrying", stream, partition, error)
        pause = min(random.uniform(0.01, min(0.5, 0.05 * 2**attempt)), deadline.remaining())
        time.sleep(pause)  # the calling thread's own wait, bounded by the deadline
        router.refresh_quietly(Deadline(min(_REFRESH_WAIT, deadline.remaining() / 2)))
        # A paused partition has no active leader and a closed log: final.
        if isinstance(error, (NotLeaderError, PartitionPausedError)) and router.is_paused(
            stream, partition
        ):
            raise PartitionPausedError(f"partition {partition} of {stream!r} is paused") from error
        if floor >= 0 and (base.startPosition != api_pb2.OFFSET or floor >= base.startOffset):
            request = api_pb2.SubscribeRequest()
            request.CopyFrom(base)
            request.startPosition = api_pb2.OFFSET
            request.startOffset = floor + 1


def _require_leader(router: Router, stream: str, partition: int, deadline: Deadline) -> None:
    """Fails fast, within the deadline, when the partition has no leader
    (partition metadata calls would keep retrying until it)."""
    info = router.partition_info(stream, partition, deadline)
    if not info.leader:
        info = router.refresh(deadline).partition(stream, partition) or info
    if not info.leader:
        raise NotLeaderError(f"partition {partition} of {stream!r} has no leader")


def _offset(value: object, arg: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgumentTypeError(f"{arg} must be an int offset, got {type(value).__name__}")
    if value < 0:
        raise InvalidArgumentError(f"{arg} must be >= 0, got {value}")
    return value


def _flag(value: object, arg: str) -> bool:
    if not isinstance(value, bool):
        raise ArgumentTypeError(f"{arg} must be a bool, got {type(value).__name__}")
    return value


def get(
    router: Router,
    admin: Admin,
    stream: str,
    offset: int,
    *,
    partition: int = 0,
    read_replica: bool = False,
    deadline: Deadline,
) -> Message:
    """See :meth:`Client.get`."""
    check.stream_name(stream)
    check.partition(partition)
    _offset(offset, "offset")
    _flag(read_replica, "read_replica")
    _require_leader(router, stream, partition, deadline)
    found: list[Message] = []
    opened: list[str] = []

    def take(message: Message) -> bool:
        found.append(message)
        return False

    begun = time.monotonic()
    try:
        # Stop at the newest offset: it always exists, so the read ends even
        # when ``offset`` itself was compacted away.
        _scan(
            router,
            stream,
            partition,
            start=offset,
            stop=StopPosition.LATEST,
            read_replica=read_replica,
            deadline=deadline,
            take=take,
            opened=opened,
        )
    except InvalidArgumentError as e:
        if "before start offset" in str(e):
            raise OffsetNotFoundError(stream, partition, offset, "beyond the newest offset") from e
        raise
    except ReadonlyPartitionError as e:
        # The server took the start and ended the read with nothing: a
        # readonly partition holds no message at or after the offset.
        if found or not opened:
            raise
        why = "removed by retention (the readonly partition holds nothing at or after it)"
        raise OffsetNotFoundError(stream, partition, offset, why) from e
    except DeadlineExceededError as e:
        # The server took the start (so not beyond the newest) and sent nothing.
        if found or not opened:
            raise
        waited = time.monotonic() - begun
        raise OffsetUnavailableError(stream, partition, offset, None, waited) from e
    if not found:
        raise OffsetNotFoundError(stream, partition, offset, "the partition is empty")
    if found[0].offset != offset:
        raise OffsetNotFoundError(
            stream,
            partition,
            offset,
            f"removed by retention or compaction (next held offset: {found[0].offset})",
        )
    return found[0]


def get_batch(
    router: Router,
    admin: Admin,
    stream: str,
    start: int,
    *,
    partition: int = 0,
    max_messages: int | None = None,
    max_bytes: int | None = None,
    read_replica: bool = False,
    deadline: Deadline,
    default_max_messages: int = 100,
) -> Batch:
    """See :meth:`Client.get_batch`."""
    check.stream_name(stream)
    check.partition(partition)
    _offset(start, "start")
    _flag(read_replica, "read_replica")
    if max_messages is not None and max_bytes is not None:
        raise InvalidArgumentError("give max_messages or max_bytes, not both")
    if max_bytes is not None:
        byte_limit = check.positive_int(max_bytes, arg="max_bytes")
        count_limit = None
    else:
        byte_limit = None
        count_limit = (
            default_max_messages
            if max_messages is None
            else check.positive_int(max_messages, arg="max_messages")
        )
    _require_leader(router, stream, partition, deadline)
    high_watermark = admin.fetch_partition_metadata(stream, partition, deadline).high_watermark
    if start > high_watermark:
        return Batch((), 0, None, None)
    messages: list[Message] = []
    size = 0

    def take(message: Message) -> bool:
        nonlocal size
        if message.offset > high_watermark:
            return False
        if byte_limit is not None:
            weight = message_size(message)
            if messages and size + weight > byte_limit:
                return False
            size += weight
        messages.append(message)
        return message.offset < high_watermark and (
            count_limit is None or len(messages) < count_limit
        )

    begun = time.monotonic()
    opened: list[str] = []
    try:
        broker = _scan(
            router,
            stream,
            partition,
            start=start,
            stop=high_watermark,
            read_replica=read_replica,
            deadline=deadline,
            take=take,
            opened=opened,
        ).broker
        ended = False
    except ReadonlyPartitionError:
        # A readonly partition has nothing left after what arrived (retention
        # may have removed the rest): the page ends here, nothing pending.
        if not opened:
            raise
        broker, ended = opened[-1], True
    except DeadlineExceededError as e:
        if messages:
            raise
        waited = time.monotonic() - begun
        raise OffsetUnavailableError(stream, partition, start, high_watermark, waited) from e
    last = messages[-1].offset if messages else None
    pending = 0 if ended else high_watermark - (start - 1 if last is None else last)
    return Batch(tuple(messages), pending, last, broker)


def message_size(message: Message) -> int:
    """What counts against a byte limit: the value plus the key."""
    return len(message.value) + len(message.key or b"")


def _key_bytes(value: object, arg: str) -> bytes:
    if isinstance(value, str):
        return check.text(value, arg=arg).encode()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise ArgumentTypeError(f"{arg} must be bytes or str, got {type(value).__name__}")


def get_last_by_key(
    router: Router,
    admin: Admin,
    stream: str,
    *,
    keys: Iterable[bytes | str] | None = None,
    prefix: bytes | str | None = None,
    up_to_offset: int | Mapping[int, int] | None = None,
    up_to_time: datetime | None = None,
    read_replica: bool = False,
    deadline: Deadline,
) -> dict[bytes, Message]:
    """See :meth:`Client.get_last_by_key`."""
    check.stream_name(stream)
    _flag(read_replica, "read_replica")
    if keys is not None and prefix is not None:
        raise InvalidArgumentError("give keys or prefix, not both")
    wanted: frozenset[bytes] | None = None
    if keys is not None:
        if isinstance(keys, (str, bytes)):
            raise ArgumentTypeError("keys must be an iterable of keys, not one key")
        if not isinstance(keys, Iterable):
            raise ArgumentTypeError(f"keys must be an iterable of keys, got {type(keys).__name__}")
        wanted = frozenset(_key_bytes(k, "keys") for k in keys)
    prefix_bytes = None if prefix is None else _key_bytes(prefix, "prefix")
    limit_ns: int | None = None
    if up_to_time is not None:
        limit_ns = check.timestamp_ns(up_to_time, arg="up_to_time")
    router.partition_info(stream, 0, deadline)  # raises NoSuchStreamError
    metadata = router.metadata
    count = metadata.partition_count(stream)
    if wanted is not None:
        partitions = sorted({_BY_KEY.partition(stream, k, b"", metadata) for k in wanted})
    else:
        partitions = list(range(count))
    bounds = _bounds(up_to_offset, partitions)
    latest: dict[bytes, Message] = {}
    for partition in partitions:
        _require_leader(router, stream, partition, deadline)
        high_watermark = admin.fetch_partition_metadata(stream, partition, deadline).high_watermark
        last = high_watermark if bounds is None else min(high_watermark, bounds[partition])
        if last < 0:
            continue

        def take(message: Message, last: int = last) -> bool:
            if message.offset > last:
                return False
            if limit_ns is not None and message.timestamp_ns > limit_ns:
                return False
            key = message.key
            if key is not None and (
                (wanted is None or key in wanted)
                and (prefix_bytes is None or key.startswith(prefix_bytes))
            ):
                latest[key] = message
            return message.offset < last

        try:
            _scan(
                router,
                stream,
                partition,
                start=StartPosition.EARLIEST,
                stop=high_watermark,
                read_replica=read_replica,
                deadline=deadline,
                take=take,
            )
        except ReadonlyPartitionError:
            continue  # a readonly partition with nothing more (retention removed it)
    return latest


def _bounds(
    up_to_offset: int | Mapping[int, int] | None, partitions: list[int]
) -> dict[int, int] | None:
    if up_to_offset is None:
        return None
    if isinstance(up_to_offset, Mapping):
        bounds: dict[int, int] = {}
        for partition in partitions:
            if partition not in up_to_offset:
                raise InvalidArgumentError(f"up_to_offset has no offset for partition {partition}")
            bounds[partition] = _offset(up_to_offset[partition], "up_to_offset")
        return bounds
    value = _offset(up_to_offset, "up_to_offset")
    return dict.fromkeys(partitions, value)
