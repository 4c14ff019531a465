"""Cluster metadata as immutable values, and the client's refreshable cache of it.

The values pickle and deep-copy (their mappings are :class:`FrozenMap`), print
as one short line, and show as tables in notebooks (``_repr_html_``). Streams
whose names start with ``__`` are the server's own (``__cursors``,
``__activity``): reprs and tables leave them out unless asked.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypeVar, overload

from liftbridge._core import _validate as check
from liftbridge._core._display import (
    Table,
    fields_table,
    join,
    show_datetime,
    timestamp_ns_to_datetime,
)
from liftbridge_api import api_pb2

K = TypeVar("K")
V = TypeVar("V")
T = TypeVar("T")

INTERNAL_PREFIX = "__"
"""Stream names the server reserves for itself start with this."""


class FrozenMap(Mapping[K, V]):
    """A read-only mapping that, unlike ``MappingProxyType``, pickles and deep-copies.

    Thread-safe: nothing changes it after construction.
    """

    __slots__ = ("_data",)

    def __init__(self, data: Mapping[K, V]) -> None:
        self._data = dict(data)

    def __getitem__(self, key: K) -> V:
        return self._data[key]

    # The Mapping mixins' get and __contains__ call __getitem__ and catch
    # KeyError; publishes look up metadata several times each.
    @overload
    def get(self, key: K, /) -> V | None: ...

    @overload
    def get(self, key: K, /, default: V | T) -> V | T: ...

    def get(self, key: K, /, default: V | T | None = None) -> V | T | None:
        return self._data.get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __iter__(self) -> Iterator[K]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"FrozenMap({self._data!r})"

    def __reduce__(self) -> tuple[type[FrozenMap[K, V]], tuple[dict[K, V]]]:
        return type(self), (self._data,)


def _frozen(data: Mapping[K, V]) -> FrozenMap[K, V]:
    return data if isinstance(data, FrozenMap) else FrozenMap(data)


def is_internal(stream: str) -> bool:
    """True for the server's own streams (``__cursors``, ``__activity``)."""
    return stream.startswith(INTERNAL_PREFIX)


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

    def _flags(self) -> str:
        return " ".join(f for f, on in (("paused", self.paused), ("readonly", self.readonly)) if on)

    def __repr__(self) -> str:
        flags = self._flags()
        return (
            f"<PartitionInfo {self.stream}/{self.id} leader={self.leader or '-'}"
            f" replicas=[{','.join(self.replicas)}] isr=[{','.join(self.isr)}]"
            f"{' ' + flags if flags else ''}>"
        )

    def _row(self) -> tuple[str, ...]:
        return (
            str(self.id),
            self.leader or "-",
            join(self.replicas),
            join(self.isr),
            self._flags() or "-",
        )

    def _repr_html_(self) -> str:
        return Table(
            f"partition {self.stream}/{self.id}", _PARTITION_COLUMNS, (self._row(),)
        )._repr_html_()


_PARTITION_COLUMNS = ("partition", "leader", "replicas", "isr", "flags")


@dataclass(frozen=True, slots=True)
class StreamInfo:
    """A stream and its partitions.

    Attributes:
        name: the stream name.
        subject: the NATS subject of partition 0 (partition N is ``subject.N``).
        partitions: partition number to :class:`PartitionInfo`.
        creation_timestamp_ns: when the stream was created, unix nanoseconds
            (exact; 0 when unknown); ``creation_timestamp`` is the same as a UTC
            datetime.
    """

    name: str
    subject: str
    partitions: Mapping[int, PartitionInfo]
    creation_timestamp_ns: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "partitions", _frozen(self.partitions))

    @property
    def creation_timestamp(self) -> datetime | None:
        """``creation_timestamp_ns`` as an aware UTC datetime; None when unknown."""
        return timestamp_ns_to_datetime(self.creation_timestamp_ns)

    @property
    def created(self) -> datetime | None:
        """Deprecated name of :attr:`creation_timestamp` (kept for one release)."""
        check.deprecated("StreamInfo.created", "StreamInfo.creation_timestamp")
        return self.creation_timestamp

    @property
    def internal(self) -> bool:
        """True for the server's own streams (``__cursors``, ``__activity``)."""
        return is_internal(self.name)

    def __repr__(self) -> str:
        return (
            f"<StreamInfo {self.name!r} subject={self.subject!r}"
            f" partitions={len(self.partitions)} created={show_datetime(self.creation_timestamp)}>"
        )

    def table(self) -> Table:
        """Its partitions as a :class:`Table`: leader, replicas, ISR, flags."""
        return Table(
            f"stream {self.name!r} (subject {self.subject!r}, created "
            f"{show_datetime(self.creation_timestamp)})",
            _PARTITION_COLUMNS,
            tuple(p._row() for _, p in sorted(self.partitions.items())),
        )

    def _repr_html_(self) -> str:
        return self.table()._repr_html_()


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


_REPR_STREAMS = 8
"""Stream names a Metadata's repr lists before an ellipsis."""


