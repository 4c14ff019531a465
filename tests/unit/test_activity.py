"""Activity stream events: every op decoded from protobufs built here."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pytest

from liftbridge._consume._activity import (
    ACTIVITY_STREAM,
    ActivityEvent,
    ActivityOp,
    activity_event_from_message,
    decode_activity_event,
)
from liftbridge._core._messages import Message
from liftbridge._errors import ArgumentTypeError, InvalidArgumentError
from liftbridge_api import api_pb2


def _encode(**fields: Any) -> bytes:
    return api_pb2.ActivityStreamEvent(**fields).SerializeToString()


CREATE = _encode(
    id=11,
    op=api_pb2.CREATE_STREAM,
    createStreamOp=api_pb2.CreateStreamOp(stream="orders", partitions=[0, 1, 2]),
)
DELETE = _encode(
    id=12, op=api_pb2.DELETE_STREAM, deleteStreamOp=api_pb2.DeleteStreamOp(stream="orders")
)

CASES = [
    pytest.param(
        CREATE,
        ActivityEvent(11, ActivityOp.CREATE_STREAM, stream="orders", partitions=(0, 1, 2)),
        id="create",
    ),
    pytest.param(
        DELETE,
        ActivityEvent(12, ActivityOp.DELETE_STREAM, stream="orders"),
        id="delete",
    ),
    pytest.param(
        _encode(
            id=13,
            op=api_pb2.PAUSE_STREAM,
            pauseStreamOp=api_pb2.PauseStreamOp(stream="orders", partitions=[1], resumeAll=True),
        ),
        ActivityEvent(
            13, ActivityOp.PAUSE_STREAM, stream="orders", partitions=(1,), resume_all=True
        ),
        id="pause-resume-all",
    ),
    pytest.param(
        _encode(
            id=14,
            op=api_pb2.PAUSE_STREAM,
            pauseStreamOp=api_pb2.PauseStreamOp(stream="orders", partitions=[0, 2]),
        ),
        ActivityEvent(
            14, ActivityOp.PAUSE_STREAM, stream="orders", partitions=(0, 2), resume_all=False
        ),
        id="pause",
    ),
    pytest.param(
        _encode(
            id=15,
            op=api_pb2.RESUME_STREAM,
            resumeStreamOp=api_pb2.ResumeStreamOp(stream="orders", partitions=[2]),
        ),
        ActivityEvent(15, ActivityOp.RESUME_STREAM, stream="orders", partitions=(2,)),
        id="resume",
    ),
    pytest.param(
        _encode(
            id=16,
            op=api_pb2.SET_STREAM_READONLY,
            setStreamReadonlyOp=api_pb2.SetStreamReadonlyOp(
                stream="orders", partitions=[0], readonly=True
            ),
        ),
        ActivityEvent(
            16, ActivityOp.SET_STREAM_READONLY, stream="orders", partitions=(0,), readonly=True
        ),
        id="readonly",
    ),
    pytest.param(
        _encode(
            id=17,
            op=api_pb2.SET_STREAM_READONLY,
            setStreamReadonlyOp=api_pb2.SetStreamReadonlyOp(stream="orders", partitions=[0]),
        ),
        ActivityEvent(
            17, ActivityOp.SET_STREAM_READONLY, stream="orders", partitions=(0,), readonly=False
        ),
        id="writable",
    ),
    pytest.param(
        _encode(
            id=18,
            op=api_pb2.JOIN_CONSUMER_GROUP,
            joinConsumerGroupOp=api_pb2.JoinConsumerGroupOp(
                groupId="billing", consumerId="c1", streams=["orders", "refunds"]
            ),
        ),
        ActivityEvent(
            18,
            ActivityOp.JOIN_CONSUMER_GROUP,
            group_id="billing",
            consumer_id="c1",
            streams=("orders", "refunds"),
        ),
        id="join",
    ),
    pytest.param(
        _encode(
            id=19,
            op=api_pb2.LEAVE_CONSUMER_GROUP,
            leaveConsumerGroupOp=api_pb2.LeaveConsumerGroupOp(
                groupId="billing", consumerId="c1", expired=True
            ),
        ),
        ActivityEvent(
            19, ActivityOp.LEAVE_CONSUMER_GROUP, group_id="billing", consumer_id="c1", expired=True
        ),
        id="leave-expired",
    ),
    pytest.param(
        _encode(
            id=20,
            op=api_pb2.LEAVE_CONSUMER_GROUP,
            leaveConsumerGroupOp=api_pb2.LeaveConsumerGroupOp(groupId="billing", consumerId="c2"),
        ),
        ActivityEvent(
            20, ActivityOp.LEAVE_CONSUMER_GROUP, group_id="billing", consumer_id="c2", expired=False
        ),
        id="leave",
    ),
]


@pytest.mark.parametrize(("data", "expected"), CASES)
def test_decode_every_op(data: bytes, expected: ActivityEvent) -> None:
    assert decode_activity_event(data) == expected


@pytest.mark.parametrize(("data", "expected"), CASES)
def test_from_message(data: bytes, expected: ActivityEvent) -> None:
    message = Message(offset=3, value=data, stream=ACTIVITY_STREAM)
    assert activity_event_from_message(message) == expected


def test_ops_match_the_protocol() -> None:
    for op in ActivityOp:
        assert api_pb2.ActivityStreamOp.Name(op.value) == op.name
    assert len(ActivityOp) == len(api_pb2.ActivityStreamOp.keys())


def test_fields_an_op_does_not_set_are_empty() -> None:
    event = decode_activity_event(DELETE)
    assert event.op is ActivityOp.DELETE_STREAM
    assert event.partitions == ()
    assert event.streams == ()
    assert (event.resume_all, event.readonly, event.expired) == (None, None, None)
    assert (event.group_id, event.consumer_id) == (None, None)


def test_event_is_immutable() -> None:
    event = ActivityEvent(1, ActivityOp.DELETE_STREAM, stream="s")
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.stream = "other"  # type: ignore[misc]


def test_message_from_an_unknown_stream_counts_as_activity() -> None:
    # A message built by hand may have no stream name.
    assert activity_event_from_message(Message(offset=0, value=CREATE)).stream == "orders"


# -------------------------------------------------------------- rejections --


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\xff", "not an activity stream event: "),
        (b"\x0a\x05ab", "not an activity stream event: "),
        (
            b"",
            "activity event 0 is a CREATE_STREAM without its details (createStreamOp is missing)",
        ),
        (
            _encode(id=7, op=api_pb2.DELETE_STREAM),
            "activity event 7 is a DELETE_STREAM without its details (deleteStreamOp is missing)",
        ),
        (
            _encode(
                id=8,
                op=api_pb2.JOIN_CONSUMER_GROUP,
                leaveConsumerGroupOp=api_pb2.LeaveConsumerGroupOp(groupId="g"),
            ),
            "activity event 8 is a JOIN_CONSUMER_GROUP without its details "
            "(joinConsumerGroupOp is missing)",
        ),
        (
            _encode(id=9, op=42),
            "activity event 9 has op 42, unknown to this SDK (known: 0 CREATE_STREAM, ",
        ),
    ],
)
def test_decode_rejects(data: bytes, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match="^" + re.escape(message)):
        decode_activity_event(data)


@pytest.mark.parametrize("data", ["text", None, 5])
def test_decode_rejects_non_bytes(data: Any) -> None:
    with pytest.raises(ArgumentTypeError, match=r"^data must be bytes, got "):
        decode_activity_event(data)


def test_from_message_rejects_other_streams() -> None:
    message = Message(offset=0, value=CREATE, stream="orders")
    with pytest.raises(
        InvalidArgumentError,
        match=re.escape("message is from stream 'orders', not the activity stream '__activity'"),
    ):
        activity_event_from_message(message)


def test_from_message_rejects_non_messages() -> None:
    value: Any = b"raw bytes"
    with pytest.raises(ArgumentTypeError, match=r"^message must be a Message, got bytes$"):
        activity_event_from_message(value)
