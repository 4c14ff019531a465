"""End-to-end latency helpers: values that carry their send time, and pacing.

The publisher and the subscriber run in the same process, so one monotonic
clock (``time.perf_counter_ns``) serves both ends.
"""

from __future__ import annotations

import struct
import time

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
