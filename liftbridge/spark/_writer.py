"""Batch and streaming writers: Arrow record batches in, one publish per row.

Each task publishes its rows with ``publish_async`` and returns only once
every row is acked, so a task that reports success has stored all its rows
(at-least-once: a retried task publishes them again). Every row carries a
deterministic correlation id, ``<query>-<batch>-<task partition>-<row>``, so a
consumer can recognise the duplicates a retry leaves.
"""

from __future__ import annotations

import logging
import uuid
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    ByteType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
)

from liftbridge import Ack, Client, InvalidArgumentError
from liftbridge.spark._clients import client_for, router_for
from liftbridge.spark._exactly_once import (
    ExactlyOncePlan,
    plan_bounds,
    record_batch_end,
    write_exactly_once,
)
from liftbridge.spark._options import WriteOptions
from liftbridge.spark._schema import header_pairs

_log = logging.getLogger(__name__)

_ACK_GRACE = 5.0
"""Seconds past the ack timeout to wait for a future (which fails by itself at the timeout)."""

# Local properties Spark sets on a micro-batch's tasks.
_QUERY_ID = "sql.streaming.queryId"
_BATCH_ID = "streaming.sql.batchId"

_BYTES = (BinaryType, StringType)
_INTS = (ByteType, ShortType, IntegerType, LongType)


def _type_error(column: str, wanted: str, found: DataType) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"column {column} must be {wanted} to write to Liftbridge, got {found.simpleString()}"
    )


def _headers_type(headers: DataType) -> bool:
    """A map of string to bytes, or Kafka's array of key/value structs."""
    if isinstance(headers, MapType):
        return isinstance(headers.keyType, StringType) and isinstance(headers.valueType, _BYTES)
    if isinstance(headers, ArrayType) and isinstance(headers.elementType, StructType):
        fields = {f.name.lower(): f.dataType for f in headers.elementType.fields}
        return (
            set(fields) == {"key", "value"}
            and isinstance(fields["key"], StringType)
            and isinstance(fields["value"], _BYTES)
        )
    return False


def check_schema(schema: StructType, options: WriteOptions) -> None:
    """Checks the DataFrame's columns at planning time: ``value`` (binary or
    string) is required; ``key`` (binary or string), ``stream`` (string),
    ``partition`` (integer) and ``headers`` (map of string to binary or
    string) are optional; other columns are not written.

    Raises:
        InvalidArgumentError: a column is missing or has the wrong type.
    """
    columns = {field.name.lower(): field.dataType for field in schema.fields}
    if "value" not in columns:
        raise InvalidArgumentError(
            "writing to Liftbridge needs a value column (binary or string); "
            f"the DataFrame has {', '.join(schema.fieldNames()) or 'no columns'}"
        )
    for name in ("value", "key"):
        if name in columns and not isinstance(columns[name], _BYTES):
            raise _type_error(name, "binary or string", columns[name])
    if "stream" in columns and not isinstance(columns["stream"], StringType):
        raise _type_error("stream", "string", columns["stream"])
    if "partition" in columns and not isinstance(columns["partition"], _INTS):
        raise _type_error("partition", "an integer", columns["partition"])
    if "headers" in columns and not _headers_type(columns["headers"]):
        raise _type_error(
            "headers",
            "map<string,binary>, map<string,string> or array<struct<key:string,value:binary>>",
            columns["headers"],
        )
    if options.stream is None and "stream" not in columns:
        raise InvalidArgumentError(
            "writing to Liftbridge needs the stream option or a stream column"
        )


@dataclass(frozen=True)
class PartitionWrite:
    """What one task wrote to one partition.

    Attributes:
        stream: the stream.
        partition: the partition.
        rows: messages acked there.
        last_offset: the highest offset they got.
    """

    stream: str
    partition: int
    rows: int
    last_offset: int


@dataclass(frozen=True)
class LiftbridgeCommitMessage(WriterCommitMessage):
    """A task's report to the driver.

    Attributes:
        task: the Spark partition the task wrote.
        rows: rows published (all acked, unless ackPolicy is none).
        partitions: per Liftbridge partition, the acked rows and last offset
            (empty with ackPolicy none, which gets no acks).
        skipped: rows an exactly-once write found stored by an earlier attempt.
    """

    task: int
    rows: int
    partitions: tuple[PartitionWrite, ...]
    skipped: int = 0


def _bytes(value: Any) -> Any:
    return value.encode() if isinstance(value, str) else value


