"""A PublishRequest written byte by byte (``_request_bytes``) is what the
generated class serializes for the same fields, for every shape, and a
publish built that way is measured exactly against ``max_message_size``."""

from __future__ import annotations

from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from liftbridge import AckPolicy, MessageTooLargeError
from liftbridge._core import _validate as check
from liftbridge._publish._bytes import varint
from liftbridge._publish._options import ClientPublishOptions
from liftbridge._publish._publishing import Publishing
from liftbridge._publish._request_bytes import (
    PublishBytes,
    publish_bytes,
    publish_bytes_like,
    stream_field,
)
from liftbridge_api import api_pb2


def generated(
    stream: str,
    value: bytes,
    correlation_id: str,
    key: bytes | None,
    partition: int,
    policy: int,
    offset: int,
) -> api_pb2.PublishRequest:
    return api_pb2.PublishRequest(
        stream=stream,
        value=value,
        key=key or b"",
        partition=partition,
        correlationId=correlation_id,
        ackPolicy=api_pb2.AckPolicy.ValueType(policy),
        expectedOffset=offset,
    )


def ours(
    stream: str,
    value: bytes,
    correlation_id: str,
    key: bytes | None,
    partition: int,
    policy: int,
    offset: int,
) -> PublishBytes:
    return publish_bytes(
        stream,
        stream_field(stream),
        value,
        correlation_id,
        key,
        partition,
        policy,
        offset,
    )


@pytest.mark.parametrize(
    ("value", "key", "partition", "policy", "offset"),
    [
        (b"v" * 100, None, 0, 0, -1),  # the commonest
        (b"", None, 0, 0, -1),  # an empty value: no value field
        (b"v" * 127, b"", 0, 1, -1),
        (b"v" * 128, None, 0, 2, -1),  # a two-byte length
        (b"v" * 70_000, b"k" * 200, 3, 1, 0),  # expected offset 0: no field
        (b"\x00\xff", b"k", 2**31 - 1, 0, 2**63 - 1),
        (b"v", None, 1, 2, 5),
    ],
)
def test_the_bytes_are_the_generated_class_s(
    value: bytes, key: bytes | None, partition: int, policy: int, offset: int
) -> None:
    request = ours("orders", value, "abc-1", key, partition, policy, offset)
    expected = generated("orders", value, "abc-1", key, partition, policy, offset)
    assert request.SerializeToString() == expected.SerializeToString()
    assert request.ByteSize() == expected.ByteSize()
    assert (request.stream, request.partition, request.correlationId, request.ackPolicy) == (
        "orders",
        partition,
        "abc-1",
        policy,
    )
    assert (request.key, request.expectedOffset, request.ackInbox) == (key, offset, "")


@settings(max_examples=400, deadline=None, database=None)
@given(
    stream=st.text(min_size=1, max_size=300),
    value=st.binary(max_size=300) | st.integers(0, 70_000).map(lambda n: b"v" * n),
    correlation_id=st.text(min_size=1, max_size=200),
    key=st.none() | st.binary(max_size=200),
    partition=st.integers(0, 2**31 - 1),
    policy=st.sampled_from([0, 1, 2]),
    offset=st.integers(min_value=-1, max_value=2**63 - 1),
)
def test_any_request_matches_the_generated_class(
    stream: str,
    value: bytes,
    correlation_id: str,
    key: bytes | None,
    partition: int,
    policy: int,
    offset: int,
) -> None:
    request = ours(stream, value, correlation_id, key, partition, policy, offset)
    expected = generated(stream, value, correlation_id, key, partition, policy, offset)
    assert request.SerializeToString() == expected.SerializeToString()
    assert api_pb2.PublishRequest.FromString(request.SerializeToString()) == expected
    # A publish_many_async batch's later requests, made like a first one: the same bytes.
    first = ours(stream, b"first", "id-0", key, partition, policy, offset)
    later = publish_bytes_like(first, stream_field(stream), [value], [correlation_id])
    fields = ("stream", "partition", "correlationId", "ackPolicy", "key", "expectedOffset", "wire")
    assert [getattr(later[0], f) for f in fields] == [getattr(request, f) for f in fields]


class _Ids:
    def next_correlation_id(self) -> str:
        return "0123456789ab-7f00aa12-99"


def _publishing(limit: int) -> Publishing:
    # No router, lanes or callbacks: without key or partitioner, building a
    # request needs no metadata and sends nothing.
    nothing = cast(Any, None)
    return Publishing(
        nothing, cast(Any, _Ids()), nothing, nothing, ack_wait=5.0, max_message_size=limit
    )


@pytest.mark.parametrize("stream", ["s", "ström-€𝄞" * 8])
@pytest.mark.parametrize("limit", [4096, 1 << 20])
def test_a_request_is_measured_exactly_against_the_limit(stream: str, limit: int) -> None:
    """The request at the limit (its bytes plus the server's envelope) goes,
    a byte more does not, whatever the stream name's encoding."""
    publishing = _publishing(limit)
    options = cast(ClientPublishOptions, {"partition": 2**31 - 1, "expected_offset": 2**62})
    probe = publishing.request(stream, b"", AckPolicy.ALL, options, "publish_async")
    room = limit - check.ENVELOPE_ALLOWANCE - probe.ByteSize()
    size = room - 1 - len(varint(room))  # the value field's tag and length come on top
    value = b"v" * size
    fits = publishing.request(stream, value, AckPolicy.ALL, options, "publish_async")
    assert isinstance(fits, PublishBytes)
    assert fits.ByteSize() + check.ENVELOPE_ALLOWANCE == limit
    with pytest.raises(MessageTooLargeError, match=f"max_message_size of {limit} bytes"):
        publishing.request(stream, value + b"v", AckPolicy.ALL, options, "publish_async")


def test_headers_or_an_ack_inbox_keep_the_generated_class() -> None:
    publishing = _publishing(1 << 20)
    for options in ({"headers": {"h": b"1"}}, {"ack_inbox": "acks.here"}):
        request = publishing.request(
            "s", b"v", AckPolicy.LEADER, cast(ClientPublishOptions, options), "publish_async"
        )
        assert isinstance(request, api_pb2.PublishRequest)
