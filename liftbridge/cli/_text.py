"""What the ``liftbridge-cli`` command line reads and prints: start and stop
positions given as text, messages shown in the ``--format`` styles, publish input
read in the ``--input`` styles, and the optional progress bars (tqdm, the ``cli``
extra). Pure functions, except the bars, which write to stderr.
"""

from __future__ import annotations

import base64
import json
import re
import sys
from datetime import UTC, datetime, timedelta
from typing import Protocol

import liftbridge
from liftbridge._core._display import show_datetime

PROG = "liftbridge-cli"
"""The command's name: not ``liftbridge``, which is the server's executable."""

FORMATS = ("text", "value", "base64", "json", "hex")
INPUTS = ("raw", "base64", "json")
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d)$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


class CliError(Exception):
    """A problem with what the user asked for, found by the command line itself."""


# ----------------------------------------------------------- positions --


def _duration(text: str) -> timedelta | None:
    match = _DURATION.match(text)
    if match is None:
        return None
    return timedelta(seconds=float(match.group(1)) * _UNITS[match.group(2)])


def _time(text: str) -> datetime | None:
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def parse_start(text: str) -> liftbridge.StartPosition | int | datetime | timedelta:
    """``earliest``, ``latest``, ``new``, an offset, an ISO time or a duration ago (``5m``)."""
    named = {
        "earliest": liftbridge.StartPosition.EARLIEST,
        "latest": liftbridge.StartPosition.LATEST,
        "new": liftbridge.StartPosition.NEW_ONLY,
    }
    if text in named:
        return named[text]
    if text.isdigit():
        return int(text)
    ago = _duration(text)
    if ago is not None:
        return ago
    when = _time(text)
    if when is not None:
        return when
    raise CliError(
        f"--start {text!r}: use earliest, latest, new, an offset, an ISO time "
        "(2026-01-31T12:00:00Z) or a duration ago (30s, 5m, 2h, 1d)"
    )


def parse_stop(text: str) -> liftbridge.StopPosition | int | datetime | None:
    """``latest``, ``never``, an offset or an ISO time."""
    if text == "latest":
        return liftbridge.StopPosition.LATEST
    if text == "never":
        return None
    if text.isdigit():
        return int(text)
    when = _time(text)
    if when is not None:
        return when
    raise CliError(f"--stop {text!r}: use latest, never, an offset or an ISO time")


# -------------------------------------------------------------- output --


def _text(data: bytes | None) -> str:
    return "" if data is None else data.decode("utf-8", "backslashreplace")


def _json_bytes(data: bytes | None) -> str | dict[str, str] | None:
    """UTF-8 text as a string; other bytes as ``{"base64": ...}``."""
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode("ascii")}


def message_record(message: liftbridge.Message) -> dict[str, object]:
    """A message as a JSON-ready dict; bytes that are not UTF-8 as ``{"base64": ...}``."""
    return {
        "stream": message.stream,
        "partition": message.partition,
        "offset": message.offset,
        "timestamp": message.timestamp.isoformat(),
        "key": _json_bytes(message.key),
        "value": _json_bytes(message.value),
        "headers": {name: _json_bytes(v) for name, v in message.headers.items()},
    }


def format_message(message: liftbridge.Message, style: str) -> bytes:
    """One message as one line of output (without its newline) in the given format.

    ``value`` is the value's bytes exactly; ``base64`` and ``json`` are safe for
    any bytes, newlines included; ``text`` and ``hex`` are for people.
    """
    where = f"{message.partition}/{message.offset}"
    if style == "value":
        return message.value
    if style == "base64":
        return base64.b64encode(message.value)
    if style == "hex":
        return f"{where}  {message.value.hex(' ')}".encode()
    if style == "json":
        return json.dumps(message_record(message), ensure_ascii=False).encode()
    key = f"  key={_text(message.key)}" if message.key is not None else ""
    return f"{where}  {show_datetime(message.timestamp)}{key}  {_text(message.value)}".encode()


# --------------------------------------------------------------- input --


def strip_line(line: bytes) -> bytes:
    """A line of input without its ``\\n`` or ``\\r\\n``."""
    if line.endswith(b"\n"):
        line = line[:-1]
    if line.endswith(b"\r"):
        line = line[:-1]
    return line


def _bytes_field(record: dict[str, object], name: str, number: int) -> bytes | None:
    value = record.get(name)
    if value is None:
        return None
    if isinstance(value, str):
        return value.encode("utf-8", "surrogateescape")
    if isinstance(value, dict) and set(value) == {"base64"} and isinstance(value["base64"], str):
        return _b64(value["base64"], number)
    raise CliError(f'line {number}: {name!r} must be a string, {{"base64": ...}} or null')


def _b64(text: str | bytes, number: int) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:
        raise CliError(f"line {number}: not valid base64") from None


def parse_input(
    line: bytes, style: str, number: int
) -> tuple[bytes, bytes | None, dict[str, bytes] | None]:
    """One line of publish input as ``(value, key, headers)``; key and headers are
    ``None`` unless a ``json`` line gives them.

    Raises:
        CliError: the line does not fit the style, naming its number.
    """
    if style == "raw":
        return line, None, None
    if style == "base64":
        return _b64(line, number), None, None
    try:
        record = json.loads(line)
    except ValueError as e:
        raise CliError(f"line {number}: not JSON ({e})") from None
    if not isinstance(record, dict):
        raise CliError(f"line {number}: a JSON object with a 'value' is needed")
    value = _bytes_field(record, "value", number)
    if value is None:
        raise CliError(f"line {number}: the JSON object has no 'value'")
    headers_in = record.get("headers") or {}
    if not isinstance(headers_in, dict):
        raise CliError(f"line {number}: 'headers' must be an object")
    headers = {str(name): _bytes_field(headers_in, name, number) or b"" for name in headers_in}
    return value, _bytes_field(record, "key", number), headers or None


class Progress(Protocol):
    def update(self, n: int = 1) -> object: ...

    def close(self) -> None: ...


class _NoProgress:
    def update(self, n: int = 1) -> object:
        return None

    def close(self) -> None:
        return None


def progress(mode: str, *, total: int | None, unit: str, terminal: bool) -> Progress:
    """A tqdm bar on stderr when asked (``always``) or, for ``auto``, when the
    output it would share a screen with is not a terminal and stderr is one."""
    if mode == "never" or (mode == "auto" and not (terminal and sys.stderr.isatty())):
        return _NoProgress()
    try:
        from tqdm import tqdm
    except ImportError:
        return _NoProgress()
    bar: Progress = tqdm(total=total, unit=unit, file=sys.stderr, dynamic_ncols=True)
    return bar
