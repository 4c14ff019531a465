"""One exception tree for everything the SDK raises on purpose, and the one
place where a call's status (a gRPC status code name and its details) becomes
those exceptions (:func:`from_status`; the transports read the status off
their calls, :mod:`liftbridge._transport._status`).

Every class says whether retrying the same call is safe and may succeed
(``retriable``), and whether the call may have been applied although it
failed (``maybe_applied``: an ack timeout, a stream lost after sending).
A publish that failed with ``maybe_applied`` is not ``retriable``: sending
it again may store it twice.
"""

from __future__ import annotations

import enum
from typing import ClassVar


class Refusal(enum.Enum):
    """Why the server refused a consumer-group request, told apart by its text
    (Liftbridge v1.9.0 sends them all as FAILED_PRECONDITION or NOT_FOUND).
    :func:`from_status` sets it as the ``refusal`` of the error it returns."""

    STALE_EPOCH = "client-provided group epoch differs from broker group epoch"
    NOT_COORDINATOR = "broker is not the consumer group coordinator"
    ALREADY_MEMBER = "consumer is already a member of the consumer group"
    NOT_MEMBER = "is not a member of"
    NO_GROUP = "consumer group does not exist"
    GROUP_EXISTS = "consumer group already exists"
    NO_STREAM = "stream does not exist"
    FENCED = "consumer is not currently assigned this partition"
    COORDINATOR_CHANGED = "coordinator generation mismatch"


_NO_GROUP_TEXTS = ("consumer group does not exist", "no such consumer group")


def _refusal(text: str) -> Refusal | None:
    """The group refusal a server's (lower-cased) error text states, if any."""
    if any(t in text for t in _NO_GROUP_TEXTS):
        return Refusal.NO_GROUP
    for refusal in Refusal:
        if refusal is not Refusal.NO_GROUP and refusal.value in text:
            return refusal
    return None


class LiftbridgeError(Exception):
    """Base of every error the SDK raises on purpose.

    Attributes:
        retriable: True when the same call is safe to try again and may
            succeed later (a broker restarting, leadership moving).
            Class-level constant.
        maybe_applied: True when the server may have applied the call
            although it failed (the answer was lost): retrying it blindly
            may apply it twice. Class-level constant.
    """

    retriable: ClassVar[bool] = False
    maybe_applied: ClassVar[bool] = False
    refusal: Refusal | None = None
    """For a consumer-group request the server refused: why (set by
    :func:`from_rpc_error`); None otherwise."""


# ------------------------------------------------------------ client-side --


class InvalidArgumentError(LiftbridgeError, ValueError):
    """An argument was rejected, before any RPC by the SDK or by the server."""


class ArgumentTypeError(InvalidArgumentError, TypeError):
    """An argument has the wrong type (e.g. ``str`` where ``bytes`` is needed)."""


class ClientClosedError(LiftbridgeError):
    """The client (or the object that needed it) was closed."""


class MissingDependencyError(LiftbridgeError, ImportError):
    """An optional feature needs a package that is not installed; the message
    names the extra to install (e.g. ``pip install 'liftbridge[nats]'``)."""


class EnvelopeError(InvalidArgumentError):
    """Bytes given to an envelope decoder are not a valid Liftbridge envelope."""


# ---------------------------------------------------------------- timeouts --


class DeadlineExceededError(LiftbridgeError, TimeoutError):
    """An RPC did not complete within its deadline."""

    retriable = True


class AckTimeoutError(DeadlineExceededError):
    """No ack arrived within the publish's ack timeout.

    The message may or may not have been stored: the SDK never re-sends it.
    """

    retriable = False
    maybe_applied = True


class AckMismatchError(LiftbridgeError):
    """The server answered a publish with another publish's ack.

    A publish with an ``ack_inbox`` is answered with the first ack the
    server reads on that NATS subject: while other publishes use the same
    inbox, that can be theirs (another correlation id). The SDK never hands
    a publish an ack that is not its own: its own outcome is unknown, and
    the message may or may not have been stored. Give publishes in flight at
    the same time their own inbox.

    Attributes:
        other_correlation_id: the correlation id the ack was for.
        other_offset: the offset that ack gave (the other message's).
    """

    retriable = False
    maybe_applied = True

    def __init__(
        self, message: str, other_correlation_id: str = "", other_offset: int = -1
    ) -> None:
        super().__init__(message)
        self.other_correlation_id = other_correlation_id
        self.other_offset = other_offset


class PullTimeoutError(DeadlineExceededError):
    """``PullConsumer.next`` found no message within its timeout."""


class PublishWindowFullError(DeadlineExceededError):
    """The in-flight window stayed full (``max_inflight`` publishes awaiting
    acks) for the whole timeout; the message was not sent."""


