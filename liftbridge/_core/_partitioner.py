"""Partitioners: which partition of a stream a published message goes to.

``PartitionByKey`` uses the same formula as the Go client (CRC-32 IEEE of the
key modulo the partition count, a missing key hashing as empty bytes), so
producers in both languages put a key on the same partition.
"""

from __future__ import annotations

import itertools
import threading
import zlib
from collections.abc import Callable
from typing import Protocol, runtime_checkable

from liftbridge._core import _validate
from liftbridge._core._metadata import Metadata
from liftbridge._errors import InvalidArgumentError


@runtime_checkable
class Partitioner(Protocol):
    """Maps a message to a partition of its stream.

    Implementations must be thread-safe: one instance may serve concurrent
    publishes. ``partition`` runs on the publishing thread and must be quick.
    """

    def partition(self, stream: str, key: bytes | None, value: bytes, metadata: Metadata) -> int:
        """Returns a partition number in ``range(metadata.partition_count(stream))``."""
        ...


class PartitionByKey:
    """Partition = CRC-32 (IEEE) of the key, modulo the partition count.

    Identical to the Go client's key partitioner. Messages without a key all
    go to the partition of the empty key.
    """

    def partition(self, stream: str, key: bytes | None, value: bytes, metadata: Metadata) -> int:
        """See :class:`Partitioner`."""
        count = metadata.partition_count(stream)
        if count == 0:
            return 0
        return zlib.crc32(key or b"") % count

    def __repr__(self) -> str:
        return "PartitionByKey()"


class PartitionByRoundRobin:
    """Cycles through a stream's partitions, one counter per stream."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards _counters
        self._counters: dict[str, itertools.count[int]] = {}

    def partition(self, stream: str, key: bytes | None, value: bytes, metadata: Metadata) -> int:
        """See :class:`Partitioner`."""
        count = metadata.partition_count(stream)
        if count == 0:
            return 0
        counter = self._counters.get(stream)
        if counter is None:
            with self._lock:
                counter = self._counters.setdefault(stream, itertools.count())
        return next(counter) % count

    def __repr__(self) -> str:
        return "PartitionByRoundRobin()"


_BY_KEY = PartitionByKey()


def choose_partition(
    stream: str,
    key: bytes | None,
    value: bytes,
    *,
    partition: int | None,
    partitioner: Partitioner | None,
    metadata: Callable[[], Metadata],
) -> int:
    """The partition a message goes to, the same on every publish path:
    ``partition`` when given, else the ``partitioner``'s choice, else the
    key's (:class:`PartitionByKey`, the Go client's formula, as Kafka users
    expect of a key), else 0. ``metadata()`` is called only when a
    partitioner or a key needs it.

    Raises:
        InvalidArgumentError, ArgumentTypeError: a bad ``partition`` or
            ``partitioner``, or a choice the stream has no partition for.
    """
    if partition is not None:
        _validate.partition(partition)
        return partition
    if partitioner is not None:
        _validate.partitioner(partitioner)
        known = metadata()
        chosen = partitioner.partition(stream, key, value, known)
        count = known.partition_count(stream)
        if isinstance(chosen, bool) or not isinstance(chosen, int) or not 0 <= chosen < count:
            raise InvalidArgumentError(
                f"{partitioner!r} chose partition {chosen!r}; stream {stream!r} has {count}"
            )
        return chosen
    if key:
        return _BY_KEY.partition(stream, key, value, metadata())
    return 0
