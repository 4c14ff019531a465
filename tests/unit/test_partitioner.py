"""Partitioners, checked against the Go client's formula: crc32(key) mod n."""

from __future__ import annotations

import zlib
from types import MappingProxyType

import pytest

import liftbridge
from liftbridge import Metadata, PartitionInfo, StreamInfo
from liftbridge._core._partitioner import choose_partition


def _metadata(stream: str, partitions: int) -> Metadata:
    parts = {i: PartitionInfo(stream, i, "a", ("a",), ("a",)) for i in range(partitions)}
    info = StreamInfo(stream, stream, MappingProxyType(parts))
    return Metadata((), MappingProxyType({stream: info}), MappingProxyType({}), None)


def test_key_partitioner_matches_go_formula() -> None:
    md = _metadata("s", 7)
    p = liftbridge.PartitionByKey()
    # 0xFFFFFFFF-range hashes must not go negative (Go computes in uint32).
    for key in (b"", b"a", b"order-17", b"\xff" * 9, b"customer-12345"):
        assert p.partition("s", key, b"", md) == zlib.crc32(key) % 7
    assert p.partition("s", None, b"", md) == zlib.crc32(b"") % 7


def test_round_robin_cycles_per_stream() -> None:
    md = _metadata("s", 3)
    p = liftbridge.PartitionByRoundRobin()
    assert [p.partition("s", None, b"", md) for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]


def test_unknown_stream_goes_to_zero() -> None:
    md = _metadata("s", 3)
    assert liftbridge.PartitionByKey().partition("other", b"k", b"", md) == 0


def test_custom_partitioners_satisfy_the_protocol() -> None:
    class Last:
        def partition(
            self, stream: str, key: bytes | None, value: bytes, metadata: Metadata
        ) -> int:
            return metadata.partition_count(stream) - 1

    assert isinstance(Last(), liftbridge.Partitioner)


def test_every_publish_path_chooses_the_partition_one_way() -> None:
    asked: list[str] = []

    def metadata() -> Metadata:
        asked.append("metadata")
        return _metadata("s", 4)

    def choose(key: bytes | None, **kwargs: object) -> int:
        options: dict[str, object] = {"partition": None, "partitioner": None, **kwargs}
        return choose_partition("s", key, b"v", metadata=metadata, **options)  # type: ignore[arg-type]

    assert choose(b"k", partition=3) == 3  # explicit wins, no metadata needed
    assert choose(None) == 0
    assert asked == []
    assert choose(b"order-17") == zlib.crc32(b"order-17") % 4  # a key alone: by key
    assert choose(None, partitioner=liftbridge.PartitionByRoundRobin()) == 0
    assert asked == ["metadata", "metadata"]

    class Outside:
        def partition(self, stream: str, key: bytes | None, value: bytes, md: Metadata) -> int:
            return 9

    with pytest.raises(liftbridge.InvalidArgumentError, match="chose partition 9"):
        choose(None, partitioner=Outside())
    with pytest.raises(liftbridge.ArgumentTypeError, match="partitioner must implement"):
        choose(None, partitioner="by key")
