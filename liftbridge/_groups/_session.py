"""The consumer-group RPCs a member's thread makes, each one bounded attempt.

The group thread is also the member's heartbeat, so nothing it calls may block
for long: every method here makes a single attempt with the deadline it is
given and raises the SDK's error, leaving the retrying to the thread's next
turn (a failed attempt moves the router to another broker and, for leaders,
refreshes its metadata). Partition leaders and the group coordinator are
found through the router.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from liftbridge._consume._cursors import Cursors
from liftbridge._core._router import BrokerId, Deadline, Leader, Router
from liftbridge._errors import LiftbridgeError
from liftbridge._groups._values import (
    Backlog,
    StreamPartition,
    assignment_from_proto,
    group_backlog,
    group_cursor_id,
    group_position_id,
    group_release_id,
)
from liftbridge_api import api_pb2

_log = logging.getLogger(__name__)


@dataclass
class Membership:
    """What a member knows about its place in the group. Owned by the group
    thread (and by ``subscribe`` before the thread starts); not shared.

    Attributes:
        consumer_id: the id the member joined with.
        coordinator: broker id of the group coordinator.
        epoch: the group epoch the member last saw.
        consumer_timeout: seconds without a heartbeat before the coordinator
            expires a member (server setting ``groups.consumer.timeout``).
        coordinator_timeout: seconds of failed heartbeats before the member
            reports the coordinator (``groups.coordinator.timeout``).
        joined_at: ``time.monotonic()`` of the join.
        last_contact: ``time.monotonic()`` of the last successful heartbeat.
        next_report: no coordinator report before this ``time.monotonic()``.
    """

    consumer_id: str
    coordinator: str
    epoch: int
    consumer_timeout: float
    coordinator_timeout: float
    joined_at: float = field(default_factory=time.monotonic)
    last_contact: float = field(default_factory=time.monotonic)
    next_report: float = 0.0

    @property
    def heartbeat_interval(self) -> float:
        """Seconds between heartbeats: a third of the consumer timeout."""
        return self.consumer_timeout / 3


class GroupSession:
    """Group-protocol and cursor RPCs for one member of one group.

    Thread-safety: the methods may be called from any thread.
    """

    def __init__(
        self, router: Router, cursors: Cursors, group_id: str, streams: Iterable[str]
    ) -> None:
        self._router = router
        self._cursors = cursors
        self._group_id = group_id
        self._streams = list(streams)
        self._cursor_id = group_cursor_id(group_id)
        self._position_id = group_position_id(group_id)
        self._release_id = group_release_id(group_id)

    def _once(self, method: str, request: Any, timeout: float, target: Any = None) -> Any:
        """One attempt of an RPC within ``timeout`` seconds."""
        deadline = Deadline(timeout)
        if target is None:
            return self._router.call(method, request, deadline=deadline, retry=False)
        return self._router.call(method, request, deadline=deadline, target=target, retry=False)

    # ----------------------------------------------------------- protocol --

    def join(self, consumer_id: str, timeout: float) -> Membership:
        """JoinConsumerGroup (any broker; creates the group when it is new).

        Raises:
            LiftbridgeError: the refusal or failure (see :func:`classify`).
        """
        request = api_pb2.JoinConsumerGroupRequest(
            groupId=self._group_id, consumerId=consumer_id, streams=self._streams
        )
        response = self._once("JoinConsumerGroup", request, timeout)
        return Membership(
            consumer_id=consumer_id,
            coordinator=response.coordinator,
            epoch=int(response.epoch),
            consumer_timeout=response.consumerTimeout / 1e9,
            coordinator_timeout=response.coordinatorTimeout / 1e9,
        )

    def leave(self, consumer_id: str, timeout: float) -> None:
        """LeaveConsumerGroup (any broker)."""
        request = api_pb2.LeaveConsumerGroupRequest(groupId=self._group_id, consumerId=consumer_id)
        self._once("LeaveConsumerGroup", request, timeout)

    def fetch_assignments(
        self, membership: Membership, timeout: float
    ) -> tuple[frozenset[StreamPartition], int]:
        """FetchConsumerGroupAssignments on the coordinator: the heartbeat.

        Returns:
            The assigned partitions and the epoch they belong to.
        """
        request = api_pb2.FetchConsumerGroupAssignmentsRequest(
            groupId=self._group_id, consumerId=membership.consumer_id, epoch=membership.epoch
        )
        response = self._once(
            "FetchConsumerGroupAssignments", request, timeout, BrokerId(membership.coordinator)
        )
        return assignment_from_proto(response.assignments), int(response.epoch)

    def report_coordinator(self, membership: Membership, timeout: float) -> None:
        """ReportConsumerGroupCoordinator: this member cannot reach the coordinator."""
        request = api_pb2.ReportConsumerGroupCoordinatorRequest(
            groupId=self._group_id,
            consumerId=membership.consumer_id,
            coordinator=membership.coordinator,
            epoch=membership.epoch,
        )
        self._once("ReportConsumerGroupCoordinator", request, timeout)

    def group_info(self, timeout: float, ask: str | None = None) -> tuple[str, int] | None:
        """The group's coordinator and epoch from FetchMetadata.

        Args:
            timeout: deadline of each attempt.
            ask: a broker id to ask first (the coordinator knows the current
                epoch; another broker may lag it by a Raft apply).

        Returns:
            ``(coordinator, epoch)``, or None when the broker does not know the group.
        """
        request = api_pb2.FetchMetadataRequest(streams=self._streams, groups=[self._group_id])
        response: Any = None
        if ask:
            try:
                response = self._once("FetchMetadata", request, timeout, BrokerId(ask))
            except LiftbridgeError as e:
                _log.debug("group metadata from broker %s failed: %s", ask, e)
        if response is None:
            response = self._once("FetchMetadata", request, timeout)
        for group in response.groupMetadata:
            if group.groupId == self._group_id:
                if group.error != api_pb2.ConsumerGroupMetadata.OK:
                    return None
                return group.coordinator, int(group.epoch)
        return None

    # ------------------------------------------------------------ cursors --

    def fetch_cursor(self, tp: StreamPartition, timeout: float, *, position: bool = False) -> int:
        """The group's committed offset of a partition (or, with ``position``,
        the position its reader last reported); -1 when none."""
        cursor_id = self._position_id if position else self._cursor_id
        offset = self._cursors.fetch(
            cursor_id, tp.stream, tp.partition, Deadline(timeout), retry=False
        )
        return -1 if offset is None else offset

    def set_cursor(
        self, tp: StreamPartition, offset: int, timeout: float, *, position: bool = False
    ) -> None:
        """Commits the group's offset of a partition (or, with ``position``,
        reports the reader's position)."""
        cursor_id = self._position_id if position else self._cursor_id
        self._cursors.set(
            cursor_id, tp.stream, tp.partition, offset, Deadline(timeout), retry=False
        )

    def mark_released(self, tp: StreamPartition, epoch: int, timeout: float) -> None:
        """Marks a partition let go at group epoch ``epoch`` (after the final commit)."""
        deadline = Deadline(timeout)
        self._cursors.set(self._release_id, tp.stream, tp.partition, epoch, deadline, retry=False)

    def released_epoch(self, tp: StreamPartition, timeout: float) -> int:
        """The epoch at which a member last let the partition go; -1 when never."""
        epoch = self._cursors.fetch(
            self._release_id, tp.stream, tp.partition, Deadline(timeout), retry=False
        )
        return -1 if epoch is None else epoch

    def partition_offsets(self, tp: StreamPartition, timeout: float) -> tuple[int, int]:
        """``(high_watermark, newest_offset)`` of a partition, from its leader."""
        request = api_pb2.FetchPartitionMetadataRequest(stream=tp.stream, partition=tp.partition)
        response = self._once(
            "FetchPartitionMetadata", request, timeout, Leader(tp.stream, tp.partition)
        )
        return int(response.metadata.highWatermark), int(response.metadata.newestOffset)

    def partition_count(self, stream: str, timeout: float) -> int:
        """How many partitions a stream has (cached metadata, refreshed once if unknown)."""
        count = self._router.metadata.partition_count(stream)
        if count == 0:
            count = self._router.refresh(Deadline(timeout)).partition_count(stream)
        return count

    def backlog(self, timeout: float) -> Backlog:
        """The group's :class:`Backlog` over the member's streams: for every
        partition, from its high watermark, the group's cursor and the
        position its reader reported (:func:`group_backlog`)."""
        positions = []
        for stream in self._streams:
            for partition in range(self.partition_count(stream, timeout)):
                tp = StreamPartition(stream, partition)
                high_watermark, _ = self.partition_offsets(tp, timeout)
                committed = self.fetch_cursor(tp, timeout)
                reported = self.fetch_cursor(tp, timeout, position=True)
                positions.append((high_watermark, committed, reported))
        return group_backlog(positions)
