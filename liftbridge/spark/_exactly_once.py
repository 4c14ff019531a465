"""The exactly-once sink (option ``exactlyOnce``): a row is stored once
however often Spark retries its task, re-runs its micro-batch or re-runs the
whole write after the driver died.

Every row carries its identity in the header ``liftbridge-spark-row``:
``<write id>/<batch id>/<task>/<row index in the task>``. The write id is the
``writeId`` option, else (streaming) one derived from the checkpoint
location, so a query restarted from its checkpoint keeps it.

A task writes its rows partition by partition, in the order Spark hands them
over. Before publishing to a partition it reads the partition from a *lower
bound* to its end and skips the rows whose identity it finds there (an
earlier attempt stored them). Then it publishes the rest with
``expected_offset`` set to the offsets it expects them to get: on a stream
created with ``optimistic_concurrency_control=True`` another writer that
slips in between (such as a second attempt of the same task still running)
makes those publishes fail with :class:`~liftbridge.IncorrectOffsetError`,
and the task reads the new messages, skips what is there and goes on.

Lower bounds live in the server's cursors stream (so the server must have
one, ``cursors.stream.partitions`` > 0): the driver stores, per target
partition, the partition's end when it first plans the write
(``lbspark-<write id>``, kept across restarts); after each micro-batch it
stores the end of what the batch wrote, tagged with the next batch's id
(``lbspark-<write id>-next``), so a micro-batch reads back only what was
written since the previous one.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from liftbridge import (
    Ack,
    Client,
    DeadlineExceededError,
    IncorrectOffsetError,
    InvalidArgumentError,
    LiftbridgeError,
    Message,
    NoSuchStreamError,
    PartitionByKey,
)
from liftbridge._core._router import Router
from liftbridge._locks import Waiters
from liftbridge.spark._fetch import FetchSettings, OffsetRange, read_range
from liftbridge.spark._options import WriteOptions
from liftbridge.spark._schema import header_pairs

_log = logging.getLogger(__name__)

ROW_HEADER = "liftbridge-spark-row"
"""The header holding a row's identity: ``<write id>/<batch>/<task>/<row>``."""

_BATCH_BITS = 22
"""A micro-batch cursor holds ``(batch mod 2**22) << 40 | offset``."""
_OFFSET_BITS = 40
_OFFSET_MASK = (1 << _OFFSET_BITS) - 1
_MAX_CONFLICTS = 1000
"""Conflicting writers a task tolerates on one partition before it fails."""
_MAX_PAUSE = 0.05
"""Longest pause after a conflict (seconds): a task gives up within about a
minute of conflicts."""
_ACK_GRACE = 5.0
_WINDOW = 2000
"""Rows a task publishes before it waits for their acks: what a conflicting
writer can make it send in vain."""


def write_id_for(options: Mapping[str, str], given: str | None) -> str | None:
    """The write id: ``writeId``, else one derived from ``checkpointLocation``
    (keys lower-case), else None."""
    if given is not None:
        return given
    checkpoint = options.get("checkpointlocation")
    if checkpoint:
        return "ckpt-" + hashlib.sha256(checkpoint.encode()).hexdigest()[:24]
    return None


def _base_cursor(write_id: str) -> str:
    return f"lbspark-{write_id}"


def _batch_cursor(write_id: str) -> str:
    return f"lbspark-{write_id}-next"


def plan_bounds(client: Client, stream: str, write_id: str) -> dict[int, int]:
    """Per partition of ``stream``, the offset before which no row of the write
    can be (driver, at planning): stored on first planning, read afterwards.

    Raises:
        NoSuchStreamError: the stream does not exist.
        InvalidArgumentError: the server has no cursors stream.
    """
    info = client.fetch_metadata().get_stream(stream)
    if info is None:
        raise NoSuchStreamError(f"option stream: the cluster has no stream {stream!r}")
    cursor = _base_cursor(write_id)
    bounds: dict[int, int] = {}
    try:
        for partition in sorted(info.partitions):
            stored = client.fetch_cursor(cursor, stream, partition)
            if stored is None:
                stored = client.fetch_partition_metadata(stream, partition).high_watermark + 1
                client.set_cursor(cursor, stream, partition, stored)
            bounds[partition] = stored
    except LiftbridgeError as e:
        if isinstance(e, InvalidArgumentError):
            raise
        raise InvalidArgumentError(
            f"option exactlyOnce keeps its positions in the server's cursors stream, which "
            f"failed ({e}); is cursors.stream.partitions above 0 on the server?"
        ) from e
    return bounds


def record_batch_end(
    client: Client, stream: str, write_id: str, batch: int, ends: Mapping[int, int]
) -> None:
    """After micro-batch ``batch`` committed (driver): per partition it wrote,
    the offset its rows end before, tagged with the next batch's id."""
    tag = ((batch + 1) % (1 << _BATCH_BITS)) << _OFFSET_BITS
    for partition, end in sorted(ends.items()):
        if end <= _OFFSET_MASK:
            client.set_cursor(_batch_cursor(write_id), stream, partition, tag | end)


