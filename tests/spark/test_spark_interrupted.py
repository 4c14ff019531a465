"""Ctrl-C while the Spark source finds a partition's first offset
(``first_offset``, which plans a read from a time or the earliest offset on
the calling thread): wherever it lands once the Subscribe stream is open, the
stream is cancelled and the read's watchdog thread stops before the
interrupt goes on. Before, an interrupt after the stream opened (its
handshake taken) left it open for good, and one in the watchdog's start
could leave its thread listed and never started.

The interrupt is raised at each point of the call where an interrupt's
handler runs, in the SDK's frames and in ``Thread.start`` run on the calling
thread (:mod:`tests.unit.interrupts`), on a fake router's streams (no network,
no SparkSession).
"""

from __future__ import annotations

import threading

import pytest

pytest.importorskip("pyarrow", reason="needs the spark extra: pip install -e '.[spark]'")

from liftbridge import StartPosition
from liftbridge.spark._fetch import first_offset
from tests.unit.fake_router import FakeRouter, FakeStream, handshake, message, metadata_with
from tests.unit.interrupts import (
    in_sdk_or_thread_start,
    interrupted_at,
    sdk_threads_left,
    sweep_whole,
)

STREAM = "orders"
MOST = 1000  # interrupt points of one call, at most (a bound on the sweep)
BOUND = 30.0  # seconds the read's threads may take to end (a loaded machine)
WATCHDOG = 2.5
"""first_offset's timeout: its watchdog ends the read (ClientClosedError) after
two of them without progress; a run takes milliseconds. An interrupt at the
start of the watchdog's ``__exit__`` skips it all: the watchdog then ends so."""
WHOLE = 3  # the sweep ends after this many runs in a row had no point left to interrupt


def test_first_offset_interrupted_anywhere_leaves_no_stream_open() -> None:
    def run(n: int) -> str | None:
        before = set(threading.enumerate())
        router = FakeRouter(metadata=metadata_with({STREAM: 1}))
        stream = FakeStream([handshake(), message(STREAM, 3)])
        router.streams.append(stream)
        found: list[int | None] = []
        where = interrupted_at(
            n,
            lambda: found.append(
                first_offset(router.as_router(), STREAM, 0, StartPosition.EARLIEST, 9, WATCHDOG)
            ),
            in_sdk_or_thread_start,
        )
        if where is None:
            assert found == [3]
        left = sdk_threads_left(before, BOUND)
        assert not left, f"{left} still run (interrupted in {where})"
        if not router.streams:  # opened
            assert stream.done(), f"an open stream was left (interrupted in {where})"
        return where

    interrupted = sweep_whole(run, WHOLE, MOST)
    # Past the opening (its handshake taken), and the watchdog's start.
    assert {"_open_once", "start_thread"} <= interrupted
