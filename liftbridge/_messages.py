"""Value objects for what flows through streams: messages, acks, ack policies.

Protobufs are converted here, at the boundary; user code only sees these.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from types import MappingProxyType

from liftbridge._errors import LiftbridgeError, from_async_error
from liftbridge_api import api_pb2

_EMPTY_HEADERS: Mapping[str, bytes] = MappingProxyType({})


class AckPolicy(enum.IntEnum):
    """When the server acknowledges a published message."""

    LEADER = api_pb2.LEADER
    """Once the partition leader has stored it (the default)."""
    ALL = api_pb2.ALL
    """Once every in-sync replica has stored it."""
    NONE = api_pb2.NONE
    """Never: fire and forget."""


def _datetime(ns: int) -> datetime:
    return datetime.fromtimestamp(ns / 1e9, tz=timezone.utc)


@dataclass(frozen=True, slots=True)
class Message:
    """A message read from a stream partition. Immutable; safe to share across threads.

    Attributes:
        offset: position in the partition, monotonic.
        value: the payload.
        key: the key, or ``None`` when the message had none.
        timestamp_ns: when the server received it, unix nanoseconds.
        stream: stream name.
        partition: partition number.
        subject: NATS subject it was received on.
        reply_subject: NATS reply subject, empty when none.
        headers: read-only mapping of header name to bytes (includes the
            server-added ``subject`` and ``reply`` headers).
    """

    offset: int
    value: bytes
    key: bytes | None = None
    timestamp_ns: int = 0
    stream: str = ""
    partition: int = 0
    subject: str = ""
    reply_subject: str = ""
    headers: Mapping[str, bytes] = field(default_factory=lambda: _EMPTY_HEADERS)

    @property
    def timestamp(self) -> datetime:
        """``timestamp_ns`` as an aware UTC datetime (microsecond precision)."""
        return _datetime(self.timestamp_ns)


def message_from_proto(pb: api_pb2.Message) -> Message:
    """Converts a wire Message; the only way a Message is built from a protobuf."""
    return Message(
        offset=pb.offset,
        value=pb.value,
        key=pb.key or None,
        timestamp_ns=pb.timestamp,
        stream=pb.stream,
        partition=pb.partition,
        subject=pb.subject,
        reply_subject=pb.replySubject,
        headers=MappingProxyType(dict(pb.headers)) if pb.headers else _EMPTY_HEADERS,
    )


@dataclass(frozen=True, slots=True)
class Ack:
    """The server's acknowledgement that a message was committed to a partition.

    Attributes:
        stream: stream name.
        partition_subject: NATS subject of the partition.
        message_subject: NATS subject the message was received on.
        offset: offset the message was committed at.
        ack_inbox: NATS subject the ack was published to.
        correlation_id: the id that matched the ack to its publish.
        ack_policy: the policy the message was sent with.
        reception_timestamp_ns: when the server received it, unix nanoseconds.
        commit_timestamp_ns: when it was committed, unix nanoseconds.
        error: for acks read from an ack inbox, the server's refusal (for
            example :class:`IncorrectOffsetError`), else ``None``. The SDK's
            publish methods raise it instead of returning such an ack.
    """

    stream: str
    partition_subject: str
    message_subject: str
    offset: int
    ack_inbox: str
    correlation_id: str
    ack_policy: AckPolicy
    reception_timestamp_ns: int
    commit_timestamp_ns: int
    error: LiftbridgeError | None = None


def ack_from_proto(pb: api_pb2.Ack) -> Ack:
    """Converts a wire Ack, carrying its ack error as a typed exception."""
    error = None
    if pb.ackError != api_pb2.Ack.OK:
        error = from_async_error(api_pb2.Ack.Error.Name(pb.ackError), "")
    return Ack(
        stream=pb.stream,
        partition_subject=pb.partitionSubject,
        message_subject=pb.msgSubject,
        offset=pb.offset,
        ack_inbox=pb.ackInbox,
        correlation_id=pb.correlationId,
        ack_policy=AckPolicy(pb.ackPolicy),
        reception_timestamp_ns=pb.receptionTimestamp,
        commit_timestamp_ns=pb.commitTimestamp,
        error=error,
    )
