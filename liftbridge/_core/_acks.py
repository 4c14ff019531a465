"""Acks of published messages: :class:`AckPolicy`, the :class:`Ack` value
object, and the outcome of a wire ack or a PublishAsync response.

Protobufs are converted here, at the boundary; user code only sees these.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from datetime import datetime
from typing import Any

from liftbridge._core import _validate as check
from liftbridge._core._wire_value import WireValue
from liftbridge._errors import ArgumentTypeError, LiftbridgeError, ServerError, from_async_error
from liftbridge_api import api_pb2


class AckPolicy(enum.IntEnum):
    """When the server acknowledges a published message."""

    LEADER = api_pb2.LEADER
    """Once the partition leader has stored it (the default)."""
    ALL = api_pb2.ALL
    """Once every in-sync replica has stored it."""
    NONE = api_pb2.NONE
    """Never: fire and forget."""


class Ack(WireValue):
    """The server's acknowledgement that a message was committed to a partition.

    Immutable; safe to share across threads. Acks compare equal when all
    their fields do, pickle, and hash by stream, offset and correlation id.

    Attributes:
        stream: stream name.
        partition: the partition the message was stored in (derived from the
            subjects below).
        partition_subject: NATS subject of the partition.
        message_subject: NATS subject the message was received on.
        offset: offset the message was committed at.
        ack_inbox: NATS subject the ack was published to.
        correlation_id: the id that matched the ack to its publish.
        ack_policy: the policy the message was sent with.
        reception_timestamp_ns: when the server received it, unix nanoseconds
            (exact); ``reception_timestamp`` is the same as a UTC datetime.
        commit_timestamp_ns: when it was committed, unix nanoseconds (exact);
            ``commit_timestamp`` is the same as a UTC datetime.
        error: for acks read from an ack inbox, the server's refusal (for
            example :class:`IncorrectOffsetError`), else ``None``. The SDK's
            publish methods raise it instead of returning such an ack.
    """

    # Like Message, an Ack keeps the protobuf it was read as (one per publish,
    # built on the thread that resolves every publish's future) and answers
    # each field from it. The protobuf is private to its Ack. The policy and
    # the error are checked up front, so an unknown value fails at the boundary;
    # the policy is then read from the protobuf like the other fields.
    # One made by ack_of_wire (NATS) keeps the checked serialized protobuf,
    # _pb None until a first field read parses it: bytes are not tracked by
    # the collector (see _nats_window).
    # Only _pb (and _wire when it is None) is set on the ack paths: an ack
    # carries no error there, and each slot written costs a call through the
    # slot's setter (about 85 ns, once per publish on the acks thread), so
    # _error is written only when an Ack may carry one (__init__,
    # ack_from_proto); unset, it reads as None.
    __slots__ = ("_error", "_pb", "_wire")

    _pb: api_pb2.Ack | None
    _error: LiftbridgeError | None
    _wire: bytes

    def __init__(
        self,
        stream: str,
        partition_subject: str,
        message_subject: str,
        offset: int,
        ack_inbox: str,
        correlation_id: str,
        ack_policy: AckPolicy,
        reception_timestamp_ns: int,
        commit_timestamp_ns: int,
        error: LiftbridgeError | None = None,
    ) -> None:
        if not isinstance(ack_policy, AckPolicy):
            raise ArgumentTypeError(
                f"ack_policy must be an AckPolicy, got {type(ack_policy).__name__}"
            )
        if error is not None and not isinstance(error, LiftbridgeError):
            raise ArgumentTypeError(
                f"error must be a LiftbridgeError or None, got {type(error).__name__}"
            )
        pb = api_pb2.Ack(
            stream=check.text(stream, arg="stream"),
            partitionSubject=check.text(partition_subject, arg="partition_subject"),
            msgSubject=check.text(message_subject, arg="message_subject"),
            offset=check.int64(offset, arg="offset", minimum=check.INT64_MIN),
            ackInbox=check.text(ack_inbox, arg="ack_inbox"),
            correlationId=check.text(correlation_id, arg="correlation_id"),
            ackPolicy=ack_policy.value,
            receptionTimestamp=check.int64(
                reception_timestamp_ns, arg="reception_timestamp_ns", minimum=check.INT64_MIN
            ),
            commitTimestamp=check.int64(
                commit_timestamp_ns, arg="commit_timestamp_ns", minimum=check.INT64_MIN
            ),
        )
        _set_ack_pb(self, pb)
        _set_ack_error(self, error)

    def _parsed(self) -> api_pb2.Ack:
        """The protobuf of an Ack made by :func:`ack_of_wire`, parsed on its
        first field read. Threads racing here each parse an equal one; any
        one is kept."""
        pb = _ack_from_string(self._wire)
        _set_ack_pb(self, pb)
        return pb

    @property
    def stream(self) -> str:
        return (self._pb or self._parsed()).stream

    @property
    def partition_subject(self) -> str:
        return (self._pb or self._parsed()).partitionSubject

    @property
    def message_subject(self) -> str:
        return (self._pb or self._parsed()).msgSubject

    @property
    def partition(self) -> int:
        """The partition the message was stored in, read from the subjects
        (computed when read, so acks cost nothing more on the publish path).

        Partition N > 0 of a stream listens on ``<partition_subject>.N``, so a
        message subject one token longer than the partition subject ends in the
        partition number; otherwise (and for a subject ending in ``>``, which
        takes one partition only) the partition is 0.
        """
        pb = self._pb or self._parsed()
        base = pb.partitionSubject
        if base.endswith(">"):
            return 0
        head, _, last = pb.msgSubject.rpartition(".")
        if head and last.isascii() and last.isdigit() and head.count(".") == base.count("."):
            return int(last)
        return 0

    @property
    def offset(self) -> int:
        return (self._pb or self._parsed()).offset

    @property
    def ack_inbox(self) -> str:
        return (self._pb or self._parsed()).ackInbox

    @property
    def correlation_id(self) -> str:
        return (self._pb or self._parsed()).correlationId

    @property
    def ack_policy(self) -> AckPolicy:
        return _ACK_POLICIES[(self._pb or self._parsed()).ackPolicy]  # checked when made

    @property
    def reception_timestamp_ns(self) -> int:
        return (self._pb or self._parsed()).receptionTimestamp

    @property
    def commit_timestamp_ns(self) -> int:
        return (self._pb or self._parsed()).commitTimestamp

    @property
    def reception_timestamp(self) -> datetime:
        """``reception_timestamp_ns`` as an aware UTC datetime, cut to whole microseconds."""
        return check.datetime_of_ns((self._pb or self._parsed()).receptionTimestamp)

    @property
    def commit_timestamp(self) -> datetime:
        """``commit_timestamp_ns`` as an aware UTC datetime, cut to whole microseconds."""
        return check.datetime_of_ns((self._pb or self._parsed()).commitTimestamp)

    @property
    def error(self) -> LiftbridgeError | None:
        return getattr(self, "_error", None)  # unset on the ack paths: None

    def _fields(self) -> dict[str, object]:
        """Every field by name, in constructor order."""
        return {
            "stream": self.stream,
            "partition_subject": self.partition_subject,
            "message_subject": self.message_subject,
            "offset": self.offset,
            "ack_inbox": self.ack_inbox,
            "correlation_id": self.correlation_id,
            "ack_policy": self.ack_policy,
            "reception_timestamp_ns": self.reception_timestamp_ns,
            "commit_timestamp_ns": self.commit_timestamp_ns,
            "error": self.error,
        }

    def __repr__(self) -> str:
        fields = self._fields()
        shown = {"stream": fields.pop("stream"), "partition": self.partition, **fields}
        return "Ack(" + ", ".join(f"{name}={value!r}" for name, value in shown.items()) + ")"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Ack):
            return NotImplemented
        return bool(self._fields() == other._fields())

    def __hash__(self) -> int:
        pb = self._pb or self._parsed()
        return hash((pb.stream, pb.offset, pb.correlationId))


_set_ack_pb = vars(Ack)["_pb"].__set__
_set_ack_error = vars(Ack)["_error"].__set__
_set_ack_wire = vars(Ack)["_wire"].__set__
_new = object.__new__
_ack_from_string = api_pb2.Ack.FromString
_ACK_POLICIES = {policy.value: policy for policy in AckPolicy}
_ACK_OK = api_pb2.Ack.OK

# What the acks thread's loop (``_publish._pending.claim_responses``) reads a
# plain ack with, in C calls and no Python frame: a run's publishes are claimed
# in the same loop that reads their acks (a function call or a tuple an ack
# costs that thread ~4 % more).
ACK_OK = _ACK_OK
"""The ``ackError`` of an ack that carries no error."""
ACK_POLICIES = _ACK_POLICIES
"""Each ack policy this SDK knows, by its wire value."""
has_field = api_pb2.PublishResponse.HasField
"""The class's HasField: half the cost of looking it up on each message."""
new_ack = _new
set_ack_pb = _set_ack_pb
"""``set_ack_pb(new_ack(Ack), pb)`` is :func:`ack_outcome`'s Ack of a wire
ack with no error and a known policy (two C calls); the Ack takes ``pb`` over."""


