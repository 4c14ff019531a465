"""Offsets on the driver: which partitions a read covers, where each range
starts and ends as concrete offsets, how ranges split into Spark partitions,
and how much of the backlog one micro-batch admits.

Streaming offsets are ``{stream: {partition: next_offset}}`` with string
partition keys (JSON's), built in sorted order so equal positions serialize
to equal JSON.

Each partition's offsets take a round trip or two to its leader (its high
watermark; its first message for "earliest" and timestamps); the partitions
of a read are resolved at once, on up to eight ``liftbridge-spark-plan``
threads, so planning takes about one partition's time, not the sum.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import TypeVar

from liftbridge import (
    Client,
    InvalidArgumentError,
    NoSuchPartitionError,
    NoSuchStreamError,
    StartPosition,
)
from liftbridge._core._router import Router
from liftbridge.spark._fetch import OffsetRange, first_offset
from liftbridge.spark._options import EARLIEST, LATEST, OffsetSpec, ReadOptions

Offsets = dict[str, dict[str, int]]
"""A streaming position: per stream, per partition (a str), the next offset to read."""

Partition = tuple[str, int]
T = TypeVar("T")

_PLANNING_THREADS = 8
"""Partitions whose offsets the driver resolves at once."""


def canonical(positions: Mapping[Partition, int]) -> Offsets:
    """The JSON-ready form of per-partition next offsets, in sorted order."""
    offsets: Offsets = {}
    for (stream, partition), offset in sorted(positions.items()):
        offsets.setdefault(stream, {})[str(partition)] = offset
    return offsets


def positions(offsets: Mapping[str, Mapping[str, int]]) -> dict[Partition, int]:
    """The inverse of :func:`canonical`."""
    return {
        (stream, int(partition)): int(offset)
        for stream, per_partition in offsets.items()
        for partition, offset in per_partition.items()
    }


def partitions_read(client: Client, options: ReadOptions, *, must_exist: bool) -> list[Partition]:
    """The partitions ``stream`` / ``assign`` name, from fresh metadata.

    Args:
        client: an open client.
        options: the read's options.
        must_exist: fail on a listed stream the cluster does not have
            (batch reads); otherwise such a stream adds no partition yet.

    Raises:
        NoSuchStreamError, NoSuchPartitionError: naming the option.
    """
    metadata = client.fetch_metadata()
    found: list[Partition] = []
    if options.pattern is not None:
        for stream in metadata.stream_names():
            info = metadata.get_stream(stream)
            if info is not None and options.reads(stream):
                found.extend((stream, p) for p in sorted(info.partitions))
        return found
    for stream in options.streams:
        info = metadata.get_stream(stream)
        option = "stream" if options.assign is None else "assign"
        if info is None:
            if must_exist or options.assign is not None:
                raise NoSuchStreamError(f"option {option}: the cluster has no stream {stream!r}")
            continue
        if options.assign is None:
            found.extend((stream, p) for p in sorted(info.partitions))
            continue
        for p in options.assign[stream]:
            if p not in info.partitions:
                raise NoSuchPartitionError(
                    f"option assign: stream {stream!r} has no partition {p} "
                    f"(it has {len(info.partitions)})"
                )
            found.append((stream, p))
    return found


def check_named_partitions(options: ReadOptions, found: list[Partition]) -> None:
    """Fails when ``startingOffsets`` / ``endingOffsets`` JSON names a partition
    that is not read (a typo would otherwise be ignored).

    Raises:
        InvalidArgumentError: naming the option and the partition.
    """
    read = set(found)
    for option, spec in (("startingOffsets", options.starting), ("endingOffsets", options.ending)):
        if isinstance(spec, int):
            continue
        for stream, per_partition in spec.items():
            for partition in per_partition:
                if (stream, partition) not in read:
                    raise InvalidArgumentError(
                        f"option {option} names partition {partition} of {stream!r}, "
                        "which is not read (no such partition, or not assigned)"
                    )


def end_offset(client: Client, stream: str, partition: int) -> int:
    """The offset after the partition's newest committed message (its high watermark + 1)."""
    return client.fetch_partition_metadata(stream, partition).high_watermark + 1


def _spec_for(spec: OffsetSpec, stream: str, partition: int, default: int) -> int:
    if isinstance(spec, int):
        return spec
    return spec.get(stream, {}).get(partition, default)


def _offset_at(
    client: Client,
    router: Router,
    stream: str,
    partition: int,
    when_ms: int,
    end: int,
    timeout: float,
) -> int:
    """The offset of the partition's first message at or after ``when_ms``
    (through the server's time index), ``end`` when there is none before it."""
    if end == 0:
        return 0
    received = client.fetch_partition_metadata(stream, partition).messages_received
    if received.latest_ns < when_ms * 1_000_000:
        return end  # nothing at or after that time yet
    when = datetime.fromtimestamp(when_ms / 1000, tz=UTC)
    found = first_offset(router, stream, partition, when, end - 1, timeout)
    return end if found is None else found


def _start(
    client: Client,
    router: Router,
    options: ReadOptions,
    stream: str,
    partition: int,
    end: int,
    default: int,
) -> tuple[int, bool]:
    """The concrete start offset and whether it stands for "earliest"."""
    timeout = options.poll_timeout
    start_ms = options.start_time(stream, partition)
    if start_ms is not None:
        return _offset_at(client, router, stream, partition, start_ms, end, timeout), False
    spec = _spec_for(options.starting, stream, partition, default)
    if spec == LATEST:
        return end, False
    if spec == EARLIEST:
        if end == 0:
            return 0, True
        found = first_offset(router, stream, partition, StartPosition.EARLIEST, end - 1, timeout)
        return (end if found is None else found), True
    return spec, False


