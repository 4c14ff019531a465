"""Kafka's read options past the basics: ``streamPattern``, offsets by
timestamp per partition, and offsets behind latest from the progress
(``local[2]``, the session's real server)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="needs the spark extra: pip install -e '.[spark]'")
pytest.importorskip("pyarrow", reason="needs the spark extra: pip install -e '.[spark]'")

from pyspark.sql import SparkSession

import liftbridge
import liftbridge.spark
from liftbridge import InvalidArgumentError
from liftbridge.spark._options import Mode, read_options
from liftbridge.testing import LocalServer
from tests.spark.helpers import fill, sdk_rows

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]


def test_stream_pattern_reads_matching_streams_and_picks_up_new_ones(
    spark: SparkSession,
    server: LocalServer,
    client: liftbridge.Client,
    unique_name: str,
    tmp_path: Path,
) -> None:
    first, later, other = f"{unique_name}-a", f"{unique_name}-b", f"x{unique_name}"
    client.create_stream(first, partitions=2)
    client.create_stream(other)
    fill(client, first, 6)
    fill(client, other, 4)
    df = (
        spark.readStream.format("liftbridge")
        .option("servers", server.address)
        .option("streamPattern", f"{unique_name}-.*")
        .option("startingOffsets", "earliest")
        .load()
    )
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def run() -> None:
        query = (
            df.writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        try:
            assert query.awaitTermination(120), "the availableNow query did not finish"
        finally:
            query.stop()

    run()
    client.create_stream(later)  # created after the query started: read from its start
    fill(client, later, 3)
    run()
    got = sorted((r.stream, bytes(r.value)) for r in spark.read.parquet(str(out)).collect())
    expected = sorted((r[2], r[1]) for stream in (first, later) for r in sdk_rows(client, stream))
    assert got == expected
    with pytest.raises(Exception, match="option streamPattern is not a regular expression"):
        spark.read.format("liftbridge").option("servers", server.address).option(
            "streamPattern", "(unclosed"
        ).load()


def test_progress_gives_kafkas_offsets_behind_latest(
    spark: SparkSession,
    server: LocalServer,
    client: liftbridge.Client,
    unique_name: str,
    tmp_path: Path,
) -> None:
    client.create_stream(unique_name)
    fill(client, unique_name, 30)
    query = (
        spark.readStream.format("liftbridge")
        .option("servers", server.address)
        .option("stream", unique_name)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "10")
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(120), "the availableNow query did not finish"
    finally:
        query.stop()
    reports = [p for p in query.recentProgress if p["numInputRows"] > 0]
    behind = [liftbridge.spark.offsets_behind_latest(p) for p in reports]
    assert [b["maxOffsetsBehindLatest"] for b in behind] == [20.0, 10.0, 0.0]
    assert behind[0] == {
        "avgOffsetsBehindLatest": 20.0,
        "maxOffsetsBehindLatest": 20.0,
        "minOffsetsBehindLatest": 20.0,
    }


def test_offsets_by_timestamp_per_partition_and_ending_timestamp(
    spark: SparkSession, server: LocalServer, client: liftbridge.Client, unique_name: str
) -> None:
    client.create_stream(unique_name, partitions=2)
    marks = []
    for block in range(3):
        for i in range(10):
            client.publish(unique_name, b"%d-%d" % (block, i), partition=i % 2)
        time.sleep(0.05)
        marks.append(int(time.time() * 1000))
        time.sleep(0.05)
    t1, t2 = marks[0], marks[1]

    def values(**options: str) -> list[bytes]:
        reader = spark.read.format("liftbridge").option("servers", server.address)
        for name, value in {"stream": unique_name, **options}.items():
            reader = reader.option(name, value)
        return sorted(bytes(r.value) for r in reader.load().select("value").collect())

    blocks = {n: sorted(b"%d-%d" % (n, i) for i in range(10)) for n in range(3)}
    both = json.dumps({unique_name: {"0": t1, "1": t1}})
    assert values(startingOffsetsByTimestamp=both, endingTimestamp=str(t2)) == blocks[1]
    # Per partition: partition 1 from the start, partition 0 from t1; both end at t2.
    per_partition = json.dumps({unique_name: {"0": t1}})
    ending = json.dumps({unique_name: {"0": t2, "1": t2}})
    got = values(startingOffsetsByTimestamp=per_partition, endingOffsetsByTimestamp=ending)
    expected = blocks[1] + [v for v in blocks[0] if int(v.split(b"-")[1]) % 2 == 1]
    assert got == sorted(expected)
    with pytest.raises(InvalidArgumentError, match=r"option endingtimestamp is for batch reads"):
        read_options(
            {"servers": server.address, "stream": unique_name, "endingTimestamp": str(t2)},
            Mode.STREAMING,
        )
    with pytest.raises(InvalidArgumentError, match=r"exclude each other"):
        read_options(
            {"servers": server.address, "stream": unique_name, "endingTimestamp": "1",
             "endingOffsetsByTimestamp": ending},
            Mode.BATCH,
        )  # fmt: skip
