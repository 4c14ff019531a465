"""The envelope codec and its CRC-32C, byte for byte, with every rejection."""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from typing import Any

import pytest

from liftbridge._core._acks import AckPolicy
from liftbridge._core._crc32c import IMPLEMENTATION, crc32c, pure_crc32c
from liftbridge._core._envelope import (
    MAGIC,
    EnvelopeType,
    decode_envelope,
    encode_envelope,
    new_message,
    unmarshal_ack,
    unmarshal_message,
)
from liftbridge._errors import (
    ArgumentTypeError,
    EncryptionError,
    EnvelopeError,
    IncorrectOffsetError,
    InvalidArgumentError,
    MessageTooLargeError,
    ServerError,
)
from liftbridge_api import api_pb2
from tests.unit.wire import wire_ack

# ------------------------------------------------------------------ CRC-32C --


_VECTORS = [
    (b"", 0x00000000),
    (b"123456789", 0xE3069283),  # the standard check value
    # RFC 3720 (iSCSI), appendix B.4
    (bytes(32), 0x8A9136AA),
    (b"\xff" * 32, 0x62A8AB43),
    (bytes(range(32)), 0x46DD794E),
    (bytes(range(31, -1, -1)), 0x113FDB5C),
    (b"The quick brown fox jumps over the lazy dog", 0x22620404),
]
_IMPLEMENTATIONS = [pytest.param(crc32c, id="crc32c"), pytest.param(pure_crc32c, id="pure")]


@pytest.mark.parametrize("checksum", _IMPLEMENTATIONS)
@pytest.mark.parametrize(("data", "expected"), _VECTORS)
def test_crc32c_known_vectors(checksum: Callable[[bytes], int], data: bytes, expected: int) -> None:
    assert checksum(data) == expected


@pytest.mark.parametrize("checksum", _IMPLEMENTATIONS)
def test_crc32c_in_pieces_equals_whole(checksum: Callable[[bytes, int], int]) -> None:
    assert checksum(b"56789", checksum(b"1234", 0)) == checksum(b"123456789", 0) == 0xE3069283


@pytest.mark.parametrize("checksum", _IMPLEMENTATIONS)
def test_crc32c_takes_any_bytes_like(checksum: Callable[[object], int]) -> None:
    assert checksum(bytearray(b"123456789")) == 0xE3069283
    assert checksum(memoryview(b"123456789")) == 0xE3069283
    assert checksum(memoryview(b"x123456789")[1:]) == 0xE3069283


def test_crc32c_uses_google_crc32c_when_installed() -> None:
    # The dev environment installs the nats extra, which brings the C implementation.
    pytest.importorskip("google_crc32c", reason="the nats extra is not installed")
    assert IMPLEMENTATION == "google-crc32c"


def test_both_implementations_agree_on_random_data() -> None:
    rng = random.Random(16)
    for size in (1, 7, 8, 63, 100, 1024, 4099):
        data = rng.randbytes(size)
        assert crc32c(data) == pure_crc32c(data)


# ------------------------------------------------------------ wire layout --


def test_new_message_matches_hand_encoded_bytes() -> None:
    expected = bytes.fromhex(
        "b90e43b4 00 08 00 00"  # magic, version 0, header length 8, no flags, publish
        "08 ffffffffffffffffff01"  # offset = -1: no expected offset
        "1a 05 68656c6c6f"  # value = "hello"
        "52 02 696e"  # ackInbox = "in"
        "5a 01 63"  # correlationId = "c"
    )
    assert new_message(b"hello", ack_inbox="in", correlation_id="c") == expected


def test_header_without_crc() -> None:
    envelope = new_message(b"v")
    assert envelope[:8] == MAGIC + bytes([0, 8, 0, 0])


def test_header_with_crc_checksums_the_payload_big_endian() -> None:
    envelope = new_message(b"v", key=b"k", crc=True)
    assert envelope[:8] == MAGIC + bytes([0, 12, 1, 0])
    assert envelope[8:12] == crc32c(envelope[12:]).to_bytes(4, "big")


