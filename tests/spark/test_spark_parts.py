"""The connector's driver- and executor-side parts called directly (no
SparkSession) against the real server: admission control of the stream
reader, and what the writer publishes and reports."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import pyarrow as pa
import pytest

pytest.importorskip("pyspark", reason="needs the spark extra: pip install -e '.[spark]'")
pytest.importorskip("pyarrow", reason="needs the spark extra: pip install -e '.[spark]'")

from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

import liftbridge
from liftbridge.spark import LiftbridgeCommitMessage, PartitionWrite
from liftbridge.spark._clients import close_clients
from liftbridge.spark._offsets import admit
from liftbridge.spark._options import Mode, read_options, write_options
from liftbridge.spark._reader import LiftbridgeStreamReader
from liftbridge.spark._writer import LiftbridgeWriter, publish_batches
from liftbridge.testing import LocalServer

pytestmark = pytest.mark.spark


@pytest.fixture
def client(server: LocalServer) -> Iterator[liftbridge.Client]:
    with liftbridge.Client(server.address) as c:
        yield c
    close_clients()  # the parts under test cache clients per process


def _publish(client: liftbridge.Client, stream: str, per_partition: dict[int, int]) -> None:
    for partition, count in per_partition.items():
        for i in range(count):
            client.publish(stream, b"%d" % i, partition=partition)


def _reader(server: LocalServer, stream: str, **options: str) -> LiftbridgeStreamReader:
    raw = {"servers": server.address, "stream": stream, **options}
    return LiftbridgeStreamReader(read_options(raw, Mode.STREAMING))


def test_max_offsets_per_trigger_is_shared_by_backlog(
    server: LocalServer, client: liftbridge.Client, unique_name: str
) -> None:
    client.create_stream(unique_name, partitions=3)
    _publish(client, unique_name, {0: 30, 1: 10})
    reader = _reader(server, unique_name, startingOffsets="earliest", maxOffsetsPerTrigger="8")
    assert reader.getDefaultReadLimit() == ReadMaxRows(8)
    start = reader.initialOffset()
    assert start == {unique_name: {"0": 0, "1": 0, "2": 0}}
    end = reader.latestOffset(start, ReadMaxRows(8))
    assert end == {unique_name: {"0": 6, "1": 2, "2": 0}}
    assert reader.latestOffset(start, ReadAllAvailable()) == {
        unique_name: {"0": 30, "1": 10, "2": 0}
    }
    assert reader.reportLatestOffset() == {unique_name: {"0": 30, "1": 10, "2": 0}}
    assert [p.offsets for p in reader.partitions(start, end)] == [  # type: ignore[attr-defined]
        liftbridge.spark._fetch.OffsetRange(unique_name, 0, 0, 6),
        liftbridge.spark._fetch.OffsetRange(unique_name, 1, 0, 2),
    ]
    assert reader.partitions(end, end) == []


def test_admit_gives_every_partition_behind_at_least_one_offset_while_it_can() -> None:
    available = {("s", 0): 100, ("s", 1): 1, ("s", 2): 1}
    assert admit({}, available, 3) == {("s", 0): 1, ("s", 1): 1, ("s", 2): 1}
    assert admit({("s", 0): 100}, available, 5) == {("s", 0): 100, ("s", 1): 1, ("s", 2): 1}
    assert sum(admit({}, available, 50).values()) == 50


def test_min_offsets_per_trigger_holds_a_batch_back_until_max_trigger_delay(
    server: LocalServer, client: liftbridge.Client, unique_name: str
) -> None:
    client.create_stream(unique_name)
    # The delay runs from the reader's creation: the RPCs and four publishes
    # up to the first latestOffset must take less than it, and a loaded CI
    # machine can take seconds for them (it was 500 ms, then 2 s); the second
    # look waits out the delay from the reader's creation, not a fixed sleep.
    reader = _reader(server, unique_name, minOffsetsPerTrigger="10", maxTriggerDelay="6s")
    created = time.monotonic()  # after the reader's own clock started
    start = reader.initialOffset()  # latest: the empty partition's end
    assert start == {unique_name: {"0": 0}}
    _publish(client, unique_name, {0: 4})
    assert reader.latestOffset(start, ReadAllAvailable()) == start  # 4 < 10: wait
    time.sleep(max(0.0, created + 6.1 - time.monotonic()))
    assert reader.latestOffset(start, ReadAllAvailable()) == {unique_name: {"0": 4}}


def test_available_now_stops_at_the_watermarks_seen_when_it_was_prepared(
    server: LocalServer, client: liftbridge.Client, unique_name: str
) -> None:
    client.create_stream(unique_name, partitions=2)
    _publish(client, unique_name, {0: 5, 1: 3})
    reader = _reader(server, unique_name, startingOffsets="earliest", minOffsetsPerTrigger="100")
    start = reader.initialOffset()
    reader.prepareForTriggerAvailableNow()
    _publish(client, unique_name, {0: 5, 1: 5})
    end = reader.latestOffset(start, ReadAllAvailable())  # minOffsets ignored here
    assert end == {unique_name: {"0": 5, "1": 3}}
    assert reader.latestOffset(end, ReadAllAvailable()) == end


class _Recording:
    """A client whose publish_async records the correlation ids it is given."""

    def __init__(self, client: liftbridge.Client) -> None:
        self._client = client
        self.ids: list[str] = []
        self.metadata = client.metadata

    def publish_async(self, stream: str, value: bytes, **kwargs: Any) -> Future[Any]:
        self.ids.append(kwargs["correlation_id"])
        future: Future[Any] = self._client.publish_async(stream, value, **kwargs)
        return future

    def fetch_metadata(self) -> liftbridge.Metadata:
        return self._client.fetch_metadata()


def test_a_task_reports_acked_rows_and_last_offsets_per_partition_with_row_ids(
    server: LocalServer, client: liftbridge.Client, unique_name: str
) -> None:
    client.create_stream(unique_name, partitions=2)
    client.publish(unique_name, b"before", partition=1)
    options = write_options({"servers": server.address, "stream": unique_name})
    batch = pa.RecordBatch.from_pydict(
        {"value": [b"a", b"b", b"c", b"d", b"e"], "partition": [0, 1, 1, 0, 1]}
    )
    recording = _Recording(client)
    message = publish_batches(
        recording,  # type: ignore[arg-type]
        options,
        [batch, batch.slice(0, 2)],
        "query-7-3",
        3,
    )
    assert message == LiftbridgeCommitMessage(
        task=3,
        rows=7,
        partitions=(
            PartitionWrite(unique_name, 0, 3, 2),
            PartitionWrite(unique_name, 1, 4, 4),
        ),
    )
    assert recording.ids == [f"query-7-3-{i}" for i in range(7)]


def test_the_batch_writer_outside_spark_writes_as_task_zero(
    server: LocalServer, client: liftbridge.Client, unique_name: str
) -> None:
    client.create_stream(unique_name)
    writer = LiftbridgeWriter(write_options({"servers": server.address, "stream": unique_name}))
    batch = pa.RecordBatch.from_pydict({"value": ["x", "y"], "key": ["k", None]})
    message = writer.write(iter([batch]))
    assert message.task == 0 and message.rows == 2
    assert message.partitions == (PartitionWrite(unique_name, 0, 2, 1),)
