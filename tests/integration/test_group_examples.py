"""The consumer-group examples, each run as a script against a real server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from liftbridge.testing import LocalServer

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run_example(name: str, address: str, *, by_env: bool = False) -> str:
    """Runs ``examples/<name>``; returns its output, failing on a non-zero exit."""
    env = dict(os.environ)
    args = [sys.executable, str(EXAMPLES / name)]
    if by_env:
        env["LIFTBRIDGE_ADDRESS"] = address
    else:
        args.append(address)
    result = subprocess.run(args, capture_output=True, text=True, timeout=100, env=env)
    assert result.returncode == 0, f"{name} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def test_consumer_group_example(server: LocalServer) -> None:
    output = run_example("consumer_group.py", server.address)
    assert "all 30 handled; bob leaves" in output
    assert "bob: revoked" in output
    assert "all 60 handled, none skipped" in output


def test_pinned_pair_example(server: LocalServer) -> None:
    output = run_example("pinned_pair.py", server.address, by_env=True)
    assert "standby is active" in output
    assert "each hand-over resumed at the committed offset + 1" in output


def test_overflow_member_example(server: LocalServer) -> None:
    output = run_example("overflow_member.py", server.address)
    assert "overflow member in group: False" in output
    assert "overflow member joined" in output
    assert "the overflow member handled" in output and "and left" in output
