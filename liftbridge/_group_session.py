"""The consumer-group RPCs a member's thread makes, each one bounded attempt.

The group thread is also the member's heartbeat, so nothing it calls may block
for long: every method here makes a single attempt with the deadline it is
given (``_rpc_any``'s move to another broker on UNAVAILABLE aside) and raises
the SDK's error, leaving the retrying to the thread's next turn. Partition
leaders and the group coordinator are found through the client's metadata.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from liftbridge._errors import (
    LiftbridgeError,
    NotLeaderError,
    ServerError,
    UnavailableError,
)
from liftbridge._group import (
    StreamPartition,
    assignment_from_proto,
    cursors_partition,
    group_backlog,
    group_cursor_id,
)
from liftbridge_api import api_pb2

if TYPE_CHECKING:
    from liftbridge._client import Client

_log = logging.getLogger(__name__)

CURSORS_STREAM = "__cursors"


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

    Thread-safety: the methods may be called from any thread; the broker
    address book is replaced atomically.
    """

    def __init__(self, client: Client, group_id: str, streams: Iterable[str]) -> None:
        self._client = client
        self._group_id = group_id
        self._streams = list(streams)
        self._cursor_id = group_cursor_id(group_id)
        self._brokers: dict[str, str] = {}  # broker id -> address; replaced, never mutated

    # ----------------------------------------------------------- protocol --

    def join(self, consumer_id: str, timeout: float) -> Membership:
        """JoinConsumerGroup (any broker; creates the group when it is new).

        Raises:
            LiftbridgeError: the refusal or failure (see :func:`classify`).
        """
        request = api_pb2.JoinConsumerGroupRequest(
            groupId=self._group_id, consumerId=consumer_id, streams=self._streams
        )
        response = self._client._rpc_any("JoinConsumerGroup", request, timeout)
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
        self._client._rpc_any("LeaveConsumerGroup", request, timeout)

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
        address = self.broker_address(membership.coordinator, timeout)
        response = self._client._invoke(address, "FetchConsumerGroupAssignments", request, timeout)
        return assignment_from_proto(response.assignments), int(response.epoch)

    def report_coordinator(self, membership: Membership, timeout: float) -> None:
        """ReportConsumerGroupCoordinator: this member cannot reach the coordinator."""
        request = api_pb2.ReportConsumerGroupCoordinatorRequest(
            groupId=self._group_id,
            consumerId=membership.consumer_id,
            coordinator=membership.coordinator,
            epoch=membership.epoch,
        )
        self._client._rpc_any("ReportConsumerGroupCoordinator", request, timeout)

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
                response = self._client._invoke(
                    self.broker_address(ask, timeout), "FetchMetadata", request, timeout
                )
            except LiftbridgeError as e:
                _log.debug("group metadata from broker %s failed: %s", ask, e)
        if response is None:
            response = self._client._rpc_any("FetchMetadata", request, timeout)
        self._brokers = {b.id: f"{b.host}:{b.port}" for b in response.brokers}
        for group in response.groupMetadata:
            if group.groupId == self._group_id:
                if group.error != api_pb2.ConsumerGroupMetadata.OK:
                    return None
                return group.coordinator, int(group.epoch)
        return None

    def broker_address(self, broker_id: str, timeout: float) -> str:
        """A broker's address, refreshing the client's metadata once if unknown.

        Raises:
            UnavailableError: no broker with this id is known.
        """
        address = self._brokers.get(broker_id)
        if address is not None:
            return address
        info = self._client.metadata.broker(broker_id)
        if info is None:
            info = self._client.fetch_metadata(timeout=timeout).broker(broker_id)
        if info is None:
            raise UnavailableError(f"broker {broker_id!r} is not in the cluster metadata")
        return info.address

    # ------------------------------------------------------------ cursors --

    def fetch_cursor(self, tp: StreamPartition, timeout: float) -> int:
        """The group's committed offset of a partition; -1 when none."""
        request = api_pb2.FetchCursorRequest(
            stream=tp.stream, partition=tp.partition, cursorId=self._cursor_id
        )
        response = self._cursor_rpc("FetchCursor", request, tp, timeout)
        return int(response.offset)

    def set_cursor(self, tp: StreamPartition, offset: int, timeout: float) -> None:
        """Commits the group's offset of a partition."""
        request = api_pb2.SetCursorRequest(
            stream=tp.stream, partition=tp.partition, cursorId=self._cursor_id, offset=offset
        )
        self._cursor_rpc("SetCursor", request, tp, timeout)

    def partition_offsets(self, tp: StreamPartition, timeout: float) -> tuple[int, int]:
        """``(high_watermark, newest_offset)`` of a partition, from its leader."""
        request = api_pb2.FetchPartitionMetadataRequest(stream=tp.stream, partition=tp.partition)
        response = self._leader_rpc(
            "FetchPartitionMetadata", request, tp.stream, tp.partition, timeout
        )
        return int(response.metadata.highWatermark), int(response.metadata.newestOffset)

    def partition_count(self, stream: str, timeout: float) -> int:
        """How many partitions a stream has (cached metadata, refreshed once if unknown)."""
        count = self._client.metadata.partition_count(stream)
        if count == 0:
            count = self._client.fetch_metadata(timeout=timeout).partition_count(stream)
        return count

    def backlog(self, timeout: float) -> int:
        """The group's backlog over the member's streams: for every partition,
        high watermark minus the group's cursor (:func:`group_backlog`)."""
        positions = []
        for stream in self._streams:
            for partition in range(self.partition_count(stream, timeout)):
                tp = StreamPartition(stream, partition)
                high_watermark, _ = self.partition_offsets(tp, timeout)
                positions.append((high_watermark, self.fetch_cursor(tp, timeout)))
        return group_backlog(positions)

    def _cursor_rpc(self, method: str, request: Any, tp: StreamPartition, timeout: float) -> Any:
        count = self.partition_count(CURSORS_STREAM, timeout)
        if count == 0:
            raise ServerError(
                "the server has no cursors stream; enable it with cursors.stream.partitions > 0",
                "FAILED_PRECONDITION",
            )
        target = cursors_partition(self._cursor_id, tp.stream, tp.partition, count)
        return self._leader_rpc(method, request, CURSORS_STREAM, target, timeout)

    def _leader_rpc(
        self, method: str, request: Any, stream: str, partition: int, timeout: float
    ) -> Any:
        try:
            address = self._client._leader_address(stream, partition)
            return self._client._invoke(address, method, request, timeout)
        except (NotLeaderError, UnavailableError):
            self._client.refresh_metadata()
            raise
