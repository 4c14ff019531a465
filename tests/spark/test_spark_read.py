"""Batch reads through Spark (``local[2]``) against the session's real server.

This module never calls ``liftbridge.spark.register``: ``format("liftbridge")``
is found through the ``pyspark_liftbridge`` module, as for an installed package.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="needs the spark extra: pip install -e '.[spark]'")
pytest.importorskip("pyarrow", reason="needs the spark extra: pip install -e '.[spark]'")

from pyspark.sql import DataFrameReader, SparkSession

import liftbridge
from liftbridge import InvalidArgumentError, LiftbridgeError, StartPosition, StopPosition
from liftbridge.spark import LiftbridgeDataSource
from liftbridge.spark._clients import close_clients
from liftbridge.testing import LocalServer
from tests.spark.helpers import fill, sdk_rows, spark_rows

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]


def _reader(spark: SparkSession, server: LocalServer, **options: str) -> DataFrameReader:
    reader = spark.read.format("liftbridge").option("servers", server.address)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader


def _offsets(rows: list[tuple[object, ...]]) -> dict[int, list[int]]:
    found: dict[int, list[int]] = {}
    for row in rows:
        found.setdefault(row[4], []).append(row[5])  # type: ignore[arg-type]
    return found


def test_batch_read_of_three_partitions_returns_exactly_the_published_rows(
    spark: SparkSession, server: LocalServer, client: liftbridge.Client, unique_name: str
) -> None:
    client.create_stream(unique_name, partitions=3)
    fill(client, unique_name, 60)
    df = _reader(spark, server, stream=unique_name, includeHeaders="true").load()
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,stream:string,subject:string,partition:int,"
        "offset:bigint,timestamp:timestamp,headers:map<string,binary>>"
    )
    got = spark_rows(df)
    assert got == sdk_rows(client, unique_name, headers=True)
    # Every published message once, with its key, value and headers, on the
    # partition its key picks (the SDK's default is Go's PartitionByKey).
    assert sorted((r[0], r[1], r[7]["n"]) for r in got) == sorted(
        (b"k%d" % (i % 7), b"value-%d" % i, b"%d" % i) for i in range(60)
    )
    assert len(_offsets(got)) == 3
    by_key = liftbridge.PartitionByKey()
    metadata = client.fetch_metadata()
    assert all(r[4] == by_key.partition(unique_name, r[0], r[1], metadata) for r in got)


def test_starting_and_ending_offsets_json_are_exact(
    spark: SparkSession, server: LocalServer, client: liftbridge.Client, unique_name: str
) -> None:
    client.create_stream(unique_name, partitions=3)
    for partition in range(3):
        for i in range(8):
            client.publish(unique_name, b"p%d-%d" % (partition, i), partition=partition)
    df = _reader(
        spark,
        server,
        stream=unique_name,
        startingOffsets=json.dumps({unique_name: {"0": 2, "1": -2, "2": 7}}),
        endingOffsets=json.dumps({unique_name: {"0": 5, "1": 3}}),
    ).load()
    rows = spark_rows(df)
    assert _offsets(rows) == {0: [2, 3, 4], 1: [0, 1, 2], 2: [7]}
    assert [r[1] for r in rows] == [b"p0-2", b"p0-3", b"p0-4", b"p1-0", b"p1-1", b"p1-2", b"p2-7"]


def test_assign_min_partitions_and_read_replica(
    spark: SparkSession, server: LocalServer, client: liftbridge.Client, unique_name: str
) -> None:
    client.create_stream(unique_name, partitions=3)
    for partition in range(3):
        for i in range(10):
            client.publish(unique_name, b"%d" % i, partition=partition)
    df = _reader(
        spark,
        server,
        assign=json.dumps({unique_name: [2, 1]}),
        minPartitions="6",
        readReplica="true",
    ).load()
    assert df.rdd.getNumPartitions() == 6
    expected = [r for r in sdk_rows(client, unique_name) if r[4] != 0]
    assert spark_rows(df) == expected


def test_starting_timestamp_starts_at_the_first_message_at_or_after_it(
    spark: SparkSession, server: LocalServer, client: liftbridge.Client, unique_name: str
) -> None:
    client.create_stream(unique_name, partitions=2)
    fill(client, unique_name, 10)
    time.sleep(0.05)
    cut_ms = time.time_ns() // 1_000_000
    time.sleep(0.05)
    fill(client, unique_name, 10, first=10)
    df = _reader(spark, server, stream=unique_name, startingTimestamp=str(cut_ms)).load()
    assert sorted(r[1] for r in spark_rows(df)) == sorted(b"value-%d" % i for i in range(10, 20))


def test_an_empty_stream_reads_no_rows(
    spark: SparkSession, server: LocalServer, client: liftbridge.Client, unique_name: str
) -> None:
    client.create_stream(unique_name, partitions=2)
    assert _reader(spark, server, stream=unique_name).load().count() == 0


_BAD_OPTIONS: list[tuple[dict[str, str | None], str]] = [
    ({"servers": None, "stream": "s"}, "option servers is required"),
    ({"servers": "nohost", "stream": "s"}, "option servers: 'nohost' is not host:port"),
    ({}, "give exactly one of the options stream"),
    ({"stream": "s", "assign": '{"s": [0]}'}, "give exactly one of the options stream"),
    ({"assign": '{"s": []}'}, "option assign: stream 's' needs a non-empty list"),
    ({"stream": "s", "startingOffsets": "{nope"}, "option startingOffsets must be earliest"),
    ({"stream": "s", "startingOffsets": '{"t": {"0": 1}}'}, "names stream 't'"),
    ({"stream": "s", "endingOffsets": '{"s": {"0": -2}}'}, "option endingOffsets: earliest"),
    ({"stream": "s", "includeHeaders": "yes"}, "option includeHeaders must be true or false"),
    ({"stream": "s", "minPartitions": "0"}, "option minPartitions must be >= 1"),
    (
        {"stream": "s", "startingOffsets": "earliest", "startingTimestamp": "1"},
        "startingTimestamp and startingOffsets exclude each other",
    ),
    ({"stream": "s", "tls.ca": "/nonexistent/ca.pem"}, "option tls.ca: cannot read"),
    (
        {"stream": "s", "tls.cert": "-----BEGIN X"},
        "tls.cert and tls.key must be given together",
    ),
]

_BAD_BATCH_OPTIONS: list[tuple[dict[str, str], str]] = [
    ({"startingOffsets": "latest"}, "option startingOffsets: latest (-1) is not allowed"),
    ({"maxOffsetsPerTrigger": "5"}, "option maxOffsetsPerTrigger is for readStream only"),
    ({"endingOffsets": '{"STREAM": {"0": 99}}'}, "option endingOffsets: STREAM/0 ends at 1"),
    ({"stream": "no-such-stream"}, "option stream: the cluster has no stream 'no-such-stream'"),
    ({"assign": '{"STREAM": [5]}'}, "option assign: stream 'STREAM' has no partition 5"),
    (
        {"startingOffsets": '{"STREAM": {"3": 0}}'},
        "option startingOffsets names partition 3 of 'STREAM', which is not read",
    ),
]


def _options(server: LocalServer, options: Mapping[str, str | None]) -> dict[str, str]:
    given = {"servers": server.address, **options}
    return {name: value for name, value in given.items() if value is not None}


def _batch_options(stream: str, options: dict[str, str]) -> dict[str, str]:
    options = {"stream": stream, **options}
    if "assign" in options:
        del options["stream"]
    return {k: v.replace("STREAM", stream) for k, v in options.items()}


# Spark's planner runs LiftbridgeDataSource's schema() in load() and
# reader().partitions() before the first job: each case below goes through
# those calls in this process (a Spark query costs a planner process each);
# the test after it shows, for one case of each, that Spark surfaces the error
# there. These request the `spark` fixture although they do not use it: the
# session (and its JVM, started with fork()) must exist before this process
# opens gRPC channels (see test_spark_cluster.py).
@pytest.mark.parametrize(("options", "message"), _BAD_OPTIONS)
@pytest.mark.usefixtures("spark")
def test_bad_options_fail_in_the_sources_schema(
    server: LocalServer, options: dict[str, str | None], message: str
) -> None:
    with pytest.raises(InvalidArgumentError) as failure:
        LiftbridgeDataSource(_options(server, options)).schema()
    assert message in str(failure.value)


@pytest.fixture
def planning() -> Iterator[None]:
    yield
    close_clients()  # planning caches a client per process, as in Spark's planner


@pytest.mark.parametrize(("options", "message"), _BAD_BATCH_OPTIONS)
@pytest.mark.usefixtures("spark", "planning")
def test_bad_batch_options_fail_in_the_readers_planning(
    server: LocalServer,
    client: liftbridge.Client,
    unique_name: str,
    options: dict[str, str],
    message: str,
) -> None:
    client.create_stream(unique_name)
    client.publish(unique_name, b"only")
    source = LiftbridgeDataSource(_options(server, _batch_options(unique_name, options)))
    schema = source.schema()  # what load() asks: these options pass it
    with pytest.raises(LiftbridgeError) as failure:
        source.reader(schema).partitions()
    assert message.replace("STREAM", unique_name) in str(failure.value)


def test_bad_options_fail_when_the_dataframe_is_made_and_at_planning_before_any_task(
    spark: SparkSession, server: LocalServer, client: liftbridge.Client, unique_name: str
) -> None:
    for options, message in (_BAD_OPTIONS[0], _BAD_OPTIONS[11]):
        reader = spark.read.format("liftbridge").options(**_options(server, options))
        with pytest.raises(Exception, match="InvalidArgumentError") as failure:
            reader.load()
        assert message in str(failure.value)
    client.create_stream(unique_name)
    client.publish(unique_name, b"only")
    for batch_options, message in (_BAD_BATCH_OPTIONS[0], _BAD_BATCH_OPTIONS[3]):
        df = _reader(spark, server, **_batch_options(unique_name, batch_options)).load()
        with pytest.raises(Exception, match="Error") as failed:
            df.collect()
        text = str(failed.value)
        assert message.replace("STREAM", unique_name) in text
        # Planning failed, so no Spark job (and no task) was started for it.
        assert "Job aborted" not in text


def test_a_task_killed_mid_read_is_retried_with_the_same_rows(
    spark: SparkSession,
    server: LocalServer,
    client: liftbridge.Client,
    unique_name: str,
    tmp_path: Path,
) -> None:
    client.create_stream(unique_name, partitions=2)
    fill(client, unique_name, 40)
    spark.dataSource.register(_flaky_source())
    df = (
        spark.read.format("liftbridge-flaky")
        .option("servers", server.address)
        .option("stream", unique_name)
        .option("failOnceDir", str(tmp_path))
        .load()
    )
    assert spark_rows(df) == sdk_rows(client, unique_name)
    assert (tmp_path / "failed").exists(), "no read attempt failed"
    attempts = [json.loads(line) for line in (tmp_path / "attempts.log").read_text().splitlines()]
    failed = [a for a in attempts if len(a[1]) == 5]  # died after its first batch of 5
    assert len(failed) == 1
    # The retry of the failed range read the same offsets, then the rest.
    partition, offsets = failed[0]
    retried = [a for a in attempts if a[0] == partition and len(a[1]) > 5]
    assert len(retried) == 1
    assert retried[0][1][:5] == offsets
    assert len(attempts) == 3  # two partitions, one of them read twice


def _flaky_source() -> type:
    from tests.spark.flaky import FlakyDataSource

    return FlakyDataSource


def _wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_offsets_removed_by_retention_fail_the_read_unless_fail_on_data_loss_is_false(
    spark: SparkSession, server: LocalServer, client: liftbridge.Client, unique_name: str
) -> None:
    client.create_stream(
        unique_name,
        retention_max_messages=10,
        segment_max_bytes=512,
        cleaner_interval=0.5,
    )
    for i in range(60):
        client.publish(unique_name, b"m%03d" % i)

    def oldest() -> int:
        with client.subscribe(
            unique_name, start=StartPosition.EARLIEST, stop=StopPosition.LATEST
        ) as subscription:
            return next(iter(subscription)).offset

    _wait_until(lambda: oldest() > 0, 20, "retention to remove the oldest segments")
    first = oldest()
    from_zero = json.dumps({unique_name: {"0": 0}})
    with pytest.raises(Exception, match="DataLossError") as failure:
        _reader(spark, server, stream=unique_name, startingOffsets=from_zero).load().collect()
    assert "failOnDataLoss" in str(failure.value)
    lenient = _reader(
        spark, server, stream=unique_name, startingOffsets=from_zero, failOnDataLoss="false"
    ).load()
    offsets = [r[5] for r in spark_rows(lenient)]
    assert offsets[0] >= first and offsets == list(range(offsets[0], 60))
    # "earliest" is where the partition starts now: no loss to report.
    earliest = spark_rows(_reader(spark, server, stream=unique_name).load())
    assert [r[5] for r in earliest] == list(range(earliest[0][5], 60))
