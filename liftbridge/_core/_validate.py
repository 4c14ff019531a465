"""Argument checks run before any RPC, so bad input fails fast with a message
that names the argument and what is allowed. One function per kind of value.

Why names and subjects are this strict: the server (v1.9.0) checks a new
stream only for an empty name and for empty subject tokens, then turns the
name into a directory ``<data.dir>/streams/<name>/`` and into the NATS
subjects ``<namespace>.<name>.<partition>.replicate`` / ``.offset``. A name
that is not one path component (``.``, ``..``, ``a/b``, a NUL, more than 255
bytes) or not valid NATS subject tokens (``a.``, ``a..b``, ``>`` in the
middle) makes the server panic when it applies the stream, and the entry stays
in its Raft log, so it panics again on every restart. The SDK is the only
guard, so it refuses everything the server cannot store:

* names (streams, groups, cursors, consumers): valid UTF-8, at most 255 bytes,
  no whitespace or control characters;
* stream names also: no ``/``, no ``*`` or ``>``, and dot-separated tokens that
  are never empty (no leading, trailing or double dot);
* cursor, group and consumer ids: no comma (the server keys a cursor as
  ``<cursor id>,<stream>,<partition>``, so a comma in the id would make two
  cursors share a key);
* subjects: valid UTF-8, at most 1024 bytes (the NATS protocol line that
  carries one is at most 4096 bytes, with the partition suffix, queue group
  and reply inbox), non-empty dot-separated tokens without whitespace or
  control characters; wildcards only where subscribing.
"""

from __future__ import annotations

import inspect
import math
import time
import warnings
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from liftbridge._errors import ArgumentTypeError, InvalidArgumentError, MessageTooLargeError


class _Sized(Protocol):
    """A request that knows its serialized size: a protobuf message, or a
    publish request written byte by byte."""

    def ByteSize(self) -> int: ...


RESERVED_STREAMS = frozenset({"__cursors", "__activity"})

BytesLike = bytes | bytearray | memoryview
"""What the SDK accepts wherever it takes bytes (stored as ``bytes``)."""

MAX_NAME_BYTES = 255
"""Longest name in UTF-8 bytes: a stream name is a directory name (NAME_MAX)."""

MAX_SUBJECT_BYTES = 1024
"""Longest NATS subject in UTF-8 bytes, well inside NATS's 4096-byte protocol line."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

SERVER_MAX_MESSAGE = 1024 * 1024
"""The server's default limit on one message: ``clustering.replication.max.bytes``
and NATS ``max_payload`` are both 1 MiB, counted on the envelope it stores."""

GRPC_MAX_MESSAGE = 4 * 1024 * 1024
"""The server's gRPC limit on one request; a bigger one breaks the whole stream."""

ENVELOPE_ALLOWANCE = 1200
"""Bytes the server adds around a publish request's fields before checking
its size: the 8-byte envelope header, the NATS subject (at most 1024 bytes
plus the partition suffix) and the ack inbox it generates
(``<namespace>.ack.<22 characters>``)."""

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

MAX_SECONDS = 10 * 365 * 24 * 3600
"""Longest duration or timeout: ten years. Far longer ones overflow gRPC
deadlines and ``threading`` waits."""


def _type_name(value: object) -> str:
    return type(value).__name__


def text(value: Any, *, arg: str, max_bytes: int | None = None) -> str:
    """A str that encodes as UTF-8 (no lone surrogates), optionally bounded in bytes."""
    if not isinstance(value, str):
        raise ArgumentTypeError(f"{arg} must be a str, got {_type_name(value)}")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as e:
        raise InvalidArgumentError(
            f"{arg} must be valid UTF-8 text, got {value!r} ({e.reason} at index {e.start})"
        ) from None
    if max_bytes is not None and size > max_bytes:
        raise InvalidArgumentError(
            f"{arg} must be at most {max_bytes} bytes in UTF-8, got {size} bytes"
        )
    return value


def printable(value: str, arg: str) -> None:
    """Refuses whitespace (any that str.isspace() knows) and control characters."""
    for c in value:
        if c.isspace():
            raise InvalidArgumentError(f"{arg} must not contain whitespace, got {value!r}")
        if c < " " or "\x7f" <= c <= "\x9f":
            raise InvalidArgumentError(f"{arg} must not contain control characters, got {value!r}")


