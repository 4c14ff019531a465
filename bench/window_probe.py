"""A measurement, not a feature: why a small ``max_inflight`` window keeps
fewer of the machine's cores busy than a large one.

``make bench``'s pipelined rows (:class:`bench.sdk.SdkPipelined`, a Future per
publish, dropped) are charged the server's CPU and compared with the
machine's bound (cores over client plus server CPU a message): their share of
it is the fraction of the cores busy. This drives that row and the Go
client's (``bench/go``, ``publish_async`` at the same window) against one
``LocalServer`` in turns, per window, and prints per repetition msgs/s,
client and server CPU a message and the share; for the SDK also its CPU and
voluntary context switches a message by thread. With ``--trace`` the SDK's
runs also count (per run, not per message, so the figures stay near the
untraced ones) how often the producer waited for window room and for the
sender, how long, and how many requests each sender write and each ack read
carried, with the window's fill when the acks came.

Run: ``python -m bench.window_probe [--windows 32,256] [--size 100] [--reps 3] [--trace]``.
"""

from __future__ import annotations

import argparse
import os
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import liftbridge
from bench import gocli
from bench.e2e_probe import thread_wakes
from bench.future_probe import _per_message, thread_cpu
from bench.sdk import SdkPipelined
from bench.stats import Run, process_cpu_seconds
from liftbridge._handover import Handover
from liftbridge._publish._publisher import Publisher
from liftbridge._publish._window import Window
from liftbridge.testing import LocalServer

_WAIT = 60.0


