"""Where a NATS stream publish goes: the NATS subject of its partition.

Partition N of a stream whose subject is S listens on NATS subject S (N = 0)
or ``S.N``. The subjects and partition counts come from the client's router's
metadata (fetched once more when a stream is unknown); partition 0's subject
and leader are cached per stream for as long as that metadata is the same,
which is what the commonest publish needs. Runs on publishing threads; a lost
race on the cache only costs a lookup.
"""

from __future__ import annotations

import re

from liftbridge._core import _validate
from liftbridge._core._metadata import Metadata, StreamInfo
from liftbridge._core._nats_connection import pub_prefix
from liftbridge._core._partitioner import Partitioner, choose_partition
from liftbridge._core._router import Router
from liftbridge._errors import InvalidArgumentError, NoSuchPartitionError, NoSuchStreamError

# Streams whose partition-0 subject is cached at most (then the cache starts over).
_SUBJECTS_CACHED = 1024
# What a subject must not hold (it would break the PUB line).
_WHITESPACE = re.compile(r"\s")


class Subjects:
    """The NATS subjects of the partitions of one client's streams.

    Args:
        router: the client's router (its metadata and partition leaders).
    """

    def __init__(self, router: Router) -> None:
        self._router = router
        # Stream name -> (the router's metadata, the subject of partition 0,
        # its leader's address: Router.leader_address from that metadata, the
        # subject's PUB prefix). Written by publishing threads; a lost race
        # only costs a lookup.
        self.first: dict[str, tuple[Metadata, str, str | None, bytes]] = {}

    def subject(
        self,
        stream: str,
        key: bytes | None,
        value: bytes,
        partition: int | None,
        partitioner: Partitioner | None,
    ) -> tuple[str, int]:
        """The NATS subject of the partition the message goes to, and the partition."""
        metadata, info = self._stream_info(stream)
        count = len(info.partitions)
        partition = choose_partition(
            stream,
            key,
            value,
            partition=partition,
            partitioner=partitioner,
            metadata=lambda: metadata,
        )
        if partition not in info.partitions:
            raise NoSuchPartitionError(
                f"stream {stream!r} has no partition {partition} (it has {count})"
            )
        subject = info.subject if partition == 0 else f"{info.subject}.{partition}"
        # Refuse a subject that would break the PUB line it goes on.
        if not subject or _WHITESPACE.search(subject):
            raise InvalidArgumentError(
                f"stream {stream!r} has an unusable NATS subject {subject!r}"
            )
        return subject, partition

    def first_subject(self, stream: str, value: bytes) -> tuple[Metadata, str, str | None, bytes]:
        """The metadata, subject, leader address and PUB prefix of partition 0
        of ``stream``, cached together (the leader is watched from now on)."""
        _validate.stream_name(stream)
        metadata = self._router.metadata
        subject, _ = self.subject(stream, None, value, None, None)
        cached = (metadata, subject, self._router.leader_address(stream, 0), pub_prefix(subject))
        if len(self.first) >= _SUBJECTS_CACHED:
            self.first.clear()
        self.first[stream] = cached
        return cached

    def _stream_info(self, stream: str) -> tuple[Metadata, StreamInfo]:
        metadata = self._router.metadata
        info = metadata.get_stream(stream)
        if info is None:
            metadata = self._router.refresh()
            info = metadata.get_stream(stream)
            if info is None:
                raise NoSuchStreamError(f"no stream named {stream!r}")
        return metadata, info
