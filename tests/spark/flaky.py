"""A ``liftbridge`` source whose reads fail once, for the task-retry test.

Executors import it by name (``tests.spark.flaky``), so it must stay a
module of its own. Option ``failOnceDir`` names a directory: each read
attempt appends its partition and the offsets it yielded to ``attempts.log`` there, and the
first attempt to create ``failed`` raises after its first record batch.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from liftbridge.spark import LiftbridgeDataSource


class FlakyReader(DataSourceReader):
    """Delegates to the real reader; the first read attempt dies mid-range."""

    def __init__(self, reader: DataSourceReader, directory: str) -> None:
        self._reader = reader
        self._directory = Path(directory)

    def partitions(self) -> Sequence[InputPartition]:
        return self._reader.partitions()

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        log = self._directory / "attempts.log"
        seen: list[int] = []
        try:
            for batch in self._reader.read(partition):
                assert isinstance(batch, pa.RecordBatch)
                seen.extend(batch.column("offset").to_pylist())
                yield batch
                try:
                    os.close(os.open(self._directory / "failed", os.O_CREAT | os.O_EXCL))
                except FileExistsError:
                    continue
                raise RuntimeError("injected failure after the first record batch")
        finally:
            with log.open("a") as f:
                f.write(json.dumps([partition.offsets.partition, seen]) + "\n")  # type: ignore[attr-defined]


class FlakyDataSource(LiftbridgeDataSource):
    """``format("liftbridge-flaky")``: the liftbridge source with FlakyReader."""

    @classmethod
    def name(cls) -> str:
        return "liftbridge-flaky"

    def reader(self, schema: StructType) -> DataSourceReader:
        directory = self.options.pop("failOnceDir")
        reader = super().reader(schema)
        reader.rows_per_batch = 5  # type: ignore[attr-defined]
        return FlakyReader(reader, directory)
