"""Reading an exact offset range of one partition into Arrow record batches.

Every read is a Subscribe stream from a start offset to a stop offset (both
inclusive on the wire), so a retried task reads exactly the rows the failed
attempt read. A watchdog bounds every wait: a range that stops delivering
within the poll timeout fails the task instead of hanging it.

Executors read the stream themselves, through the router, and build each
Arrow column from a batch of wire messages in one go: no SDK
:class:`~liftbridge.Message` per row. One thread receives while the task's
thread builds and hands on record batches; messages pass between them in
batches (:class:`~liftbridge._consume._handoff.Handoff`), not one lock round per message.
A broker failure mid-range re-subscribes from the next offset, as
:class:`~liftbridge.Subscription` does.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from liftbridge import (
    ClientClosedError,
    ConnectionLostError,
    DeadlineExceededError,
    LiftbridgeError,
    StartPosition,
    StopPositionReachedError,
)
from liftbridge._consume._handoff import Empty, Handoff
from liftbridge._core._router import Deadline, Leader, Replica, Router, Stream
from liftbridge._errors import resubscribable
from liftbridge._locks import start_thread
from liftbridge.spark._schema import SERVER_HEADERS, arrow_schema
from liftbridge_api import api_pb2

_log = logging.getLogger(__name__)

_JOIN_TIMEOUT = 5.0
_POLL = 0.1
"""Seconds between checks while a read waits to hand over or take a message."""
_LINGER = 0.0005
"""Seconds the task's thread waits for more messages after taking all it had,
so it wakes once per batch of messages rather than once per message."""
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_RESUBSCRIBE_WAIT = 30.0
"""Seconds a read keeps re-subscribing after its broker failed (the SDK
client's default ``resubscribe_wait``)."""


class DataLossError(LiftbridgeError):
    """Offsets a read needs are gone from the partition (removed by retention),
    and ``failOnDataLoss`` is true (the default)."""


@dataclass(frozen=True)
class OffsetRange:
    """Offsets ``start`` to ``end`` (exclusive) of one partition.

    Attributes:
        stream: the stream.
        partition: the partition.
        start: first offset read.
        end: offset after the last one read.
        from_earliest: ``start`` stands for "the oldest message": offsets
            missing at the head of the range are expected, not data loss.
    """

    stream: str
    partition: int
    start: int
    end: int
    from_earliest: bool = False

    @property
    def size(self) -> int:
        """How many offsets the range covers."""
        return max(0, self.end - self.start)


@dataclass(frozen=True)
class FetchSettings:
    """How executors read (from the read's options).

    Attributes:
        include_headers: build the ``headers`` column.
        read_replica: read from a random in-sync replica.
        fail_on_data_loss: raise :class:`DataLossError` on offsets removed by retention.
        poll_timeout: seconds to wait for the next message before failing.
        rows_per_batch: rows per Arrow record batch.
        headers_array: build ``headers`` as Kafka's array of key/value structs.
    """

    include_headers: bool
    read_replica: bool
    fail_on_data_loss: bool
    poll_timeout: float
    rows_per_batch: int = 8192
    headers_array: bool = False


class Watchdog:
    """Calls ``stop`` when a read makes no progress for ``timeout`` seconds.

    Its thread (``liftbridge-spark-watchdog-<stream>-<partition>``) wakes
    every ``timeout`` and stops the read when :attr:`position` did not change
    since its last wake-up (and the read is not :attr:`paused`), so an idle
    read ends within two timeouts. Use it as a context manager around the
    reading.

    Attributes:
        position: written by the reading thread as it progresses (any value
            that changes, such as the last offset read).
        paused: set by the reading thread while the consumer holds a batch,
            so a slow consumer does not count as a stalled read.
        fired: whether the watchdog stopped the read.
    """

    def __init__(self, stop: Callable[[], object], timeout: float, name: str) -> None:
        self._stop_read = stop
        self._timeout = timeout
        self.position: object = None
        self.paused = False
        self.fired = False
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"liftbridge-spark-watchdog-{name}", daemon=True
        )

    def _run(self) -> None:
        seen: object = object()
        while not self._stop.wait(self._timeout):
            position = self.position
            if position is seen and not self.paused:
                self.fired = True
                self._stop_read()
                return
            seen = position

    def __enter__(self) -> Watchdog:
        try:
            start_thread(self._thread)
        except BaseException:  # an interrupt (Ctrl-C): no __exit__ stops it
            self._stop.set()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join(_JOIN_TIMEOUT)
        if self._thread.is_alive():
            _log.warning("%s did not stop within %.0fs", self._thread.name, _JOIN_TIMEOUT)