@dataclass(frozen=True, slots=True)
class Metadata:
    """An immutable snapshot of the cluster: brokers, streams, partitions.

    Attributes:
        brokers: every broker, sorted by id.
        streams: stream name to :class:`StreamInfo`.
        groups: consumer groups that were asked for, by id.
        updated: when this snapshot was fetched (this machine's clock), an
            aware UTC datetime; None for a snapshot not fetched from a server.
    """

    brokers: tuple[BrokerInfo, ...]
    streams: Mapping[str, StreamInfo]
    groups: Mapping[str, ConsumerGroupInfo]
    updated: datetime | None

    def __post_init__(self) -> None:
        if isinstance(self.updated, int | float) and not isinstance(self.updated, bool):
            # The old float field (time.time(), 0.0 for never), for one release.
            check.deprecated(
                "Metadata(updated=<time.time() float>)",
                "Metadata(updated=<aware datetime or None>)",
                stacklevel=4,
            )
            when = datetime.fromtimestamp(self.updated, tz=UTC) if self.updated else None
            object.__setattr__(self, "updated", when)
        object.__setattr__(self, "streams", _frozen(self.streams))
        object.__setattr__(self, "groups", _frozen(self.groups))

    @property
    def last_updated(self) -> float:
        """Deprecated: :attr:`updated` as ``time.time()`` seconds (0.0 for None);
        kept for one release."""
        check.deprecated("Metadata.last_updated", "Metadata.updated")
        return self.updated.timestamp() if self.updated is not None else 0.0

    def stream_names(self, *, internal: bool = False) -> tuple[str, ...]:
        """The streams' names, sorted; the server's own ``__`` streams only when asked."""
        return tuple(sorted(n for n in self.streams if internal or not is_internal(n)))

    def __repr__(self) -> str:
        names = self.stream_names()
        hidden = len(self.streams) - len(names)
        shown = ", ".join(names[:_REPR_STREAMS]) + (", …" if len(names) > _REPR_STREAMS else "")
        brokers = ", ".join(f"{b.id}@{b.address}" for b in self.brokers)
        return (
            f"<Metadata brokers=[{brokers}] {len(names)} streams [{shown}]"
            f"{f' (+{hidden} internal)' if hidden else ''}"
            f"{f' {len(self.groups)} groups' if self.groups else ''}"
            f" updated={show_datetime(self.updated)}>"
        )

    def table(self, *, internal: bool = False) -> Table:
        """Every partition of every stream as a :class:`Table` (a row each).

        Args:
            internal: also list the server's own streams (``__cursors``,
                ``__activity``).
        """
        rows = tuple(
            (name, info.subject, *partition._row(), show_datetime(info.creation_timestamp))
            for name in self.stream_names(internal=internal)
            for info in (self.streams[name],)
            for _, partition in sorted(info.partitions.items())
        )
        hidden = len(self.streams) - len(self.stream_names(internal=internal))
        brokers = ", ".join(f"{b.id} ({b.address})" for b in self.brokers) or "none"
        return Table(
            f"brokers: {brokers}; updated {show_datetime(self.updated)}",
            ("stream", "subject", *_PARTITION_COLUMNS, "created (UTC)"),
            rows,
            note=f"{hidden} internal stream(s) hidden: table(internal=True) shows them"
            if hidden
            else "",
        )

    def _repr_html_(self) -> str:
        return self.table()._repr_html_()

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
        streams[s.name] = StreamInfo(s.name, s.subject, FrozenMap(parts), s.creationTimestamp)
    groups = {
        g.groupId: ConsumerGroupInfo(g.groupId, g.coordinator, g.epoch)
        for g in pb.groupMetadata
        if g.error == api_pb2.ConsumerGroupMetadata.OK
    }
    return Metadata(brokers, FrozenMap(streams), FrozenMap(groups), datetime.now(UTC))


@dataclass(frozen=True, slots=True)
class EventTimestamps:
    """First and latest time something happened to a partition (unix ns; 0 = never)."""

    first_ns: int
    latest_ns: int

    @property
    def first(self) -> datetime | None:
        """``first_ns`` as an aware UTC datetime; None for never."""
        return timestamp_ns_to_datetime(self.first_ns)

    @property
    def latest(self) -> datetime | None:
        """``latest_ns`` as an aware UTC datetime; None for never."""
        return timestamp_ns_to_datetime(self.latest_ns)

    def __repr__(self) -> str:
        return (
            f"EventTimestamps(first={show_datetime(self.first)}, "
            f"latest={show_datetime(self.latest)})"
        )


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

    def _repr_html_(self) -> str:
        """The fields as an HTML table for notebooks (each value cut at 200 characters)."""
        fields = ((f, repr(getattr(self, f))) for f in self.__dataclass_fields__)
        return fields_table(f"PartitionMetadata {self.stream!r} [{self.id}]", fields)._repr_html_()


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
        self._lock = threading.Lock()  # guards writes of current
        self._seeds = seeds
        self.current = Metadata((), FrozenMap({}), FrozenMap({}), None)
        """The latest snapshot (empty before the first refresh). Read as a
        plain attribute (one load, not a property's call: every publish
        reads it); written only by :meth:`replace`."""

    def replace(self, metadata: Metadata) -> Metadata:
        """Stores a newer snapshot and returns it."""
        with self._lock:
            self.current = metadata
        return metadata

    def addresses(self) -> list[str]:
        """Known broker addresses, then any seed not among them (for failover)."""
        known = list(self.current.addresses)
        return known + [s for s in self._seeds if s not in known]
