"""The hand-written Message protobuf of NATS publishes is byte for byte what
the generated class serializes, and the server's parser (protobuf's) reads
back every field."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from liftbridge._core._acks import AckPolicy
from liftbridge._core._envelope import EnvelopeType, encode_envelope, new_message
from liftbridge._publish._bytes import (
    PlainFrames,
    ack_inbox_field,
    envelope_of,
    message_bytes,
    varint,
)
from liftbridge_api import api_pb2

INBOX = "_INBOX.0123456789abcdef0123456789abcdef"


def generated(
    value: bytes, correlation_id: str, key: bytes | None, inbox: str, policy: int, offset: int
) -> bytes:
    message = api_pb2.Message(
        value=value,
        ackInbox=inbox,
        correlationId=correlation_id,
        ackPolicy=api_pb2.AckPolicy.ValueType(policy),
        offset=offset,
    )
    if key:
        message.key = key
    return message.SerializeToString()


@pytest.mark.parametrize(
    ("value", "key", "inbox", "policy", "offset"),
    [
        (b"v" * 100, None, INBOX, 0, -1),
        (b"", None, INBOX, 0, -1),
        (b"v" * 127, b"k", INBOX, 1, 0),
        (b"v" * 128, b"k" * 200, "", 2, 1),
        (b"v" * 70_000, None, INBOX, 0, 2**40),
        (b"\x00\xff", b"", INBOX, 1, 2**63 - 1),
    ],
)
def test_same_bytes_as_the_generated_class(
    value: bytes, key: bytes | None, inbox: str, policy: int, offset: int
) -> None:
    ours = message_bytes(
        value,
        "abc-1",
        key=key,
        ack_inbox=ack_inbox_field(inbox),
        ack_policy=policy,
        offset=offset,
    )
    assert ours == generated(value, "abc-1", key, inbox, policy, offset)
    parsed = api_pb2.Message.FromString(ours)
    assert (parsed.value, parsed.key, parsed.ackInbox, parsed.ackPolicy, parsed.offset) == (
        value,
        key or b"",
        inbox,
        policy,
        offset,
    )


@settings(max_examples=300, deadline=None, database=None)
@given(
    value=st.binary(max_size=400),
    correlation_id=st.text(max_size=40),
    key=st.none() | st.binary(max_size=200),
    inbox=st.sampled_from(["", INBOX, "é" * 70]),
    policy=st.sampled_from([0, 1, 2]),
    offset=st.integers(min_value=-1, max_value=2**63 - 1),
)
def test_any_message_matches_the_generated_class(
    value: bytes, correlation_id: str, key: bytes | None, inbox: str, policy: int, offset: int
) -> None:
    ours = message_bytes(
        value,
        correlation_id,
        key=key,
        ack_inbox=ack_inbox_field(inbox),
        ack_policy=policy,
        offset=offset,
    )
    assert ours == generated(value, correlation_id, key, inbox, policy, offset)


def test_varints() -> None:
    assert varint(0) == b"\x00"
    assert varint(127) == b"\x7f"
    assert varint(128) == b"\x80\x01"
    assert varint(300) == b"\xac\x02"
    assert varint(-1) == b"\xff" * 9 + b"\x01"


@settings(max_examples=300, deadline=None)
@given(
    value=st.one_of(st.binary(min_size=1, max_size=300), st.integers(1, 70_000)),
    counter=st.integers(0, 2**63),
    policy=st.sampled_from([0, 1]),
)
def test_a_plain_frame_is_the_generated_message_in_its_pub_frame(
    value: bytes | int, counter: int, policy: int
) -> None:
    data = b"v" * value if isinstance(value, int) else value
    correlation_id = f"0123456789ab-{counter}"
    header = encode_envelope(EnvelopeType.MESSAGE, b"")
    envelope = header + generated(data, correlation_id, None, INBOX, policy, -1)
    expected = b"PUB orders.3 %d\r\n%s\r\n" % (len(envelope), envelope)
    frames = PlainFrames(header, ack_inbox_field(INBOX))
    assert frames.frame(b"PUB orders.3 ", data, correlation_id.encode(), policy) == expected
    assert len(envelope) - len(data) <= frames.overhead


SHARED = PlainFrames(encode_envelope(EnvelopeType.MESSAGE, b""), ack_inbox_field(INBOX))


@settings(max_examples=300, deadline=None)
@given(
    value=st.binary(min_size=1, max_size=200),
    counter=st.integers(0, 2**63),
    policy=st.sampled_from([0, 1]),
    subject=st.sampled_from(["a", "orders.3", "x" * 40]),
)
def test_plain_frames_of_a_shape_seen_before_are_the_generated_message(
    value: bytes, counter: int, policy: int, subject: str
) -> None:
    # One PlainFrames for every example: most shapes (subject, value size, id
    # length, policy) come again, and the second frame of one is made from its kept parts.
    correlation_id = f"0123456789ab-{counter}"
    header = encode_envelope(EnvelopeType.MESSAGE, b"")
    envelope = header + generated(value, correlation_id, None, INBOX, policy, -1)
    prefix = b"PUB %s " % subject.encode()
    expected = b"%s%d\r\n%s\r\n" % (prefix, len(envelope), envelope)
    for _ in range(2):
        assert SHARED.frame(prefix, value, correlation_id.encode(), policy) == expected


def test_plain_frames_past_the_shapes_kept_are_still_whole() -> None:
    header = encode_envelope(EnvelopeType.MESSAGE, b"")
    frames = PlainFrames(header, ack_inbox_field(INBOX))
    for size in range(1, 1500, 1):  # more shapes than are kept
        data = b"v" * size
        envelope = header + generated(data, "0123456789ab-7", None, INBOX, 0, -1)
        expected = b"PUB s %d\r\n%s\r\n" % (len(envelope), envelope)
        assert frames.frame(b"PUB s ", data, b"0123456789ab-7", 0) == expected
        assert frames.frame(b"PUB s ", data, b"0123456789ab-7", 0) == expected


@settings(max_examples=200, deadline=None)
@given(
    value=st.one_of(st.binary(max_size=300), st.binary(max_size=20).map(bytearray)),
    key=st.one_of(st.none(), st.binary(max_size=10)),
    headers=st.one_of(st.none(), st.dictionaries(st.text(max_size=5), st.binary(max_size=5))),
    inbox=st.sampled_from(["", INBOX]),
    correlation_id=st.text(alphabet="0123456789abcdefx-", min_size=1, max_size=40),
    policy=st.sampled_from(list(AckPolicy)),
    offset=st.one_of(st.none(), st.integers(min_value=0, max_value=2**40)),
    crc=st.booleans(),
)
def test_the_nats_publishers_envelope_is_new_messages(
    value: bytes | bytearray,
    key: bytes | None,
    headers: dict[str, bytes] | None,
    inbox: str,
    correlation_id: str,
    policy: AckPolicy,
    offset: int | None,
    crc: bool,
) -> None:
    """NatsPublisher's envelope (written out for the commonest publish) is
    new_message's, byte for byte, for every publish."""
    arguments = {
        "key": key,
        "headers": headers,
        "ack_inbox": inbox,
        "correlation_id": correlation_id,
        "ack_policy": policy,
        "expected_offset": offset,
        "crc": crc,
    }
    assert envelope_of(value, **arguments) == new_message(value, **arguments)  # type: ignore[arg-type]
