"""The package as a pip user gets it: build the wheel, install it into a fresh
virtualenv of each supported Python, and run the README's tour there against
the session's real server."""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from liftbridge.testing._process import free_port
from tests import readme_blocks

REPO = Path(__file__).resolve().parents[2]
PYENV = Path.home() / ".pyenv" / "versions"

_NOT_SOURCE = shutil.ignore_patterns(
    ".git", ".venv", ".cache", ".nox", "build", "dist", "*.egg-info", "__pycache__", "*_cache"
)

pytestmark = [pytest.mark.install, pytest.mark.timeout(900)]


def _interpreter(minor: str) -> str | None:
    """A CPython 3.<minor> executable: this one, else pyenv's newest of that line."""
    if f"{sys.version_info[0]}.{sys.version_info[1]}" == minor:
        return sys.executable
    candidates = sorted(PYENV.glob(f"{minor}.*/bin/python3")) if PYENV.is_dir() else []
    return str(candidates[-1]) if candidates else None


def _run(
    args: list[str], *, timeout: float, env: dict[str, str] | None = None, cwd: Path | None = None
) -> str:
    done = subprocess.run(
        args, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd, check=False
    )
    assert done.returncode == 0, f"{args} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel `pip wheel .` builds from this checkout (isolated build, PEP 517)."""
    out = tmp_path_factory.mktemp("wheel")
    # Built from a copy: pip builds in the source tree, and a build/ left in the
    # checkout could slip stale modules into later wheels.
    source = tmp_path_factory.mktemp("source") / "liftbridge"
    shutil.copytree(REPO, source, ignore=_NOT_SOURCE)
    _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out), str(source)],
        timeout=300,
    )
    (built,) = out.glob("liftbridge-*.whl")
    return built


def test_wheel_carries_license_metadata_and_typing(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (metadata_name,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        metadata = archive.read(metadata_name).decode()
        entry_points = archive.read(metadata_name.replace("METADATA", "entry_points.txt"))
    assert "License-Expression: Apache-2.0" in metadata
    assert any(n.endswith("licenses/LICENSE") for n in names)
    assert "Requires-Python: >=3.11" in metadata
    for minor in ("3.11", "3.12", "3.13"):
        assert f"Classifier: Programming Language :: Python :: {minor}" in metadata
    assert "Project-URL: Homepage, https://liftbridge.io" in metadata
    # [nats] never pins or downgrades anything; pynats2's needs are its own extra's.
    nats_requires = [r for r in metadata.splitlines() if 'extra == "nats"' in r]
    assert nats_requires and not any("setuptools" in r or "pynats2" in r for r in nats_requires)
    assert 'Requires-Dist: setuptools<81; extra == "pynats2"' in metadata
    for dependency in ("grpcio", "hpack", "protobuf", "tenacity"):  # the README names each
        assert f"Requires-Dist: {dependency}" in metadata
        assert dependency in (REPO / "README.md").read_text().split("## Installing")[1][:600]
    assert "liftbridge/py.typed" in names
    assert "liftbridge_api/api.proto" in names
    assert not any(n.startswith(("tests/", "examples/", "bench/")) for n in names)
    assert b"liftbridge-cli = liftbridge.cli:main" in entry_points
    assert b"liftbridge = " not in entry_points  # the server's name, never ours


def _readme_tour(stream: str, address: str) -> str:
    """The README's tour, literally, with the session server's address and a
    stream name of this test's own."""
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("## A short tour") :]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match is not None, "the README's tour has no python block"
    code = match.group(1)
    assert '"127.0.0.1:9292"' in code and '"orders"' in code
    return code.replace('"127.0.0.1:9292"', repr(address)).replace('"orders"', repr(stream))


@pytest.mark.parametrize("minor", ["3.11", "3.12", "3.13"])
def test_fresh_venv_runs_the_readme_tour(
    wheel: Path, tmp_path: Path, minor: str, server_address: str, unique_name: str
) -> None:
    python = _interpreter(minor)
    if python is None:
        pytest.skip(f"no Python {minor} on this machine (looked in {PYENV})")
    # Nothing of this checkout or of the test run's venv may leak in.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    venv = tmp_path / "venv"
    _run([python, "-m", "venv", str(venv)], timeout=120, env=env, cwd=tmp_path)
    bin_dir = venv / "bin"
    _run(
        [str(bin_dir / "python"), "-m", "pip", "install", "--quiet", str(wheel)],
        timeout=600,
        env=env,
    )

    script = tmp_path / "tour.py"
    script.write_text(_readme_tour(unique_name, server_address))
    out = _run([str(bin_dir / "python"), str(script)], timeout=120, env=env, cwd=tmp_path)
    # The iterator printed every message of partition 0 (the 1,000 pipelined ones at least).
    assert len(re.findall(r"^\d+ ", out, re.MULTILINE)) >= 1000, out[-2000:]
    where = _run(
        [str(bin_dir / "python"), "-c", "import liftbridge; print(liftbridge.__file__)"],
        timeout=60,
        env=env,
        cwd=tmp_path,
    )
    assert str(venv) in where
    # The console script and `python -m liftbridge` are installed with it.
    help_text = _run([str(bin_dir / "liftbridge-cli"), "--help"], timeout=60, env=env, cwd=tmp_path)
    assert "streams" in help_text
    listing = _run(
        [str(bin_dir / "python"), "-m", "liftbridge", "--address", server_address, "streams"],
        timeout=60,
        env=env,
        cwd=tmp_path,
    )
    assert unique_name in listing


def test_fresh_venv_dev_server_through_the_cli_runs_the_readme_twice(
    wheel: Path, tmp_path: Path
) -> None:
    """The first hour of a pip user: install the wheel (no dev extras; pandas and
    pyarrow for the notebook block), start a server with ``liftbridge-cli
    dev-server``, and run every Python block of the README in order, twice."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], timeout=120, env=env, cwd=tmp_path)
    python = str(venv / "bin" / "python")
    _run(
        [python, "-m", "pip", "install", "--quiet", f"{wheel}[pandas,arrow]"],
        timeout=600,
        env=env,
    )
    port, nats_port = free_port(), free_port()
    dev = subprocess.Popen(
        [
            str(venv / "bin" / "liftbridge-cli"),
            "dev-server",
            "--json",
            "--port",
            str(port),
            "--nats-port",
            str(nats_port),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
        env=env,
    )
    try:
        assert dev.stdout is not None
        ready, _, _ = select.select([dev.stdout], [], [], 90)
        assert ready, "the dev server printed nothing within 90 s"
        started = json.loads(dev.stdout.readline())
        script = tmp_path / "readme.py"
        script.write_text(readme_blocks.script(started["address"], started["nats_url"]))
        for run in (1, 2):
            out = _run([python, str(script)], timeout=300, env=env, cwd=tmp_path)
            printed = re.findall(r"^\d+ None \{", out, re.MULTILINE)  # the tour's iterator
            assert len(printed) >= 1000 * run, f"run {run}: {out[-2000:]}"
        dev.send_signal(signal.SIGTERM)
        _, err = dev.communicate(timeout=60)
        assert dev.returncode == 0, err.decode()
    finally:
        if dev.poll() is None:
            dev.kill()
            dev.communicate(timeout=10)
