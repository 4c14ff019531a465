"""A ``PublishRequest`` written byte by byte, for publishes on the
PublishAsync stream without headers or an ack inbox (nearly all).

The generated class costs a pipelined publish three times over: building
the request field by field on the publishing thread, reading four of its
fields back there (each read of a upb field is a dozen lines of Python's
work), and serializing it on the sender. Joining the fields' bytes here
once, next to the few values the publisher reads as plain attributes,
costs a fraction of that (figures in CHANGELOG.md).

The bytes are what protobuf's own serializer writes for the same request
(fields in number order, proto3 zeros left out), so the server reads them
as any other: tests compare both for every shape. Publishes with headers
(a map, whose order the serializer does not fix) or an ack inbox (sent by
the unary Publish RPC, which takes the generated class) keep the generated
class. Pure functions; thread-safe.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

from liftbridge._publish._bytes import SMALL_VARINTS as _SMALL
from liftbridge._publish._bytes import varint
from liftbridge_api import api_pb2

# Field keys of api.proto's PublishRequest: (number << 3) | wire type (0 varint, 2 bytes).
_KEY = b"\x0a"  # 1: bytes key
_VALUE = b"\x12"  # 2: bytes value
_STREAM = b"\x1a"  # 3: string stream
_PARTITION = b"\x20"  # 4: int32 partition
_CORRELATION_ID = b"\x3a"  # 7: string correlationId
_ACK_POLICY = b"\x40"  # 8: AckPolicy ackPolicy
_EXPECTED_OFFSET = b"\x48"  # 9: int64 expectedOffset

_NO_OFFSET = _EXPECTED_OFFSET + varint(-1)
"""expectedOffset -1 ("no expectation", set on every publish without one): ten bytes."""
_POLICIES = (b"", _ACK_POLICY + varint(1), _ACK_POLICY + varint(2))
"""The ackPolicy field of each wire AckPolicy (LEADER, 0, is left out)."""


class PublishBytes:
    """A publish request already serialized (``wire``), with the fields the
    publisher, its error messages and a batch's later requests read, under
    the generated class's names (its value is in ``wire`` alone). Made by
    :func:`publish_bytes`; not changed after.

    It has no ``__init__``: ``PublishBytes()`` runs object's own (C slots,
    no Python frame), ~350 instructions cheaper than ``object.__new__(
    PublishBytes)``, a C call with an argument tuple sliced (callgrind)."""

    __slots__ = (
        "ackPolicy",
        "correlationId",
        "expectedOffset",
        "key",
        "partition",
        "stream",
        "wire",
    )

    ackInbox = ""  # never one: a publish naming an ack inbox keeps the generated class

    stream: str
    partition: int
    correlationId: str
    ackPolicy: int
    key: bytes | None
    expectedOffset: int
    wire: bytes

    def SerializeToString(self) -> bytes:
        """The request's bytes."""
        return self.wire

    def ByteSize(self) -> int:
        """The request's size in bytes."""
        return len(self.wire)

    def __repr__(self) -> str:
        return (
            f"PublishBytes(stream={self.stream!r}, partition={self.partition}, "
            f"correlationId={self.correlationId!r}, ackPolicy={self.ackPolicy}, "
            f"{len(self.wire)} bytes)"
        )


Request = api_pb2.PublishRequest | PublishBytes
"""A publish request as the publisher takes it: either carries the fields it
reads (stream, partition, correlationId, ackPolicy, ackInbox) and
``SerializeToString``."""

_join = b"".join


def stream_field(stream: str) -> bytes:
    """The stream field of every request to ``stream`` (a checked name):
    computed once per stream by the caller."""
    data = stream.encode()
    return _STREAM + varint(len(data)) + data


_PLAIN_TAILS = tuple(policy + _NO_OFFSET for policy in _POLICIES)
"""What ends a request without a key, partition or expected offset, by wire AckPolicy."""
_VALUE_HEADS = (b"", *(_VALUE + _SMALL[size] for size in range(1, 128)))
"""The value field's key and length, by the value's size (an empty value is left out)."""


@functools.lru_cache(maxsize=256)
def _value_head(size: int) -> bytes:
    """The value field's key and length for a value of ``size`` bytes (128 or
    more): a publisher sends the same few sizes over and over."""
    return _VALUE + varint(size)


