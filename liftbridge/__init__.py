"""liftbridge: the Python client SDK for the Liftbridge streaming server.

Everything public is importable from here; every other module is private.

Example:
    >>> import liftbridge
    >>> with liftbridge.Client("127.0.0.1:9292") as client:
    ...     client.create_stream("orders")
    ...     client.publish("orders", b"hello")
"""

from liftbridge.__version__ import __version__
from liftbridge._activity import (
    ACTIVITY_STREAM,
    ActivityEvent,
    ActivityOp,
    activity_event_from_message,
    decode_activity_event,
)
from liftbridge._channels import TLSConfig
from liftbridge._client import Client, ClientState
from liftbridge._consumer import (
    AssignmentCallback,
    AutoOffset,
    Backlog,
    Consumer,
    StreamPartition,
)
from liftbridge._direct import Batch
from liftbridge._display import Table, messages_table
from liftbridge._envelope import new_message, unmarshal_ack, unmarshal_message
from liftbridge._errors import (
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
    PartitionPausedError,
    PermissionDeniedError,
    PublishWindowFullError,
    PullTimeoutError,
    ReadonlyPartitionError,
    ServerError,
    StopPositionReached,
    StreamDeletedError,
    StreamExistsError,
    UnavailableError,
)
from liftbridge._frames import messages_to_arrow, messages_to_pandas
from liftbridge._group_describe import GroupDescription, GroupMemberInfo
from liftbridge._group_pin import PinCallback, PinEvent, PinEventKind, PinState, UnpinReason
from liftbridge._messages import Ack, AckPolicy, Message
from liftbridge._metadata import (
    BrokerInfo,
    ConsumerGroupInfo,
    EventTimestamps,
    Metadata,
    PartitionInfo,
    PartitionMetadata,
    StreamInfo,
)
from liftbridge._nats import NatsPublisher
from liftbridge._nats_stream import NatsStreamPublisher
from liftbridge._partitioner import PartitionByKey, PartitionByRoundRobin, Partitioner
from liftbridge._publisher import AckHandler
from liftbridge._pull import PullConsumer
from liftbridge._pull_consume import ConsumeHandle
from liftbridge._pull_options import FromCursor, Stall, StallCallback
from liftbridge._retry import DEFAULT_RETRY_POLICY, RetryPolicy
from liftbridge._subscription import Handler, StartPosition, StopPosition, Subscription

__all__ = [
    "ACTIVITY_STREAM",
    "DEFAULT_RETRY_POLICY",
    "Ack",
    "AckHandler",
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
    "StopPositionReached",
    "StreamDeletedError",
    "StreamExistsError",
    "StreamInfo",
    "StreamPartition",
    "Subscription",
    "TLSConfig",
    "Table",
    "UnavailableError",
    "UnpinReason",
    "__version__",
    "activity_event_from_message",
    "decode_activity_event",
    "messages_table",
    "messages_to_arrow",
    "messages_to_pandas",
    "new_message",
    "unmarshal_ack",
    "unmarshal_message",
]
