"""Runs the scripts in examples/ as a user would, for the tests that check them."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run_example(
    name: str, *args: str, env: Mapping[str, str] | None = None, timeout: float = 60.0
) -> str:
    """Runs ``examples/<name>`` with the arguments and extra environment
    variables; returns its output, failing on a non-zero exit."""
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        check=False,
    )
    assert done.returncode == 0, f"{name} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout
