"""End-to-end latency helpers: values that carry their send time, and pacing.

The publisher and the subscriber run in the same process, so one monotonic
clock (``time.perf_counter_ns``) serves both ends.
"""

from __future__ import annotations

import struct
import threading
import time

import liftbridge

_STAMP = struct.Struct("<q")


def stamped_value(size: int) -> bytes:
    """A value of ``size`` bytes (at least 8) starting with the current time."""
    return _STAMP.pack(time.perf_counter_ns()).ljust(max(size, _STAMP.size), b"x")


def latency_of(value: bytes) -> float:
    """Seconds since the value was stamped."""
    sent: int = _STAMP.unpack_from(value)[0]
    return (time.perf_counter_ns() - sent) / 1e9


def wait_for(when: float) -> None:
    """Sleeps until ``time.perf_counter()`` reaches ``when`` (at once if past)."""
    delay = when - time.perf_counter()
    if delay > 0:
        time.sleep(delay)


class Arrivals:
    """A ``subscribe`` handler that records each message's latency
    (:func:`latency_of`); ``all_in`` is set once ``count`` came, or when the
    subscription ends."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.latencies: list[float] = []
        self.all_in = threading.Event()

    def __call__(self, message: liftbridge.Message | None, error: BaseException | None) -> None:
        if message is None:
            self.all_in.set()
            return
        self.latencies.append(latency_of(message.value))
        if len(self.latencies) == self.count:
            self.all_in.set()
