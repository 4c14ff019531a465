"""A nats-server started from a config file, for the tests that need one set up
their own way (TLS with users, operator mode); stopped by its pid."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

DEADLINE = 10.0
"""Seconds for the server to listen, and then to stop."""


@contextmanager
def nats_server(folder: Path, config: Callable[[int], str]) -> Iterator[int]:
    """Runs nats-server with ``config(port)`` (written to ``folder``) on a free
    loopback port until the block ends; yields the port. Skips the test when no
    nats-server binary is known (``make server`` installs one)."""
    binary = os.environ.get("NATS_SERVER_BIN")
    if not binary:
        pytest.skip("no nats-server: run `make server` or set NATS_SERVER_BIN")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    (folder / "nats.conf").write_text(config(port), encoding="utf-8")
    log = folder / "nats-server.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [binary, "-c", str(folder / "nats.conf")], stdout=sink, stderr=subprocess.STDOUT
        )
    try:
        _wait_for_port(port, process, log)
        yield port
    finally:
        process.terminate()
        try:
            process.wait(DEADLINE)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(DEADLINE)


def _wait_for_port(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"nats-server exited: {log.read_text()[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)  # a fixture waiting for a port, not a stoppable loop
    raise RuntimeError(f"nats-server not listening on {port} after {DEADLINE:g}s")