def test_payload_carries_every_field() -> None:
    envelope = new_message(
        b"value",
        key=b"key",
        headers={"a": b"1", "b": b""},
        ack_inbox="acks.here",
        correlation_id="id-1",
        ack_policy=AckPolicy.ALL,
        expected_offset=7,
    )
    pb = api_pb2.Message.FromString(envelope[8:])
    assert pb.value == b"value"
    assert pb.key == b"key"
    assert dict(pb.headers) == {"a": b"1", "b": b""}
    assert pb.ackInbox == "acks.here"
    assert pb.correlationId == "id-1"
    assert pb.ackPolicy == api_pb2.ALL
    assert pb.offset == 7


def test_no_expected_offset_is_sent_as_minus_one() -> None:
    # The server checks the offset field on streams with optimistic
    # concurrency control; 0 would mean "must land at offset 0".
    assert api_pb2.Message.FromString(new_message(b"v")[8:]).offset == -1


def test_encode_envelope_layout() -> None:
    assert encode_envelope(EnvelopeType.ACK, b"xyz") == MAGIC + bytes([0, 8, 0, 1]) + b"xyz"
    with_crc = encode_envelope(EnvelopeType.ACK, b"xyz", crc=True)
    assert with_crc == MAGIC + bytes([0, 12, 1, 1]) + crc32c(b"xyz").to_bytes(4, "big") + b"xyz"


# ------------------------------------------------------------- round trips --


@pytest.mark.parametrize("crc", [False, True])
def test_message_round_trip(crc: bool) -> None:
    envelope = new_message(
        b"\x00payload\xff", key=b"k", headers={"h": b"\x01\x02"}, expected_offset=3, crc=crc
    )
    message = unmarshal_message(envelope)
    assert message.value == b"\x00payload\xff"
    assert message.key == b"k"
    assert dict(message.headers) == {"h": b"\x01\x02"}
    assert message.offset == 3


@pytest.mark.parametrize("crc", [False, True])
def test_message_round_trip_minimal(crc: bool) -> None:
    message = unmarshal_message(new_message(b"", crc=crc))
    assert message.value == b""
    assert message.key is None
    assert dict(message.headers) == {}
    assert message.offset == -1


def test_unmarshal_accepts_bytearray_and_memoryview() -> None:
    # Typed as bytes, but any bytes-like value works at run time.
    envelope = new_message(b"v", crc=True)
    as_bytearray: Any = bytearray(envelope)
    as_memoryview: Any = memoryview(envelope)
    assert unmarshal_message(as_bytearray).value == b"v"
    assert unmarshal_message(as_memoryview).value == b"v"


def test_new_message_accepts_bytes_like_arguments() -> None:
    value: Any = bytearray(b"v")
    key: Any = memoryview(b"k")
    headers: Any = {"h": bytearray(b"x")}
    envelope = new_message(value, key=key, headers=headers)
    message = unmarshal_message(envelope)
    assert (message.value, message.key, dict(message.headers)) == (b"v", b"k", {"h": b"x"})


def test_go_client_envelope_without_offset_decodes() -> None:
    # The Go client's NewMessage never sets the offset field.
    payload = api_pb2.Message(value=b"go", key=b"k").SerializeToString()
    message = unmarshal_message(MAGIC + bytes([0, 8, 0, 0]) + payload)
    assert (message.value, message.key, message.offset) == (b"go", b"k", 0)


@pytest.mark.parametrize("crc", [False, True])
def test_ack_round_trip(crc: bool) -> None:
    envelope = encode_envelope(EnvelopeType.ACK, wire_ack().SerializeToString(), crc=crc)
    ack = unmarshal_ack(envelope)
    assert ack.stream == "orders"
    assert ack.partition_subject == "orders.1"
    assert ack.message_subject == "orders.1"
    assert ack.offset == 42
    assert ack.ack_inbox == "acks"
    assert ack.correlation_id == "c-7"
    assert ack.ack_policy is AckPolicy.ALL
    assert ack.reception_timestamp_ns == 1_000
    assert ack.commit_timestamp_ns == 2_000
    assert ack.error is None


