"""Batch and streaming readers.

Planning (``partitions``, ``initialOffset``, ``latestOffset``) runs in a
Python process on the driver and turns every position into concrete offsets;
``read`` runs on executors, on a pickled copy of the reader that shares no
state with the driver's, so everything a read needs travels in its
:class:`RangePartition`. Readers hold options, never a client.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from liftbridge import Client
from liftbridge.spark._clients import client_for, router_for
from liftbridge.spark._fetch import FetchSettings, OffsetRange, read_range
from liftbridge.spark._offsets import (
    Offsets,
    admit,
    available_offsets,
    batch_ranges,
    canonical,
    initial_offsets,
    positions,
    split,
    stream_ranges,
)
from liftbridge.spark._options import ReadOptions

_log = logging.getLogger(__name__)


class RangePartition(InputPartition):
    """One Spark partition: an offset range of one Liftbridge partition."""

    def __init__(self, offsets: OffsetRange) -> None:
        super().__init__(offsets)
        self.offsets = offsets

    def __repr__(self) -> str:
        r = self.offsets
        return f"RangePartition({r.stream}/{r.partition} [{r.start}, {r.end}))"


def _settings(options: ReadOptions, rows_per_batch: int) -> FetchSettings:
    return FetchSettings(
        include_headers=options.include_headers,
        headers_array=options.headers_array,
        read_replica=options.read_replica,
        fail_on_data_loss=options.fail_on_data_loss,
        poll_timeout=options.poll_timeout,
        rows_per_batch=rows_per_batch,
    )


class LiftbridgeReader(DataSourceReader):
    """``spark.read.format("liftbridge")``: each partition's range resolved on
    the driver, each range read on an executor."""

    rows_per_batch = 8192
    """Rows per Arrow record batch a read yields."""

    def __init__(self, options: ReadOptions) -> None:
        self._options = options

    def partitions(self) -> Sequence[InputPartition]:
        """Resolves the ranges (driver). Raises the planning errors of
        :func:`batch_ranges`."""
        config = self._options.client
        ranges = batch_ranges(client_for(config), router_for(config), self._options)
        return [RangePartition(r) for r in split(ranges, self._options.min_partitions)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Reads one range (executor)."""
        if not isinstance(partition, RangePartition):
            return  # Spark reads one empty partition when partitions() has none
        settings = _settings(self._options, self.rows_per_batch)
        yield from read_range(router_for(self._options.client), partition.offsets, settings)


class LiftbridgeStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("liftbridge")``.

    Offsets are ``{stream: {partition: next_offset}}``. Each micro-batch ends
    at the partitions' high watermarks, cut down by ``maxOffsetsPerTrigger``
    (shared by backlog) and held back while fewer than
    ``minOffsetsPerTrigger`` are new, until ``maxTriggerDelay`` has passed.
    With ``trigger(availableNow=True)`` it stops at the watermarks seen when
    the query started.
    """

    rows_per_batch = 8192
    """Rows per Arrow record batch a read yields."""

    def __init__(self, options: ReadOptions) -> None:
        self._options = options
        # Driver-side state, never seen by executors:
        self._target: dict[tuple[str, int], int] | None = None  # availableNow's end
        self._latest: Offsets | None = None  # what reportLatestOffset tells
        self._last_batch = time.monotonic()  # when a micro-batch last got new offsets

    def _client(self) -> Client:
        return client_for(self._options.client)

    def initialOffset(self) -> dict[str, dict[str, int]]:
        """Where a new query starts (driver)."""
        config = self._options.client
        return initial_offsets(client_for(config), router_for(config), self._options)

    def getDefaultReadLimit(self) -> ReadLimit:
        """``ReadMaxRows(maxOffsetsPerTrigger)`` when set, else everything."""
        if self._options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self._options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Fixes the end of an availableNow run at today's high watermarks (driver)."""
        self._target = available_offsets(self._client(), self._options)

    def latestOffset(
        self, start: dict[str, dict[str, int]], limit: ReadLimit
    ) -> dict[str, dict[str, int]]:
        """The end of the next micro-batch; ``start`` itself when there is
        nothing to admit (driver)."""
        begin = positions(start)
        available = available_offsets(self._client(), self._options)
        self._latest = canonical(available)
        if self._target is not None:
            available = {
                p: min(end, self._target[p]) for p, end in available.items() if p in self._target
            }
        for p, offset in begin.items():
            # A partition read before keeps its position (never move back).
            available[p] = max(available.get(p, offset), offset)
        new = sum(end - begin.get(p, 0) for p, end in available.items())
        if isinstance(limit, ReadMaxRows):
            available = admit(begin, available, limit.max_rows)
            new = min(new, limit.max_rows)
        minimum = self._options.min_offsets_per_trigger
        if isinstance(limit, ReadMinRows):
            minimum = limit.min_rows
        if self._target is None and minimum is not None and 0 < new < minimum:
            waited = time.monotonic() - self._last_batch
            if waited < self._options.max_trigger_delay:
                _log.debug("%d new offsets, fewer than %d: holding the batch back", new, minimum)
                return canonical(begin)
        if new > 0:
            self._last_batch = time.monotonic()
        return canonical(available)

    def reportLatestOffset(self) -> dict[str, dict[str, int]] | None:
        """The high watermarks seen by the last ``latestOffset``."""
        return self._latest

    def partitions(
        self, start: dict[str, dict[str, int]], end: dict[str, dict[str, int]]
    ) -> Sequence[InputPartition]:
        """The ranges between two positions (driver); none when they are equal."""
        ranges = split(stream_ranges(start, end), self._options.min_partitions)
        return [RangePartition(r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Reads one range (executor)."""
        if not isinstance(partition, RangePartition):
            return  # Spark reads one empty partition when partitions() has none
        settings = _settings(self._options, self.rows_per_batch)
        yield from read_range(router_for(self._options.client), partition.offsets, settings)

    def commit(self, end: dict[str, dict[str, int]]) -> None:
        """Nothing to do: Liftbridge keeps no reader position for Spark (the
        checkpoint holds it). Idempotent."""
