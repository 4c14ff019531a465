"""Consumer-group building blocks: partitions as values, the ``__group:<id>``
cursors, member ids, the overflow backlog rule, and how the server's group
refusals are told apart.

Pure functions and small immutable values; the protocol runs in
:mod:`liftbridge._groups._session` (RPCs) and :mod:`liftbridge._groups._consumer` (the
member's thread).
"""

from __future__ import annotations

import enum
import secrets
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from liftbridge._core import _validate as check
from liftbridge._errors import ArgumentTypeError, InvalidArgumentError, LiftbridgeError, Refusal
from liftbridge_api import api_pb2

GROUP_CURSOR_PREFIX = "__group:"
"""Group offsets are cursors named ``__group:<group id>``, as in the Go client."""


class AutoOffset(enum.Enum):
    """Where a member starts on a partition that has no committed offset."""

    EARLIEST = "earliest"
    """The oldest message still in the partition (the default)."""
    LATEST = "latest"
    """The newest message already in the partition, then new ones."""
    NEW_ONLY = "new_only"
    """Only messages published after the group first reads the partition."""
    ERROR = "error"
    """Do not read it: the handler gets a :class:`NoCursorError`."""


@dataclass(frozen=True, slots=True, order=True)
class StreamPartition:
    """One partition of one stream: the unit a consumer group assigns.

    Immutable, hashable and ordered (by stream, then partition), so sets and
    sorted tuples of them are stable values.

    Attributes:
        stream: the stream name.
        partition: the partition number.
    """

    stream: str
    partition: int

    def __str__(self) -> str:
        return f"{self.stream}/{self.partition}"


def group_cursor_id(group_id: str) -> str:
    """The cursor id under which a group's offsets are stored: ``__group:<group_id>``.

    The same id as the Go client's, so Go and Python members of one group share
    their committed offsets.
    """
    return GROUP_CURSOR_PREFIX + group_id


GROUP_POSITION_PREFIX = "__group-position:"
"""Members report how far they got (the last offset given to a handler, which
may not be committed yet) in cursors named ``__group-position:<group id>``."""


def group_position_id(group_id: str) -> str:
    """The cursor id under which a group's members report their positions."""
    return GROUP_POSITION_PREFIX + group_id


GROUP_RELEASE_PREFIX = "__group-released:"
"""Cursor ids of the hand-over markers: a member that let a partition go
writes, after its final commit, the group epoch it did so in to the cursor
``__group-released:<group id>`` of that partition."""


def group_release_id(group_id: str) -> str:
    """The cursor id under which members mark partitions they let go."""
    return GROUP_RELEASE_PREFIX + group_id


OVERFLOW_ID_PREFIX = "~overflow-"
"""Generated ids of overflow members start with this: ``~`` sorts after every
character of a generated regular id (and after letters and digits)."""


def new_consumer_id(now_ns: int | None = None, *, overflow: bool = False) -> str:
    """A fresh consumer id that sorts by creation time: ``<20-digit unix ns>-<8 hex>``.

    The server gives a contested partition to the member whose id sorts first,
    so with these ids the member that joined first keeps it (see pinned groups
    in :class:`~liftbridge.Consumer`). Overflow members' ids carry
    :data:`OVERFLOW_ID_PREFIX`, so they sort after every regular member's and
    take a partition only when each regular member already holds as many.

    Args:
        now_ns: the creation time in unix nanoseconds; now when None.
        overflow: an id for an overflow member.
    """
    stamp = time.time_ns() if now_ns is None else now_ns
    return f"{OVERFLOW_ID_PREFIX if overflow else ''}{stamp:020d}-{secrets.token_hex(4)}"


def assignment_from_proto(
    assignments: Iterable[api_pb2.PartitionAssignment],
) -> frozenset[StreamPartition]:
    """The partitions a FetchConsumerGroupAssignments response assigns."""
    return frozenset(StreamPartition(a.stream, int(p)) for a in assignments for p in a.partitions)


# ------------------------------------------------------------ refusals ----


def classify(error: BaseException) -> Refusal | None:
    """The group refusal an error reports (as :func:`liftbridge._errors.from_status` found
    it), or None when it is not one."""
    return error.refusal if isinstance(error, LiftbridgeError) else None


# ------------------------------------------------------------- backlog ----


@dataclass(frozen=True, slots=True)
class Backlog:
    """The messages a consumer group has not finished, over some streams.

    The two counts of the pull consumer groups design (NATS ADR-42), for
    Liftbridge partitions: ``pending`` is what no member has been given yet,
    ``ack_pending`` what a member was given (its handler called) and the
    group has not committed. Their sum is what the group would read again
    from its cursors.

    Attributes:
        pending: over every partition, the high watermark minus the group's
            position: the later of its committed offset and the last offset
            its members report having given to a handler.
        ack_pending: over every partition, that position minus the committed
            offset.
    """

    pending: int = 0
    ack_pending: int = 0

    @property
    def total(self) -> int:
        """``pending + ack_pending``: messages after the committed offsets."""
        return self.pending + self.ack_pending

    def __add__(self, other: Backlog) -> Backlog:
        return Backlog(self.pending + other.pending, self.ack_pending + other.ack_pending)