@pytest.mark.parametrize(
    ("code", "error_type"),
    [
        (api_pb2.Ack.INCORRECT_OFFSET, IncorrectOffsetError),
        (api_pb2.Ack.TOO_LARGE, MessageTooLargeError),
        (api_pb2.Ack.ENCRYPTION, EncryptionError),
        (api_pb2.Ack.UNKNOWN, ServerError),
    ],
)
def test_ack_keeps_the_servers_error(code: int, error_type: type[Exception]) -> None:
    pb = wire_ack(ackError=code, offset=0)
    ack = unmarshal_ack(encode_envelope(EnvelopeType.ACK, pb.SerializeToString()))
    assert isinstance(ack.error, error_type)
    assert ack.correlation_id == "c-7"


def test_decode_envelope_returns_the_payload() -> None:
    assert decode_envelope(encode_envelope(EnvelopeType.ACK, b"p", crc=True), EnvelopeType.ACK) == (
        b"p"
    )


# -------------------------------------------------------------- rejections --

_GOOD = new_message(b"value", key=b"key")
_GOOD_CRC = new_message(b"value", key=b"key", crc=True)


def _header(version: int = 0, length: int = 8, flags: int = 0, kind: int = 0) -> bytes:
    return MAGIC + bytes([version, length, flags, kind])


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "not a Liftbridge envelope: 0 bytes, shorter than the 8-byte header"),
        (
            MAGIC + b"\x00\x08\x00",
            "not a Liftbridge envelope: 7 bytes, shorter than the 8-byte header",
        ),
        (
            b"\x00\x01\x02\x03\x00\x08\x00\x00payload",
            r"not a Liftbridge envelope: bad magic b'\x00\x01\x02\x03'",
        ),
        (b"hello, world", "not a Liftbridge envelope: bad magic b'hell'"),
        (
            _header(version=1) + _GOOD[8:],
            "unsupported envelope protocol version 1 (this SDK reads version 0)",
        ),
        (
            _header(length=8, flags=1) + _GOOD[8:],
            "envelope header length 8 does not match its flags 0x01: "
            "with the CRC flag set it must be 12",
        ),
        (
            _header(length=12, flags=0) + _GOOD_CRC[8:],
            "envelope header length 12 does not match its flags 0x00: "
            "with the CRC flag clear it must be 8",
        ),
        (
            _header(length=16, flags=0) + _GOOD[8:],
            "envelope header length 16 does not match its flags 0x00: "
            "with the CRC flag clear it must be 8",
        ),
        (
            _header(length=12, flags=1) + b"\x00\x00",
            "envelope truncated: 10 bytes, shorter than its 12-byte header",
        ),
        (
            _header(kind=1) + _GOOD[8:],
            "envelope holds an Ack (type 1), expected a Message (type 0)",
        ),
        (
            _header(kind=5) + _GOOD[8:],
            "envelope holds a server-internal type (5), expected a Message (type 0)",
        ),
        (
            _header(kind=200) + _GOOD[8:],
            "envelope holds an unknown type (200), expected a Message (type 0)",
        ),
        (
            _header() + b"\xff",
            "envelope payload is not a valid Message protobuf: ",
        ),
    ],
)
def test_unmarshal_message_rejects(data: bytes, message: str) -> None:
    with pytest.raises(EnvelopeError, match="^" + re.escape(message)):
        unmarshal_message(data)


def test_crc_mismatch_names_both_checksums() -> None:
    payload = _GOOD_CRC[12:]
    corrupt = _GOOD_CRC[:12] + payload[:-1] + bytes([payload[-1] ^ 0xFF])
    declared = int.from_bytes(_GOOD_CRC[8:12], "big")
    actual = crc32c(corrupt[12:])
    expected = f"CRC-32C mismatch: header 0x{declared:08x}, payload 0x{actual:08x}"
    with pytest.raises(EnvelopeError, match=f"^{re.escape(expected)}$"):
        unmarshal_message(corrupt)


