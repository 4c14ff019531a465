"""liftbridge: the Python client SDK for the Liftbridge streaming server.

Everything public is importable from here; every other module is private.

Example:
    >>> import liftbridge
    >>> with liftbridge.Client("127.0.0.1:9292") as client:
    ...     client.create_stream("orders")
    ...     client.publish("orders", b"hello")
"""

import warnings

from liftbridge.__version__ import __version__
from liftbridge._client import Client
from liftbridge._consume._activity import (
    ACTIVITY_STREAM,
    ActivityEvent,
    ActivityOp,
    activity_event_from_message,
    decode_activity_event,
)
from liftbridge._consume._direct import Batch
from liftbridge._consume._positions import StartPosition, StopPosition
from liftbridge._consume._pull import PullConsumer
from liftbridge._consume._pull_consume import ConsumeHandle
from liftbridge._consume._pull_options import FromCursor, Stall, StallCallback
from liftbridge._consume._subscription import Handler, Subscription
from liftbridge._core._acks import Ack, AckPolicy
from liftbridge._core._client_api import ClientState
from liftbridge._core._display import Table, messages_table
from liftbridge._core._envelope import decode_ack, decode_message, encode_message
from liftbridge._core._frames import messages_to_arrow, messages_to_pandas
from liftbridge._core._messages import Message
from liftbridge._core._metadata import (
    BrokerInfo,
    ConsumerGroupInfo,
    EventTimestamps,
    Metadata,
    PartitionInfo,
    PartitionMetadata,
    StreamInfo,
)
from liftbridge._core._partitioner import PartitionByKey, PartitionByRoundRobin, Partitioner
from liftbridge._core._retry import DEFAULT_RETRY_POLICY, RetryPolicy
from liftbridge._core._router import TLSConfig
from liftbridge._errors import (
    AckMismatchError,
    AckTimeoutError,
    ArgumentTypeError,
    ClientClosedError,
    ConnectionLostError,
    ConsumerGroupError,
    DeadlineExceededError,
    EncryptionError,
    EnvelopeError,
    HandlerError,
    IncorrectOffsetError,
    InvalidArgumentError,
    LeaderLostError,
    LiftbridgeError,
    MessageTooLargeError,
    MissingDependencyError,
    NoCursorError,
    NoSuchPartitionError,
    NoSuchStreamError,
    NotLeaderError,
    OffsetNotFoundError,
    OffsetUnavailableError,
    PartitionPausedError,
    PermissionDeniedError,
    ProtocolError,
    PublishWindowFullError,
    PullTimeoutError,
    ReadonlyPartitionError,
    ServerError,
    StopPositionReachedError,
    StreamDeletedError,
    StreamExistsError,
    StreamRefusedError,
    UnavailableError,
)
from liftbridge._groups._consumer import (
    AssignmentCallback,
    AutoOffset,
    Backlog,
    Consumer,
    StreamPartition,
)
from liftbridge._groups._describe import GroupDescription, GroupMemberInfo
from liftbridge._groups._pin import PinCallback, PinEvent, PinEventKind, PinState, UnpinReason
from liftbridge._publish._nats import NatsPublisher
from liftbridge._publish._nats_stream import NatsStreamPublisher
from liftbridge._publish._options import (
    ClientPublishOptions,
    PublishOptions,
    StreamPublishOptions,
)
from liftbridge._publish._publisher import AckHandler

__all__ = [
    "ACTIVITY_STREAM",
    "DEFAULT_RETRY_POLICY",
    "Ack",
    "AckHandler",
    "AckMismatchError",
    "AckPolicy",
    "AckTimeoutError",
    "ActivityEvent",
    "ActivityOp",
    "ArgumentTypeError",
    "AssignmentCallback",
    "AutoOffset",
    "Backlog",
    "Batch",
    "BrokerInfo",
    "Client",
    "ClientClosedError",
    "ClientPublishOptions",
    "ClientState",
    "ConnectionLostError",
    "ConsumeHandle",
    "Consumer",
    "ConsumerGroupError",
    "ConsumerGroupInfo",
    "DeadlineExceededError",
    "EncryptionError",
    "EnvelopeError",
    "EventTimestamps",
    "FromCursor",
    "GroupDescription",
    "GroupMemberInfo",
    "Handler",
    "HandlerError",
    "IncorrectOffsetError",
    "InvalidArgumentError",
    "LeaderLostError",
    "LiftbridgeError",
    "Message",
    "MessageTooLargeError",
    "Metadata",
    "MissingDependencyError",
    "NatsPublisher",
    "NatsStreamPublisher",
    "NoCursorError",
    "NoSuchPartitionError",
    "NoSuchStreamError",
    "NotLeaderError",
    "OffsetNotFoundError",
    "OffsetUnavailableError",
    "PartitionByKey",
    "PartitionByRoundRobin",
    "PartitionInfo",
    "PartitionMetadata",
    "PartitionPausedError",
    "Partitioner",
    "PermissionDeniedError",
    "PinCallback",
    "PinEvent",
    "PinEventKind",
    "PinState",
    "ProtocolError",
    "PublishOptions",
    "PublishWindowFullError",
    "PullConsumer",
    "PullTimeoutError",
    "ReadonlyPartitionError",
    "RetryPolicy",
    "ServerError",
    "Stall",
    "StallCallback",
    "StartPosition",
    "StopPosition",
    "StopPositionReachedError",
    "StreamDeletedError",
    "StreamExistsError",
    "StreamInfo",
    "StreamPartition",
    "StreamPublishOptions",
    "StreamRefusedError",
    "Subscription",
    "TLSConfig",
    "Table",
    "UnavailableError",
    "UnpinReason",
    "__version__",
    "activity_event_from_message",
    "decode_ack",
    "decode_activity_event",
    "decode_message",
    "encode_message",
    "messages_table",
    "messages_to_arrow",
    "messages_to_pandas",
]

_DEPRECATED = {
    "StopPositionReached": ("StopPositionReachedError", StopPositionReachedError),
    "new_message": ("encode_message", encode_message),
    "unmarshal_ack": ("decode_ack", decode_ack),
    "unmarshal_message": ("decode_message", decode_message),
}
"""go-liftbridge's names, kept for one release: each use warns."""


def __getattr__(name: str) -> object:
    if name in _DEPRECATED:
        new, value = _DEPRECATED[name]
        warnings.warn(
            f"liftbridge.{name} is deprecated: use liftbridge.{new}",
            DeprecationWarning,
            stacklevel=2,
        )
        return value
    raise AttributeError(f"module 'liftbridge' has no attribute {name!r}")
