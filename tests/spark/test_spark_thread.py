"""``writeStream`` started from a thread other than the main one: it fails
with DATA_SOURCE_NOT_FOUND (plain ``threading.Thread`` and
``pyspark.InheritableThread`` alike) unless the thread first makes the session
the active one of its JVM side, which ``createDataFrame`` does."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="needs the spark extra: pip install -e '.[spark]'")
pytest.importorskip("pyarrow", reason="needs the spark extra: pip install -e '.[spark]'")

from pyspark.sql import SparkSession

import liftbridge
import liftbridge.spark
from liftbridge.testing import LocalServer
from tests.spark.helpers import fill, sdk_rows

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]


def test_a_stream_to_stream_query_started_from_another_thread_runs(
    spark: SparkSession,
    server: LocalServer,
    client: liftbridge.Client,
    unique_name: str,
    tmp_path: Path,
) -> None:
    source, sink = f"{unique_name}-in", f"{unique_name}-out"
    client.create_stream(source)
    client.create_stream(sink)
    fill(client, source, 10)
    liftbridge.spark.register(spark)
    failures: list[BaseException] = []

    def run() -> None:
        try:
            # createDataFrame makes the session the active one of this thread's JVM side.
            spark.createDataFrame([(1,)], "x int")
            query = (
                spark.readStream.format("liftbridge")
                .option("servers", server.address)
                .option("stream", source)
                .option("startingOffsets", "earliest")
                .load()
                .select("key", "value")
                .writeStream.format("liftbridge")
                .option("servers", server.address)
                .option("stream", sink)
                .option("checkpointLocation", str(tmp_path / "checkpoint"))
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination(120)
            query.stop()
        except BaseException as e:
            failures.append(e)

    thread = threading.Thread(target=run, name="not-main")
    thread.start()
    thread.join(180)
    assert [str(f)[:3000] for f in failures] == []
    assert sorted(r[1] for r in sdk_rows(client, sink)) == sorted(
        r[1] for r in sdk_rows(client, source)
    )
