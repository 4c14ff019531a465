"""A description of the machine and software a benchmark ran on, for the results file."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

import grpc
from google.protobuf import __version__ as protobuf_version
from google.protobuf.internal import api_implementation

from liftbridge import __version__ as sdk_version


def _cpu_model() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return platform.processor() or "unknown"
    for line in text.splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _memory_mb() -> int | None:
    try:
        pages, page_size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None
    return pages * page_size // (1024 * 1024)


def _server_version(binary: str | None) -> str:
    if not binary:
        return "unknown"
    try:
        done = subprocess.run(
            [binary, "--version"], capture_output=True, text=True, timeout=10, check=False
        )
    except OSError:
        return "unknown"
    return done.stdout.strip() or "unknown"


def describe() -> dict[str, object]:
    """CPU, memory, platform and the versions that matter to the figures.

    The load average is taken when called: other processes on the machine
    (test suites, builds) make figures noisy, and this says how busy it was.
    """
    try:
        load: list[float] | None = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    return {
        "cpu_count": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "memory_mb": _memory_mb(),
        "platform": platform.platform(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "grpcio": grpc.__version__,
        "protobuf": protobuf_version,
        "protobuf_backend": api_implementation.Type(),
        "liftbridge_sdk": sdk_version,
        "liftbridge_server": _server_version(os.environ.get("LIFTBRIDGE_SERVER_BIN")),
        "load_average_at_start": load,
    }
