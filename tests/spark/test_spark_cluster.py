"""The connector on a real Spark standalone cluster on loopback (a master and
two one-core workers), so no reader or writer state can hide in the driver;
and the pipeline example, run as a user runs it, on the same cluster."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

import liftbridge
import liftbridge.spark
from liftbridge.testing import LocalServer
from tests.integration.examples import run_example
from tests.spark.conftest import python_path, spark_session
from tests.spark.helpers import fill, sdk_rows, spark_rows
from tests.spark.standalone import StandaloneCluster

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    with StandaloneCluster(tmp_path_factory.mktemp("spark-standalone")) as cluster:
        yield cluster


@pytest.fixture
def client(server: LocalServer) -> Iterator[liftbridge.Client]:
    with liftbridge.Client(server.address) as c:
        yield c


def test_read_and_write_run_on_the_cluster_executors(
    standalone: StandaloneCluster,
    server: LocalServer,
    client: liftbridge.Client,
    unique_name: str,
) -> None:
    source, sink = f"{unique_name}-in", f"{unique_name}-out"
    client.create_stream(source, partitions=3)
    client.create_stream(sink, partitions=2)
    fill(client, source, 90)
    spark = spark_session(
        standalone.master,
        **{"spark.executor.memory": "512m", "spark.cores.max": "2"},
    )
    try:
        liftbridge.spark.register(spark)
        executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size()  # type: ignore[union-attr]
        assert executors == 3  # the driver and one executor per worker
        df = (
            spark.read.format("liftbridge")
            .option("servers", server.address)
            .option("stream", source)
            .option("includeHeaders", "true")
            .option("minPartitions", "4")
            .load()
        )
        assert spark_rows(df) == sdk_rows(client, source, headers=True)
        df.select("key", "value", "headers").write.format("liftbridge").option(
            "servers", server.address
        ).option("stream", sink).mode("append").save()
    finally:
        spark.stop()
    written = sdk_rows(client, sink, headers=True)
    assert sorted((r[0], r[1], r[7]["n"]) for r in written) == sorted(
        (b"k%d" % (i % 7), b"value-%d" % i, b"%d" % i) for i in range(90)
    )


def test_the_pipeline_example_aggregates_per_key_into_another_stream(
    standalone: StandaloneCluster,
    server: LocalServer,
    client: liftbridge.Client,
    unique_name: str,
    tmp_path: Path,
) -> None:
    source, target = f"{unique_name}-events", f"{unique_name}-totals"
    client.create_stream(source, partitions=3)
    client.create_stream(target, partitions=2)
    fill(client, source, 50, headers=False)
    out = run_example(
        "spark_pipeline.py",
        server.address,
        source,
        target,
        "--master",
        standalone.master,
        env={"PYTHONPATH": python_path()},
        timeout=240,
    )
    assert f"wrote 7 per-key results to '{target}'" in out
    totals = {json.loads(r[1])["key"]: json.loads(r[1]) for r in sdk_rows(client, target)}
    expected_counts = {f"k{k}": len(range(k, 50, 7)) for k in range(7)}
    assert {k: v["messages"] for k, v in totals.items()} == expected_counts
    assert totals["k0"]["bytes"] == sum(len(b"value-%d" % i) for i in range(0, 50, 7))
    assert "k0: 8 messages" in out
