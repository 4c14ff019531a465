"""Kafka-shaped headers, ``liftbridge.<option>`` client options, the Python
Spark starts its workers with, and queries started from threads other than
the main one (``local[2]``, the session's real server)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="needs the spark extra: pip install -e '.[spark]'")
pytest.importorskip("pyarrow", reason="needs the spark extra: pip install -e '.[spark]'")

from pyspark.sql import SparkSession

import liftbridge
import liftbridge.spark
from liftbridge import MissingDependencyError
from liftbridge.testing import LocalServer
from tests.spark.helpers import fill, sdk_rows

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]


def test_register_names_a_worker_python_that_cannot_import_the_connector(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # A Python without this checkout or the venv's packages (isolated, no site).
    other = tmp_path / "python3"
    other.write_text(f'#!/bin/sh\nexec "{sys.executable}" -I -S "$@"\n')
    other.chmod(0o755)
    monkeypatch.setenv("PYSPARK_PYTHON", str(other))
    with pytest.raises(MissingDependencyError) as failure:
        liftbridge.spark.register(spark)
    text = str(failure.value)
    assert str(other) in text and f"PYSPARK_PYTHON={sys.executable}" in text
    assert "No module named" in text
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    liftbridge.spark.register(spark)  # the right Python: no error


def test_kafka_shaped_headers_read_and_write_back(
    spark: SparkSession, server: LocalServer, client: liftbridge.Client, unique_name: str
) -> None:
    source, sink = f"{unique_name}-in", f"{unique_name}-out"
    client.create_stream(source, partitions=2)
    client.create_stream(sink)
    fill(client, source, 12)
    df = (
        spark.read.format("liftbridge")
        .option("servers", server.address)
        .option("stream", source)
        .option("includeHeaders", "true")
        .option("headersFormat", "array")
        .load()
    )
    assert df.schema["headers"].dataType.simpleString() == "array<struct<key:string,value:binary>>"
    got = sorted(
        (bytes(r.value), [(h.key, bytes(h.value)) for h in r.headers]) for r in df.collect()
    )
    assert got == sorted(
        (r[1], sorted(r[7].items())) for r in sdk_rows(client, source, headers=True)
    )
    # Written back as they are: an array of key/value structs is a header map again.
    df.select("key", "value", "headers").write.format("liftbridge").option(
        "servers", server.address
    ).option("stream", sink).mode("append").save()
    assert sorted((r[1], r[7]) for r in sdk_rows(client, sink, headers=True)) == sorted(
        (r[1], r[7]) for r in sdk_rows(client, source, headers=True)
    )


def test_client_options_pass_through_and_unknown_ones_fail_at_load(
    spark: SparkSession, server: LocalServer, client: liftbridge.Client, unique_name: str
) -> None:
    client.create_stream(unique_name)
    fill(client, unique_name, 5)
    df = (
        spark.read.format("liftbridge")
        .option("servers", server.address)
        .option("stream", unique_name)
        .option("liftbridge.rpcTimeoutMs", "4000")
        .option("liftbridge.connectTimeoutMs", "3000")
        .option("liftbridge.readReplica", "true")
        .load()
    )
    assert df.count() == 5
    with pytest.raises(Exception, match=r"option liftbridge\.rpctimeout is not a client option"):
        spark.read.format("liftbridge").option("servers", server.address).option(
            "stream", unique_name
        ).option("liftbridge.rpcTimeout", "4000").load()
    with pytest.raises(Exception, match=r"option liftbridge\.ackWaitMs must be an integer"):
        spark.createDataFrame([("v",)], "value string").write.format("liftbridge").option(
            "servers", server.address
        ).option("stream", unique_name).option("liftbridge.ackWaitMs", "soon").mode("append").save()
