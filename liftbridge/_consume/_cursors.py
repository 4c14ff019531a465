"""Cursors: where each one lives, and the two RPCs that read and write them.

A cursor is stored in the internal ``__cursors`` stream under the key
``<cursor id>,<stream>,<partition>``, in the partition CRC-32 (IEEE) of that
key modulo the partition count of ``__cursors`` picks, as the server (and the
Go client) compute it. SetCursor and FetchCursor go to that partition's
leader. The client's ``set_cursor``/``fetch_cursor`` and the consumer-group
commits both route through :class:`Cursors`.
"""

from __future__ import annotations

import zlib

from liftbridge._core._router import Deadline, Leader, Router
from liftbridge._errors import (
    InvalidArgumentError,
    NoSuchPartitionError,
    NoSuchStreamError,
    ServerError,
)
from liftbridge_api import api_pb2

CURSORS_STREAM = "__cursors"


def cursor_key(cursor_id: str, stream: str, partition: int) -> str:
    """The key a cursor is stored under in ``__cursors``: ``<id>,<stream>,<partition>``."""
    return f"{cursor_id},{stream},{partition}"


def cursors_partition(cursor_id: str, stream: str, partition: int, partitions: int) -> int:
    """The ``__cursors`` partition holding a cursor: CRC-32 (IEEE) of its key
    modulo the number of ``__cursors`` partitions, as the server computes it.

    Raises:
        InvalidArgumentError: ``partitions`` is below 1.
    """
    if partitions < 1:
        raise InvalidArgumentError(f"partitions must be >= 1, got {partitions}")
    return zlib.crc32(cursor_key(cursor_id, stream, partition).encode()) % partitions


class Cursors:
    """Cursor RPCs over a router. Thread-safe (it holds nothing but the router)."""

    def __init__(self, router: Router) -> None:
        self._router = router

    def require(self, stream: str, partition: int, deadline: Deadline) -> None:
        """Raises unless ``stream`` has ``partition``: the server stores and returns a
        cursor of any stream name, so a misspelt stream would pass unnoticed. The
        client's cached metadata answers when it knows the partition (no RPC); else
        one metadata refresh, within ``deadline``, decides. A stream deleted since
        the cache was filled still passes.

        Raises:
            NoSuchStreamError: the stream does not exist (naming it).
            NoSuchPartitionError: it has no such partition (naming both).
        """
        info = self._router.metadata.streams.get(stream)
        if info is not None and partition in info.partitions:
            return
        info = self._router.refresh(deadline).streams.get(stream)
        if info is None:
            raise NoSuchStreamError(
                f"no such stream: {stream!r} (a cursor needs an existing stream)"
            )
        if partition not in info.partitions:
            raise NoSuchPartitionError(f"stream {stream!r} has no partition {partition}")

    def _target(self, cursor_id: str, stream: str, partition: int, deadline: Deadline) -> Leader:
        count = self._router.metadata.partition_count(CURSORS_STREAM)
        if count == 0:
            count = self._router.refresh(deadline).partition_count(CURSORS_STREAM)
        if count == 0:
            raise ServerError(
                "the server has no cursors stream; enable it with cursors.stream.partitions > 0",
                "FAILED_PRECONDITION",
            )
        return Leader(CURSORS_STREAM, cursors_partition(cursor_id, stream, partition, count))

    def set(
        self,
        cursor_id: str,
        stream: str,
        partition: int,
        offset: int,
        deadline: Deadline,
        *,
        retry: bool = True,
    ) -> None:
        """Stores ``offset`` (the last offset processed) under the cursor.

        Args:
            retry: retry leadership moves and unavailable brokers within the
                deadline; False for one attempt (a heartbeat thread's budget).
        """
        request = api_pb2.SetCursorRequest(
            stream=stream, partition=partition, cursorId=cursor_id, offset=offset
        )
        target = self._target(cursor_id, stream, partition, deadline)
        self._router.call(
            "SetCursor", request, target=target, deadline=deadline, idempotent=True, retry=retry
        )

    def fetch(
        self,
        cursor_id: str,
        stream: str,
        partition: int,
        deadline: Deadline,
        *,
        retry: bool = True,
    ) -> int | None:
        """The cursor's offset (the last processed), or None when none is stored."""
        request = api_pb2.FetchCursorRequest(stream=stream, partition=partition, cursorId=cursor_id)
        target = self._target(cursor_id, stream, partition, deadline)
        response = self._router.call(
            "FetchCursor", request, target=target, deadline=deadline, idempotent=True, retry=retry
        )
        offset = int(response.offset)
        return None if offset < 0 else offset
