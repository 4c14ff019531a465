"""Streaming reads and batch / streaming writes through Spark (``local[2]``)
against the session's real server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="needs the spark extra: pip install -e '.[spark]'")
pytest.importorskip("pyarrow", reason="needs the spark extra: pip install -e '.[spark]'")

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import liftbridge
from liftbridge import InvalidArgumentError
from liftbridge.spark import LiftbridgeDataSource
from liftbridge.testing import LocalServer
from tests.spark.helpers import fill, sdk_rows, spark_rows

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

QUERY_TIMEOUT = 120


def _stream_of(spark: SparkSession, server: LocalServer, **options: str) -> DataFrame:
    reader = spark.readStream.format("liftbridge").option("servers", server.address)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def _available_now(df: DataFrame, out: Path, checkpoint: Path) -> list[dict[str, Any]]:
    """Runs the query to the end of what is there now into parquet files;
    returns its progress reports (one per micro-batch)."""
    query = (
        df.writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(QUERY_TIMEOUT), "the availableNow query did not finish"
    finally:
        query.stop()
    assert query.exception() is None
    return [p for p in query.recentProgress if p["numInputRows"] > 0]


def test_available_now_new_data_and_a_restart_read_every_message_exactly_once(
    spark: SparkSession,
    server: LocalServer,
    client: liftbridge.Client,
    unique_name: str,
    tmp_path: Path,
) -> None:
    client.create_stream(unique_name, partitions=3)
    fill(client, unique_name, 30)
    df = _stream_of(
        spark, server, stream=unique_name, startingOffsets="earliest", maxOffsetsPerTrigger="10"
    )
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    first = _available_now(df, out, checkpoint)
    assert [p["numInputRows"] for p in first] == [10, 10, 10]
    end = json.loads(first[-1]["sources"][0]["endOffset"])
    assert end == {
        unique_name: {
            "0": _hw(client, unique_name, 0),
            "1": _hw(client, unique_name, 1),
            "2": _hw(client, unique_name, 2),
        }
    }

    fill(client, unique_name, 25, first=30)
    second = _available_now(df, out, checkpoint)  # restarts from the checkpoint
    assert sum(p["numInputRows"] for p in second) == 25
    assert spark_rows(spark.read.parquet(str(out))) == sdk_rows(client, unique_name)


def _hw(client: liftbridge.Client, stream: str, partition: int) -> int:
    return client.fetch_partition_metadata(stream, partition).high_watermark + 1


def test_a_stream_created_after_the_query_started_is_read_from_its_earliest_message(
    spark: SparkSession,
    server: LocalServer,
    client: liftbridge.Client,
    unique_name: str,
    tmp_path: Path,
) -> None:
    early, late = f"{unique_name}-a", f"{unique_name}-b"
    client.create_stream(early)
    fill(client, early, 5)
    df = _stream_of(spark, server, stream=f"{early},{late}")  # default start: latest
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    assert _available_now(df, out, checkpoint) == []  # latest: nothing yet
    client.create_stream(late, partitions=2)
    fill(client, late, 12)
    fill(client, early, 3, first=5)
    _available_now(df, out, checkpoint)
    got = spark_rows(spark.read.parquet(str(out)))
    expected = sdk_rows(client, late) + [r for r in sdk_rows(client, early) if r[5] >= 5]
    assert sorted(got) == sorted(expected)


def test_stream_to_stream_write_lands_every_row_on_its_key_partition(
    spark: SparkSession,
    server: LocalServer,
    client: liftbridge.Client,
    unique_name: str,
    tmp_path: Path,
) -> None:
    source, sink = f"{unique_name}-in", f"{unique_name}-out"
    client.create_stream(source, partitions=2)
    client.create_stream(sink, partitions=3)
    fill(client, source, 40)
    df = _stream_of(spark, server, stream=source, startingOffsets="earliest", includeHeaders="true")
    query = (
        df.select("key", F.upper(F.col("value").cast("string")).alias("value"), "headers")
        .writeStream.format("liftbridge")
        .option("servers", server.address)
        .option("stream", sink)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(QUERY_TIMEOUT), "the availableNow query did not finish"
    finally:
        query.stop()
    assert query.exception() is None
    written = sdk_rows(client, sink, headers=True)
    assert sorted((r[0], r[1], r[7]["n"]) for r in written) == sorted(
        (b"k%d" % (i % 7), b"VALUE-%d" % i, b"%d" % i) for i in range(40)
    )
    by_key = liftbridge.PartitionByKey()
    metadata = client.fetch_metadata()
    assert all(r[4] == by_key.partition(sink, r[0], r[1], metadata) for r in written)


def test_batch_write_honours_stream_partition_key_and_header_columns(
    spark: SparkSession, server: LocalServer, client: liftbridge.Client, unique_name: str
) -> None:
    one, two = f"{unique_name}-1", f"{unique_name}-2"
    client.create_stream(one, partitions=3)
    client.create_stream(two, partitions=3)
    rows = [
        (one, None, "keyless", None, None),
        (one, b"alpha", "keyed", None, {"h": b"1"}),
        (two, b"beta", "pinned", 2, {"h": b"2"}),
        (two, None, "pinned too", 1, None),
    ] * 5
    df = spark.createDataFrame(
        rows, "stream string, key binary, value string, partition int, headers map<string,binary>"
    ).repartition(2)
    df.write.format("liftbridge").option("servers", server.address).mode("append").save()
    metadata = client.fetch_metadata()
    by_key = liftbridge.PartitionByKey()
    got = {stream: sdk_rows(client, stream, headers=True) for stream in (one, two)}
    assert len(got[one]) == len(got[two]) == 10
    for stream, key, value, partition, headers in rows:
        matching = [r for r in got[stream] if r[1] == value.encode()]
        assert len(matching) == 5
        if partition is not None:
            expected = partition
        elif key is not None:
            expected = by_key.partition(stream, key, b"", metadata)
        else:
            expected = 0
        assert {r[4] for r in matching} == {expected}
        assert all(r[0] == key and r[7] == (headers or {}) for r in matching)
    # The stream option wins over the column.
    df.write.format("liftbridge").option("servers", server.address).option("stream", two).mode(
        "append"
    ).save()
    assert len(sdk_rows(client, two)) == 30
    assert len(sdk_rows(client, one)) == 10


_BAD_WRITES = [
    ("key string", {"stream": "s"}, "append", "needs a value column"),
    (
        "value int",
        {"stream": "s"},
        "append",
        "column value must be binary or string to write to Liftbridge, got int",
    ),
    ("value string", {}, "append", "needs the stream option or a stream column"),
    ("value string, partition string", {"stream": "s"}, "append", "column partition must be"),
    ("value string", {"stream": "s", "ackPolicy": "most"}, "append", "option ackPolicy must"),
    ("value string", {"stream": "s"}, "overwrite", "append"),
]


# Spark's planner asks LiftbridgeDataSource for its writer in save(): each case
# goes through that call in this process (a Spark save costs a planner process
# each); the test after it shows, for two cases, that Spark surfaces the error.
@pytest.mark.parametrize(("columns", "options", "mode", "message"), _BAD_WRITES)
def test_bad_writes_fail_in_the_sources_writer(
    spark: SparkSession,
    server: LocalServer,
    columns: str,
    options: dict[str, str],
    mode: str,
    message: str,
) -> None:
    schema = spark.createDataFrame([], columns).schema
    source = LiftbridgeDataSource({"servers": server.address, **options})
    with pytest.raises(InvalidArgumentError) as failure:
        source.writer(schema, mode == "overwrite")
    assert message in str(failure.value)


def test_bad_writes_fail_at_planning(spark: SparkSession, server: LocalServer) -> None:
    for columns, options, mode, message in (_BAD_WRITES[1], _BAD_WRITES[5]):
        df = spark.createDataFrame([], columns)
        writer = df.write.format("liftbridge").option("servers", server.address).mode(mode)
        for name, value in options.items():
            writer = writer.option(name, value)
        with pytest.raises(Exception) as failure:
            writer.save()
        assert message in str(failure.value)
