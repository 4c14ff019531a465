"""Cluster metadata as immutable values, and the client's refreshable cache of it."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from liftbridge_api import api_pb2


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """A broker (server) of the cluster.

    Attributes:
        id: the broker's server id.
        host: advertised host.
        port: advertised gRPC port.
        partition_count: partitions it stores.
        leader_count: partitions it leads.
    """

    id: str
    host: str
    port: int
    partition_count: int = 0
    leader_count: int = 0

    @property
    def address(self) -> str:
        """``host:port``, as the client dials it."""
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """Where a stream partition lives, as of the last metadata refresh.

    Attributes:
        stream: the stream name.
        id: partition number.
        leader: broker id of the leader, empty while there is none.
        replicas: broker ids holding a replica.
        isr: broker ids of the in-sync replicas.
        paused: whether the partition is paused.
        readonly: whether the partition is readonly.
    """

    stream: str
    id: int
    leader: str
    replicas: tuple[str, ...]
    isr: tuple[str, ...]
    paused: bool = False
    readonly: bool = False


@dataclass(frozen=True, slots=True)
class StreamInfo:
    """A stream and its partitions.

    Attributes:
        name: the stream name.
        subject: the NATS subject of partition 0 (partition N is ``subject.N``).
        partitions: partition number to :class:`PartitionInfo`.
        creation_timestamp_ns: when the stream was created, unix nanoseconds.
    """

    name: str
    subject: str
    partitions: Mapping[int, PartitionInfo]
    creation_timestamp_ns: int = 0


@dataclass(frozen=True, slots=True)
class ConsumerGroupInfo:
    """A consumer group's coordinator and generation.

    Attributes:
        group_id: the group.
        coordinator: broker id of its coordinator.
        epoch: the group generation; bumped at every membership change.
    """

    group_id: str
    coordinator: str
    epoch: int


@dataclass(frozen=True, slots=True)
class Metadata:
    """An immutable snapshot of the cluster: brokers, streams, partitions.

    Attributes:
        brokers: every broker, sorted by id.
        streams: stream name to :class:`StreamInfo`.
        groups: consumer groups that were asked for, by id.
        last_updated: ``time.time()`` when this snapshot was fetched.
    """

    brokers: tuple[BrokerInfo, ...]
    streams: Mapping[str, StreamInfo]
    groups: Mapping[str, ConsumerGroupInfo]
    last_updated: float

    @property
    def addresses(self) -> tuple[str, ...]:
        """Every broker's ``host:port``."""
        return tuple(b.address for b in self.brokers)

    def broker(self, broker_id: str) -> BrokerInfo | None:
        """The broker with this id, or None."""
        for b in self.brokers:
            if b.id == broker_id:
                return b
        return None

    def get_stream(self, name: str) -> StreamInfo | None:
        """The stream with this name, or None."""
        return self.streams.get(name)

    def partition_count(self, stream: str) -> int:
        """How many partitions the stream has; 0 when it is unknown."""
        info = self.streams.get(stream)
        return len(info.partitions) if info is not None else 0

    def partition(self, stream: str, partition: int) -> PartitionInfo | None:
        """The partition's info, or None when unknown."""
        info = self.streams.get(stream)
        return info.partitions.get(partition) if info is not None else None


def metadata_from_proto(pb: api_pb2.FetchMetadataResponse) -> Metadata:
    """Converts a FetchMetadataResponse into a :class:`Metadata` snapshot."""
    brokers = tuple(
        sorted(
            (BrokerInfo(b.id, b.host, b.port, b.partitionCount, b.leaderCount) for b in pb.brokers),
            key=lambda b: b.id,
        )
    )
    streams: dict[str, StreamInfo] = {}
    for s in pb.streamMetadata:
        if s.error != api_pb2.StreamMetadata.OK:
            continue
        parts = {
            pid: PartitionInfo(
                s.name, pid, p.leader, tuple(p.replicas), tuple(p.isr), p.paused, p.readonly
            )
            for pid, p in sorted(s.partitions.items())
        }
        streams[s.name] = StreamInfo(
            s.name, s.subject, MappingProxyType(parts), s.creationTimestamp
        )
    groups = {
        g.groupId: ConsumerGroupInfo(g.groupId, g.coordinator, g.epoch)
        for g in pb.groupMetadata
        if g.error == api_pb2.ConsumerGroupMetadata.OK
    }
    return Metadata(brokers, MappingProxyType(streams), MappingProxyType(groups), time.time())


@dataclass(frozen=True, slots=True)
class EventTimestamps:
    """First and latest time something happened to a partition (unix ns; 0 = never)."""

    first_ns: int
    latest_ns: int


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    """A partition's state as its leader sees it (``Client.fetch_partition_metadata``).

    Attributes:
        stream: the stream name.
        id: partition number.
        leader: broker id of the leader.
        replicas: broker ids holding a replica.
        isr: broker ids of the in-sync replicas.
        high_watermark: offset of the last committed message (-1 when empty).
        newest_offset: offset of the last message written (-1 when empty).
        paused: whether the partition is paused.
        readonly: whether the partition is readonly.
        messages_received: when the first and latest message arrived.
        paused_changed: when the paused state first and last changed.
        readonly_changed: when the readonly flag first and last changed.
    """

    stream: str
    id: int
    leader: str
    replicas: tuple[str, ...]
    isr: tuple[str, ...]
    high_watermark: int
    newest_offset: int
    paused: bool
    readonly: bool
    messages_received: EventTimestamps
    paused_changed: EventTimestamps
    readonly_changed: EventTimestamps


def _stamps(pb: api_pb2.PartitionEventTimestamps) -> EventTimestamps:
    return EventTimestamps(pb.firstTimestamp, pb.latestTimestamp)


def partition_metadata_from_proto(stream: str, pb: api_pb2.PartitionMetadata) -> PartitionMetadata:
    """Converts a FetchPartitionMetadataResponse's partition."""
    return PartitionMetadata(
        stream=stream,
        id=pb.id,
        leader=pb.leader,
        replicas=tuple(pb.replicas),
        isr=tuple(pb.isr),
        high_watermark=pb.highWatermark,
        newest_offset=pb.newestOffset,
        paused=pb.paused,
        readonly=pb.readonly,
        messages_received=_stamps(pb.messagesReceivedTimestamps),
        paused_changed=_stamps(pb.pauseTimestamps),
        readonly_changed=_stamps(pb.readonlyTimestamps),
    )


class MetadataCache:
    """The client's latest :class:`Metadata`, plus the seed addresses.

    Thread-safe: readers get an immutable snapshot; writers swap it under a lock.
    """

    def __init__(self, seeds: tuple[str, ...]) -> None:
        self._lock = threading.Lock()  # guards _current
        self._seeds = seeds
        self._current = Metadata((), MappingProxyType({}), MappingProxyType({}), 0.0)

    @property
    def current(self) -> Metadata:
        """The latest snapshot (empty before the first refresh)."""
        return self._current

    def replace(self, metadata: Metadata) -> Metadata:
        """Stores a newer snapshot and returns it."""
        with self._lock:
            self._current = metadata
        return metadata

    def addresses(self) -> list[str]:
        """Known broker addresses, then any seed not among them (for failover)."""
        known = list(self._current.addresses)
        return known + [s for s in self._seeds if s not in known]