class Feed:
    """Subscribe streams of one partition, read on the calling thread.

    :meth:`open` starts a stream (retrying leadership moves and unavailable
    brokers for up to ``_RESUBSCRIBE_WAIT`` seconds), :meth:`close` cancels
    the open stream from any thread (the watchdog's) and every later one.
    Thread-safe.
    """

    def __init__(self, router: Router, stream: str, partition: int, *, replica: bool) -> None:
        self._router = router
        self.stream = stream
        self.partition = partition
        self._target = Replica(stream, partition) if replica else Leader(stream, partition)
        self._replica = replica
        self._lock = threading.Lock()  # guards _call and the setting of _closed
        self._call: Stream[api_pb2.Message] | None = None
        self._closed = threading.Event()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed.is_set()

    def close(self) -> None:
        """Cancels the open stream and every later one (any thread). Idempotent."""
        with self._lock:
            self._closed.set()
            call, self._call = self._call, None
        if call is not None:
            call.cancel()

    def request(self, start: int | StartPosition | datetime, stop: int) -> api_pb2.SubscribeRequest:
        """A request from ``start`` (an offset, earliest, or a time) to offset ``stop``."""
        request = api_pb2.SubscribeRequest(
            stream=self.stream,
            partition=self.partition,
            readISRReplica=self._replica,
            stopPosition=api_pb2.STOP_OFFSET,
            stopOffset=stop,
        )
        if isinstance(start, datetime):
            request.startPosition = api_pb2.TIMESTAMP
            request.startTimestamp = (start - _EPOCH) // timedelta(microseconds=1) * 1000
        elif isinstance(start, StartPosition):
            request.startPosition = api_pb2.EARLIEST  # the only position reads use
        else:
            request.startPosition = api_pb2.OFFSET
            request.startOffset = start
        return request

    def open(self, request: api_pb2.SubscribeRequest) -> Stream[api_pb2.Message]:
        """Starts a stream and takes its handshake.

        Raises:
            StopPositionReachedError: the range holds nothing (any more).
            ClientClosedError: :meth:`close` was called.
            LiftbridgeError: a failure not worth retrying, or the last one
                after ``_RESUBSCRIBE_WAIT`` seconds of retrying.
        """
        give_up = time.monotonic() + _RESUBSCRIBE_WAIT
        attempt = 0
        while True:
            try:
                return self._open_once(request)
            except LiftbridgeError as e:
                attempt += 1
                if not resubscribable(e) or time.monotonic() >= give_up:
                    raise
                _log.info(
                    "subscribing to %s/%s failed (%s); retrying", self.stream, self.partition, e
                )
                if self._closed.wait(random.uniform(0.01, min(0.5, 0.05 * 2**attempt))):
                    raise self._stopped() from e
                wait = max(0.1, min(5.0, give_up - time.monotonic()))
                self._router.broker_failed(e, Deadline(wait))

    def _stopped(self) -> ClientClosedError:
        return ClientClosedError(f"the read of {self.stream}/{self.partition} was stopped")

    def _open_once(self, request: api_pb2.SubscribeRequest) -> Stream[api_pb2.Message]:
        _, call = self._router.open_stream(
            "Subscribe", request, target=self._target, deadline=self._router.deadline(None)
        )
        try:
            with self._lock:
                if self._closed.is_set():
                    call.cancel()
                    raise self._stopped()
                self._call = call
            next(call)  # the empty handshake; errors arrive here
        except LiftbridgeError as e:
            if self._closed.is_set():
                raise self._stopped() from e
            raise
        except StopIteration:
            raise ConnectionLostError(
                "the subscription stream ended during the handshake"
            ) from None
        except BaseException:  # an interrupt (Ctrl-C): no one else would end the stream
            call.cancel()
            raise
        return call

    def failure(self, error: LiftbridgeError) -> LiftbridgeError:
        """The error a stream's failure stands for (ClientClosedError once closed)."""
        if self._closed.is_set():
            return self._stopped()
        return error


