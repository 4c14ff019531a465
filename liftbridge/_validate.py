"""Argument checks run before any RPC, so bad input fails fast with a message
that names the argument and what is allowed."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from liftbridge._errors import ArgumentTypeError, InvalidArgumentError

RESERVED_STREAMS = frozenset({"__cursors", "__activity"})

BytesLike = bytes | bytearray | memoryview
"""What the SDK accepts wherever it takes bytes (stored as ``bytes``)."""


def _type_name(value: object) -> str:
    return type(value).__name__


def stream_name(value: Any, *, arg: str = "stream", allow_reserved: bool = True) -> str:
    """A stream name: a non-empty str without whitespace."""
    if not isinstance(value, str):
        raise ArgumentTypeError(f"{arg} must be a str, got {_type_name(value)}")
    if not value:
        raise InvalidArgumentError(f"{arg} must not be empty")
    if value.split() != [value]:  # splits at exactly the characters str.isspace() matches
        raise InvalidArgumentError(f"{arg} must not contain whitespace, got {value!r}")
    if not allow_reserved and value in RESERVED_STREAMS:
        raise InvalidArgumentError(
            f"{arg} {value!r} is reserved for the server's internal streams "
            f"({', '.join(sorted(RESERVED_STREAMS))})"
        )
    return value


def subject(value: Any, *, arg: str = "subject", wildcards: bool = False) -> str:
    """A NATS subject: dot-separated non-empty tokens, no whitespace.

    Args:
        value: the subject.
        arg: the argument's name, for the message.
        wildcards: whether ``*`` tokens and a final ``>`` token are allowed.
    """
    if not isinstance(value, str):
        raise ArgumentTypeError(f"{arg} must be a str, got {_type_name(value)}")
    if not value:
        raise InvalidArgumentError(f"{arg} must not be empty")
    if any(c.isspace() for c in value):
        raise InvalidArgumentError(f"{arg} must not contain whitespace, got {value!r}")
    tokens = value.split(".")
    for i, token in enumerate(tokens):
        if not token:
            raise InvalidArgumentError(
                f"{arg} {value!r} has an empty token (a leading, trailing or double dot)"
            )
        is_wild = token in ("*", ">") or ("*" in token or ">" in token)
        if is_wild:
            if not wildcards:
                raise InvalidArgumentError(f"{arg} {value!r} must not contain wildcards ('*', '>')")
            if token not in ("*", ">") or (token == ">" and i != len(tokens) - 1):
                raise InvalidArgumentError(
                    f"{arg} {value!r}: '*' must be a whole token and '>' the whole last token"
                )
    return value


def partition(value: Any, *, arg: str = "partition") -> int:
    """A partition number: an int >= 0 (bool is refused)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgumentTypeError(f"{arg} must be an int, got {_type_name(value)}")
    if value < 0:
        raise InvalidArgumentError(f"{arg} must be >= 0, got {value}")
    if value > 2**31 - 1:
        raise InvalidArgumentError(f"{arg} must fit in 32 bits, got {value}")
    return value


def partitions(value: Any, *, arg: str = "partitions") -> list[int]:
    """An optional iterable of partition numbers; None means all."""
    if value is None:
        return []
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise ArgumentTypeError(
            f"{arg} must be an iterable of ints or None, got {_type_name(value)}"
        )
    return [partition(p, arg=f"{arg}[{i}]") for i, p in enumerate(value)]


def positive_int(value: Any, *, arg: str, minimum: int = 1) -> int:
    """An int >= minimum (bool is refused)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgumentTypeError(f"{arg} must be an int, got {_type_name(value)}")
    if value < minimum:
        raise InvalidArgumentError(f"{arg} must be >= {minimum}, got {value}")
    return value


def seconds(value: Any, *, arg: str, allow_zero: bool = False) -> float:
    """A duration in seconds: a number > 0 (or >= 0 with allow_zero)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ArgumentTypeError(f"{arg} must be a number of seconds, got {_type_name(value)}")
    if value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise InvalidArgumentError(f"{arg} must be {bound} seconds, got {value}")
    return float(value)


def optional_bytes(value: Any, *, arg: str) -> bytes | None:
    """None, or bytes-like (bytes, bytearray, memoryview) converted to bytes."""
    if value is None:
        return None
    return data(value, arg=arg)


def data(value: Any, *, arg: str = "value") -> bytes:
    """Bytes-like (bytes, bytearray, memoryview); a str is refused with a hint."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    hint = " (encode text first, e.g. value.encode())" if isinstance(value, str) else ""
    raise ArgumentTypeError(f"{arg} must be bytes, got {_type_name(value)}{hint}")


def headers(value: Any, *, arg: str = "headers") -> dict[str, bytes]:
    """An optional mapping of str to bytes-like."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ArgumentTypeError(f"{arg} must be a mapping of str to bytes, got {_type_name(value)}")
    out: dict[str, bytes] = {}
    for name, raw in value.items():
        if not isinstance(name, str):
            raise ArgumentTypeError(f"{arg} keys must be str, got {_type_name(name)}")
        out[name] = data(raw, arg=f"{arg}[{name!r}]")
    return out
