"""Reading an exact offset range of one partition into Arrow record batches.

Every read is a subscription from a start offset to a stop offset (both
inclusive on the wire), so a retried task reads exactly the rows the failed
attempt read. A watchdog bounds every wait: a range that stops delivering
within the poll timeout fails the task instead of hanging it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType

import pyarrow as pa

from liftbridge import (
    Client,
    DeadlineExceededError,
    LiftbridgeError,
    StartPosition,
    Subscription,
)
from liftbridge.spark._schema import SERVER_HEADERS, arrow_schema

_log = logging.getLogger(__name__)

_JOIN_TIMEOUT = 5.0


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
    """

    include_headers: bool
    read_replica: bool
    fail_on_data_loss: bool
    poll_timeout: float
    rows_per_batch: int = 4096


class Watchdog:
    """Closes a subscription that delivers nothing for ``timeout`` seconds.

    Its thread (``liftbridge-spark-watchdog-<stream>-<partition>``) wakes
    every ``timeout`` and closes the subscription when :meth:`tick` was not
    called since its last wake-up, so an idle read ends within two timeouts.
    Use it as a context manager around the iteration.
    """

    def __init__(self, subscription: Subscription, timeout: float) -> None:
        self._subscription = subscription
        self._timeout = timeout
        self._ticks = 0  # written by the reading thread only
        self._stop = threading.Event()
        self.fired = False
        self._thread = threading.Thread(
            target=self._run,
            name=f"liftbridge-spark-watchdog-{subscription.stream}-{subscription.partition}",
            daemon=True,
        )

    def tick(self) -> None:
        """Records progress (called by the reading thread)."""
        self._ticks += 1

    def _run(self) -> None:
        seen = -1
        while not self._stop.wait(self._timeout):
            ticks = self._ticks
            if ticks == seen:
                self.fired = True
                self._subscription.close()
                return
            seen = ticks

    def __enter__(self) -> Watchdog:
        self._thread.start()
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


def first_offset(
    client: Client,
    stream: str,
    partition: int,
    start: StartPosition | datetime,
    last: int,
    timeout: float,
) -> int | None:
    """The offset of the first message at ``start`` (a position or a time),
    looking no further than offset ``last``; None when there is none.

    Raises:
        DeadlineExceededError: no answer within ``timeout``.
    """
    subscription = client.subscribe(stream, partition=partition, start=start, stop=last)
    with subscription, Watchdog(subscription, timeout) as watchdog:
        for message in subscription:
            return message.offset if message.offset <= last else None
    if watchdog.fired:
        raise DeadlineExceededError(
            f"finding the first offset of {stream}/{partition} at {start} took over {timeout:g}s"
        )
    return None


class _Columns:
    """Column lists of the record batch being built."""

    def __init__(self, stream: str, partition: int, include_headers: bool) -> None:
        self._stream = stream
        self._partition = partition
        self._schema = arrow_schema(include_headers)
        self._include_headers = include_headers
        self.reset()

    def reset(self) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes] = []
        self.subjects: list[str] = []
        self.offsets: list[int] = []
        self.timestamps: list[int] = []
        self.headers: list[list[tuple[str, bytes]]] = []

    def batch(self) -> pa.RecordBatch:
        rows = len(self.offsets)
        arrays = [
            pa.array(self.keys, pa.binary()),
            pa.array(self.values, pa.binary()),
            pa.array([self._stream] * rows, pa.string()),
            pa.array(self.subjects, pa.string()),
            pa.array([self._partition] * rows, pa.int32()),
            pa.array(self.offsets, pa.int64()),
            pa.array(self.timestamps, pa.timestamp("us", tz="UTC")),
        ]
        if self._include_headers:
            arrays.append(pa.array(self.headers, self._schema.field("headers").type))
        self.reset()
        return pa.RecordBatch.from_arrays(arrays, schema=self._schema)


def read_range(
    client: Client, offsets: OffsetRange, settings: FetchSettings
) -> Iterator[pa.RecordBatch]:
    """Yields the messages of ``offsets`` as record batches, in offset order.

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
    stream, partition, last = offsets.stream, offsets.partition, offsets.end - 1
    columns = _Columns(stream, partition, settings.include_headers)
    rows_per_batch = settings.rows_per_batch
    include_headers = settings.include_headers
    done = False
    subscription = client.subscribe(
        stream,
        partition=partition,
        start=offsets.start,
        stop=last,
        read_isr_replica=settings.read_replica,
    )
    with subscription, Watchdog(subscription, settings.poll_timeout) as watchdog:
        first = True
        for message in subscription:
            watchdog.tick()
            offset = message.offset
            if first:
                first = False
                if offset != offsets.start and not offsets.from_earliest:
                    _check_head_gap(client, offsets, offset, settings)
            if offset > last:
                done = True
                break
            columns.keys.append(message.key)
            columns.values.append(message.value)
            columns.subjects.append(message.subject)
            columns.offsets.append(offset)
            columns.timestamps.append(message.timestamp_ns // 1000)
            if include_headers:
                columns.headers.append(
                    [(k, v) for k, v in message.headers.items() if k not in SERVER_HEADERS]
                )
            if len(columns.offsets) >= rows_per_batch:
                yield columns.batch()
            if offset == last:
                done = True
                break
    if not done:
        if watchdog.fired:
            raise DeadlineExceededError(
                f"reading {stream}/{partition} offsets {offsets.start}-{last}: no message for "
                f"{settings.poll_timeout:g}s (option pollTimeoutMs)"
            )
        raise LiftbridgeError(
            f"the subscription to {stream}/{partition} ended before offset {last} "
            f"({subscription.error or 'no error given'})"
        )
    if columns.offsets:
        yield columns.batch()


def _check_head_gap(
    client: Client, offsets: OffsetRange, first: int, settings: FetchSettings
) -> None:
    """The first message is past the range's start: retention (data loss) when
    the partition's oldest message is past it too, compaction otherwise."""
    oldest = first_offset(
        client,
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
