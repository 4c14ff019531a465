"""What a NATS server says before any client connects: its ``INFO`` greeting.

Both NATS publishers read it on a socket of their own first: pynats2 leaks a
socket or spins when nothing (or not NATS) answers, and TLS is refused up
front against a server that only allows it. The greeting also gives
the server's ``max_payload``.
"""

from __future__ import annotations

import json
import socket
from typing import Any

from liftbridge._errors import UnavailableError

DEFAULT_PORT = 4222
"""NATS's port when a URL names none."""

_MAX_INFO_LINE = 64 * 1024
"""The longest INFO line read (real ones are under 1 KiB)."""


def _read_greeting(host: str, port: int, timeout: float) -> bytes:
    """Connects to a NATS server and returns its first line (its INFO)."""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        line = b""
        while b"\r\n" not in line and len(line) < _MAX_INFO_LINE:
            chunk = sock.recv(4096)
            if not chunk:
                break
            line += chunk
    return line.split(b"\r\n", 1)[0]


def server_info(host: str, port: int, timeout: float) -> dict[str, Any]:
    """Checks that a NATS server answers at host:port and returns its INFO.

    Raises:
        UnavailableError: nothing answers, or what answers is not NATS.
    """
    where = f"{host}:{port}"
    try:
        line = _read_greeting(host, port, timeout)
    except OSError as e:
        raise UnavailableError(f"cannot reach a NATS server at {where}: {e}") from e
    if not line.startswith(b"INFO "):
        raise UnavailableError(
            f"{where} is not a NATS server: it greeted with {line[:40]!r}, not INFO"
        )
    try:
        info = json.loads(line[5:])
    except ValueError:
        info = None
    return info if isinstance(info, dict) else {}