class _Tally:
    """Counts acked rows and the last offset per partition.

    An ack names its partition only by the subject the message was received
    on (``<subject>`` for partition 0, ``<subject>.<n>`` for n; its
    ``partition_subject`` is the stream's subject for every partition in
    server v1.9.0); the stream's subject comes from metadata.
    """

    def __init__(self, client: Client) -> None:
        self._client = client
        self.rows = 0
        self._parts: dict[tuple[str, int], list[int]] = {}
        self._subjects: dict[str, dict[str, int]] = {}  # stream -> subject -> partition

    def _partition(self, ack: Ack) -> int:
        subjects = self._subjects.get(ack.stream)
        if subjects is None or ack.message_subject not in subjects:
            info = self._client.metadata.get_stream(ack.stream)
            if info is None or len(info.partitions) <= len(subjects or ()):
                info = self._client.fetch_metadata().get_stream(ack.stream)
            subjects = {}
            if info is not None:
                for p in info.partitions:
                    subjects[info.subject if p == 0 else f"{info.subject}.{p}"] = p
            self._subjects[ack.stream] = subjects
        return subjects.get(ack.message_subject, -1)

    def add(self, ack: Ack | None) -> None:
        if ack is None:
            return
        entry = self._parts.setdefault((ack.stream, self._partition(ack)), [0, -1])
        entry[0] += 1
        entry[1] = max(entry[1], ack.offset)

    def message(self, task: int) -> LiftbridgeCommitMessage:
        parts = tuple(
            PartitionWrite(stream, partition, rows, last)
            for (stream, partition), (rows, last) in sorted(self._parts.items())
        )
        return LiftbridgeCommitMessage(task=task, rows=self.rows, partitions=parts)


def _columns(batch: pa.RecordBatch) -> dict[str, list[Any]]:
    """The batch's columns by lower-case name, as Python lists."""
    return {name.lower(): batch.column(i).to_pylist() for i, name in enumerate(batch.schema.names)}


def publish_batches(
    client: Client,
    options: WriteOptions,
    batches: Iterable[pa.RecordBatch],
    id_prefix: str,
    task: int,
) -> LiftbridgeCommitMessage:
    """Publishes every row and waits for every ack.

    Args:
        client: an open client.
        options: the write's options.
        batches: the rows.
        id_prefix: correlation ids are ``<id_prefix>-<row number>``.
        task: the Spark partition, for the commit message.

    Raises:
        InvalidArgumentError: a row has no value or no stream.
        LiftbridgeError: a publish failed (AckTimeoutError, NoSuchStreamError, ...).
    """
    tally = _Tally(client)
    pending: deque[Future[Ack | None]] = deque()
    wait = options.ack_timeout + _ACK_GRACE
    row = 0
    for batch in batches:
        columns = _columns(batch)
        count = batch.num_rows
        missing = [None] * count
        values = columns["value"]
        keys = columns.get("key", missing)
        partitions = columns.get("partition", missing)
        headers = columns.get("headers", missing)
        streams = [options.stream] * count if options.stream else columns["stream"]
        for i in range(count):
            value, stream = values[i], streams[i]
            if value is None or stream is None:
                what = "value" if value is None else "stream"
                raise InvalidArgumentError(f"row {row} of task {task} has a null {what}")
            future = client.publish_async(
                stream,
                _bytes(value),
                key=_bytes(keys[i]),
                headers=header_pairs(headers[i]),
                partition=partitions[i],
                ack_policy=options.ack_policy,
                correlation_id=f"{id_prefix}-{row}",
                timeout=options.ack_timeout,
            )
            pending.append(future)
            row += 1
            while pending and pending[0].done():
                tally.add(pending.popleft().result())
    tally.rows = row
    while pending:
        tally.add(pending.popleft().result(timeout=wait))
    return tally.message(task)


def _exactly_once(
    options: WriteOptions,
    plan: ExactlyOncePlan,
    batches: Iterable[pa.RecordBatch],
    batch: int,
    task: int,
) -> LiftbridgeCommitMessage:
    config = options.client
    rows, skipped, written = write_exactly_once(
        client_for(config), router_for(config), options, plan, batches, batch, task
    )
    assert options.stream is not None
    parts = tuple(
        PartitionWrite(options.stream, partition, published, end - 1)
        for partition, (published, end) in sorted(written.items())
    )
    return LiftbridgeCommitMessage(task=task, rows=rows, partitions=parts, skipped=skipped)


