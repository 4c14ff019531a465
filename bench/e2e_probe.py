"""A measurement, not a feature: where a paced end-to-end message's CPU and
thread wake-ups go.

``make bench``'s end-to-end rows (:class:`bench.sdk.SdkEndToEnd`) publish at a
fixed rate with ``publish_async`` and read with a ``subscribe`` handler in the
same process. This drives the same loop against one ``LocalServer`` at each
rate given and prints, per rate, the latency percentiles, the client CPU per
message split by thread, the voluntary context switches per message of each
thread (a thread waking for work, or waiting for the GIL, counts one), and the
share of publishes their own thread wrote (``_write``, no hand-over to the
stream's sender).

``--switch-interval S`` sets ``sys.setswitchinterval(S)`` in the probe's
process (the GIL's hand-off interval, 5 ms by default; the SDK never sets it).

Run: ``python -m bench.e2e_probe [--rates 1000,5000,10000] [--secs 3] [--size 100]
[--switch-interval S]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections.abc import Callable

import liftbridge
from bench.e2e import Arrivals, stamped_value, wait_for
from bench.future_probe import _per_message, thread_cpu
from bench.stats import percentile
from liftbridge._publish._pending import Pending
from liftbridge._publish._publisher import Publisher
from liftbridge._publish._sending import Sending
from liftbridge.testing import LocalServer

_WAIT = 60.0


def thread_wakes() -> dict[str, int]:
    """Voluntary context switches of each live thread, by thread name (as
    :func:`bench.future_probe.thread_cpu` names them)."""
    names = {thread.native_id: thread.name for thread in threading.enumerate()}
    counts: dict[str, int] = {}
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/status", encoding="ascii") as status:
                lines = status.read().splitlines()
        except OSError:  # the thread ended meanwhile
            continue
        switches = next(int(line.split()[1]) for line in lines if line.startswith("voluntary"))
        name = names.get(int(task), f"native-{task}")
        head, _, tail = name.rpartition("-")
        name = head if head and tail.isdigit() else name
        name = "liftbridge-sub" if name.startswith("liftbridge-sub-") else name
        counts[name] = counts.get(name, 0) + switches
    return counts


_WRITE = Publisher._write


def _own_writes() -> list[int]:
    """Counts the publishes their own thread writes from now on (this
    process only; the count of an earlier call stops)."""
    written = [0]
    write = _WRITE

    def counted(self: Sending, pending: Pending, generation: int) -> None:
        written[0] += 1
        write(self, pending, generation)

    Publisher._write = counted  # type: ignore[method-assign]
    return written


def run(client: liftbridge.Client, stream: str, size: int, rate: float, count: int) -> str:
    """``count`` publishes paced at ``rate`` msgs/s; a few lines of figures."""
    written = _own_writes()
    arrivals = Arrivals(count)
    subscription = client.subscribe(stream, arrivals)
    try:
        time.sleep(0.2)  # the subscription is in place
        wakes, cpu = thread_wakes(), thread_cpu()
        start = time.perf_counter()
        for i in range(count):
            wait_for(start + i / rate)
            client.publish_async(stream, stamped_value(size))
        published = time.perf_counter() - start
        arrivals.all_in.wait(_WAIT)
        handled = time.perf_counter() - start
        split = _per_message(cpu, thread_cpu(), count)
        after = thread_wakes()
    finally:
        subscription.close()
    woke = ", ".join(
        f"{name} {(after[name] - wakes.get(name, 0)) / count:.2f}"
        for name in sorted(after)
        if after[name] - wakes.get(name, 0) >= 0.02 * count
    )
    ms = sorted(x * 1e3 for x in arrivals.latencies)
    return (
        f"{rate:,.0f} msgs/s: p50 {percentile(ms, 50):.2f} p99 {percentile(ms, 99):.2f} ms, "
        f"own writes {written[0] / count:.2f}\n"
        f"  msgs/s published {count / published:,.0f}, handled {count / handled:,.0f}\n"
        f"  CPU us/msg: {split}\n  wake-ups/msg: {woke}"
    )


def each_rate(
    rates: str, reps: int, name: str, measure: Callable[[liftbridge.Client, str, float], str]
) -> None:
    """One ``LocalServer`` and client (a window of 1,024); for each
    repetition and rate (``rates``: comma-separated msgs/s) a stream of its
    own, ``measure(client, stream, rate)``'s figures printed."""
    with (
        LocalServer(log_level="warn") as server,
        liftbridge.Client(server.addresses, ack_wait=_WAIT, max_inflight=1024) as client,
    ):
        for rep in range(reps):
            for rate in (float(r) for r in rates.split(",")):
                stream = f"{name}-{rep}-{rate:.0f}"
                client.create_stream(stream)
                print(measure(client, stream, rate), flush=True)
                client.delete_stream(stream)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="1000,5000,10000")
    parser.add_argument("--secs", type=float, default=3.0)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument(
        "--switch-interval",
        type=float,
        help="seconds: sys.setswitchinterval for this process (a measurement of the GIL's "
        "hand-off; the SDK never sets it)",
    )
    args = parser.parse_args()
    if args.switch_interval is not None:
        sys.setswitchinterval(args.switch_interval)
    each_rate(
        args.rates,
        args.reps,
        "e2e-probe",
        lambda client, stream, rate: run(client, stream, args.size, rate, int(rate * args.secs)),
    )


if __name__ == "__main__":
    main()