# -------------------------------------------------------- connectivity ----


class UnavailableError(LiftbridgeError, ConnectionError):
    """No broker could be reached, or the reached one went away."""

    retriable = True


class ProtocolError(UnavailableError):
    """A server sent what its protocol does not allow (a NATS frame with a
    negative or oversized length, a malformed ``INFO``, bytes that are no
    frame at all). The SDK dropped that connection; a connection being
    made fails with this error, one in use is made again.
    """


class StreamRefusedError(UnavailableError):
    """The broker refused the stream before processing anything sent on it
    (HTTP/2 REFUSED_STREAM, or a GOAWAY naming a lower last stream: RFC 9113
    §8.7). Nothing sent on it was applied: sending again is safe."""


class ConnectionLostError(UnavailableError):
    """The stream a request was sent on broke before its answer arrived.

    Raised for async publishes in flight when the PublishAsync stream breaks:
    the message may or may not have been stored.
    """

    retriable = False
    maybe_applied = True


class LeaderLostError(ConnectionLostError):
    """The partition's leader went down while a publish to it awaited its ack.

    The publish went out through a broker that forwards it to the leader
    (over NATS), and the leader's own connection then failed: no ack can
    come from it, so the publish fails at once instead of at its ack
    timeout. The leader may have stored the message before it died, and a
    new leader may hold it: like every ``maybe_applied`` error, publishing
    it again may store it twice.

    Attributes:
        address: the ``host:port`` of the leader that went down.
    """

    def __init__(self, message: str, address: str = "") -> None:
        super().__init__(message)
        self.address = address


# ------------------------------------------------------- server answers ----


class StreamExistsError(LiftbridgeError):
    """A stream with this name already exists."""


class NoSuchPartitionError(LiftbridgeError, LookupError):
    """The stream or the partition does not exist."""


class NoSuchStreamError(NoSuchPartitionError):
    """The stream does not exist (a special case of a missing partition)."""


class StreamDeletedError(NoSuchStreamError):
    """The stream was deleted while a subscription was reading it."""


class OffsetNotFoundError(LiftbridgeError, LookupError):
    """A direct read asked for an offset the partition does not hold: removed
    by retention or compaction, or beyond the newest offset.

    Not a :class:`NoSuchPartitionError`: the partition exists.

    Attributes:
        stream: the stream read.
        partition: the partition read.
        offset: the offset asked for.
    """

    def __init__(self, stream: str, partition: int, offset: int, why: str) -> None:
        super().__init__(f"offset {offset} of {stream!r} partition {partition} not found: {why}")
        self.stream = stream
        self.partition = partition
        self.offset = offset


class OffsetUnavailableError(DeadlineExceededError):
    """A direct read of an offset the partition was written up to found no
    message at or after it within the deadline.

    Retention may have removed that message and every later one (the server
    then waits for the next publish), or the leader is slow: Liftbridge
    v1.9.0 reports no oldest offset that would tell the two apart, so this is
    never reported as :class:`OffsetNotFoundError`. A deadline error, so
    code catching :class:`DeadlineExceededError` sees it too.

    Attributes:
        stream: the stream read.
        partition: the partition read.
        offset: the offset asked for.
        high_watermark: the partition's high watermark the read started
            under; None when not fetched.
    """

    def __init__(
        self, stream: str, partition: int, offset: int, high_watermark: int | None, waited: float
    ) -> None:
        written = "" if high_watermark is None else f" (high watermark {high_watermark})"
        super().__init__(
            f"offset {offset} of {stream!r} partition {partition} was written{written} but no "
            f"message at or after it arrived within the read's deadline ({waited:.3g}s): "
            "retention may have removed "
            "it and every later message (the server reports no oldest offset to tell), or "
            "the leader is slow"
        )
        self.stream = stream
        self.partition = partition
        self.offset = offset
        self.high_watermark = high_watermark


class NotLeaderError(LiftbridgeError):
    """The broker asked is not the leader the request needs (partition,
    cursor partition or group coordinator); metadata is stale."""

    retriable = True


class ReadonlyPartitionError(LiftbridgeError):
    """The partition is readonly: publishes are refused, and subscriptions end
    with this error once everything in the partition has been read."""


class PartitionPausedError(LiftbridgeError):
    """The partition was paused while a subscription was reading it.

    Attributes:
        segment_closed: the server said "segment has been closed", which it
            also says when retention deletes the segment a slow reader is on;
            subscriptions re-subscribe then, and end only if the partition
            turns out to be paused.
    """

    segment_closed: bool = False


class IncorrectOffsetError(LiftbridgeError):
    """Optimistic concurrency: the partition's next offset is not the expected one."""


