"""Servers started by the harness die with the test process, even when it is
SIGKILLed and its exit hook never runs (issue 15: an orphaned server was found
running an hour after its test process was killed)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the parent-death signal is Linux-only"
)

GONE_WITHIN = 15.0
"""Seconds the kernel gets to kill and reap the orphans (a busy machine)."""

_CHILD = """
import json, sys, threading
from liftbridge.testing import LocalCluster, LocalServer

server = LocalServer().start()
# A cluster started from a thread that then ends: its processes must survive
# the thread (the parent-death signal follows the forking thread).
holder = {}
starter = threading.Thread(target=lambda: holder.update(c=LocalCluster(1).start()))
starter.start()
starter.join(60)
cluster = holder["c"]
print(json.dumps({
    "pids": [server.pid, cluster.nats_pid, cluster.nodes[0].pid],
    "dirs": [str(server.data_dir.parent), str(cluster.nodes[0].data_dir.parent.parent)],
}), flush=True)
sys.stdin.read()  # until the test kills us
"""


def _dead(pid: int) -> bool:
    """True when ``pid`` is gone or a zombie waiting for init to reap it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def test_servers_die_when_the_test_process_is_killed() -> None:
    started: dict[str, list[object]] = {}
    with subprocess.Popen(
        [sys.executable, "-c", _CHILD],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    ) as child:
        try:
            _kill_and_watch(child, started)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait(10)
            for directory in started.get("dirs", []):
                shutil.rmtree(str(directory), ignore_errors=True)


def _kill_and_watch(child: subprocess.Popen[bytes], started: dict[str, list[object]]) -> None:
    assert child.stdout is not None
    line = child.stdout.readline()  # bounded by the test's timeout
    started.update(json.loads(line))
    pids = [int(str(pid)) for pid in started["pids"]]
    assert not any(_dead(pid) for pid in pids), "a server was not running"
    # The threaded start returned, its thread ended: the servers must still run.
    time.sleep(0.5)
    assert not any(_dead(pid) for pid in pids), "a server died with its starting thread"
    child.send_signal(signal.SIGKILL)
    child.wait(10)
    deadline = time.monotonic() + GONE_WITHIN
    while not all(_dead(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    survivors = [pid for pid in pids if not _dead(pid)]
    assert not survivors, f"server pids {survivors} outlived their killed parent"
