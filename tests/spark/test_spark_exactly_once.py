"""The exactly-once sink: Python workers and whole drivers SIGKILLed in the
middle of batch and streaming writes, the job run again, and every row is in
the target stream exactly once. The driver runs in a process of its own
(``tests.spark.eo_job``) so the test can kill it and its JVM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="needs the spark extra: pip install -e '.[spark]'")
pytest.importorskip("pyarrow", reason="needs the spark extra: pip install -e '.[spark]'")

import liftbridge
from liftbridge.testing import LocalServer
from tests.spark.conftest import REPO_ROOT, need_java, python_path
from tests.spark.helpers import fill

pytestmark = [pytest.mark.spark, pytest.mark.timeout(1800)]

ROWS = 4_000
RUN_TIMEOUT = 600.0


def _processes() -> dict[int, tuple[int, str]]:
    """Every process: pid -> (parent pid, command line)."""
    found: dict[int, tuple[int, str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            command = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        found[int(entry)] = (parent, command.replace(b"\0", b" ").decode(errors="replace"))
    return found


def kill_python_workers(roots: list[int]) -> int:
    """SIGKILLs the forked PySpark workers below ``roots`` (children of a
    ``pyspark.daemon`` process); returns how many."""
    processes = _processes()
    below, frontier = set(), list(roots)
    while frontier:
        pid = frontier.pop()
        children = [p for p, (parent, _) in processes.items() if parent == pid]
        below.update(children)
        frontier.extend(children)
    killed = 0
    for pid in below:
        parent, command = processes[pid]
        if "pyspark.daemon" in command and "pyspark.daemon" in processes.get(parent, (0, ""))[1]:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
    return killed


def stored(client: liftbridge.Client, stream: str) -> int:
    """Messages in the stream (sum of the partitions' high watermarks + 1)."""
    info = client.fetch_metadata().get_stream(stream)
    assert info is not None
    return sum(
        client.fetch_partition_metadata(stream, p).high_watermark + 1 for p in info.partitions
    )


def values(client: liftbridge.Client, stream: str) -> list[bytes]:
    info = client.fetch_metadata().get_stream(stream)
    assert info is not None
    found: list[bytes] = []
    for p in info.partitions:
        if client.fetch_partition_metadata(stream, p).high_watermark < 0:
            continue
        with client.subscribe(
            stream,
            partition=p,
            start=liftbridge.StartPosition.EARLIEST,
            stop=liftbridge.StopPosition.LATEST,
        ) as subscription:
            found.extend(m.value for m in subscription)
    return sorted(found)


def run_with_kills(
    client: liftbridge.Client,
    master: str,
    job: list[str],
    sink: str,
    log: Path,
    executors: list[int] | None = None,
) -> list[str]:
    """Runs the job; kills its Python workers (below ``executors``, default
    below the driver) when a tenth of the rows is stored and the whole driver
    at two fifths; then runs it again until it succeeds (three runs at most).
    Returns what happened, for the asserts."""
    command = [sys.executable, "-m", "tests.spark.eo_job", master, *job]
    env = {**os.environ, "PYTHONPATH": python_path()}
    events: list[str] = []
    for run in range(3):
        with (log.parent / f"{log.name}-{run}.log").open("wb") as out:
            process = subprocess.Popen(
                command, cwd=REPO_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + RUN_TIMEOUT
        try:
            while process.poll() is None:
                assert time.monotonic() < deadline, f"run {run} of the job did not finish"
                count = stored(client, sink)
                if run == 0 and "workers" not in " ".join(events) and count >= ROWS // 10:
                    killed = kill_python_workers(executors or [process.pid])
                    if killed:
                        events.append(f"killed {killed} python workers at {count}")
                if run == 0 and count >= ROWS * 2 // 5:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait(30)
                    events.append(f"killed the driver at {count}")
                    break
                time.sleep(0.05)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(30)
        if process.returncode == 0:
            events.append(f"run {run} succeeded")
            return events
    raise AssertionError(f"the job never succeeded: {events}; logs in {log.parent}")


def check_exactly_once(
    client: liftbridge.Client, source: str, sink: str, events: list[str]
) -> None:
    assert any("python workers" in e for e in events), events
    assert any("driver" in e for e in events), events
    assert values(client, sink) == values(client, source)  # each row exactly once


@pytest.mark.parametrize(
    "mode",
    [
        pytest.param(
            "batch",
            marks=pytest.mark.skipif(
                not os.environ.get("LIFTBRIDGE_SPARK_FULL"),
                reason="2-4 min; the batch write with kills runs on the standalone cluster "
                "(test_spark_cluster.py); set LIFTBRIDGE_SPARK_FULL=1 to run it on local[2] too",
            ),
        ),
        "stream",
    ],
)
def test_rows_are_stored_once_when_workers_and_the_driver_are_killed_mid_write(
    server: LocalServer, unique_name: str, tmp_path: Path, mode: str
) -> None:
    need_java()
    source, sink = f"{unique_name}-in", f"{unique_name}-out"
    with liftbridge.Client(server.address) as client:
        client.create_stream(source, partitions=2)
        client.create_stream(sink, partitions=3, optimistic_concurrency_control=True)
        fill(client, source, ROWS, headers=False)
        where = "eo-batch-test" if mode == "batch" else str(tmp_path / "checkpoint")
        events = run_with_kills(
            client, "local[2,4]", [server.address, mode, source, sink, where], sink, tmp_path / mode
        )
        check_exactly_once(client, source, sink, events)
