"""Where a subscription starts and stops: the :class:`StartPosition` and
:class:`StopPosition` choices, offsets, times, and the ``SubscribeRequest`` they
make (checked before any RPC). Pure values; no I/O."""

from __future__ import annotations

import enum
from datetime import datetime, timedelta

from liftbridge._core import _validate as check
from liftbridge._errors import ArgumentTypeError, InvalidArgumentError
from liftbridge_api import api_pb2


class StartPosition(enum.Enum):
    """Where a subscription starts, when not at an offset or a time.

    ``Client.subscribe`` also takes an ``int`` offset (first message at or
    after it), a ``datetime`` (first message received at or after it) or a
    ``timedelta`` (that long before now).
    """

    NEW_ONLY = "new_only"
    """Only messages published after the subscription starts (the default)."""
    EARLIEST = "earliest"
    """The oldest message still in the partition."""
    LATEST = "latest"
    """The newest message already in the partition, then new ones."""


class StopPosition(enum.Enum):
    """Where a subscription stops, when not at an offset or a time.

    ``Client.subscribe`` also takes an ``int`` offset (stop after that message)
    or a ``datetime`` (stop after the last message received before it).
    """

    LATEST = "latest"
    """The newest message in the partition when the subscription starts."""


Start = StartPosition | int | datetime | timedelta
Stop = StopPosition | int | datetime


def _unix_ns(when: datetime, arg: str) -> int:
    return check.timestamp_ns(when, arg=arg)


def subscribe_request(
    stream: str,
    partition: int,
    start: Start,
    stop: Stop | None,
    read_isr_replica: bool,
    resume: bool,
) -> api_pb2.SubscribeRequest:
    """Builds a SubscribeRequest, validating the positions.

    Raises:
        InvalidArgumentError: a negative offset, a naive datetime, or a stop
            before the start.
        ArgumentTypeError: a position of an unsupported type.
    """
    request = api_pb2.SubscribeRequest(
        stream=stream, partition=partition, readISRReplica=read_isr_replica, resume=resume
    )
    if isinstance(start, StartPosition):
        request.startPosition = {
            StartPosition.NEW_ONLY: api_pb2.NEW_ONLY,
            StartPosition.EARLIEST: api_pb2.EARLIEST,
            StartPosition.LATEST: api_pb2.LATEST,
        }[start]
    elif isinstance(start, int) and not isinstance(start, bool):
        check.int64(start, arg="start offset")
        request.startPosition = api_pb2.OFFSET
        request.startOffset = start
    elif isinstance(start, datetime):
        request.startPosition = api_pb2.TIMESTAMP
        request.startTimestamp = _unix_ns(start, "start")
    elif isinstance(start, timedelta):
        request.startPosition = api_pb2.TIMESTAMP
        request.startTimestamp = check.time_before_now_ns(start, arg="start")
    else:
        raise ArgumentTypeError(
            "start must be a StartPosition, an int offset, a datetime or a timedelta, "
            f"got {type(start).__name__}"
        )
    if stop is None:
        request.stopPosition = api_pb2.STOP_ON_CANCEL
    elif isinstance(stop, StopPosition):
        request.stopPosition = api_pb2.STOP_LATEST
    elif isinstance(stop, int) and not isinstance(stop, bool):
        check.int64(stop, arg="stop offset")
        if request.startPosition == api_pb2.OFFSET and stop < request.startOffset:
            raise InvalidArgumentError(
                f"stop offset {stop} is before start offset {request.startOffset}"
            )
        request.stopPosition = api_pb2.STOP_OFFSET
        request.stopOffset = stop
    elif isinstance(stop, datetime):
        request.stopPosition = api_pb2.STOP_TIMESTAMP
        request.stopTimestamp = _unix_ns(stop, "stop")
    else:
        raise ArgumentTypeError(
            "stop must be None, a StopPosition, an int offset or a datetime, "
            f"got {type(stop).__name__}"
        )
    return request
