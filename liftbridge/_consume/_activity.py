"""Events of the activity stream, the server's log of metadata changes.

With ``activity.stream.enabled: true`` the server publishes one message on the
internal stream ``__activity`` for each stream or consumer-group change it
commits. A message's value is a serialized ``ActivityStreamEvent`` protobuf
(no envelope); :func:`activity_event_from_message` turns it into an
:class:`ActivityEvent`. Decoding is pure and thread-safe.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Literal

from google.protobuf.message import DecodeError

from liftbridge._core import _validate
from liftbridge._core._messages import Message
from liftbridge._errors import ArgumentTypeError, InvalidArgumentError
from liftbridge_api import api_pb2

ACTIVITY_STREAM = "__activity"
"""The name of the server's activity stream."""


class ActivityOp(enum.IntEnum):
    """What an activity event reports."""

    CREATE_STREAM = api_pb2.CREATE_STREAM
    """A stream was created; sets ``stream`` and ``partitions``."""
    DELETE_STREAM = api_pb2.DELETE_STREAM
    """A stream was deleted; sets ``stream``."""
    PAUSE_STREAM = api_pb2.PAUSE_STREAM
    """Partitions were paused; sets ``stream``, ``partitions`` and ``resume_all``."""
    RESUME_STREAM = api_pb2.RESUME_STREAM
    """Paused partitions were resumed; sets ``stream`` and ``partitions``."""
    SET_STREAM_READONLY = api_pb2.SET_STREAM_READONLY
    """Partitions were made readonly or writable again; sets ``stream``,
    ``partitions`` and ``readonly``."""
    JOIN_CONSUMER_GROUP = api_pb2.JOIN_CONSUMER_GROUP
    """A consumer joined a group, or created it by joining first; sets
    ``group_id``, ``consumer_id`` and ``streams``."""
    LEAVE_CONSUMER_GROUP = api_pb2.LEAVE_CONSUMER_GROUP
    """A consumer left a group or was removed from it; sets ``group_id``,
    ``consumer_id`` and ``expired``."""


@dataclass(frozen=True, slots=True)
class ActivityEvent:
    """One metadata change, as read from the activity stream. Immutable.

    Fields that do not apply to ``op`` are ``None`` (or empty tuples); each
    :class:`ActivityOp` member lists the fields it sets.

    Attributes:
        id: the server's Raft log index of the change. Unique and increasing:
            an event read twice (after a leader change, say) has the same id,
            so use it to drop duplicates.
        op: what changed.
        stream: the stream's name, for stream operations.
        partitions: the partitions created, paused, resumed or changed, in
            the server's order.
        resume_all: for PAUSE_STREAM, whether publishing to any one of the
            partitions resumes all of them (otherwise only that one).
        readonly: for SET_STREAM_READONLY, True if the partitions became
            readonly, False if they became writable again.
        group_id: the consumer group, for group operations.
        consumer_id: the consumer that joined or left.
        streams: for JOIN_CONSUMER_GROUP, the streams the consumer reads.
        expired: for LEAVE_CONSUMER_GROUP, True if the server removed the
            consumer for missing heartbeats, False if it left.
    """

    id: int
    op: ActivityOp
    stream: str | None = None
    partitions: tuple[int, ...] = ()
    resume_all: bool | None = None
    readonly: bool | None = None
    group_id: str | None = None
    consumer_id: str | None = None
    streams: tuple[str, ...] = ()
    expired: bool | None = None


_DetailsField = Literal[
    "createStreamOp",
    "deleteStreamOp",
    "pauseStreamOp",
    "resumeStreamOp",
    "setStreamReadonlyOp",
    "joinConsumerGroupOp",
    "leaveConsumerGroupOp",
]

# The ActivityStreamEvent field that holds each op's details.
_DETAILS_FIELD: dict[ActivityOp, _DetailsField] = {
    ActivityOp.CREATE_STREAM: "createStreamOp",
    ActivityOp.DELETE_STREAM: "deleteStreamOp",
    ActivityOp.PAUSE_STREAM: "pauseStreamOp",
    ActivityOp.RESUME_STREAM: "resumeStreamOp",
    ActivityOp.SET_STREAM_READONLY: "setStreamReadonlyOp",
    ActivityOp.JOIN_CONSUMER_GROUP: "joinConsumerGroupOp",
    ActivityOp.LEAVE_CONSUMER_GROUP: "leaveConsumerGroupOp",
}


