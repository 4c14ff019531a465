"""``publish_async(stream, value)`` to a stream published to before takes a
short way to its request (``Publishing.publish_async`` with
``plain_publish_bytes``): it must send exactly what the general way sends,
and refuse exactly what it refuses, before anything is submitted."""

from __future__ import annotations

from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from liftbridge import AckPolicy, ArgumentTypeError, InvalidArgumentError, MessageTooLargeError
from liftbridge._core import _validate as check
from liftbridge._publish._bytes import varint
from liftbridge._publish._options import ClientPublishOptions
from liftbridge._publish._publishing import Publishing
from liftbridge._publish._request_bytes import (
    PublishBytes,
    plain_publish_bytes,
    publish_bytes,
    stream_field,
)
from liftbridge_api import api_pb2

_NO_OPTIONS = cast(ClientPublishOptions, {})


@settings(max_examples=300, deadline=None)
@given(
    stream=st.text(min_size=1, max_size=40),
    size=st.one_of(st.integers(0, 300), st.integers(16_000, 17_000)),
    correlation_id=st.text(min_size=1, max_size=200),  # never empty: ids are made
    policy=st.sampled_from([0, 1, 2]),
)
def test_a_plain_request_is_what_the_generated_class_and_publish_bytes_make(
    stream: str, size: int, correlation_id: str, policy: int
) -> None:
    value = b"\xff" * size
    plain = plain_publish_bytes(stream, stream_field(stream), value, correlation_id, policy)
    general = publish_bytes(
        stream, stream_field(stream), value, correlation_id, None, 0, policy, -1
    )
    expected = api_pb2.PublishRequest(
        stream=stream,
        value=value,
        correlationId=correlation_id,
        ackPolicy=api_pb2.AckPolicy.ValueType(policy),
        expectedOffset=-1,
    )
    assert plain.wire == general.wire == expected.SerializeToString()
    fields = ("stream", "partition", "correlationId", "ackPolicy", "key", "expectedOffset")
    assert [getattr(plain, f) for f in fields] == [getattr(general, f) for f in fields]


class _Recorder:
    """A publisher that records what it is handed (nothing is sent)."""

    def __init__(self) -> None:
        self.submitted: list[tuple[Any, ...]] = []
        self._ids = iter(range(1_000_000))

    def next_correlation_id(self) -> str:
        return f"id-{next(self._ids)}"

    def submit(self, request: Any, handler: Any, timeout: Any, future: bool) -> None:
        self.submitted.append((request, handler, timeout, future))


def _publishing(limit: int = 1 << 20) -> tuple[Publishing, _Recorder]:
    recorder = _Recorder()
    nothing = cast(Any, None)
    publishing = Publishing(
        nothing, cast(Any, recorder), nothing, nothing, ack_wait=5.0, max_message_size=limit
    )
    return publishing, recorder


@pytest.mark.parametrize("policy", list(AckPolicy))
@pytest.mark.parametrize("size", [0, 1, 127, 128, 1024, 70_000])
def test_the_short_way_sends_what_the_general_way_sends(policy: AckPolicy, size: int) -> None:
    """The first publish to a stream goes the general way (its name is
    checked); later ones the short way: the same request but for its own
    correlation id, handed on with the same handler, timeout and future."""
    publishing, recorder = _publishing()
    value = b"v" * size

    def handler(ack: object, error: object) -> None: ...

    for _ in range(3):
        publishing.publish_async("orders", value, policy, _NO_OPTIONS, handler, False)
    requests = [entry[0] for entry in recorder.submitted]
    assert [entry[1:] for entry in recorder.submitted] == [(handler, None, False)] * 3
    for index, request in enumerate(requests):
        assert isinstance(request, PublishBytes)
        assert request.correlationId == f"id-{index}"
        expected = api_pb2.PublishRequest(
            stream="orders",
            value=value,
            correlationId=f"id-{index}",
            ackPolicy=api_pb2.AckPolicy.ValueType(policy.value),
            expectedOffset=-1,
        )
        assert request.wire == expected.SerializeToString()
        assert (request.stream, request.partition, request.key) == ("orders", 0, None)
        assert (request.ackPolicy, request.expectedOffset) == (policy.value, -1)


@pytest.mark.parametrize(
    ("value", "ack_policy", "error"),
    [
        ("text", AckPolicy.LEADER, ArgumentTypeError),
        (None, AckPolicy.LEADER, ArgumentTypeError),
        (b"v", 0, ArgumentTypeError),
        (b"v", "LEADER", ArgumentTypeError),
    ],
)
def test_a_known_stream_still_refuses_bad_input_before_submitting(
    value: Any, ack_policy: Any, error: type[Exception]
) -> None:
    publishing, recorder = _publishing()
    publishing.publish_async("orders", b"first", AckPolicy.LEADER, _NO_OPTIONS, None, True)
    with pytest.raises(error):
        publishing.publish_async("orders", value, ack_policy, _NO_OPTIONS, None, True)
    assert len(recorder.submitted) == 1


def test_bytes_like_values_go_the_general_way_and_read_the_same() -> None:
    publishing, recorder = _publishing()
    publishing.publish_async("orders", b"first", AckPolicy.LEADER, _NO_OPTIONS, None, True)
    for value in (bytearray(b"abc"), memoryview(b"abc")):
        publishing.publish_async("orders", value, AckPolicy.LEADER, _NO_OPTIONS, None, True)
    first, *others = (entry[0].wire for entry in recorder.submitted[1:])
    assert others == [first.replace(b"id-1", b"id-2")]


def test_a_bad_stream_name_is_refused_every_time() -> None:
    publishing, recorder = _publishing()
    for _ in range(2):
        with pytest.raises(InvalidArgumentError):
            publishing.publish_async("", b"v", AckPolicy.LEADER, _NO_OPTIONS, None, True)
    assert recorder.submitted == []


@pytest.mark.parametrize("limit", [4096, 1 << 20])
def test_the_short_way_measures_exactly_against_the_limit(limit: int) -> None:
    """A value that fills ``max_message_size`` exactly goes; a byte more is
    refused with nothing submitted, on a stream published to before."""
    publishing, recorder = _publishing(limit)
    publishing.publish_async("orders", b"", AckPolicy.ALL, _NO_OPTIONS, None, True)
    probe = recorder.submitted[0][0]
    # The next correlation id ("id-1") has the first's length: the rest is the value's.
    room = limit - check.ENVELOPE_ALLOWANCE - probe.ByteSize()
    size = room - 1 - len(varint(room))  # the value field's key and length come on top
    fits = b"v" * size
    publishing.publish_async("orders", fits, AckPolicy.ALL, _NO_OPTIONS, None, True)
    assert recorder.submitted[1][0].ByteSize() + check.ENVELOPE_ALLOWANCE == limit
    with pytest.raises(MessageTooLargeError, match=f"max_message_size of {limit} bytes"):
        publishing.publish_async("orders", fits + b"v", AckPolicy.ALL, _NO_OPTIONS, None, True)
    assert len(recorder.submitted) == 2