def plain_publish_bytes(
    stream: str, field: bytes, value: bytes, correlation_id: str, ack_policy: int
) -> PublishBytes:
    """:func:`publish_bytes` of a publish with no key, partition 0 and no
    expected offset (``publish_async(stream, value)``, the commonest call):
    the same request, with fewer arguments and tests."""
    request = PublishBytes()
    request.stream = stream
    request.partition = 0
    request.correlationId = correlation_id
    request.ackPolicy = ack_policy
    request.key = None
    request.expectedOffset = -1
    size = len(value)
    cid = correlation_id.encode()
    request.wire = _join(  # ~0.1 us less than b"%s..." % (...) for the same bytes
        (
            _VALUE_HEADS[size] if size < 128 else _value_head(size),
            value,
            field,
            _CORRELATION_ID,
            _SMALL[len(cid)] if len(cid) < 128 else varint(len(cid)),
            cid,
            _PLAIN_TAILS[ack_policy],
        )
    )
    return request


def publish_bytes(
    stream: str,
    field: bytes,
    value: bytes,
    correlation_id: str,
    key: bytes | None,
    partition: int,
    ack_policy: int,
    expected_offset: int,
) -> PublishBytes:
    """The request of a publish without headers or an ack inbox, its
    arguments checked: ``field`` is :func:`stream_field` of ``stream``,
    ``ack_policy`` the wire AckPolicy, ``expected_offset`` -1 for none.
    Called with positional arguments: keywords cost a call more."""
    request = PublishBytes()
    request.stream = stream
    request.partition = partition
    request.correlationId = correlation_id
    request.ackPolicy = ack_policy
    request.key = key
    request.expectedOffset = expected_offset
    size = len(value)
    cid = correlation_id.encode()
    tail = _SMALL[len(cid)] if len(cid) < 128 else varint(len(cid))
    if not key and not partition and expected_offset == -1:
        # The commonest request: value, stream, correlation id, policy, no expected offset.
        request.wire = b"%s%s%s%s\x3a%s%s%s%s" % (
            _VALUE if size else b"",
            (_SMALL[size] if size < 128 else varint(size)) if size else b"",
            value,
            field,
            tail,
            cid,
            _POLICIES[ack_policy],
            _NO_OFFSET,
        )
        return request
    parts = [_KEY, varint(len(key)), key] if key else []
    if size:
        parts += (_VALUE, varint(size), value)
    parts.append(field)
    if partition:
        parts += (_PARTITION, varint(partition))
    parts += (_CORRELATION_ID, tail, cid, _POLICIES[ack_policy])
    if expected_offset:
        parts += (_EXPECTED_OFFSET, varint(expected_offset))
    request.wire = b"".join(parts)
    return request


def publish_bytes_like(
    first: PublishBytes, field: bytes, values: Iterable[bytes], correlation_ids: Iterable[str]
) -> list[PublishBytes]:
    """:func:`publish_bytes` of each of ``values`` with its correlation id and
    ``first``'s other fields (``field`` is its stream's :func:`stream_field`):
    a ``publish_many_async`` batch's later requests. What surrounds the value
    and the id is joined once for all of them, and each request costs one
    formatting and no call."""
    # Every field but the id and the value: the same in each request.
    shared = (first.stream, first.partition, first.ackPolicy, first.key, first.expectedOffset)
    _, partition, policy, key, expected_offset = shared
    head = _KEY + varint(len(key)) + key if key else b""
    middle = field + (_PARTITION + varint(partition) if partition else b"") + _CORRELATION_ID
    tail = _POLICIES[policy] + (
        _EXPECTED_OFFSET + varint(expected_offset) if expected_offset else b""
    )
    requests: list[PublishBytes] = []
    append = requests.append
    for value, correlation_id in zip(values, correlation_ids, strict=True):
        request = PublishBytes()
        (
            request.stream,
            request.partition,
            request.ackPolicy,
            request.key,
            request.expectedOffset,
        ) = shared
        request.correlationId = correlation_id
        size, cid = len(value), correlation_id.encode()
        request.wire = b"%s%s%s%s%s%s%s" % (
            head,
            _VALUE_HEADS[size] if size < 128 else _value_head(size),
            value,
            middle,
            _SMALL[len(cid)] if len(cid) < 128 else varint(len(cid)),
            cid,
            tail,
        )
        append(request)
    return requests