def partition_backlog(high_watermark: int, committed: int, position: int = -1) -> Backlog:
    """One partition's :class:`Backlog`.

    Offsets are -1 for "none": an empty partition (``high_watermark``), no
    committed offset (every message counts), no reported position. Neither
    count is ever negative; a position behind the committed offset counts as
    the committed offset.

    Args:
        high_watermark: offset of the partition's last committed message
            (:attr:`PartitionMetadata.high_watermark`).
        committed: the group's cursor.
        position: the last offset a member reports having given to a handler.
    """
    committed = max(committed, -1)
    reached = min(max(committed, position), max(high_watermark, committed))
    return Backlog(max(0, high_watermark - reached), reached - committed)


def group_backlog(positions: Iterable[tuple[int, int, int]]) -> Backlog:
    """The sum of :func:`partition_backlog` over ``(high_watermark, committed,
    position)`` triples."""
    total = Backlog()
    for high_watermark, committed, position in positions:
        total += partition_backlog(high_watermark, committed, position)
    return total


def _low_mark(name: str, high: int | None, low: int | None, high_name: str) -> int:
    if high is None:
        if low is not None:
            raise InvalidArgumentError(f"{name} needs {high_name}")
        return 0
    check.positive_int(high, arg=high_name)
    if low is None:
        return high // 2
    check.positive_int(low, arg=name, minimum=0)
    if low >= high:
        raise InvalidArgumentError(f"{name} must be below {high_name} ({high}), got {low}")
    return low


@dataclass(frozen=True, slots=True)
class OverflowRule:
    """When an overflow member belongs in its group.

    Outside the group, it joins once ``pending`` reaches ``min_pending`` or
    ``ack_pending`` reaches ``min_ack_pending`` (either is enough, as in
    NATS ADR-42). Inside, it leaves (after committing) once each is at most
    its low mark. Between the marks it stays where it is, so it does not flap.
    A threshold that is None plays no part.

    Attributes:
        min_pending: the high mark of :attr:`Backlog.pending`, at least 1, or None.
        low_pending: its low mark, from 0 to ``min_pending - 1``.
        min_ack_pending: the high mark of :attr:`Backlog.ack_pending`, or None.
        low_ack_pending: its low mark, from 0 to ``min_ack_pending - 1``.
    """

    min_pending: int | None
    low_pending: int = 0
    min_ack_pending: int | None = None
    low_ack_pending: int = 0

    def __post_init__(self) -> None:
        if self.min_pending is None and self.min_ack_pending is None:
            raise InvalidArgumentError("an overflow rule needs min_pending or min_ack_pending")
        for name, high, low, high_name in (
            ("low_pending", self.min_pending, self.low_pending, "min_pending"),
            ("low_ack_pending", self.min_ack_pending, self.low_ack_pending, "min_ack_pending"),
        ):
            _low_mark(name, high, low if high is not None or low else None, high_name)

    @classmethod
    def from_options(
        cls,
        min_pending: int | None,
        low_pending: int | None,
        min_ack_pending: int | None = None,
    ) -> OverflowRule | None:
        """The rule for ``create_consumer``'s options; None when not an overflow member.

        ``low_pending`` defaults to ``min_pending // 2``; the low mark of
        ``min_ack_pending`` is ``min_ack_pending // 2``.

        Raises:
            InvalidArgumentError: ``low_pending`` without ``min_pending``, or
                marks out of range.
        """
        low = _low_mark("low_pending", min_pending, low_pending, "min_pending")
        ack_low = _low_mark("low_ack_pending", min_ack_pending, None, "min_ack_pending")
        if min_pending is None and min_ack_pending is None:
            return None
        return cls(min_pending, low, min_ack_pending, ack_low)

    def wants_membership(self, member: bool, backlog: Backlog) -> bool:
        """Whether the member should be in the group, given where it is now.

        Args:
            member: True while it is in the group (or joining it).
            backlog: the group's backlog (:func:`group_backlog`).
        """
        marks = (
            (self.min_pending, self.low_pending, backlog.pending),
            (self.min_ack_pending, self.low_ack_pending, backlog.ack_pending),
        )
        if member:
            return any(high is not None and count > low for high, low, count in marks)
        return any(high is not None and count >= high for high, _, count in marks)


def stream_list(streams: str | Sequence[str]) -> tuple[str, ...]:
    """The streams a consumer subscribes to, checked, without repeats."""
    if isinstance(streams, (bytes, bytearray, memoryview)):
        raise ArgumentTypeError(
            f"streams must be a str or a list of str, got {type(streams).__name__}"
        )
    if isinstance(streams, str):
        streams = [streams]
    if not isinstance(streams, Sequence) or not streams:
        raise InvalidArgumentError("streams must be a stream name or a non-empty list of them")
    names = [check.stream_name(s, arg=f"streams[{i}]") for i, s in enumerate(streams)]
    return tuple(dict.fromkeys(names))
