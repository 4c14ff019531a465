"""Partitioners, checked against the Go client's formula: crc32(key) mod n."""

from __future__ import annotations

import zlib
from types import MappingProxyType

import liftbridge
from liftbridge import Metadata, PartitionInfo, StreamInfo


def _metadata(stream: str, partitions: int) -> Metadata:
    parts = {i: PartitionInfo(stream, i, "a", ("a",), ("a",)) for i in range(partitions)}
    info = StreamInfo(stream, stream, MappingProxyType(parts))
    return Metadata((), MappingProxyType({stream: info}), MappingProxyType({}), 0.0)


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