def _each(partitions: Sequence[Partition], find: Callable[[str, int], T]) -> list[T]:
    """``find(stream, partition)`` for every partition, in order, the calls
    made at once (each is a round trip or two to the partition's leader).

    Raises:
        Exception: the error of the first partition (in order) whose call failed.
    """
    if len(partitions) <= 1:
        return [find(stream, partition) for stream, partition in partitions]
    workers = min(_PLANNING_THREADS, len(partitions))
    with ThreadPoolExecutor(workers, thread_name_prefix="liftbridge-spark-plan") as pool:
        return list(pool.map(lambda p: find(*p), partitions))


def batch_ranges(client: Client, router: Router, options: ReadOptions) -> list[OffsetRange]:
    """Concrete ranges of a batch read, one per partition with something to read.

    Raises:
        NoSuchStreamError, NoSuchPartitionError: a stream or partition named
            by the options does not exist.
        InvalidArgumentError: an offset of ``startingOffsets`` /
            ``endingOffsets`` is outside the partition.
    """

    def resolve(stream: str, partition: int) -> OffsetRange | None:
        latest = end_offset(client, stream, partition)
        end = _spec_for(options.ending, stream, partition, LATEST)
        end_ms = options.end_time(stream, partition)
        if end_ms is not None:
            end = _offset_at(
                client, router, stream, partition, end_ms, latest, options.poll_timeout
            )
        elif end == LATEST:
            end = latest
        elif end > latest:
            raise InvalidArgumentError(
                f"option endingOffsets: {stream}/{partition} ends at {latest} (its newest "
                f"message is offset {latest - 1}); {end} is past it"
            )
        start, from_earliest = _start(client, router, options, stream, partition, latest, EARLIEST)
        if start > end:
            if options.start_time(stream, partition) is not None or end_ms is not None:
                start = end  # the time is after the range's end: nothing to read
            else:
                raise InvalidArgumentError(
                    f"option startingOffsets: {stream}/{partition} starts at {start}, "
                    f"after its ending offset {end}"
                )
        return OffsetRange(stream, partition, start, end, from_earliest) if end > start else None

    found = partitions_read(client, options, must_exist=True)
    check_named_partitions(options, found)
    return [r for r in _each(found, resolve) if r is not None]


def initial_offsets(client: Client, router: Router, options: ReadOptions) -> Offsets:
    """Where a new streaming query starts (``startingOffsets``, default latest)."""

    def resolve(stream: str, partition: int) -> int:
        end = end_offset(client, stream, partition)
        return _start(client, router, options, stream, partition, end, LATEST)[0]

    found = partitions_read(client, options, must_exist=False)
    check_named_partitions(options, found)
    return canonical(dict(zip(found, _each(found, resolve), strict=True)))


def available_offsets(client: Client, options: ReadOptions) -> dict[Partition, int]:
    """Every partition read and the offset after its newest committed message."""
    found = partitions_read(client, options, must_exist=False)
    ends = _each(found, lambda stream, partition: end_offset(client, stream, partition))
    return dict(zip(found, ends, strict=True))


def stream_ranges(start: Offsets, end: Offsets) -> list[OffsetRange]:
    """The ranges of a micro-batch. A partition missing from ``start`` (new
    since the query started) is read from its earliest message."""
    begin = positions(start)
    ranges = []
    for (stream, partition), stop in sorted(positions(end).items()):
        first = begin.get((stream, partition))
        offsets = OffsetRange(stream, partition, first or 0, stop, from_earliest=first is None)
        if offsets.size:
            ranges.append(offsets)
    return ranges


def split(ranges: Iterable[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """Splits ranges so there are at least about ``min_partitions`` of them,
    each range into pieces in proportion to its share of all offsets."""
    ranges = list(ranges)
    total = sum(r.size for r in ranges)
    if not min_partitions or len(ranges) >= min_partitions or total == 0:
        return ranges
    pieces = []
    for r in ranges:
        count = min(r.size, max(1, round(r.size / total * min_partitions)))
        bounds = [r.start + r.size * i // count for i in range(count + 1)]
        for i in range(count):
            pieces.append(
                OffsetRange(
                    r.stream,
                    r.partition,
                    bounds[i],
                    bounds[i + 1],
                    from_earliest=r.from_earliest and i == 0,
                )
            )
    return pieces


def admit(
    start: Mapping[Partition, int], available: Mapping[Partition, int], limit: int
) -> dict[Partition, int]:
    """The end of a micro-batch that covers at most ``limit`` new offsets.

    Every partition behind gets one offset first (largest backlog first, while
    the limit lasts), so none starves; the rest is shared in proportion to
    what each still has to read.
    """
    backlog = {p: max(0, end - start.get(p, 0)) for p, end in available.items()}
    if sum(backlog.values()) <= limit:
        return dict(available)
    behind = sorted((p for p, lag in backlog.items() if lag > 0), key=lambda p: (-backlog[p], p))
    share = dict.fromkeys(available, 0)
    for p in behind[:limit]:
        share[p] = 1
    left = {p: backlog[p] - share[p] for p in behind}
    spare, total = limit - sum(share.values()), sum(left.values())
    for p in behind:
        share[p] += math.floor(spare * left[p] / total)
    spare = limit - sum(share.values())
    for p in behind:
        if spare == 0:
            break
        if share[p] < backlog[p]:
            share[p] += 1
            spare -= 1
    return {p: start.get(p, 0) + share[p] for p in available}