def wire_enum_name(name_of: Callable[[Any], str], number: int) -> str:
    """The name of a wire enum value by its enum's ``Name`` (e.g.
    ``api_pb2.Ack.Error.Name``), ``"UNKNOWN_<number>"`` for a value this SDK's
    protocol does not define (a newer or misbehaving server).

    Never raises: one unknown value in one response must not fail the stream
    it came on. :func:`~liftbridge._errors.from_async_error` maps the unknown
    name to a :class:`ServerError` carrying it as its ``code``.
    """
    try:
        return name_of(number)
    except ValueError:
        return f"UNKNOWN_{number}"


def ack_outcome(pb: api_pb2.Ack) -> tuple[Ack | None, LiftbridgeError | None]:
    """A wire Ack as (ack, error), exactly one of them None; never raises.

    The error is the server's refusal (``ackError``), or a :class:`ServerError`
    for an ack policy this SDK does not know: the server acknowledged the
    message (it was most likely stored), but the ack cannot be represented.
    The Ack takes ``pb`` over: the caller must not change it.
    """
    # ack_from_proto, unrolled: this runs once per acked publish.
    if pb.ackError != _ACK_OK:
        return None, from_async_error(wire_enum_name(api_pb2.Ack.Error.Name, pb.ackError), "")
    policy = _ACK_POLICIES.get(pb.ackPolicy)
    if policy is None:
        return None, ServerError(
            f"the server acked the publish with ack policy {pb.ackPolicy}, which this SDK "
            "does not know; the message was most likely stored",
            code=f"UNKNOWN_ACK_POLICY_{pb.ackPolicy}",
        )
    ack = _new(Ack)
    _set_ack_pb(ack, pb)
    return ack, None