def _name(value: Any, arg: str, max_bytes: int = MAX_NAME_BYTES) -> str:
    text(value, arg=arg, max_bytes=max_bytes)
    if not value:
        raise InvalidArgumentError(f"{arg} must not be empty")
    printable(value, arg)
    return str(value)


def stream_name(value: Any, *, arg: str = "stream", allow_reserved: bool = True) -> str:
    """A stream name the server can store (see the module docstring)."""
    _name(value, arg)
    if "/" in value:
        raise InvalidArgumentError(f"{arg} must not contain '/', got {value!r}")
    if "*" in value or ">" in value:
        raise InvalidArgumentError(
            f"{arg} must not contain the NATS wildcard characters '*' or '>', got {value!r}"
        )
    if "" in value.split("."):
        raise InvalidArgumentError(
            f"{arg} {value!r} has an empty dot-separated token (a leading, trailing "
            "or double dot): the server uses the name in NATS subjects"
        )
    if not allow_reserved and value in RESERVED_STREAMS:
        raise InvalidArgumentError(
            f"{arg} {value!r} is reserved for the server's internal streams "
            f"({', '.join(sorted(RESERVED_STREAMS))})"
        )
    return str(value)


def queue_group(value: Any, *, arg: str = "group") -> str:
    """A stream's load-balance group (a NATS queue group name)."""
    return _name(value, arg)


def identifier(value: Any, *, arg: str, max_bytes: int = MAX_NAME_BYTES) -> str:
    """A cursor id, consumer group id or consumer id: a name without commas."""
    _name(value, arg, max_bytes)
    if "," in value:
        raise InvalidArgumentError(
            f"{arg} must not contain ',' (the server joins cursor keys with commas), got {value!r}"
        )
    return str(value)


def subject(value: Any, *, arg: str = "subject", wildcards: bool = False) -> str:
    """A NATS subject: dot-separated non-empty tokens, no whitespace.

    Args:
        value: the subject.
        arg: the argument's name, for the message.
        wildcards: whether ``*`` tokens and a final ``>`` token are allowed.
    """
    text(value, arg=arg, max_bytes=MAX_SUBJECT_BYTES)
    if not value:
        raise InvalidArgumentError(f"{arg} must not be empty")
    printable(value, arg)
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
    return str(value)


def stream_subject(value: Any, *, partitions: Any, arg: str = "subject") -> str:
    """The subject of a new stream: partition N > 0 listens on ``<subject>.N``,
    so with several partitions the subject cannot end in ``>``."""
    subject(value, arg=arg, wildcards=True)
    if isinstance(partitions, int) and partitions > 1 and value.endswith(">"):
        raise InvalidArgumentError(
            f"{arg} {value!r} ends in '>', which cannot take the partition suffix "
            f"'.N' that partitions 1..{partitions - 1} listen on; use one partition or '*'"
        )
    return str(value)


def optional_text(value: Any, *, arg: str) -> str | None:
    """None, or a non-empty valid-UTF-8 str (for ids such as ``correlation_id``)."""
    if value is None:
        return None
    text(value, arg=arg)
    if not value:
        raise InvalidArgumentError(f"{arg} must be a non-empty str or None")
    return str(value)


