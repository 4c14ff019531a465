"""What a NATS server says about itself: its ``INFO``, checked before use.

Both NATS publishers read the greeting on a socket of their own first
(:func:`server_info`): pynats2 leaks a socket or spins when nothing (or not
NATS) answers, and TLS is refused up front against a server that only allows
it. Every ``INFO`` the SDK reads, that greeting and those a connection gets
later, goes through :func:`check_info`: a field the SDK acts on with the
wrong type or out of range is a :class:`ProtocolError`, never a raw
``ValueError`` on some thread.
"""

from __future__ import annotations

import json
import socket
from typing import Any

from liftbridge._errors import ProtocolError, UnavailableError

DEFAULT_PORT = 4222
"""NATS's port when a URL names none."""

DEFAULT_MAX_PAYLOAD = 1024 * 1024
"""NATS's own default ``max_payload``, taken when an ``INFO`` names none."""

MAX_PAYLOAD_LIMIT = 64 * 1024 * 1024
"""The largest ``max_payload`` a NATS server can be set to (64 MiB), and
grpcio's default message size limit too; an ``INFO`` offering more is refused."""

MAX_INFO_LINE = 64 * 1024
"""The longest INFO line read (real ones are under 1 KiB; a cluster's
``connect_urls`` make them longer)."""

_FLAGS = ("tls_required", "tls_available", "headers", "auth_required")
_TEXTS = ("nonce", "server_id", "version")


def parse_info(text: bytes, where: str) -> dict[str, Any]:
    """The JSON object after ``INFO ``, checked by :func:`check_info`.

    Raises:
        ProtocolError: not JSON, not an object, or a field out of range.
    """
    try:
        info = json.loads(text)
    except (ValueError, RecursionError) as e:  # RecursionError: "[[[[..." nested deep
        raise ProtocolError(f"{where} sent an INFO that is not JSON: {e}") from e
    return check_info(info, where)


def check_info(info: object, where: str) -> dict[str, Any]:
    """``info`` when the fields the SDK reads have their types and ranges;
    ``max_payload`` is set (the default when absent).

    Raises:
        ProtocolError: naming the field and the value sent.
    """
    if not isinstance(info, dict):
        raise ProtocolError(f"{where} sent an INFO that is not a JSON object: {_short(info)}")
    max_payload = info.get("max_payload", DEFAULT_MAX_PAYLOAD)
    if type(max_payload) is not int or not 0 < max_payload <= MAX_PAYLOAD_LIMIT:
        raise ProtocolError(
            f"{where} sent an INFO with max_payload {_short(max_payload)}: "
            f"not a number of bytes from 1 to {MAX_PAYLOAD_LIMIT}"
        )
    for name in _FLAGS:
        if name in info and type(info[name]) is not bool:
            raise ProtocolError(
                f"{where} sent an INFO with {name} {_short(info[name])}: not a bool"
            )
    for name in _TEXTS:
        if name in info and type(info[name]) is not str:
            raise ProtocolError(f"{where} sent an INFO with {name} {_short(info[name])}: not text")
    return {**info, "max_payload": max_payload}


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _read_greeting(host: str, port: int, timeout: float) -> bytes:
    """Connects to a NATS server and returns its first line (its INFO)."""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        line = b""
        while b"\r\n" not in line and len(line) < MAX_INFO_LINE:
            chunk = sock.recv(4096)
            if not chunk:
                break
            line += chunk
    return line.split(b"\r\n", 1)[0]


def server_info(host: str, port: int, timeout: float) -> dict[str, Any]:
    """Checks that a NATS server answers at host:port and returns its INFO.

    Raises:
        UnavailableError: nothing answers, or what answers is not NATS.
        ProtocolError: its INFO is malformed (:func:`check_info`).
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
    return parse_info(line[5:], f"the NATS server at {where}")