class Trace:
    """Counts, per SDK run, the producer's waits and the sizes of the
    sender's runs and of the acks read together."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Forgets what was counted."""
        self.window_waits = 0
        self.window_wait_s = 0.0
        self.sender_waits = 0
        self.sender_wait_s = 0.0
        self.writes: Counter[int] = Counter()
        self.reads: Counter[int] = Counter()
        self.fill_at_read: list[int] = []
        # (perf_counter, what, requests): A an ack run read (before its
        # resolve), W/w the producer starts/stops waiting for room, S the
        # sender pulled a run, H/h the producer starts/stops waiting for it.
        self.events: list[tuple[float, str, int]] = []

    def install(self) -> None:
        """Wraps the functions counted, for good (before the client is made)."""
        trace = self
        wait, hand, resolve, pull = (
            Window._wait,
            Handover.wait,
            Publisher._resolve,
            Publisher._next_requests,
        )

        def window_wait(window: Window, seconds: float) -> None:
            started = time.perf_counter()
            trace.events.append((started, "W", window.used))
            try:
                wait(window, seconds)
            finally:
                ended = time.perf_counter()
                trace.events.append((ended, "w", window.used))
                trace.window_waits += 1
                trace.window_wait_s += ended - started

        def sender_wait(handover: Handover, queued: Callable[[], int]) -> None:
            started = time.perf_counter()
            trace.events.append((started, "H", 0))
            hand(handover, queued)
            ended = time.perf_counter()
            trace.events.append((ended, "h", 0))
            trace.sender_waits += 1
            trace.sender_wait_s += ended - started

        def resolved(publisher: Publisher, responses: list[Any]) -> None:
            trace.reads[len(responses)] += 1
            trace.events.append((time.perf_counter(), "A", len(responses)))
            trace.fill_at_read.append(publisher._window.used)
            resolve(publisher, responses)

        def pulled(publisher: Publisher, generation: int, *, block: bool) -> list[Any]:
            requests = pull(publisher, generation, block=block)
            if requests:
                trace.writes[len(requests)] += 1
                trace.events.append((time.perf_counter(), "S", len(requests)))
            return requests

        Window._wait = window_wait  # type: ignore[method-assign,assignment]
        Handover.wait = sender_wait  # type: ignore[method-assign,assignment]
        Publisher._resolve = resolved  # type: ignore[method-assign,assignment]
        Publisher._next_requests = pulled  # type: ignore[method-assign,assignment]

    def report(self, count: int, seconds: float) -> str:
        def spread(sizes: Counter[int]) -> str:
            runs = sum(sizes.values())
            common = ", ".join(f"{size}x{n}" for size, n in sizes.most_common(4))
            return f"{runs / count:.3f}/msg, {count / max(runs, 1):.1f} a run ({common})"

        fill = sorted(self.fill_at_read) or [0]
        gaps: dict[str, list[float]] = {}
        last: dict[str, float] = {}
        for at, what, _ in self.events:
            for before in "AWwSHh":
                if before in last:
                    gaps.setdefault(before + what, []).append(at - last[before])
            last[what] = at

        def figures(key: str) -> str:
            values = sorted(gaps[key])
            mean = sum(values) / len(values) * 1e6
            p50, p90 = values[len(values) // 2] * 1e6, values[len(values) * 9 // 10] * 1e6
            return f"{key} n={len(values)} mean {mean:.0f} p50 {p50:.0f} p90 {p90:.0f}"

        chain = "; ".join(figures(k) for k in ("Aw", "wW", "WS", "SA", "AA", "ww") if k in gaps)
        middle = len(self.events) // 2
        sample = " ".join(
            f"{what}{n}@{(at - self.events[middle][0]) * 1e6:.0f}"
            for at, what, n in self.events[middle : middle + 24]
        )
        return (
            f"  window waits {self.window_waits / count * 1e3:.1f}/1k msgs, "
            f"{self.window_wait_s / seconds:.0%} of the run; "
            f"sender waits {self.sender_waits / count * 1e3:.1f}/1k msgs, "
            f"{self.sender_wait_s / seconds:.0%}\n"
            f"  writes {spread(self.writes)}\n  ack reads {spread(self.reads)}; "
            f"in flight at a read p50 {fill[len(fill) // 2]}, p10 {fill[len(fill) // 10]}\n"
            f"  us from the last X to Y (XY): {chain}\n  {sample}"
        )


def _share(run: Run, server_s: float) -> str:
    cores = os.cpu_count() or 1
    client_us = run.cpu_seconds / run.count * 1e6
    server_us = server_s / run.count * 1e6
    rate = run.count / run.seconds
    share = rate * (client_us + server_us) * 1e-6 / cores
    return (
        f"{rate:8,.0f} msgs/s, client {client_us:5.1f} + server {server_us:5.1f} us/msg, "
        f"share {share:.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--windows", default="32,256")
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--trace", action="store_true", help="count waits and run sizes")
    parser.add_argument("--no-go", action="store_true")
    args = parser.parse_args()
    value = b"w" * args.size
    trace = Trace() if args.trace else None
    if trace is not None:
        trace.install()  # before the client: its threads bind the methods counted
    with LocalServer(log_level="warn") as server:
        pid = server.pid
        assert pid is not None

        def server_cpu() -> float:
            return process_cpu_seconds(pid) or 0.0

        for window in (int(w) for w in args.windows.split(",")):
            with liftbridge.Client(server.addresses, ack_wait=_WAIT, max_inflight=window) as client:
                names = [f"window-probe-{window}-{v}" for v in "sg"]
                for name in names:
                    client.create_stream(name)
                sdk = SdkPipelined(client, names[0], value, liftbridge.AckPolicy.LEADER)
                drivers: list[tuple[str, Any]] = [("sdk", sdk)]
                if not args.no_go:
                    go = gocli.GoDriver(
                        server.address, "publish_async", names[1], args.size, window=window
                    )
                    drivers.append(("go", go))
                try:
                    for _, driver in drivers:
                        driver.run(args.count // 5)
                    for rep in range(args.reps):
                        for name, driver in drivers if rep % 2 == 0 else reversed(drivers):
                            if trace is not None:
                                trace.reset()
                            wakes, cpu, served = thread_wakes(), thread_cpu(), server_cpu()
                            run = driver.run(args.count)
                            served = server_cpu() - served
                            split = _per_message(cpu, thread_cpu(), args.count)
                            after = thread_wakes()
                            print(f"w={window} {rep} {name:3} {_share(run, served)}", flush=True)
                            if name == "sdk":
                                woke = ", ".join(
                                    f"{t} {(after[t] - wakes.get(t, 0)) / args.count:.3f}"
                                    for t in sorted(after)
                                    if after[t] - wakes.get(t, 0) >= 0.002 * args.count
                                )
                                print(f"  CPU us/msg: {split}\n  wakes/msg: {woke}")
                            if trace is not None and name == "sdk":
                                print(trace.report(args.count, run.seconds), flush=True)
                finally:
                    for _, driver in drivers:
                        driver.close()


if __name__ == "__main__":
    main()