def ack_of_checked(pb: api_pb2.Ack) -> Ack:
    """The Ack of a wire Ack found to carry no ack error and an ack policy
    this SDK knows (:func:`ack_outcome`'s, without the checks). The Ack takes
    ``pb`` over: the caller must not change it."""
    ack = _new(Ack)
    _set_ack_pb(ack, pb)
    return ack


def ack_of_wire(wire: bytes) -> Ack:
    """The Ack of a serialized wire Ack already parsed (and found to carry no
    ack error and an ack policy this SDK knows), keeping ``wire`` rather than
    the protobuf: it reads, compares, hashes and pickles as
    :func:`ack_outcome`'s would."""
    ack = _new(Ack)
    _set_ack_pb(ack, None)
    _set_ack_wire(ack, wire)
    return ack


def ack_from_proto(pb: api_pb2.Ack) -> Ack:
    """Wraps a wire Ack, carrying its ack error as a typed exception (a
    :class:`ServerError` for an error code this SDK does not know).

    The Ack takes ``pb`` over: the caller must not change it.

    Raises:
        ValueError: the ack policy is not one this SDK knows.
    """
    error = None
    if pb.ackError != _ACK_OK:
        error = from_async_error(wire_enum_name(api_pb2.Ack.Error.Name, pb.ackError), "")
    if pb.ackPolicy not in _ACK_POLICIES:
        AckPolicy(pb.ackPolicy)  # raises ValueError naming the unknown value
    ack = _new(Ack)
    _set_ack_pb(ack, pb)
    _set_ack_error(ack, error)
    return ack


def response_outcome(
    response: api_pb2.PublishResponse,
) -> tuple[str, Ack | None, LiftbridgeError | None]:
    """A PublishAsync response as (correlation id, ack, error): exactly one
    of ack and error is None.

    The acks thread reads a plain ack (a correlation id on the response, no
    async error, no ack error, an ack policy this SDK knows) its own quicker
    way, to the same outcome, and any other response this way
    (``_publish._pending.claim_responses``)."""
    if not response.HasField("asyncError"):
        ack_pb = response.ack
        ack, error = ack_outcome(ack_pb)  # never raises: one odd ack fails one publish
        return response.correlationId or ack_pb.correlationId, ack, error
    if response.HasField("ack") and response.ack.ackError != api_pb2.Ack.OK:
        name = wire_enum_name(api_pb2.Ack.Error.Name, response.ack.ackError)
    else:
        name = wire_enum_name(api_pb2.PublishAsyncError.Code.Name, response.asyncError.code)
    return response.correlationId, None, from_async_error(name, response.asyncError.message)