def _lower_bound(
    client: Client, stream: str, write_id: str, partition: int, batch: int, base: int
) -> int:
    """Where a task of ``batch`` starts looking for its rows in ``partition``."""
    if batch < 0:
        return base
    stored = client.fetch_cursor(_batch_cursor(write_id), stream, partition)
    if stored is None:
        return base
    tagged, end = stored >> _OFFSET_BITS, stored & _OFFSET_MASK
    if tagged == (batch + 1) % (1 << _BATCH_BITS):
        # The batch itself committed once already (the driver died before
        # Spark recorded it): its rows are before this end.
        return base
    return max(base, end)


@dataclass
class _Rows:
    """One partition's rows of a task, in order."""

    indices: list[int] = field(default_factory=list)
    values: list[bytes] = field(default_factory=list)
    keys: list[bytes | None] = field(default_factory=list)
    headers: list[dict[str, bytes]] = field(default_factory=list)


def _bytes(value: Any) -> Any:
    return value.encode() if isinstance(value, str) else value


def _group(
    client: Client, options: WriteOptions, batches: Iterable[pa.RecordBatch], task: int
) -> tuple[int, dict[int, _Rows]]:
    """The task's rows by target partition (the partition column, else the
    key's partition, else 0: what ``publish_async`` would pick)."""
    stream = options.stream
    assert stream is not None
    metadata = client.metadata
    if metadata.get_stream(stream) is None:
        metadata = client.fetch_metadata()
    by_key = PartitionByKey()
    parts: dict[int, _Rows] = {}
    row = 0
    for batch in batches:
        columns = {
            name.lower(): batch.column(i).to_pylist() for i, name in enumerate(batch.schema.names)
        }
        count = batch.num_rows
        missing = [None] * count
        values = columns["value"]
        keys = columns.get("key", missing)
        partitions = columns.get("partition", missing)
        headers = columns.get("headers", missing)
        for i in range(count):
            value = values[i]
            if value is None:
                raise InvalidArgumentError(f"row {row} of task {task} has a null value")
            key = _bytes(keys[i])
            partition = partitions[i]
            if partition is None:
                partition = by_key.partition(stream, key, b"", metadata) if key is not None else 0
            rows = parts.setdefault(partition, _Rows())
            rows.indices.append(row)
            rows.values.append(_bytes(value))
            rows.keys.append(key)
            rows.headers.append(header_pairs(headers[i]) or {})
            row += 1
    return row, parts


def _stored(
    router: Router, stream: str, partition: int, start: int, end: int, prefix: str, wait: float
) -> set[int]:
    """The row indices with identity ``<prefix><row>`` in offsets [start, end)."""
    found: set[int] = set()
    if end <= start:
        return found
    settings = FetchSettings(
        include_headers=True, read_replica=False, fail_on_data_loss=False, poll_timeout=wait
    )
    wanted = prefix.encode()
    offsets = OffsetRange(stream, partition, start, end, from_earliest=True)
    for batch in read_range(router, offsets, settings):
        for pairs in batch.column("headers").to_pylist():
            for name, value in pairs or ():
                if name == ROW_HEADER and value.startswith(wanted):
                    found.add(int(value[len(wanted) :]))
    return found


def _end(client: Client, stream: str, partition: int) -> int:
    return client.fetch_partition_metadata(stream, partition).high_watermark + 1


class _Tail:
    """A subscription following one partition from an offset on, kept open
    by a task that met another writer: the row indices of the task it has
    seen and the offset it has read to.

    After a conflict the task measures the partition's end and waits until
    the subscription has delivered everything before it (usually at once: it
    follows live), then publishes right away. Reading back through a new
    subscription each time took long enough that a writer that never pauses
    always got in between, and the task met it on every try.
    Thread-safe: the subscription's thread adds, the task's thread reads.
    """

    def __init__(self, client: Client, stream: str, partition: int, start: int, prefix: str):
        self._wanted = prefix.encode()
        self._lock = threading.Lock()  # guards _found, _end, _error
        # Not a Condition: its wait, interrupted (Ctrl-C on a local-mode task's
        # thread), can raise with the lock let go of, and the with then fails.
        self._changed = Waiters(self._lock)
        self._found: set[int] = set()
        self._end = start
        self._error: BaseException | None = None
        self._subscription = client.subscribe(
            stream, self._on_message, partition=partition, start=start
        )

    def _on_message(self, message: Message | None, error: BaseException | None) -> None:
        # The subscription's thread; never blocks beyond the lock.
        with self._lock:
            if message is None:
                self._error = error
            else:
                value = message.headers.get(ROW_HEADER)
                if value is not None and value.startswith(self._wanted):
                    self._found.add(int(value[len(self._wanted) :]))
                self._end = message.offset + 1
            self._changed.notify_all()

    def read_to(self, end: int, timeout: float) -> set[int]:
        """The row indices seen before ``end``, once read to there.

        Raises:
            DeadlineExceededError: not read to ``end`` within ``timeout``.
            LiftbridgeError: the subscription failed.
        """
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._end < end and self._error is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._changed.wait(left)
            ready = self._end >= end
            if self._error is not None:
                raise LiftbridgeError(f"exactly-once read-back failed: {self._error}")
            if not ready:
                raise DeadlineExceededError(
                    f"exactly-once read-back reached offset {self._end}, not {end}, "
                    f"within {timeout:g}s"
                )
            return set(self._found)

    def close(self) -> None:
        self._subscription.close()


