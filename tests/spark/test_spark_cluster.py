"""The connector on a real Spark standalone cluster on loopback (a master and
two one-core workers), so no reader or writer state can hide in the driver."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="needs the spark extra: pip install -e '.[spark]'")
pytest.importorskip("pyarrow", reason="needs the spark extra: pip install -e '.[spark]'")

from pyspark.sql import SparkSession

import liftbridge
import liftbridge.spark
from liftbridge.testing import LocalServer
from tests.spark.conftest import spark_session, stop_shared_session
from tests.spark.helpers import fill, sdk_rows, spark_rows
from tests.spark.standalone import StandaloneCluster
from tests.spark.test_spark_exactly_once import ROWS, check_exactly_once, run_with_kills

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    # The run's shared local[2,3] session goes first: getOrCreate would hand
    # it out instead of a session on this cluster, and it would hold memory
    # and a core's worth of Python workers while the cluster runs.
    stop_shared_session()
    with StandaloneCluster(tmp_path_factory.mktemp("spark-standalone")) as cluster:
        yield cluster


def _wait_for_executors(spark: SparkSession, count: int, timeout: float = 60.0) -> None:
    """Waits until ``count`` executors (one per worker) have registered."""
    deadline = time.monotonic() + timeout
    while True:
        # getExecutorMemoryStatus lists the driver too.
        registered = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
        if registered >= count:
            return
        assert time.monotonic() < deadline, f"{registered} of {count} executors registered"
        time.sleep(0.5)


def test_read_and_write_run_on_the_cluster_executors(
    standalone: StandaloneCluster,
    server: LocalServer,
    unique_name: str,
) -> None:
    # The session first, then the client (not the `client` fixture, which
    # would connect before the test body runs): PySpark starts its JVM with
    # fork(), and a fork while this process has a gRPC channel open crashed
    # the child in gRPC's fork handling ("epoll_wait error: Bad file
    # descriptor", JAVA_GATEWAY_EXITED).
    spark = spark_session(
        standalone.master,
        **{"spark.executor.memory": "512m", "spark.cores.max": "2"},
    )
    client = liftbridge.Client(server.address)
    try:
        source, sink = f"{unique_name}-in", f"{unique_name}-out"
        client.create_stream(source, partitions=3)
        client.create_stream(sink, partitions=2)
        fill(client, source, 90)
        liftbridge.spark.register(spark)
        _wait_for_executors(spark, 2)
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
        written = sdk_rows(client, sink, headers=True)
    finally:
        spark.stop()
        client.close()
    assert sorted((r[0], r[1], r[7]["n"]) for r in written) == sorted(
        (b"k%d" % (i % 7), b"value-%d" % i, b"%d" % i) for i in range(90)
    )


def test_exactly_once_batch_write_survives_killed_executors_and_driver(
    standalone: StandaloneCluster, server: LocalServer, unique_name: str, tmp_path: Path
) -> None:
    source, sink = f"{unique_name}-in", f"{unique_name}-out"
    with liftbridge.Client(server.address) as client:
        client.create_stream(source, partitions=2)
        client.create_stream(sink, partitions=3, optimistic_concurrency_control=True)
        fill(client, source, ROWS, headers=False)
        job = [server.address, "batch", source, sink, "eo-standalone"]
        events = run_with_kills(
            client, standalone.master, job, sink, tmp_path / "batch", standalone.pids
        )
        check_exactly_once(client, source, sink, events)
