"""Every Python block of the README runs as written, in order, against a local
server, and a second run works too (no StreamExistsError)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import liftbridge
from liftbridge.testing import LocalServer
from tests import readme_blocks

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def readme_server() -> Iterator[LocalServer]:
    """A server of this module's own: the README uses fixed names ("orders")."""
    with LocalServer() as server:
        yield server


def test_only_blocks_that_need_spark_or_docker_are_left_out() -> None:
    found = readme_blocks.blocks()
    assert len(found) >= 9
    left_out = {b.not_run for b in found if b.not_run is not None}
    assert left_out == {"needs Docker", "needs a SparkSession: the spark extra and Java"}
    assert sum(b.not_run is None for b in found) >= 7


def test_the_readme_runs_in_order_twice(readme_server: LocalServer, tmp_path: Path) -> None:
    script = tmp_path / "readme.py"
    script.write_text(readme_blocks.script(readme_server.address, readme_server.nats_url))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for run in (1, 2):
        done = subprocess.run(
            [sys.executable, str(script)],
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
            cwd=tmp_path,
            env=env,
        )
        assert done.returncode == 0, f"run {run}:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
        assert "StreamExistsError" not in done.stderr
        # The tour's iterator printed partition 0 (1,000 pipelined messages a run at least).
        printed = re.findall(r"^\d+ None \{", done.stdout, re.MULTILINE)  # offset, key, headers
        assert len(printed) >= 1000 * run, done.stdout[-2000:]


def test_read_stream_reads_every_partition(client: liftbridge.Client, unique_name: str) -> None:
    client.create_stream(unique_name, partitions=3)
    for partition in range(3):
        for n in range(partition + 2):
            client.publish(unique_name, b"%d-%d" % (partition, n), partition=partition)
    everything = client.read_stream(unique_name)
    assert [(m.partition, m.offset) for m in everything] == [
        (p, o) for p in range(3) for o in range(p + 2)
    ]
    some = client.read_stream(unique_name, start=1, stop=2, partitions=[2])
    assert [m.value for m in some] == [b"2-1", b"2-2"]
    with pytest.raises(liftbridge.InvalidArgumentError, match="stop must not be None"):
        client.read_stream(unique_name, stop=None)  # type: ignore[arg-type]
    with pytest.raises(liftbridge.NoSuchStreamError, match="nope-"):
        client.read_stream(f"nope-{unique_name}")
