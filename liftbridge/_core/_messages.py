"""Messages read from stream partitions: the :class:`Message` value object.

Protobufs are converted here, at the boundary; user code only sees these.
Acks and ack policies are in :mod:`liftbridge._core._acks`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from types import MappingProxyType
from typing import TYPE_CHECKING

from liftbridge._core import _validate as check
from liftbridge._core._wire_value import WireValue
from liftbridge._errors import ArgumentTypeError
from liftbridge_api import api_pb2

_EMPTY_HEADERS: Mapping[str, bytes] = MappingProxyType({})


class Message(WireValue):
    """A message read from a stream partition. Immutable; safe to share across threads.

    Messages compare equal when all their fields do, pickle, and hash by
    stream, partition, offset and value.

    Attributes:
        offset: position in the partition, monotonic.
        value: the payload.
        key: the key, or ``None`` when the message had none.
        timestamp_ns: when the server received it, unix nanoseconds (exact);
            ``timestamp`` is the same as a UTC datetime.
        stream: stream name.
        partition: partition number.
        subject: NATS subject it was received on.
        reply_subject: NATS reply subject, empty when none.
        headers: read-only mapping of header name to bytes (includes the
            server-added ``subject`` and ``reply`` headers).
    """

    # A Message keeps the protobuf it was read as and answers each field from
    # it: converting every field up front cost more than the gRPC read itself
    # on the subscription path. The protobuf is private to its Message
    # (message_from_proto takes it over; __init__ builds its own), so nothing
    # can change it. The headers are copied into a read-only mapping the
    # first time they are read (until then the _headers slot is unset),
    # because reading a missing key of a protobuf map would insert it.
    # The offset, read by nearly every reader, is kept in a slot: reading a
    # field through a property and the protobuf costs ten times a slot's.
    __slots__ = ("_headers", "_pb", "offset")

    _pb: api_pb2.Message
    _headers: Mapping[str, bytes]

    if TYPE_CHECKING:  # read-only to type checkers, as the other fields are

        @property
        def offset(self) -> int: ...

    def __init__(
        self,
        offset: int,
        value: bytes,
        key: bytes | None = None,
        timestamp_ns: int = 0,
        stream: str = "",
        partition: int = 0,
        subject: str = "",
        reply_subject: str = "",
        headers: Mapping[str, bytes] | None = None,
    ) -> None:
        pb = api_pb2.Message(
            offset=check.int64(offset, arg="offset", minimum=check.INT64_MIN),
            value=check.data(value),
            key=check.optional_bytes(key, arg="key") or b"",
            timestamp=check.int64(timestamp_ns, arg="timestamp_ns", minimum=check.INT64_MIN),
            stream=check.text(stream, arg="stream"),
            partition=check.partition(partition),
            subject=check.text(subject, arg="subject"),
            replySubject=check.text(reply_subject, arg="reply_subject"),
            headers=check.headers(headers),
        )
        _set_pb(self, pb)
        _set_offset(self, pb.offset)

    @property
    def value(self) -> bytes:
        return self._pb.value

    @property
    def key(self) -> bytes | None:
        return self._pb.key or None

    @property
    def timestamp_ns(self) -> int:
        return self._pb.timestamp

    @property
    def stream(self) -> str:
        return self._pb.stream

    @property
    def partition(self) -> int:
        return self._pb.partition

    @property
    def subject(self) -> str:
        return self._pb.subject

    @property
    def reply_subject(self) -> str:
        return self._pb.replySubject

    @property
    def headers(self) -> Mapping[str, bytes]:
        try:
            return self._headers
        except AttributeError:  # first read
            pass
        # Threads racing here each build an equal mapping; any one is kept.
        pb_headers = self._pb.headers
        headers = (
            MappingProxyType({name: pb_headers[name] for name in pb_headers})
            if pb_headers
            else _EMPTY_HEADERS
        )
        _set_headers(self, headers)
        return headers

    @property
    def timestamp(self) -> datetime:
        """``timestamp_ns`` as an aware UTC datetime, cut to whole microseconds."""
        return check.datetime_of_ns(self._pb.timestamp)

    def to_dict(self) -> dict[str, object]:
        """The message as a plain dict of its fields, plus ``timestamp`` as a datetime.

        Keys: ``stream``, ``partition``, ``offset``, ``timestamp`` (aware UTC
        datetime), ``timestamp_ns``, ``key``, ``value``, ``headers`` (a new
        ``dict``), ``subject``, ``reply_subject``. Handy for ``json``,
        DataFrames and logging; the dict is the caller's to change.
        """
        return {
            "stream": self.stream,
            "partition": self.partition,
            "offset": self.offset,
            "timestamp": self.timestamp,
            "timestamp_ns": self.timestamp_ns,
            "key": self.key,
            "value": self.value,
            "headers": dict(self.headers),
            "subject": self.subject,
            "reply_subject": self.reply_subject,
        }

    def _fields(self) -> dict[str, object]:
        """Every field by name, in constructor order."""
        return {
            "offset": self.offset,
            "value": self.value,
            "key": self.key,
            "timestamp_ns": self.timestamp_ns,
            "stream": self.stream,
            "partition": self.partition,
            "subject": self.subject,
            "reply_subject": self.reply_subject,
            "headers": dict(self.headers),
        }

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Message):
            return NotImplemented
        return bool(self._pb == other._pb)

    def __hash__(self) -> int:
        pb = self._pb
        return hash((pb.stream, pb.partition, pb.offset, pb.value))


# The slots' own setters: the only writers, used once per Message (headers: once at most).
_set_pb = vars(Message)["_pb"].__set__
_set_offset = vars(Message)["offset"].__set__
_set_headers = vars(Message)["_headers"].__set__
_new = object.__new__
# message_from_proto's three steps, for the one loop that builds a Message
# per item inline (a subscription's thread) and saves the Python call.
message_parts = (_new, _set_pb, _set_offset)


def message_from_proto(pb: api_pb2.Message, offset: int | None = None) -> Message:
    """Wraps a wire Message: how one is built from a protobuf (a
    subscription's thread does the same three steps inline, ``message_parts``).

    The Message takes ``pb`` over: the caller must not keep or change it.
    ``offset`` is ``pb.offset`` when the caller has read it already (a
    subscription checks it before it delivers the message); None reads it.
    """
    message = _new(Message)
    _set_pb(message, pb)
    _set_offset(message, pb.offset if offset is None else offset)
    return message


def checked_messages(value: object, *, arg: str = "messages") -> list[Message]:
    """An iterable of :class:`Message` (a list, a subscription, a generator),
    as a list; for the helpers that tabulate messages.

    Raises:
        ArgumentTypeError: not an iterable, or an item is not a Message.
    """
    if isinstance(value, (str, bytes, bytearray, Mapping)) or not isinstance(value, Iterable):
        raise ArgumentTypeError(f"{arg} must be an iterable of Message, got {type(value).__name__}")
    items = list(value)
    for item in items:
        if not isinstance(item, Message):
            raise ArgumentTypeError(f"{arg} must hold Message, got {type(item).__name__}")
    return items