def _plan(options: WriteOptions, write_id: str) -> ExactlyOncePlan:
    assert options.stream is not None
    bounds = plan_bounds(client_for(options.client), options.stream, write_id)
    return ExactlyOncePlan(write_id, bounds)


def _task() -> tuple[int, TaskContext | None]:
    context = TaskContext.get()
    return (context.partitionId() if context is not None else 0), context


def _log_commit(messages: Iterable[WriterCommitMessage | None], what: str) -> None:
    rows = 0
    per_partition: dict[tuple[str, int], tuple[int, int]] = {}
    for message in messages:
        if not isinstance(message, LiftbridgeCommitMessage):
            continue
        rows += message.rows
        for p in message.partitions:
            count, last = per_partition.get((p.stream, p.partition), (0, -1))
            per_partition[p.stream, p.partition] = (count + p.rows, max(last, p.last_offset))
    _log.info(
        "%s: %d rows written; %s",
        what,
        rows,
        ", ".join(
            f"{s}/{p}: {count} up to offset {last}"
            for (s, p), (count, last) in sorted(per_partition.items())
        )
        or "no acks (ackPolicy none)",
    )


class LiftbridgeWriter(DataSourceArrowWriter):
    """``df.write.format("liftbridge")``: publishes each task's rows and
    returns once they are all acked."""

    def __init__(self, options: WriteOptions) -> None:
        self._options = options
        # Made on the driver and pickled to every task, so retries reuse it.
        self._write_id = options.write_id or uuid.uuid4().hex
        self._plan = _plan(options, self._write_id) if options.exactly_once else None

    def write(self, iterator: Iterator[pa.RecordBatch]) -> LiftbridgeCommitMessage:
        """Publishes one task's rows (executor)."""
        task, _ = _task()
        if self._plan is not None:
            return _exactly_once(self._options, self._plan, iterator, -1, task)
        return publish_batches(
            client_for(self._options.client),
            self._options,
            iterator,
            f"{self._write_id}-0-{task}",
            task,
        )

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Logs what the tasks wrote (driver); the rows are already stored."""
        _log_commit(messages, "liftbridge write")

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Logs the failure (driver). Rows of tasks that succeeded stay stored:
        Liftbridge cannot take messages back."""
        done = sum(1 for m in messages if m is not None)
        _log.warning("liftbridge write aborted; %d task(s) had stored their rows", done)


class LiftbridgeStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("liftbridge")``: like :class:`LiftbridgeWriter`
    per micro-batch; correlation ids use the query id and batch id."""

    def __init__(self, options: WriteOptions, write_id: str | None = None) -> None:
        self._options = options
        self._fallback_id = uuid.uuid4().hex  # when Spark names no query
        self._plan: ExactlyOncePlan | None = None
        if options.exactly_once:
            if write_id is None:
                raise InvalidArgumentError(
                    "option exactlyOnce on writeStream needs option writeId or "
                    "checkpointLocation (to recognise rows after a restart)"
                )
            self._plan = _plan(options, write_id)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> LiftbridgeCommitMessage:
        """Publishes one task's rows of a micro-batch (executor)."""
        task, context = _task()
        query = batch = None
        if context is not None:
            query = context.getLocalProperty(_QUERY_ID)
            batch = context.getLocalProperty(_BATCH_ID)
        if self._plan is not None:
            number = int(batch) if batch is not None else 0
            return _exactly_once(self._options, self._plan, iterator, number, task)
        return publish_batches(
            client_for(self._options.client),
            self._options,
            iterator,
            f"{query or self._fallback_id}-{batch or 0}-{task}",
            task,
        )

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Logs what the micro-batch wrote (driver); idempotent. With
        exactlyOnce, records where the batch's rows end, so the next batch
        reads back only from there."""
        _log_commit(messages, f"liftbridge micro-batch {batchId}")
        if self._plan is None or self._options.stream is None:
            return
        ends: dict[int, int] = {}
        for message in messages:
            if isinstance(message, LiftbridgeCommitMessage):
                for p in message.partitions:
                    ends[p.partition] = max(ends.get(p.partition, 0), p.last_offset + 1)
        record_batch_end(
            client_for(self._options.client),
            self._options.stream,
            self._plan.write_id,
            batchId,
            ends,
        )

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Logs the failure (driver); rows already acked stay stored."""
        _log.warning("liftbridge micro-batch %d aborted", batchId)
