"""Consumer-group building blocks: partitions as values, the ``__group:<id>``
cursors, member ids, the overflow backlog rule, and how the server's group
refusals are told apart.

Pure functions and small immutable values; the protocol runs in
:mod:`liftbridge._group_session` (RPCs) and :mod:`liftbridge._consumer` (the
member's thread).
"""

from __future__ import annotations

import enum
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass

from liftbridge import _validate as check
from liftbridge._errors import InvalidArgumentError
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


def new_consumer_id(now_ns: int | None = None) -> str:
    """A fresh consumer id that sorts by creation time: ``<20-digit unix ns>-<8 hex>``.

    The server gives a contested partition to the member whose id sorts first,
    so with these ids the member that joined first keeps it (see pinned groups
    in :class:`~liftbridge.Consumer`).

    Args:
        now_ns: the creation time in unix nanoseconds; now when None.
    """
    stamp = time.time_ns() if now_ns is None else now_ns
    return f"{stamp:020d}-{secrets.token_hex(4)}"


def assignment_from_proto(
    assignments: Iterable[api_pb2.PartitionAssignment],
) -> frozenset[StreamPartition]:
    """The partitions a FetchConsumerGroupAssignments response assigns."""
    return frozenset(StreamPartition(a.stream, int(p)) for a in assignments for p in a.partitions)


# ------------------------------------------------------------ refusals ----


class Refusal(enum.Enum):
    """Why the server refused a consumer-group request, told apart by its text
    (Liftbridge v1.9.0 sends them all as FAILED_PRECONDITION or NOT_FOUND)."""

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


def classify(error: BaseException) -> Refusal | None:
    """The group refusal an error reports, or None when it is not one."""
    text = str(error).lower()
    if any(t in text for t in _NO_GROUP_TEXTS):
        return Refusal.NO_GROUP
    for refusal in Refusal:
        if refusal is not Refusal.NO_GROUP and refusal.value in text:
            return refusal
    return None


# ------------------------------------------------------------- backlog ----


def partition_backlog(high_watermark: int, committed: int) -> int:
    """Messages of one partition the group has not committed yet.

    ``high_watermark - committed``, never negative. Without a committed offset
    (``committed == -1``) every message counts: ``high_watermark + 1``. An
    empty partition (``high_watermark == -1``) has none.

    Args:
        high_watermark: offset of the partition's last committed message, -1
            when empty (:attr:`PartitionMetadata.high_watermark`).
        committed: the group's cursor, -1 when none.
    """
    return max(0, high_watermark - committed)


def group_backlog(positions: Iterable[tuple[int, int]]) -> int:
    """The sum of :func:`partition_backlog` over ``(high_watermark, committed)`` pairs."""
    return sum(partition_backlog(hw, committed) for hw, committed in positions)


@dataclass(frozen=True, slots=True)
class OverflowRule:
    """When an overflow member belongs in its group.

    Outside the group, it joins once the backlog is at least ``min_pending``.
    Inside, it leaves (after committing) once the backlog is at most
    ``low_pending``. Between the two marks it stays where it is, so it does
    not flap.

    Attributes:
        min_pending: the high mark, at least 1.
        low_pending: the low mark, from 0 to ``min_pending - 1``.
    """

    min_pending: int
    low_pending: int

    def __post_init__(self) -> None:
        check.positive_int(self.min_pending, arg="min_pending")
        check.positive_int(self.low_pending, arg="low_pending", minimum=0)
        if self.low_pending >= self.min_pending:
            raise InvalidArgumentError(
                f"low_pending must be below min_pending ({self.min_pending}), "
                f"got {self.low_pending}"
            )

    @classmethod
    def from_options(cls, min_pending: int | None, low_pending: int | None) -> OverflowRule | None:
        """The rule for ``create_consumer``'s options; None when not an overflow member.

        ``low_pending`` defaults to ``min_pending // 2``.

        Raises:
            InvalidArgumentError: ``low_pending`` without ``min_pending``, or
                marks out of range.
        """
        if min_pending is None:
            if low_pending is not None:
                raise InvalidArgumentError("low_pending needs min_pending (an overflow member)")
            return None
        check.positive_int(min_pending, arg="min_pending")
        return cls(min_pending, min_pending // 2 if low_pending is None else low_pending)

    def wants_membership(self, member: bool, backlog: int) -> bool:
        """Whether the member should be in the group, given where it is now.

        Args:
            member: True while it is in the group (or joining it).
            backlog: the group's backlog (:func:`group_backlog`).
        """
        if member:
            return backlog > self.low_pending
        return backlog >= self.min_pending
