"""A publish envelope's ``Message`` protobuf, written byte by byte.

The NATS stream publisher writes one ``Message`` per publish, with at most
the fields offset, key, value, ack inbox, correlation id and ack policy
(headers go through the generated class instead). Building a generated
message and serializing it costs about a microsecond; joining the few
fields' bytes here costs a fifth of that, on the thread that publishes.

The bytes are what protobuf's own serializer writes for the same message
(fields in number order, proto3 defaults left out), so the server reads
them as it reads any other: a test checks both agree.
Pure functions; thread-safe.
"""

from __future__ import annotations

# Field keys: (field number << 3) | wire type (0 varint, 2 length-delimited).
_OFFSET = b"\x08"  # 1: int64 offset
_KEY = b"\x12"  # 2: bytes key
_VALUE = b"\x1a"  # 3: bytes value
_ACK_INBOX = b"\x52"  # 10: string ackInbox
_CORRELATION_ID = b"\x5a"  # 11: string correlationId
_ACK_POLICY = b"\x60"  # 12: AckPolicy ackPolicy

# An int64 of -1 ("no expected offset") as a varint: ten bytes.
_NO_OFFSET = _OFFSET + b"\xff" * 9 + b"\x01"
# One-byte varints, the length of nearly every field.
_SMALL = tuple(bytes((n,)) for n in range(128))


def varint(number: int) -> bytes:
    """A non-negative int (or a negative int64, as its two's complement) as a
    protobuf varint."""
    if 0 <= number < 128:
        return _SMALL[number]
    number &= (1 << 64) - 1
    out = bytearray()
    while number >= 0x80:
        out.append((number & 0x7F) | 0x80)
        number >>= 7
    out.append(number)
    return bytes(out)


def ack_inbox_field(ack_inbox: str) -> bytes:
    """The ackInbox field of every publish made with ``ack_inbox`` (computed
    once per publisher)."""
    if not ack_inbox:
        return b""
    data = ack_inbox.encode()
    return _ACK_INBOX + varint(len(data)) + data


def message_bytes(
    value: bytes,
    correlation_id: str,
    *,
    key: bytes | None,
    ack_inbox: bytes,
    ack_policy: int,
    offset: int,
) -> bytes:
    """The serialized ``Message`` of a publish without headers.

    Args:
        value: the payload.
        correlation_id: the publish's correlation id.
        key: the message key, if any.
        ack_inbox: :func:`ack_inbox_field` of the ack inbox (empty for no ack).
        ack_policy: the wire value of the AckPolicy.
        offset: the expected offset, -1 for none.
    """
    parts = [_NO_OFFSET if offset == -1 else _OFFSET + varint(offset) if offset else b""]
    if key:
        parts += (_KEY, varint(len(key)), key)
    if value:
        parts += (_VALUE, varint(len(value)), value)
    parts.append(ack_inbox)
    if correlation_id:
        data = correlation_id.encode()
        parts += (_CORRELATION_ID, varint(len(data)), data)
    if ack_policy:
        parts += (_ACK_POLICY, varint(ack_policy))
    return b"".join(parts)
