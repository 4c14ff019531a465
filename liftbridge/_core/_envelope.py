"""The Liftbridge envelope: how messages and acks travel as plain NATS messages.

Pure functions, no I/O; thread-safe. An envelope is an 8-byte header, an
optional 4-byte CRC-32C, then a protobuf::

    bytes 0-3   magic B9 0E 43 B4
    byte  4     protocol version, 0
    byte  5     header length: 8, or 12 with a CRC
    byte  6     flags; bit 0 = CRC-32C present
    byte  7     type: 0 = publish (a Message), 1 = ack (an Ack), 2-14 server-internal
    bytes 8-11  with the CRC flag, CRC-32C (Castagnoli) of the payload, big-endian

The server stores the Message of a publish envelope received on a stream's
subject (key, value, headers) and sends an ack envelope to its ``ackInbox``.
The Message's ``offset`` field carries the expected offset for streams with
optimistic concurrency control (the server's own Publish RPC puts it there),
with -1 meaning "no expectation": :func:`encode_message` always sets it.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, TypeVar

from google.protobuf.message import DecodeError
from google.protobuf.message import Message as ProtoMessage

from liftbridge._core import _validate
from liftbridge._core._acks import Ack, AckPolicy, ack_from_proto
from liftbridge._core._crc32c import crc32c
from liftbridge._core._messages import Message, message_from_proto
from liftbridge._core._validate import BytesLike
from liftbridge._errors import ArgumentTypeError, EnvelopeError, InvalidArgumentError
from liftbridge_api import api_pb2

MAGIC = b"\xb9\x0e\x43\xb4"
VERSION = 0
HEADER_LENGTH = 8
CRC_HEADER_LENGTH = 12
_FLAG_CRC = 0x01
_LAST_INTERNAL_TYPE = 14
# What the Message's offset field holds when the publisher expects no offset.
_NO_EXPECTED_OFFSET = -1

_Proto = TypeVar("_Proto", bound=ProtoMessage)


class EnvelopeType(enum.IntEnum):
    """The envelope types a client sends or receives (byte 7 of the header)."""

    MESSAGE = 0
    """A publish: the payload is a ``Message``."""
    ACK = 1
    """An acknowledgement: the payload is an ``Ack``."""


PLAIN_ACK_HEADER = MAGIC + bytes((VERSION, HEADER_LENGTH, 0, EnvelopeType.ACK))
"""The header of every ack the server sends (no CRC): such an ack skips the
field-by-field checks of decode_envelope, which would accept it as is."""
ack_from_string = api_pb2.Ack.FromString
"""Parses a serialized wire Ack (raises ``DecodeError``): :func:`ack_wire`
after the header, for a publisher reading many acks at once."""


def _describe_type(value: int) -> str:
    """Names a type byte for error messages, e.g. ``"an Ack (type 1)"``."""
    if value == EnvelopeType.MESSAGE:
        return "a Message (type 0)"
    if value == EnvelopeType.ACK:
        return "an Ack (type 1)"
    if value <= _LAST_INTERNAL_TYPE:
        return f"a server-internal type ({value})"
    return f"an unknown type ({value})"


def encode_envelope(kind: EnvelopeType, payload: bytes, *, crc: bool = False) -> bytes:
    """Wraps a serialized protobuf in an envelope header.

    Args:
        kind: what the payload is.
        payload: the serialized protobuf.
        crc: add the CRC-32C of the payload (header length 12, flag bit 0).

    Returns:
        The envelope, ready to publish on NATS.
    """
    if crc:
        header = bytes((VERSION, CRC_HEADER_LENGTH, _FLAG_CRC, kind))
        return MAGIC + header + crc32c(payload).to_bytes(4, "big") + payload
    return MAGIC + bytes((VERSION, HEADER_LENGTH, 0, kind)) + payload


def decode_envelope(data: Any, expected: EnvelopeType) -> bytes:
    """Checks an envelope header and returns its payload.

    Stricter than the server, which only checks the header length when the
    CRC flag is set: here the header length must match the flags either way.
    Other flag bits are ignored, as the server does.

    Args:
        data: the NATS message payload (bytes, bytearray or memoryview).
        expected: the type the caller can decode.

    Returns:
        The payload after the header (not yet parsed).

    Raises:
        ArgumentTypeError: ``data`` is not bytes-like.
        EnvelopeError: the bytes are not an envelope of the expected type,
            or its CRC does not match; the message says which check failed.
    """
    raw = _validate.data(data, arg="data")
    if len(raw) < HEADER_LENGTH:
        raise EnvelopeError(
            f"not a Liftbridge envelope: {len(raw)} bytes, shorter than the "
            f"{HEADER_LENGTH}-byte header"
        )
    magic = raw[:4]
    if magic != MAGIC:
        raise EnvelopeError(f"not a Liftbridge envelope: bad magic {magic!r}")
    version, header_length, flags, kind = raw[4:8]
    if version != VERSION:
        raise EnvelopeError(
            f"unsupported envelope protocol version {version} (this SDK reads version {VERSION})"
        )
    has_crc = bool(flags & _FLAG_CRC)
    wanted_length = CRC_HEADER_LENGTH if has_crc else HEADER_LENGTH
    if header_length != wanted_length:
        crc_state = "set" if has_crc else "clear"
        raise EnvelopeError(
            f"envelope header length {header_length} does not match its flags 0x{flags:02x}: "
            f"with the CRC flag {crc_state} it must be {wanted_length}"
        )
    if len(raw) < header_length:
        raise EnvelopeError(
            f"envelope truncated: {len(raw)} bytes, shorter than its {header_length}-byte header"
        )
    if kind != expected:
        raise EnvelopeError(
            f"envelope holds {_describe_type(kind)}, expected {_describe_type(expected)}"
        )
    payload = raw[header_length:]
    if has_crc:
        declared = int.from_bytes(raw[HEADER_LENGTH:CRC_HEADER_LENGTH], "big")
        actual = crc32c(payload)
        if declared != actual:
            raise EnvelopeError(
                f"CRC-32C mismatch: header 0x{declared:08x}, payload 0x{actual:08x}"
            )
    return payload


def encode_message(
    value: BytesLike,
    *,
    key: BytesLike | None = None,
    headers: Mapping[str, BytesLike] | None = None,
    ack_inbox: str = "",
    correlation_id: str = "",
    ack_policy: AckPolicy = AckPolicy.LEADER,
    expected_offset: int | None = None,
    crc: bool = False,
) -> bytes:
    """Builds a publish envelope to send on a stream's NATS subject yourself.

    Publishing this on the subject of a stream partition stores the message
    with its key and headers, and (unless ``ack_policy`` is NONE) makes the
    server publish an ack envelope to ``ack_inbox``; read it with
    :func:`decode_ack`. Pure function; thread-safe.

    Args:
        value: the message payload.
        key: the message key, ``None`` for none.
        headers: header name to bytes.
        ack_inbox: the NATS subject the server publishes the ack to; empty
            for no ack.
        correlation_id: copied into the ack, to match it to this message.
        ack_policy: when the server acks.
        expected_offset: for streams with optimistic concurrency control, the
            offset the message must land at (the server acks a mismatch with
            an :class:`IncorrectOffsetError`); ``None`` for no expectation.
            Streams without concurrency control ignore it.
        crc: add a CRC-32C of the payload, which the server verifies (it
            drops the message, unacked, on a mismatch).

    Returns:
        The envelope bytes.

    Raises:
        ArgumentTypeError: an argument has the wrong type (e.g. ``str`` for
            ``value``).
        InvalidArgumentError: ``ack_inbox`` is not a NATS subject a message
            can be published to, or ``expected_offset`` is negative.
    """
    if not isinstance(crc, bool):
        raise ArgumentTypeError(f"crc must be a bool, got {type(crc).__name__}")
    message = api_pb2.Message(
        value=_validate.data(value, arg="value"),
        key=_validate.optional_bytes(key, arg="key") or b"",
        headers=_validate.headers(headers),
        ackInbox=_ack_inbox(ack_inbox),
        correlationId=_text(correlation_id, arg="correlation_id"),
        ackPolicy=_ack_policy(ack_policy),
        offset=_expected_offset(expected_offset),
    )
    return encode_envelope(EnvelopeType.MESSAGE, message.SerializeToString(), crc=crc)


def decode_message(data: bytes) -> Message:
    """Reads a publish envelope, as built by :func:`encode_message`.

    Nothing has been stored yet, so the returned message's ``offset`` is the
    offset the publisher expects it to land at, or -1 for none; ``stream``,
    ``partition`` and ``timestamp_ns`` are unset. Pure function; thread-safe.

    Args:
        data: the NATS message payload.

    Returns:
        The message, with its key, value and headers.

    Raises:
        ArgumentTypeError: ``data`` is not bytes-like.
        EnvelopeError: ``data`` is not a publish envelope (the message says
            which check failed) or its protobuf does not parse.
    """
    payload = decode_envelope(data, EnvelopeType.MESSAGE)
    return message_from_proto(_parse(api_pb2.Message(), payload, "Message"))


def decode_ack(data: bytes) -> Ack:
    """Reads an ack envelope, as the server publishes to a message's ack inbox.

    A refusal by the server (a wrong expected offset, a message too large) is
    still an ack: its ``error`` holds the matching exception. Pure function;
    thread-safe.

    Args:
        data: the NATS message payload.

    Returns:
        The ack.

    Raises:
        ArgumentTypeError: ``data`` is not bytes-like.
        EnvelopeError: ``data`` is not an ack envelope (the message says
            which check failed) or its protobuf does not parse.
    """
    pb = ack_proto(data)
    try:
        return ack_from_proto(pb)
    except ValueError as e:  # an ack policy this SDK does not know
        raise EnvelopeError(f"envelope Ack has a value this SDK does not know: {e}") from e


def ack_proto(data: bytes) -> api_pb2.Ack:
    """The wire Ack of an ack envelope, not yet made into an :class:`Ack`.

    Raises:
        ArgumentTypeError: ``data`` is not bytes-like.
        EnvelopeError: ``data`` is not an ack envelope or does not parse.
    """
    return ack_wire(data)[1]


def ack_wire(data: bytes) -> tuple[bytes, api_pb2.Ack]:
    """The wire Ack of an ack envelope, serialized and parsed: a publisher
    reads the parsed one as far as its correlation id, policy and error, and
    keeps the bytes (:func:`~liftbridge._core._acks.ack_of_wire`) for a
    publish still pending, letting the protobuf go at once.

    Raises:
        ArgumentTypeError: ``data`` is not bytes-like.
        EnvelopeError: ``data`` is not an ack envelope or does not parse.
    """
    if type(data) is bytes and data[:HEADER_LENGTH] == PLAIN_ACK_HEADER:
        # What decode_envelope would return (the path of every ack a publisher reads).
        wire = data[HEADER_LENGTH:]
    else:
        wire = bytes(decode_envelope(data, EnvelopeType.ACK))
    try:
        return wire, ack_from_string(wire)
    except DecodeError as e:
        raise EnvelopeError(f"envelope payload is not a valid Ack protobuf: {e}") from e


def _parse(pb: _Proto, payload: bytes, name: str) -> _Proto:
    try:
        pb.ParseFromString(payload)
    except DecodeError as e:
        raise EnvelopeError(f"envelope payload is not a valid {name} protobuf: {e}") from e
    return pb


def _text(value: Any, *, arg: str) -> str:
    return _validate.text(value, arg=arg)


def _ack_inbox(value: Any) -> str:
    if _text(value, arg="ack_inbox"):
        return _validate.subject(value, arg="ack_inbox")
    return ""


def _ack_policy(value: Any) -> api_pb2.AckPolicy.ValueType:
    if not isinstance(value, AckPolicy):
        raise ArgumentTypeError(
            f"ack_policy must be an AckPolicy ({', '.join(p.name for p in AckPolicy)}), "
            f"got {type(value).__name__}"
        )
    return api_pb2.AckPolicy.ValueType(value)


def _expected_offset(value: Any) -> int:
    if value is None:
        return _NO_EXPECTED_OFFSET
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgumentTypeError(
            f"expected_offset must be an int or None, got {type(value).__name__}"
        )
    if value < 0:
        raise InvalidArgumentError(f"expected_offset must be >= 0 or None, got {value}")
    return _validate.int64(value, arg="expected_offset")


# go-liftbridge's names, kept for code written against them (the public ones
# are deprecated aliases in liftbridge/__init__.py, for one release).
new_message = encode_message
unmarshal_message = decode_message
unmarshal_ack = decode_ack