class MessageTooLargeError(InvalidArgumentError):
    """The message is larger than the server accepts."""


class EncryptionError(LiftbridgeError):
    """The server failed to encrypt the message for a stream with encryption on."""


class PermissionDeniedError(LiftbridgeError, PermissionError):
    """The server's authorization refused the call."""


class StopPositionReachedError(LiftbridgeError):
    """A subscription reached its stop position: a normal, expected end."""


class ConsumerGroupError(LiftbridgeError):
    """A consumer-group request was refused (not coordinator, stale epoch,
    not a member, already a member)."""

    retriable = True


class HandlerError(LiftbridgeError):
    """A subscription handler raised; the exception is ``__cause__``.

    Attributes:
        offset: the offset of the message the handler failed on.
    """

    def __init__(self, offset: int, cause: BaseException) -> None:
        super().__init__(f"the handler raised on offset {offset}: {cause!r}")
        self.offset = offset
        self.__cause__ = cause


class NoCursorError(LiftbridgeError, LookupError):
    """A consumer asked to fail when a partition has no committed offset."""


class ServerError(LiftbridgeError):
    """The server failed in a way the SDK has no more specific class for.

    Attributes:
        code: the gRPC status code name, or the async error code.
    """

    def __init__(self, message: str, code: str = "UNKNOWN") -> None:
        super().__init__(message)
        self.code = code


# ------------------------------------------------------------- mapping ----


def from_status(code: str, details: str, *, unprocessed: bool = False) -> LiftbridgeError:
    """The SDK's exception for a call that ended with a status other than OK.

    The only place that knows the server's status codes and texts (Liftbridge
    v1.9.0). The transport's own error is kept as ``__cause__`` by the
    callers (``raise from_status(...) from e``).

    Args:
        code: the gRPC status code's name (``"UNAVAILABLE"``).
        details: the status message.
        unprocessed: the server said it never processed the call (HTTP/2
            REFUSED_STREAM, RFC 9113 §8.7).

    Returns:
        The matching :class:`LiftbridgeError` subclass instance.
    """
    text = details.lower()
    if code == "DEADLINE_EXCEEDED" and text in ("", "deadline exceeded"):
        # gRPC's own words for its timer: say it as every other deadline error does.
        details = "the call's deadline passed"
    message = f"{details} (gRPC {code})" if details else f"gRPC {code}"
    error = _from_status(code, text, message)
    if code == "UNAVAILABLE" and unprocessed:
        error = StreamRefusedError(f"refused before processing: {message}")
    refusal = _refusal(text)
    if refusal is not None:
        error.refusal = refusal
    return error


def _from_status(code: str, text: str, message: str) -> LiftbridgeError:
    if code == "UNAVAILABLE":
        return UnavailableError(message)
    if code == "DEADLINE_EXCEEDED":
        return DeadlineExceededError(message)
    if code == "CANCELLED":
        return ConnectionLostError(message)
    if code == "ALREADY_EXISTS":
        return StreamExistsError(message)
    if code == "NOT_FOUND":
        if "deleted" in text:
            return StreamDeletedError(message)
        if "stream not found" in text or "no such stream" in text or "stream does not" in text:
            return NoSuchStreamError(message)
        return NoSuchPartitionError(message)
    if code == "FAILED_PRECONDITION":
        return _failed_precondition(text, message)
    if code == "RESOURCE_EXHAUSTED":
        if "readonly" in text:
            return ReadonlyPartitionError(message)
        if "stop offset" in text or "stream is empty" in text:
            return StopPositionReachedError(message)
        return ServerError(message, code)
    if code == "INVALID_ARGUMENT":
        if _too_large(text):
            return MessageTooLargeError(message)
        return InvalidArgumentError(message)
    if code == "PERMISSION_DENIED" or "not authorized" in text:
        return PermissionDeniedError(message)
    if code == "INTERNAL" and ("no responders" in text or "no known metadata leader" in text):
        # The metadata leader is being elected: the request was not applied.
        return UnavailableError(f"no metadata leader yet: {message}")
    if code == "INTERNAL" and ("segment has been closed" in text or "log was closed" in text):
        # A paused partition's log is closed; subscribing to it says so this
        # way. So does a segment that retention deleted under a slow reader.
        paused = PartitionPausedError(message)
        paused.segment_closed = "segment has been closed" in text
        return paused
    if "incorrect expected offset" in text:
        return IncorrectOffsetError(message)
    return ServerError(message, code)