def first_offset(
    router: Router,
    stream: str,
    partition: int,
    start: StartPosition | datetime,
    last: int,
    timeout: float,
) -> int | None:
    """The offset of the first message at ``start`` (earliest or a time),
    looking no further than offset ``last``; None when there is none.

    Raises:
        DeadlineExceededError: no answer within ``timeout``.
        LiftbridgeError: the subscription failed.
    """
    feed = Feed(router, stream, partition, replica=False)
    with Watchdog(feed.close, timeout, f"{stream}-{partition}") as watchdog:
        try:
            call = feed.open(feed.request(start, last))
            try:
                for message in call:
                    return message.offset if message.offset <= last else None
            except LiftbridgeError as e:
                error = feed.failure(e)
                if error is e and not isinstance(error, StopPositionReachedError):
                    raise
                if not isinstance(error, StopPositionReachedError):
                    raise error from e
            finally:
                call.cancel()
        except StopPositionReachedError:
            pass
        except ClientClosedError as e:
            if watchdog.fired:
                raise DeadlineExceededError(
                    f"finding the first offset of {stream}/{partition} at {start} took over "
                    f"{timeout:g}s"
                ) from e
            raise
    return None


class _Batches:
    """Arrow record batches of one partition's wire messages, each column
    built from the whole batch at once."""

    def __init__(
        self, stream: str, partition: int, include_headers: bool, headers_array: bool = False
    ) -> None:
        self._schema = arrow_schema(include_headers, headers_array)
        self._headers_array = headers_array
        self._stream = pa.scalar(stream, pa.string())
        self._partition = pa.scalar(partition, pa.int32())
        self._timestamp = self._schema.field("timestamp").type
        self._headers = self._schema.field("headers").type if include_headers else None

    def batch(self, rows: Sequence[api_pb2.Message]) -> pa.RecordBatch:
        count = len(rows)
        nanos = pa.array([m.timestamp for m in rows], pa.int64())
        arrays = [
            pa.array([m.key or None for m in rows], pa.binary()),
            pa.array([m.value for m in rows], pa.binary()),
            pa.repeat(self._stream, count),
            pa.array([m.subject for m in rows], pa.string()),
            pa.repeat(self._partition, count),
            pa.array([m.offset for m in rows], pa.int64()),
            pc.divide(nanos, 1000).cast(self._timestamp),
        ]
        if self._headers is not None:
            if self._headers_array:
                headers: list[Any] = [
                    [
                        {"key": k, "value": v}
                        for k, v in m.headers.items()
                        if k not in SERVER_HEADERS
                    ]
                    for m in rows
                ]
            else:
                headers = [
                    [(k, v) for k, v in m.headers.items() if k not in SERVER_HEADERS] for m in rows
                ]
            arrays.append(pa.array(headers, self._headers))
        return pa.RecordBatch.from_arrays(arrays, schema=self._schema)


