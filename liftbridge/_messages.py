"""Value objects for what flows through streams: messages, acks, ack policies.

Protobufs are converted here, at the boundary; user code only sees these.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
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


# Fast construction of the value objects built once per message.
#
# A frozen dataclass's __init__ sets each field through object.__setattr__ by
# name; with slots, calling each field's slot descriptor directly does the same
# job in about a third of the time, which matters on the subscription and ack
# hot paths. The objects are exactly what __init__ builds (no __post_init__
# exists to skip), and stay frozen: only these builders write the slots. The
# descriptor tuples are taken in field order, and message_from_proto /
# ack_from_proto unpack them by position: the assertions below fail at import
# if a field is added, removed or reordered without updating them.
_new = object.__new__
_MESSAGE_SLOTS = tuple(getattr(Message, f.name).__set__ for f in fields(Message))
assert [f.name for f in fields(Message)] == [
    "offset",
    "value",
    "key",
    "timestamp_ns",
    "stream",
    "partition",
    "subject",
    "reply_subject",
    "headers",
], "update message_from_proto for Message's fields"


def message_from_proto(pb: api_pb2.Message) -> Message:
    """Converts a wire Message; the only way a Message is built from a protobuf."""
    (
        set_offset,
        set_value,
        set_key,
        set_timestamp,
        set_stream,
        set_partition,
        set_subject,
        set_reply_subject,
        set_headers,
    ) = _MESSAGE_SLOTS
    message = _new(Message)
    set_offset(message, pb.offset)
    set_value(message, pb.value)
    set_key(message, pb.key or None)
    set_timestamp(message, pb.timestamp)
    set_stream(message, pb.stream)
    set_partition(message, pb.partition)
    set_subject(message, pb.subject)
    set_reply_subject(message, pb.replySubject)
    headers = pb.headers
    # A comprehension copies the protobuf map about twice as fast as dict().
    set_headers(
        message,
        MappingProxyType({name: headers[name] for name in headers}) if headers else _EMPTY_HEADERS,
    )
    return message


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


_ACK_SLOTS = tuple(getattr(Ack, f.name).__set__ for f in fields(Ack))
assert [f.name for f in fields(Ack)] == [
    "stream",
    "partition_subject",
    "message_subject",
    "offset",
    "ack_inbox",
    "correlation_id",
    "ack_policy",
    "reception_timestamp_ns",
    "commit_timestamp_ns",
    "error",
], "update ack_from_proto for Ack's fields"
_ACK_POLICIES = {policy.value: policy for policy in AckPolicy}
_ACK_OK = api_pb2.Ack.OK


def ack_from_proto(pb: api_pb2.Ack) -> Ack:
    """Converts a wire Ack, carrying its ack error as a typed exception."""
    error = None
    if pb.ackError != _ACK_OK:
        error = from_async_error(api_pb2.Ack.Error.Name(pb.ackError), "")
    policy = _ACK_POLICIES.get(pb.ackPolicy)
    if policy is None:
        policy = AckPolicy(pb.ackPolicy)  # raises ValueError naming the unknown value
    (
        set_stream,
        set_partition_subject,
        set_message_subject,
        set_offset,
        set_ack_inbox,
        set_correlation_id,
        set_ack_policy,
        set_reception,
        set_commit,
        set_error,
    ) = _ACK_SLOTS
    ack = _new(Ack)
    set_stream(ack, pb.stream)
    set_partition_subject(ack, pb.partitionSubject)
    set_message_subject(ack, pb.msgSubject)
    set_offset(ack, pb.offset)
    set_ack_inbox(ack, pb.ackInbox)
    set_correlation_id(ack, pb.correlationId)
    set_ack_policy(ack, policy)
    set_reception(ack, pb.receptionTimestamp)
    set_commit(ack, pb.commitTimestamp)
    set_error(ack, error)
    return ack