def _write_partition(
    client: Client,
    router: Router,
    options: WriteOptions,
    partition: int,
    rows: _Rows,
    bound: int,
    identity: str,
) -> tuple[int, int, int]:
    """Stores the rows of one partition that are not there yet.

    Returns:
        (rows published, rows found already stored, the partition's end after them).
    """
    stream = options.stream
    assert stream is not None
    wait = options.ack_timeout + _ACK_GRACE
    prefix = identity + "/"
    tail = _end(client, stream, partition)
    done = _stored(router, stream, partition, bound, tail, prefix, wait)
    skipped = len(done.intersection(rows.indices))
    published = 0
    conflicts = 0
    follower: _Tail | None = None  # opened at the first conflict
    try:
        while True:
            todo = [i for i, row in enumerate(rows.indices) if row not in done][:_WINDOW]
            if not todo:
                return published, skipped, tail
            pending: list[tuple[int, Future[Ack | None]]] = []
            for n, i in enumerate(todo):
                row = rows.indices[i]
                headers = dict(rows.headers[i])
                headers[ROW_HEADER] = f"{prefix}{row}".encode()
                future = client.publish_async(
                    stream,
                    rows.values[i],
                    key=rows.keys[i],
                    headers=headers,
                    partition=partition,
                    ack_policy=options.ack_policy,
                    expected_offset=tail + n,
                    timeout=options.ack_timeout,
                )
                pending.append((row, future))
            conflicted = False
            last = tail - 1
            for row, future in pending:
                try:
                    ack = future.result(timeout=wait)
                except IncorrectOffsetError:
                    conflicted = True
                    continue
                done.add(row)
                published += 1
                if ack is not None:
                    last = max(last, ack.offset)
            if not conflicted:
                tail = max(last + 1, tail)
                continue
            # Another writer got in between: read what it stored, then go on.
            conflicts += 1
            if conflicts > _MAX_CONFLICTS:
                break
            _log.info(
                "exactly-once write to %s/%d met another writer at offset %d",
                stream,
                partition,
                tail,
            )
            time.sleep(min(_MAX_PAUSE, 0.001 * conflicts))
            if follower is None:
                follower = _Tail(client, stream, partition, tail, prefix)
            # Measured last, right before the next publishes expect it.
            tail = _end(client, stream, partition)
            done.update(follower.read_to(tail, wait))
    finally:
        if follower is not None:
            follower.close()
    raise IncorrectOffsetError(
        f"exactly-once write to {stream}/{partition}: other writers kept taking the "
        f"expected offsets ({_MAX_CONFLICTS} times)"
    )


@dataclass(frozen=True)
class ExactlyOncePlan:
    """What a task needs beyond the options (made on the driver, pickled).

    Attributes:
        write_id: the write's identity.
        bounds: per target partition, the offset before which none of the
            write's rows can be.
    """

    write_id: str
    bounds: Mapping[int, int]


def write_exactly_once(
    client: Client,
    router: Router,
    options: WriteOptions,
    plan: ExactlyOncePlan,
    batches: Iterable[pa.RecordBatch],
    batch: int,
    task: int,
) -> tuple[int, int, dict[int, tuple[int, int]]]:
    """Stores one task's rows exactly once.

    Args:
        batch: the micro-batch id; -1 for a batch write.

    Returns:
        (rows, rows skipped as already stored, per partition
        (rows published, end offset after the task's rows)).

    Raises:
        InvalidArgumentError: a row has no value.
        LiftbridgeError: a publish or a read failed.
    """
    stream = options.stream
    assert stream is not None
    total, parts = _group(client, options, batches, task)
    identity = f"{plan.write_id}/{max(batch, 0)}/{task}"
    skipped = 0
    written: dict[int, tuple[int, int]] = {}
    order = sorted(parts)
    # Tasks start at different partitions, so they meet less often on one.
    turn = task % len(order) if order else 0
    for partition in order[turn:] + order[:turn]:
        base = plan.bounds.get(partition, 0)
        bound = _lower_bound(client, stream, plan.write_id, partition, batch, base)
        published, found, end = _write_partition(
            client, router, options, partition, parts[partition], bound, identity
        )
        skipped += found
        written[partition] = (published, end)
    if skipped:
        _log.info("exactly-once task %s: %d of %d rows stored before", identity, skipped, total)
    return total, skipped, written
