"""Fixtures shared by the whole test suite: real servers, unique names, and a
check that no SDK thread outlives its test."""

from __future__ import annotations

import os
import re
import threading
import time
import uuid
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

from liftbridge.testing import LocalCluster, LocalServer

REPO_ROOT = Path(__file__).resolve().parent.parent
SERVERS_BIN = REPO_ROOT / ".cache" / "servers" / "bin"

THREAD_PREFIX = "liftbridge-"
GRPC_SENDER = " (_run)"
"""The name suffix of the threads gRPC starts through its context runner
(``Thread-N (_run)``): each PublishAsync stream, the shared one and every
publish lane, has one sending its requests."""
THREAD_GRACE = 2.0
"""Seconds an SDK thread may take to finish after its test."""
SERVER_LOG_LINES = 60
"""Lines of each server's log a failed test's report shows (repeats folded)."""


def pytest_configure(config: pytest.Config) -> None:
    """Points the harness at the servers `make server` builds when the environment
    does not name them, so that a bare `pytest` works outside make."""
    for variable, name in (
        ("LIFTBRIDGE_SERVER_BIN", "liftbridge"),
        ("NATS_SERVER_BIN", "nats-server"),
    ):
        candidate = SERVERS_BIN / name
        if not os.environ.get(variable) and candidate.is_file():
            os.environ[variable] = str(candidate)


def _folded_tail(text: str) -> str:
    """The last ``SERVER_LOG_LINES`` lines of a server log, each run of one
    message (time stamp aside) folded into its first line and a count: a
    server retrying something logs the same line hundreds of times a second."""
    lines: list[str] = []
    repeats: list[int] = []
    for line in text.splitlines():
        message = line.partition(" level=")[2] or line
        if lines and message == lines[-1].partition(" level=")[2]:
            repeats[-1] += 1
            continue
        lines.append(line[:400])
        repeats.append(1)
    shown = zip(lines[-SERVER_LOG_LINES:], repeats[-SERVER_LOG_LINES:], strict=True)
    return "\n".join(line if n == 1 else f"{line}  [x{n}]" for line, n in shown)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Adds the tails of the servers' logs to the report of a failed test that
    used the ``cluster`` or ``server`` fixture: the harness removes the logs
    with the servers, and a failover that did not happen on a loaded CI
    machine cannot be explained from the client's side alone."""
    report = yield
    if report.when != "call" or not report.failed:
        return report
    used = getattr(item, "funcargs", {})
    try:
        cluster = used.get("cluster")
        if isinstance(cluster, LocalCluster):
            for node in cluster.nodes:
                tail = _folded_tail(node.log_tail(2_000))
                report.sections.append((f"server {node.server_id} log (tail)", tail))
        server = used.get("server")
        if isinstance(server, LocalServer):
            report.sections.append(("server log (tail)", _folded_tail(server.log_tail(2_000))))
    except Exception as e:  # a diagnostic: it must not turn a failure into an internal error
        report.sections.append(("server logs", f"not available: {e!r}"))
    return report


@pytest.fixture(autouse=True)
def no_leaked_liftbridge_threads() -> Iterator[None]:
    """Fails a test that leaves a ``liftbridge-*`` thread, or a gRPC stream's
    sender thread, running ``THREAD_GRACE`` seconds after it ends. Threads
    already running before it (started by wider fixtures) are not its
    responsibility."""
    before = set(threading.enumerate())
    yield
    deadline = time.monotonic() + THREAD_GRACE
    leaked = []
    for thread in threading.enumerate():
        ours = thread.name.startswith(THREAD_PREFIX) or thread.name.endswith(GRPC_SENDER)
        if thread in before or not ours:
            continue
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            leaked.append(thread.name)
    if leaked:
        names = ", ".join(sorted(leaked))
        pytest.fail(f"thread(s) outlived the test by {THREAD_GRACE}s: {names}", pytrace=False)


@pytest.fixture(scope="session")
def server() -> Iterator[LocalServer]:
    """One Liftbridge server with embedded NATS for the whole session.

    Tests share it: name streams with ``unique_name`` so they never collide.
    """
    with LocalServer() as local:
        yield local


@pytest.fixture(scope="session")
def server_address(server: LocalServer) -> str:
    """The session server's API address, ``"127.0.0.1:<port>"``."""
    return server.address


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    """A three-node cluster for one test module; started only when a test asks.

    Tests that kill or stop nodes should restart them before they end, so the
    next test of the module finds every node running.
    """
    with LocalCluster(3) as local:
        yield local


_NOT_NAME = re.compile(r"[^A-Za-z0-9_-]+")


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> str:
    """A fresh stream name for this test, e.g. ``"test_publish-1a2b3c4d"``.

    Only letters, digits, ``_`` and ``-``, so it is also a valid NATS subject.
    """
    base = _NOT_NAME.sub("-", request.node.name).strip("-")[:48] or "test"
    return f"{base}-{uuid.uuid4().hex[:8]}"
