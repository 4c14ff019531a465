"""The official Go client (go-liftbridge v2.3.0) as benchmark drivers.

``scripts/build-bench-go.sh`` builds ``bench/go`` into ``.cache/bench-go/<key>``
(``key``: a hash of its sources, so checkouts with different drivers sharing
one ``.cache`` never swap each other's binary mid-run);
each :class:`GoDriver` keeps one such process running for one workload and
stream, and asks it for a run of ``count`` messages per line on its stdin.
The process times itself (wall clock and its own CPU), so starting it and
connecting are not counted, as they are not for the SDK and floor drivers.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import threading
from pathlib import Path

from bench.stats import Run

ROOT = Path(__file__).resolve().parent.parent


def _source_key() -> str:
    digest = hashlib.sha256()
    for path in sorted((ROOT / "bench" / "go").iterdir()):
        if path.suffix == ".go" or path.name in ("go.mod", "go.sum"):
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


BINARY = ROOT / ".cache" / "bench-go" / _source_key() / "liftbridge-bench-go"
BUILD_SCRIPT = ROOT / "scripts" / "build-bench-go.sh"
_WAIT = 600.0
"""Seconds one run may take before the process is declared stuck."""


class GoDriverError(RuntimeError):
    """The Go driver could not be built or started, or a run failed."""


def build() -> Path:
    """Builds the Go driver if its sources changed since the last build; returns its path."""
    done = subprocess.run(
        ["bash", str(BUILD_SCRIPT), str(BINARY.parent)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if done.returncode != 0 or not BINARY.is_file():
        raise GoDriverError(f"building the Go driver failed:\n{done.stderr[-2000:]}")
    return BINARY


class GoDriver:
    """One Go process running one workload against one stream.

    Args:
        address: a broker's host:port.
        workload: ``publish``, ``publish_async``, ``subscribe`` or ``e2e``
            (publish at ``rate`` to a subscription in the same process).
        stream: the stream, already created.
        value_size: bytes per value (publishes) or per stored message (subscribe).
        window: publishes in flight for ``publish_async``.
        last_offset: the partition's last offset, for ``subscribe``.
        partition: the partition read, for ``subscribe``.
        rate: publishes a second for ``e2e`` (0: as fast as ``window`` allows).
    """

    def __init__(
        self,
        address: str,
        workload: str,
        stream: str,
        value_size: int,
        *,
        window: int = 1024,
        last_offset: int = -1,
        partition: int = 0,
        rate: float = 0.0,
    ) -> None:
        self._value_size = value_size
        command = [
            str(BINARY),
            f"-addr={address}",
            f"-workload={workload}",
            f"-stream={stream}",
            f"-size={value_size}",
            f"-window={window}",
            f"-last-offset={last_offset}",
            f"-partition={partition}",
        ]
        if workload == "e2e":  # a flag older builds lack (the build folder is shared)
            command.append(f"-rate={rate:g}")
        self._process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def run(self, count: int) -> Run:
        process = self._process
        assert process.stdin is not None and process.stdout is not None
        try:
            process.stdin.write(f"{count}\n")
            process.stdin.flush()
        except OSError as e:
            raise GoDriverError(f"the Go driver exited: {self._stderr()}") from e
        line = self._read_line(process)
        if not line:
            raise GoDriverError(f"the Go driver exited: {self._stderr()}")
        result = json.loads(line)
        if result.get("error"):
            raise GoDriverError(f"Go run failed: {result['error']}")
        return Run(
            count=int(result["count"]),
            seconds=float(result["seconds"]),
            payload_bytes=int(result["count"]) * self._value_size,
            cpu_seconds=float(result["cpu_seconds"]),
            latencies=tuple(float(x) for x in result.get("latencies") or ()),
        )

    def _read_line(self, process: subprocess.Popen[str]) -> str:
        """The process's next stdout line, or a GoDriverError after ``_WAIT`` seconds."""
        assert process.stdout is not None
        lines: list[str] = []
        reader = threading.Thread(
            target=lambda: lines.append(process.stdout.readline()),  # type: ignore[union-attr]
            name="bench-go-reader",
            daemon=True,
        )
        reader.start()
        reader.join(_WAIT)
        if reader.is_alive():
            process.kill()
            raise GoDriverError(f"the Go driver gave no result within {_WAIT:g}s")
        return lines[0] if lines else ""

    def _stderr(self) -> str:
        self._process.kill()
        _, err = self._process.communicate(timeout=10)
        return err.strip()[-2000:]

    def close(self) -> None:
        process = self._process
        if process.poll() is None:
            try:
                assert process.stdin is not None
                process.stdin.write("\n")
                process.stdin.flush()
                process.wait(10)
            except (OSError, subprocess.TimeoutExpired):
                process.kill()
                process.wait(10)
        for pipe in (process.stdin, process.stdout, process.stderr):
            if pipe is not None:
                pipe.close()
