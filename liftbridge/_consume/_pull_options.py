"""What :meth:`Client.pull` takes and tells: where partitions start
(:class:`FromCursor`, offsets, times), the :class:`Stall` report given to
``on_stall``, and the :class:`PullSource` a :class:`PullConsumer` reads
through (the client's public methods). Values and checks only: no threads,
no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from liftbridge._consume._positions import StartPosition, StopPosition
from liftbridge._consume._subscription import Handler, Subscription
from liftbridge._core import _validate as check
from liftbridge._core._metadata import Metadata, PartitionMetadata
from liftbridge._errors import ArgumentTypeError, InvalidArgumentError


@dataclass(frozen=True)
class FromCursor:
    """``start=`` for :meth:`Client.pull`: resume every partition after the
    offset stored in a cursor (see :meth:`PullConsumer.commit`).

    Attributes:
        cursor_id: the cursor.
        otherwise: where partitions without a stored cursor start.
    """

    cursor_id: str
    otherwise: StartPosition | int = StartPosition.EARLIEST

    def __post_init__(self) -> None:
        check.identifier(self.cursor_id, arg="cursor_id")
        if isinstance(self.otherwise, bool) or not isinstance(self.otherwise, (StartPosition, int)):
            raise ArgumentTypeError(
                "FromCursor's otherwise must be a StartPosition or an offset (int), "
                f"got {type(self.otherwise).__name__}"
            )


Start = StartPosition | int | datetime | timedelta
PullStart = Start | FromCursor


@dataclass(frozen=True)
class Stall:
    """What :meth:`Client.pull`'s ``on_stall`` callback is told.

    Attributes:
        stream: the stream.
        partition: the partition that stalled.
        last_offset: the last offset that arrived before it (None: none did).
        high_watermark: the leader's high watermark seen; -1 when the
            leader did not answer within half of ``stall_timeout`` (a frozen
            leader answers nothing; the partition is resubscribed anyway).
        idle: seconds nothing had arrived.
        resumed_from: the offset it was resubscribed from (None: the start
            position), or None with ``error`` set when resubscribing failed
            (it is tried again at the next look).
        error: why resubscribing failed, else None.
    """

    stream: str
    partition: int
    last_offset: int | None
    high_watermark: int
    idle: float
    resumed_from: int | None
    error: BaseException | None = None


StallCallback = Callable[[Stall], None]


class PullSource(Protocol):
    """What a pull consumer needs from the client."""

    @property
    def metadata(self) -> Metadata: ...

    @property
    def closed(self) -> bool: ...

    def fetch_metadata(self, *, timeout: float | None = None) -> Metadata: ...

    def fetch_partition_metadata(
        self, stream: str, partition: int = 0, *, timeout: float | None = None
    ) -> PartitionMetadata: ...

    def subscribe(
        self,
        stream: str,
        handler: Handler | None = None,
        *,
        partition: int = 0,
        start: Start = StartPosition.NEW_ONLY,
        stop: StopPosition | int | datetime | None = None,
        read_replica: bool = False,
        resume: bool = False,
    ) -> Subscription: ...

    def set_cursor(
        self,
        cursor_id: str,
        stream: str,
        partition: int,
        offset: int,
        *,
        timeout: float | None = None,
    ) -> None: ...

    def fetch_cursor(
        self, cursor_id: str, stream: str, partition: int, *, timeout: float | None = None
    ) -> int | None: ...


def check_start(start: object) -> None:
    """Validates ``start=`` before any RPC.

    Raises:
        ArgumentTypeError: a type ``start`` cannot be.
        InvalidArgumentError: a negative offset or delta, a naive datetime.
    """
    if isinstance(start, FromCursor):
        check.stream_name(start.cursor_id, arg="cursor_id")
        start = start.otherwise
        if not isinstance(start, (StartPosition, int)) or isinstance(start, bool):
            raise ArgumentTypeError("FromCursor.otherwise must be a StartPosition or an int offset")
    if isinstance(start, StartPosition):
        return
    if isinstance(start, int) and not isinstance(start, bool):
        if start < 0:
            raise InvalidArgumentError(f"start offset must be >= 0, got {start}")
        return
    if isinstance(start, datetime):
        if start.tzinfo is None:
            raise InvalidArgumentError("start must be timezone-aware (e.g. datetime.now(UTC))")
        return
    if isinstance(start, timedelta):
        if start < timedelta(0):
            raise InvalidArgumentError(f"start time delta must be >= 0, got {start}")
        return
    raise ArgumentTypeError(
        "start must be a StartPosition, an int offset, a datetime, a timedelta or a "
        f"FromCursor, got {type(start).__name__}"
    )