def decode_activity_event(data: bytes) -> ActivityEvent:
    """Decodes the value of an activity stream message.

    Pure function; thread-safe.

    Args:
        data: the message value, a serialized ``ActivityStreamEvent``.

    Returns:
        The event.

    Raises:
        ArgumentTypeError: ``data`` is not bytes-like.
        InvalidArgumentError: ``data`` is not an activity event: it does not
            parse, its op is unknown to this SDK (a newer server), or the
            details its op needs are missing.
    """
    pb = api_pb2.ActivityStreamEvent()
    try:
        pb.ParseFromString(_validate.data(data, arg="data"))
    except DecodeError as e:
        raise InvalidArgumentError(f"not an activity stream event: {e}") from e
    try:
        op = ActivityOp(pb.op)
    except ValueError:
        known = ", ".join(f"{o.value} {o.name}" for o in ActivityOp)
        raise InvalidArgumentError(
            f"activity event {pb.id} has op {pb.op}, unknown to this SDK (known: {known})"
        ) from None
    field = _DETAILS_FIELD[op]
    if not pb.HasField(field):
        raise InvalidArgumentError(
            f"activity event {pb.id} is a {op.name} without its details ({field} is missing)"
        )
    return _event(pb, op)


def _event(pb: api_pb2.ActivityStreamEvent, op: ActivityOp) -> ActivityEvent:
    match op:
        case ActivityOp.CREATE_STREAM:
            create = pb.createStreamOp
            return ActivityEvent(
                pb.id, op, stream=create.stream, partitions=tuple(create.partitions)
            )
        case ActivityOp.DELETE_STREAM:
            return ActivityEvent(pb.id, op, stream=pb.deleteStreamOp.stream)
        case ActivityOp.PAUSE_STREAM:
            pause = pb.pauseStreamOp
            return ActivityEvent(
                pb.id,
                op,
                stream=pause.stream,
                partitions=tuple(pause.partitions),
                resume_all=pause.resumeAll,
            )
        case ActivityOp.RESUME_STREAM:
            resume = pb.resumeStreamOp
            return ActivityEvent(
                pb.id, op, stream=resume.stream, partitions=tuple(resume.partitions)
            )
        case ActivityOp.SET_STREAM_READONLY:
            readonly = pb.setStreamReadonlyOp
            return ActivityEvent(
                pb.id,
                op,
                stream=readonly.stream,
                partitions=tuple(readonly.partitions),
                readonly=readonly.readonly,
            )
        case ActivityOp.JOIN_CONSUMER_GROUP:
            join = pb.joinConsumerGroupOp
            return ActivityEvent(
                pb.id,
                op,
                group_id=join.groupId,
                consumer_id=join.consumerId,
                streams=tuple(join.streams),
            )
        case ActivityOp.LEAVE_CONSUMER_GROUP:
            leave = pb.leaveConsumerGroupOp
            return ActivityEvent(
                pb.id,
                op,
                group_id=leave.groupId,
                consumer_id=leave.consumerId,
                expired=leave.expired,
            )


def activity_event_from_message(message: Message) -> ActivityEvent:
    """Decodes a message read from the activity stream.

    Pure function; thread-safe.

    Args:
        message: a message of the ``__activity`` stream.

    Returns:
        The event its value holds.

    Raises:
        ArgumentTypeError: ``message`` is not a :class:`Message`.
        InvalidArgumentError: the message comes from another stream, or its
            value is not an activity event (see :func:`decode_activity_event`).
    """
    if not isinstance(message, Message):
        raise ArgumentTypeError(f"message must be a Message, got {type(message).__name__}")
    if message.stream and message.stream != ACTIVITY_STREAM:
        raise InvalidArgumentError(
            f"message is from stream {message.stream!r}, not the activity stream "
            f"{ACTIVITY_STREAM!r}"
        )
    return decode_activity_event(message.value)