def resubscribable(error: LiftbridgeError) -> bool:
    """Whether a new Subscribe stream (to the partition's leader as the
    metadata names it now) may cure the failure of one: the one rule of every
    reader (subscriptions, pull consumers, direct reads, Spark).

    Yes for an unreachable or lost broker (``UnavailableError``, its
    ``ConnectionLostError`` included), a leader that moved
    (``NotLeaderError``), a segment retention deleted under a slow reader,
    and the INTERNAL a leader closing its log while stepping down (or a
    broker breaking the protocol) ends a stream with; never once the client
    is closed.
    """
    if isinstance(error, ClientClosedError):
        return False
    if isinstance(error, (UnavailableError, NotLeaderError)):
        return True
    if isinstance(error, PartitionPausedError) and error.segment_closed:
        return True
    return isinstance(error, ServerError) and error.code == "INTERNAL"


def _too_large(text: str) -> bool:
    return "too large" in text or "maximum payload" in text or "max payload" in text


def _failed_precondition(text: str, message: str) -> LiftbridgeError:
    if "leader" in text:
        return NotLeaderError(message)
    if "readonly" in text or "read-only" in text:
        return ReadonlyPartitionError(message)
    if "commit log was closed" in text or "paused" in text:
        return PartitionPausedError(message)
    if "no such partition" in text:
        return NoSuchPartitionError(message)
    if "consumer" in text or "coordinator" in text or "group" in text:
        return ConsumerGroupError(message)
    return ServerError(message, "FAILED_PRECONDITION")


# Async publish errors (PublishAsyncError.Code) and ack errors (Ack.Error),
# by the protobuf enum *name*, so this module needs no generated code.
_ASYNC_ERRORS: dict[str, type[LiftbridgeError]] = {
    "BAD_REQUEST": InvalidArgumentError,
    "NOT_FOUND": NoSuchPartitionError,
    "READONLY": ReadonlyPartitionError,
    "INCORRECT_OFFSET": IncorrectOffsetError,
    "TOO_LARGE": MessageTooLargeError,
    "ENCRYPTION_FAILED": EncryptionError,
    "ENCRYPTION": EncryptionError,
    "PERMISSION_DENIED": PermissionDeniedError,
}


def from_async_error(code_name: str, message: str) -> LiftbridgeError:
    """Converts a PublishAsyncError or an Ack error code into the SDK's exception.

    Args:
        code_name: the enum value's name, e.g. ``"READONLY"``.
        message: the server's text, may be empty.
    """
    text = f"{message} ({code_name})" if message else code_name
    if _too_large(message.lower()):  # NATS refuses it; the server says INTERNAL
        return MessageTooLargeError(text)
    if code_name == "NOT_FOUND" and "no such stream" in message.lower():
        return NoSuchStreamError(text)  # as subscribe says it
    cls = _ASYNC_ERRORS.get(code_name)
    if cls is None:
        return ServerError(text, code_name)
    return cls(text)


def naming(error: LiftbridgeError, stream: str, partition: int | None = None) -> LiftbridgeError:
    """``error`` saying which stream (and partition, when known) it is about:
    the server's "stream not found" and "no such partition: 3" name neither.
    A :class:`NoSuchPartitionError` (a :class:`NoSuchStreamError` included)
    becomes one of the same class that reads "no such stream: 'orders'" or
    "stream 'orders' has no partition 3", followed by the server's text;
    other errors, and texts that already name the stream, are returned as is.
    """
    if not isinstance(error, NoSuchPartitionError) or repr(stream) in str(error):
        return error
    if isinstance(error, StreamDeletedError):
        head = f"stream {stream!r} was deleted"
    elif isinstance(error, NoSuchStreamError):
        head = f"no such stream: {stream!r}"
    elif partition is None:
        head = f"stream {stream!r} lacks a partition asked for"
    else:
        head = f"stream {stream!r} has no partition {partition}"
    named = type(error)(f"{head} ({error})")
    named.refusal = error.refusal
    named.__cause__ = error.__cause__
    return named


StopPositionReached = StopPositionReachedError
"""The name before 0.x's naming pass (go-liftbridge's); deprecated publicly."""


def unreached(
    error: LiftbridgeError,
    what: str,
    failures: dict[str, BaseException],
    address: str | None = None,
) -> LiftbridgeError:
    """``error`` saying which brokers ``what`` (a call) could not reach, when
    it is a plain :class:`UnavailableError` or :class:`DeadlineExceededError`
    and ``failures`` (address to its last failure; plus ``address`` when
    ``error`` is a failure to reach it) is not empty: a new error of the same
    class (a deadline stays a deadline) reading "DeleteStream: could not
    reach 10.0.0.1:9292: <the last failure>". Else ``error``."""
    if address is not None and type(error) is UnavailableError:
        failures = {**failures, address: error}
    if not failures or type(error) not in (UnavailableError, DeadlineExceededError):
        return error
    last = list(failures.values())[-1]
    return type(error)(f"{what}: could not reach {', '.join(failures)}: {last}")
