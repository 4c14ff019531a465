"""scripts/install-server.sh: idempotent, and clear when Go is missing."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "install-server.sh"


def test_missing_go_is_named(tmp_path: Path) -> None:
    bash = shutil.which("bash")
    assert bash is not None
    done = subprocess.run(
        [bash, str(SCRIPT), str(tmp_path / "servers")],
        env={"PATH": "/nonexistent"},  # no go here
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert "Go toolchain ('go') is not on PATH" in done.stderr


def test_second_run_is_instant_when_built(tmp_path: Path) -> None:
    bin_dir = tmp_path / "servers" / "bin"
    bin_dir.mkdir(parents=True)
    for name, version in (("liftbridge", "v1.9.0"), ("nats-server", "v2.10.22")):
        exe = bin_dir / name
        exe.write_text("#!/bin/sh\n")
        exe.chmod(0o755)
        (bin_dir / f"{name}.version").write_text(version + "\n")
    done = subprocess.run(
        ["bash", str(SCRIPT), str(tmp_path / "servers")],
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""  # nothing rebuilt