def read_range(
    router: Router, offsets: OffsetRange, settings: FetchSettings
) -> Iterator[pa.RecordBatch]:
    """Yields the messages of ``offsets`` as record batches, in offset order.

    A thread (``liftbridge-spark-read-<stream>-<partition>``) reads the
    stream and hands the messages over in batches, so gRPC keeps receiving
    while the task builds and hands on a record batch; the thread is stopped
    and joined before this generator ends, also when it is closed early.

    Offsets missing inside the range (compaction) are skipped. Offsets
    missing at its head are data loss when retention removed them.

    Raises:
        DataLossError: retention removed offsets of the range and
            ``fail_on_data_loss`` is set.
        DeadlineExceededError: no message within the poll timeout.
        LiftbridgeError: the subscription failed.
    """
    if offsets.size == 0:
        return
    stream, partition = offsets.stream, offsets.partition
    batches = _Batches(stream, partition, settings.include_headers, settings.headers_array)
    rows_per_batch = settings.rows_per_batch
    feed = Feed(router, stream, partition, replica=settings.read_replica)
    handoff: Handoff[api_pb2.Message | None] = Handoff(2 * rows_per_batch, linger=_LINGER)
    failure: list[BaseException] = []  # what ended the receiving thread, if anything
    with Watchdog(feed.close, settings.poll_timeout, f"{stream}-{partition}") as watchdog:

        def put(message: api_pb2.Message | None) -> None:
            while not handoff.put(message, _POLL):
                if feed.closed:
                    return

        def receive() -> None:
            try:
                _receive(router, feed, offsets, settings, watchdog, put)
            except BaseException as e:  # handed to the task's thread, never lost
                failure.append(e)
            finally:
                put(None)

        receiver = threading.Thread(
            target=receive, name=f"liftbridge-spark-read-{stream}-{partition}", daemon=True
        )
        receiver.start()
        try:
            rows: list[api_pb2.Message] = []
            get = handoff.get
            while True:
                try:
                    message = get(_POLL)
                except Empty:
                    if receiver.is_alive():
                        continue  # the watchdog bounds a stalled stream
                    raise LiftbridgeError(f"the read of {stream}/{partition} stopped") from None
                if message is None:
                    break
                rows.append(message)
                if len(rows) >= rows_per_batch:
                    watchdog.paused = True
                    yield batches.batch(rows)
                    watchdog.paused = False
                    rows = []
        finally:
            feed.close()
            receiver.join(_JOIN_TIMEOUT)
            if receiver.is_alive():
                _log.warning("%s did not stop within %.0fs", receiver.name, _JOIN_TIMEOUT)
    if failure:
        error = failure[0]
        if isinstance(error, ClientClosedError) and watchdog.fired:
            raise DeadlineExceededError(
                f"reading {stream}/{partition} offsets {offsets.start}-{offsets.end - 1}: no "
                f"message for {settings.poll_timeout:g}s (option pollTimeoutMs)"
            ) from error
        raise error
    if rows:
        yield batches.batch(rows)


def _receive(
    router: Router,
    feed: Feed,
    offsets: OffsetRange,
    settings: FetchSettings,
    watchdog: Watchdog,
    put: Callable[[api_pb2.Message], None],
) -> None:
    """Reads the range's messages into ``put``, re-subscribing from the next
    offset after a broker failure (thread ``liftbridge-spark-read-*``)."""
    start = following = offsets.start  # following: the next offset wanted
    last = offsets.end - 1
    while following <= last:
        try:
            call = feed.open(feed.request(following, last))
        except StopPositionReachedError:
            return  # the rest of the range was compacted away
        error: LiftbridgeError = ConnectionLostError("the server ended the subscription stream")
        try:
            for message in call:
                offset = message.offset
                # Server v1.9.0 may serve a start offset from an older
                # message; a resumed stream may repeat one: never twice.
                if offset != following:
                    if offset < following:
                        continue
                    if following == start and not offsets.from_earliest:
                        _check_head_gap(router, offsets, offset, settings)
                if offset > last:
                    return
                put(message)
                following = offset + 1
                watchdog.position = following
                if offset == last:
                    return
        except LiftbridgeError as e:
            error = feed.failure(e)
        finally:
            call.cancel()
        if isinstance(error, StopPositionReachedError):
            return
        if not resubscribable(error):
            raise error
        _log.info(
            "reading %s/%s interrupted (%s); re-subscribing from offset %d",
            offsets.stream,
            offsets.partition,
            error,
            following,
        )


def _check_head_gap(
    router: Router, offsets: OffsetRange, first: int, settings: FetchSettings
) -> None:
    """The first message is past the range's start: retention (data loss) when
    the partition's oldest message is past it too, compaction otherwise."""
    oldest = first_offset(
        router,
        offsets.stream,
        offsets.partition,
        StartPosition.EARLIEST,
        offsets.end - 1,
        settings.poll_timeout,
    )
    if oldest is not None and oldest <= offsets.start:
        return  # compacted away, the log still starts before the range
    lost = f"{offsets.start}-{min(first, offsets.end) - 1}"
    message = (
        f"offsets {lost} of {offsets.stream}/{offsets.partition} are gone (removed by "
        "retention) before they were read"
    )
    if settings.fail_on_data_loss:
        raise DataLossError(
            message + "; set option failOnDataLoss to false to read on without them"
        )
    _log.warning("%s; reading on (failOnDataLoss is false)", message)
