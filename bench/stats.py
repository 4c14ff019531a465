"""What one timed run measured, and how repetitions are summarised.

A :class:`Run` is one repetition of one driver: how many messages moved, in
how long, and (for the latency workloads) each message's latency. A
:class:`Spread` summarises one metric over the repetitions: the median, the
lowest and highest values, and the values themselves for the JSON file.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field


def percentile(ordered: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) of already sorted values, interpolating
    linearly between the two nearest ranks."""
    if not ordered:
        raise ValueError("percentile of no values")
    if len(ordered) == 1:
        return ordered[0]
    rank = (len(ordered) - 1) * q / 100.0
    below = int(rank)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (rank - below)


@dataclass(frozen=True)
class Run:
    """One repetition of one driver.

    Attributes:
        count: messages moved.
        seconds: wall-clock time for all of them.
        payload_bytes: value bytes moved (keys, headers and framing excluded).
        cpu_seconds: CPU time the benchmark process used meanwhile, every
            thread included (the server runs in another process). Steadier
            than wall-clock time on a busy machine.
        latencies: seconds per message, for workloads that time each one.
        server_cpu_seconds: CPU time the server's processes used meanwhile,
            when the suite measured it (``None``: not measured).
        cores: the machine's CPUs, for the bound (see :meth:`metrics`).
    """

    count: int
    seconds: float
    payload_bytes: int
    cpu_seconds: float
    latencies: tuple[float, ...] = field(default=(), repr=False)
    server_cpu_seconds: float | None = None
    cores: int = 0

    @classmethod
    def combined(cls, runs: Sequence[Run]) -> Run:
        """One run made of several consecutive slices of the same driver."""
        server = [r.server_cpu_seconds for r in runs]
        return cls(
            count=sum(r.count for r in runs),
            seconds=sum(r.seconds for r in runs),
            payload_bytes=sum(r.payload_bytes for r in runs),
            cpu_seconds=sum(r.cpu_seconds for r in runs),
            latencies=tuple(latency for r in runs for latency in r.latencies),
            server_cpu_seconds=None if None in server else sum(s or 0.0 for s in server),
            cores=max((r.cores for r in runs), default=0),
        )

    def metrics(self) -> dict[str, float]:
        """The figures this run contributes: msgs/s, MB/s, client CPU
        microseconds per message and, when timed per message, p50, p99,
        p99.9 and the highest latency in milliseconds.

        With the server's CPU measured, also the server's CPU microseconds
        per message, the machine's bound (its cores divided by the CPU the
        client and the server spend per message: the msgs/s this machine
        could reach if every core did only this) and the run's msgs/s as a
        fraction of that bound."""
        seconds = max(self.seconds, 1e-9)
        count = max(self.count, 1)
        figures = {
            "msgs_per_s": self.count / seconds,
            "mb_per_s": self.payload_bytes / seconds / 1e6,
            "cpu_us_per_msg": self.cpu_seconds / count * 1e6,
        }
        if self.server_cpu_seconds is not None and self.cores > 0:
            figures["server_cpu_us_per_msg"] = self.server_cpu_seconds / count * 1e6
            spent = (self.cpu_seconds + self.server_cpu_seconds) / count
            if spent > 0:
                figures["bound_msgs_per_s"] = self.cores / spent
                figures["of_bound"] = figures["msgs_per_s"] / figures["bound_msgs_per_s"]
        if self.latencies:
            ordered = sorted(self.latencies)
            figures["p50_ms"] = percentile(ordered, 50) * 1e3
            figures["p99_ms"] = percentile(ordered, 99) * 1e3
            figures["p999_ms"] = percentile(ordered, 99.9) * 1e3
            figures["max_ms"] = ordered[-1] * 1e3
        return figures


@dataclass(frozen=True)
class Spread:
    """One metric over several repetitions."""

    median: float
    low: float
    high: float
    values: tuple[float, ...]

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        """Summarises the values of one metric, one per repetition."""
        if not values:
            raise ValueError("a spread of no values")
        return cls(statistics.median(values), min(values), max(values), tuple(values))

    @property
    def relative(self) -> float:
        """Half the range as a fraction of the median: 0.05 reads "±5%"."""
        if self.median == 0:
            return 0.0
        return (self.high - self.low) / 2 / self.median

    def as_json(self) -> dict[str, object]:
        """The JSON form stored in the results file."""
        return {
            "median": self.median,
            "low": self.low,
            "high": self.high,
            "values": list(self.values),
        }


def summarise(runs: Sequence[Run]) -> dict[str, Spread]:
    """Every metric of the runs, each summarised over the repetitions."""
    per_metric: dict[str, list[float]] = {}
    for run in runs:
        for name, value in run.metrics().items():
            per_metric.setdefault(name, []).append(value)
    return {name: Spread.of(values) for name, values in per_metric.items()}


class Stopwatch:
    """Wall-clock and process CPU time since it was made."""

    def __init__(self) -> None:
        self._wall = time.perf_counter()
        self._cpu = time.process_time()

    def stop(self) -> tuple[float, float]:
        """Seconds of wall-clock time and of CPU time elapsed."""
        return time.perf_counter() - self._wall, time.process_time() - self._cpu


def process_cpu_seconds(pid: int) -> float | None:
    """User plus system CPU seconds process ``pid`` has used so far, from
    ``/proc/<pid>/stat``; ``None`` where that cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            text = stat.read()
    except OSError:
        return None
    # the command name (field 2) may hold spaces: the fields after it follow ")"
    fields = text.rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime and stime, fields 14 and 15
    return ticks / os.sysconf("SC_CLK_TCK")
