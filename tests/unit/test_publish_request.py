"""``Publishing.request`` writes the PublishRequest byte by byte (or, with
headers, builds the generated class field by field), leaving the zeros
unset: the bytes are those of the generated class given every field,
whatever the options."""

from __future__ import annotations

import itertools
from typing import Any, cast

import pytest

from liftbridge import AckPolicy
from liftbridge._publish._options import ClientPublishOptions
from liftbridge._publish._publishing import Publishing
from liftbridge._publish._request_bytes import PublishBytes
from liftbridge_api import api_pb2


class _Ids:
    """The one thing ``request`` asks of the publisher: a correlation id."""

    def next_correlation_id(self) -> str:
        return "generated-7"


def _publishing() -> Publishing:
    # No router, lanes or callbacks: with an explicit partition (or none and
    # no key) building a request needs no metadata and sends nothing.
    nothing = cast(Any, None)
    return Publishing(
        nothing, cast(Any, _Ids()), nothing, nothing, ack_wait=5.0, max_message_size=1 << 20
    )


@pytest.mark.parametrize(
    ("partition", "policy", "expected_offset", "key", "headers", "correlation_id"),
    [
        *itertools.product([None, 0, 3], AckPolicy, [None], [None], [None], [None]),
        (None, AckPolicy.LEADER, 0, None, None, "mine"),
        (2, AckPolicy.ALL, 7, b"k", {"h": b"v"}, None),
        (0, AckPolicy.LEADER, 2**63 - 1, b"", None, "c"),
        (1, AckPolicy.NONE, None, b"key", {"a": b"", "b": b"x"}, "cid"),
    ],
)
def test_the_request_is_what_the_generated_class_makes_of_every_field(
    partition: int | None,
    policy: AckPolicy,
    expected_offset: int | None,
    key: bytes | None,
    headers: dict[str, bytes] | None,
    correlation_id: str | None,
) -> None:
    options: dict[str, object] = {
        name: value
        for name, value in (
            ("partition", partition),
            ("expected_offset", expected_offset),
            ("key", key),
            ("headers", headers),
            ("correlation_id", correlation_id),
        )
        if value is not None
    }
    request = _publishing().request(
        "stream-a", b"v" * 100, policy, cast(ClientPublishOptions, options), "publish_async"
    )
    every_field = api_pb2.PublishRequest(
        stream="stream-a",
        partition=partition or 0,
        value=b"v" * 100,
        key=key or b"",
        headers=headers or {},
        correlationId=correlation_id or "generated-7",
        ackPolicy=policy.value,
        expectedOffset=-1 if expected_offset is None else expected_offset,
    )
    if headers:  # the generated class (a map's order is the serializer's own)
        assert isinstance(request, api_pb2.PublishRequest)
        assert request.SerializeToString(deterministic=True) == every_field.SerializeToString(
            deterministic=True
        )
    else:  # written byte by byte: what protobuf's serializer writes
        assert isinstance(request, PublishBytes)
        assert request.SerializeToString() == every_field.SerializeToString()
    assert api_pb2.PublishRequest.FromString(request.SerializeToString()) == every_field
    assert (request.partition, request.ackPolicy) == (partition or 0, policy.value)
    assert (request.stream, request.correlationId) == ("stream-a", every_field.correlationId)