def _int(value: Any, arg: str, minimum: int, maximum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgumentTypeError(f"{arg} must be an int, got {_type_name(value)}")
    if value < minimum:
        raise InvalidArgumentError(f"{arg} must be >= {minimum}, got {value}")
    if value > maximum:
        bits = {INT32_MAX: 32, INT64_MAX: 64}.get(maximum)
        why = f" (it is sent as a signed {bits}-bit int)" if bits else ""
        raise InvalidArgumentError(f"{arg} must be <= {maximum}{why}, got {value}")
    return int(value)


def timestamp_ns(value: Any, *, arg: str) -> int:
    """A timezone-aware datetime as unix nanoseconds, within what a signed 64-bit
    int of nanoseconds holds (years 1677 to 2262)."""
    if not isinstance(value, datetime):
        raise ArgumentTypeError(f"{arg} must be a datetime, got {_type_name(value)}")
    if value.tzinfo is None:
        raise InvalidArgumentError(
            f"{arg} must be timezone-aware (e.g. datetime.now(timezone.utc))"
        )
    ns = (value - _EPOCH) // timedelta(microseconds=1) * 1000
    if not -INT64_MAX <= ns <= INT64_MAX:
        raise InvalidArgumentError(
            f"{arg} must be between the years 1677 and 2262 (unix nanoseconds in 64 bits), "
            f"got {value.isoformat()}"
        )
    return ns


def datetime_of_ns(ns: int) -> datetime:
    """Unix nanoseconds as an aware UTC datetime, cut to whole microseconds (the
    inverse of :func:`timestamp_ns`: a datetime read from a message and given back
    as a start position is at or before the message, never after it)."""
    return _EPOCH + timedelta(microseconds=ns // 1000)


def time_before_now_ns(value: Any, *, arg: str) -> int:
    """A timedelta >= 0, as the unix nanoseconds that long before now."""
    if not isinstance(value, timedelta):
        raise ArgumentTypeError(f"{arg} must be a timedelta, got {_type_name(value)}")
    if value < timedelta(0):
        raise InvalidArgumentError(f"{arg} time delta must be >= 0, got {value}")
    ns = time.time_ns() - value // timedelta(microseconds=1) * 1000
    if ns < -INT64_MAX:
        raise InvalidArgumentError(
            f"{arg} must reach back no further than 1677 (unix nanoseconds in 64 bits), got {value}"
        )
    return ns


def int32(value: Any, *, arg: str, minimum: int = 0) -> int:
    """An int from ``minimum`` up to the largest signed 32-bit int (bool refused)."""
    return _int(value, arg, minimum, INT32_MAX)


INT64_MIN = -(2**63)


def int64(value: Any, *, arg: str, minimum: int = 0) -> int:
    """An int from ``minimum`` up to the largest signed 64-bit int (bool refused)."""
    return _int(value, arg, minimum, INT64_MAX)


MAX_PARTITIONS = 10_000
"""Most partitions of one stream. The wire allows any int32, but the server
allocates them all at once and lists every partition in one Raft entry and in
every FetchMetadata response (which gRPC caps at 4 MiB): 2**31 - 1 of them
exhausts its memory, and tens of thousands break metadata for every client."""


def partition_count(value: Any, *, arg: str = "partitions") -> int:
    """The number of partitions of a new stream: 1 to :data:`MAX_PARTITIONS`."""
    return _int(value, arg, 1, MAX_PARTITIONS)


def partition(value: Any, *, arg: str = "partition") -> int:
    """A partition number: an int from 0 to 2**31 - 1 (bool is refused)."""
    return _int(value, arg, 0, INT32_MAX)


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
    """An int >= minimum that fits in 64 bits (bool is refused)."""
    return _int(value, arg, minimum, INT64_MAX)


def seconds(value: Any, *, arg: str, allow_zero: bool = False) -> float:
    """A duration in seconds: a finite number > 0 (or >= 0 with allow_zero),
    at most :data:`MAX_SECONDS`."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ArgumentTypeError(f"{arg} must be a number of seconds, got {_type_name(value)}")
    bound = ">= 0" if allow_zero else "> 0"
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidArgumentError(
            f"{arg} must be a finite number of seconds ({bound}, at most {MAX_SECONDS}), "
            f"got {value}"
        )
    if value < 0 or (value == 0 and not allow_zero):
        raise InvalidArgumentError(f"{arg} must be {bound} seconds, got {value}")
    if value > MAX_SECONDS:
        raise InvalidArgumentError(
            f"{arg} must be at most {MAX_SECONDS} seconds (ten years), got {value}"
        )
    return float(value)


def number(value: Any, *, arg: str, minimum: float, maximum: float) -> float:
    """A finite int or float from ``minimum`` to ``maximum`` (bool is refused)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ArgumentTypeError(f"{arg} must be a number, got {_type_name(value)}")
    if not minimum <= value <= maximum:  # False for NaN too
        raise InvalidArgumentError(
            f"{arg} must be a number from {minimum:g} to {maximum:g}, got {value}"
        )
    return float(value)


def optional_seconds(value: Any, *, arg: str = "timeout", allow_zero: bool = True) -> float | None:
    """None (no limit, or the default), or :func:`seconds`."""
    if value is None:
        return None
    return seconds(value, arg=arg, allow_zero=allow_zero)


def flag(value: Any, *, arg: str) -> bool:
    """A bool (ints such as 1 are refused: they usually mean a misplaced argument)."""
    if not isinstance(value, bool):
        raise ArgumentTypeError(f"{arg} must be a bool, got {_type_name(value)}")
    return value


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
    """An optional mapping of str (valid UTF-8) to bytes-like."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ArgumentTypeError(f"{arg} must be a mapping of str to bytes, got {_type_name(value)}")
    out: dict[str, bytes] = {}
    for name, raw in value.items():
        if not isinstance(name, str):
            raise ArgumentTypeError(f"{arg} keys must be str, got {_type_name(name)}")
        text(name, arg=f"{arg} key {name!r}")
        out[name] = data(raw, arg=f"{arg}[{name!r}]")
    return out


def address(value: Any, *, arg: str = "addresses") -> str:
    """A ``host:port`` address with a port from 1 to 65535."""
    if not isinstance(value, str):
        raise ArgumentTypeError(f"{arg} must hold 'host:port' str, got {_type_name(value)}")
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isascii() or not port.isdigit():
        raise InvalidArgumentError(f"{arg}: address {value!r} is not of the form 'host:port'")
    if not 1 <= int(port) <= 65535:
        raise InvalidArgumentError(f"{arg}: address {value!r}: the port must be from 1 to 65535")
    text(value, arg=arg)
    printable(value, arg)
    return value


def partitioner(value: Any, *, arg: str = "partitioner") -> Any:
    """An object with a ``partition(stream, key, value, metadata)`` method:
    an instance, not a class, and not a str (``str.partition`` exists too)."""
    if isinstance(value, type):
        raise ArgumentTypeError(
            f"{arg} must be an instance, got the class {value.__name__} (write {value.__name__}())"
        )
    if isinstance(value, (str, bytes, bytearray)) or not callable(
        getattr(value, "partition", None)
    ):
        raise ArgumentTypeError(
            f"{arg} must implement partition(stream, key, value, metadata), "
            f"e.g. liftbridge.PartitionByKey(); got {_type_name(value)}"
        )
    return value


def message_size_limit(value: Any, *, arg: str = "max_message_size") -> int:
    """The client's limit on a publish request, in bytes: from 4096 up to the
    server's 4 MiB gRPC limit."""
    return _int(value, arg, 4096, GRPC_MAX_MESSAGE)


def message_size(request: _Sized, *, limit: int) -> None:
    """Refuses a publish request too large for the server to store, before it
    is sent: on a PublishAsync stream an oversized request would break the
    stream and fail every other publish in flight on it.

    Raises:
        MessageTooLargeError: the serialized request plus
            :data:`ENVELOPE_ALLOWANCE` exceeds ``limit``.
    """
    size = request.ByteSize()
    if size + ENVELOPE_ALLOWANCE > limit:
        raise MessageTooLargeError(
            f"the message is {size} bytes serialized; with {ENVELOPE_ALLOWANCE} bytes for the "
            f"server's envelope it exceeds the client's max_message_size of {limit} bytes "
            "(the server's clustering.replication.max.bytes and NATS max_payload); "
            "nothing was sent"
        )


def callback(value: Any, *, arg: str, shape: str, optional: bool = True) -> Any:
    """A callable that takes the positional arguments ``shape`` names, e.g.
    ``"(message, error)"``: a handler of the wrong arity fails here, when it
    is passed, not later in a log line from the thread that calls it. A
    callable whose signature Python cannot read (some builtins) is accepted."""
    if value is None and optional:
        return None
    if isinstance(value, (str, bytes, bytearray)) or not callable(value):
        allowed = "a callable or None" if optional else "a callable"
        raise ArgumentTypeError(f"{arg} must be {allowed} {shape}, got {_type_name(value)}")
    count = len([part for part in shape.strip("()").split(",") if part.strip()])
    try:
        signature = inspect.signature(value)
    except (TypeError, ValueError):
        return value
    try:
        signature.bind(*([None] * count))
    except TypeError as e:
        raise ArgumentTypeError(
            f"{arg} must take {count} positional argument(s) {shape}; "
            f"{getattr(value, '__qualname__', _type_name(value))}{signature} does not ({e})"
        ) from None
    return value


def deprecated(old: str, new: str, *, stacklevel: int = 3) -> None:
    """Warns (DeprecationWarning, at the caller's caller) that ``old`` is an old
    name of ``new``, kept for one release."""
    warnings.warn(f"{old} is deprecated: use {new}", DeprecationWarning, stacklevel=stacklevel)


def renamed(value: Any, old_value: Any, *, arg: str, old: str) -> Any:
    """The value of an option that has a deprecated second name: ``old_value``
    (with a DeprecationWarning pointing at the caller's caller) when the old
    name was given, else ``value``."""
    if old_value is None:
        return value
    warnings.warn(f"{old} is deprecated: use {arg}", DeprecationWarning, stacklevel=3)
    return old_value