def test_crc_mismatch_in_the_header_field() -> None:
    corrupt = _GOOD_CRC[:8] + b"\x00\x00\x00\x00" + _GOOD_CRC[12:]
    with pytest.raises(EnvelopeError, match=r"^CRC-32C mismatch: header 0x00000000, payload 0x"):
        unmarshal_message(corrupt)


def test_unknown_flag_bits_are_ignored_like_the_server_does() -> None:
    envelope = _header(flags=0b110) + _GOOD[8:]
    assert unmarshal_message(envelope).value == b"value"


def test_unmarshal_ack_rejects_a_message() -> None:
    with pytest.raises(
        EnvelopeError,
        match=re.escape("envelope holds a Message (type 0), expected an Ack (type 1)"),
    ):
        unmarshal_ack(_GOOD)


def test_unmarshal_ack_rejects_a_bad_payload() -> None:
    with pytest.raises(EnvelopeError, match=r"^envelope payload is not a valid Ack protobuf: "):
        unmarshal_ack(_header(kind=1) + b"\x0a\x05ab")


def test_unmarshal_ack_rejects_an_ack_policy_it_does_not_know() -> None:
    payload = wire_ack(ackPolicy=9).SerializeToString()
    with pytest.raises(EnvelopeError, match=r"^envelope Ack has a value this SDK does not know"):
        unmarshal_ack(encode_envelope(EnvelopeType.ACK, payload))


def test_envelope_error_is_an_invalid_argument() -> None:
    with pytest.raises(InvalidArgumentError):
        unmarshal_message(b"")
    with pytest.raises(ValueError):
        unmarshal_ack(b"")


@pytest.mark.parametrize("data", ["text", None, 12, [1, 2]])
def test_unmarshal_rejects_non_bytes(data: Any) -> None:
    with pytest.raises(ArgumentTypeError, match=r"^data must be bytes, got "):
        unmarshal_message(data)
    with pytest.raises(ArgumentTypeError, match=r"^data must be bytes, got "):
        unmarshal_ack(data)


# ------------------------------------------------------- new_message input --


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"value": "text"}, ArgumentTypeError, r"value must be bytes, got str \(encode text"),
        ({"value": None}, ArgumentTypeError, "value must be bytes, got NoneType"),
        ({"key": "k"}, ArgumentTypeError, "key must be bytes, got str"),
        ({"headers": [("a", b"1")]}, ArgumentTypeError, "headers must be a mapping"),
        ({"headers": {1: b"1"}}, ArgumentTypeError, "headers keys must be str"),
        ({"headers": {"a": "1"}}, ArgumentTypeError, r"headers\['a'\] must be bytes"),
        ({"ack_inbox": None}, ArgumentTypeError, "ack_inbox must be a str, got NoneType"),
        ({"ack_inbox": "acks.*"}, InvalidArgumentError, "ack_inbox 'acks.*' must not contain"),
        ({"ack_inbox": "a..b"}, InvalidArgumentError, "ack_inbox 'a..b' has an empty token"),
        ({"correlation_id": 5}, ArgumentTypeError, "correlation_id must be a str, got int"),
        ({"ack_policy": 0}, ArgumentTypeError, r"ack_policy must be an AckPolicy \(LEADER, ALL,"),
        ({"expected_offset": -1}, InvalidArgumentError, "expected_offset must be >= 0 or None"),
        ({"expected_offset": True}, ArgumentTypeError, "expected_offset must be an int or None"),
        ({"expected_offset": 1.0}, ArgumentTypeError, "expected_offset must be an int or None"),
        ({"crc": 1}, ArgumentTypeError, "crc must be a bool, got int"),
    ],
)
def test_new_message_rejects(kwargs: dict[str, Any], error: type[Exception], message: str) -> None:
    value = kwargs.pop("value", b"v")
    with pytest.raises(error, match="^" + message):
        new_message(value, **kwargs)
