"""examples/spark_pipeline.py runs as a user runs it (its own Spark driver,
``local[2]``) against the session's server."""

from __future__ import annotations

import json
import sys

import pytest

pytest.importorskip("pyspark", reason="needs the spark extra: pip install -e '.[spark]'")
pytest.importorskip("pyarrow", reason="needs the spark extra: pip install -e '.[spark]'")


import liftbridge
from liftbridge.testing import LocalServer
from tests.integration.examples import run_example
from tests.spark.conftest import need_java, python_path
from tests.spark.helpers import fill, sdk_rows

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]


def test_the_pipeline_example_aggregates_per_key_into_another_stream(
    server: LocalServer,
    client: liftbridge.Client,
    unique_name: str,
) -> None:
    source, target = f"{unique_name}-events", f"{unique_name}-totals"
    client.create_stream(source, partitions=3)
    client.create_stream(target, partitions=2)
    fill(client, source, 50, headers=False)
    need_java()
    out = run_example(
        "spark_pipeline.py",
        server.address,
        source,
        target,
        env={
            "PYTHONPATH": python_path(),
            "PYSPARK_PYTHON": sys.executable,
            "SPARK_LOCAL_IP": "127.0.0.1",
        },
        timeout=240,
    )
    assert f"wrote 7 per-key results to '{target}'" in out
    totals = {json.loads(r[1])["key"]: json.loads(r[1]) for r in sdk_rows(client, target)}
    expected_counts = {f"k{k}": len(range(k, 50, 7)) for k in range(7)}
    assert {k: v["messages"] for k, v in totals.items()} == expected_counts
    assert totals["k0"]["bytes"] == sum(len(b"value-%d" % i) for i in range(0, 50, 7))
    assert "k0: 8 messages" in out
