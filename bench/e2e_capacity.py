"""A measurement, not a feature: whether ``make bench``'s end-to-end row at
Go's highest rate is bound by the machine's CPU rather than by either client.

Runs the SDK's end-to-end driver (:class:`bench.sdk.SdkEndToEnd`) and Go's
(``liftbridge-bench-go -workload e2e``) in turn on one ``LocalServer`` at one
offered rate and value size, as the suite's row does, and prints for each run
the latency p50/p99, the rate handled (messages over the time until the last
one was handled: below the offered rate when the client fell behind), the
client's and the server's CPU per message (the server's process, its
embedded NATS included) and how busy the whole machine was (``/proc/stat``,
1.00: every core). When both clients' runs have the machine busy near 1.00,
the row measures which process got the CPU, not either client.

Run: ``python -m bench.e2e_capacity [--rate 38000] [--size 1024] [--reps 3] [--secs 3]``.
"""

from __future__ import annotations

import argparse

import liftbridge
from bench import gocli, sdk
from bench.stats import Run, percentile, process_cpu_seconds
from liftbridge.testing import LocalServer


def machine_ticks() -> tuple[int, int]:
    """All CPU ticks of the machine so far, and the idle ones (idle and iowait)."""
    with open("/proc/stat", encoding="ascii") as stat:
        ticks = [int(x) for x in stat.readline().split()[1:]]
    return sum(ticks), ticks[3] + ticks[4]


def measure(driver: sdk.SdkEndToEnd | gocli.GoDriver, count: int, server_pid: int) -> str:
    """One warm-up and one measured run of ``driver``; a line of figures."""
    driver.run(max(200, count // 10))
    server_before, machine_before = process_cpu_seconds(server_pid), machine_ticks()
    run: Run = driver.run(count)
    server_after, machine_after = process_cpu_seconds(server_pid), machine_ticks()
    ms = sorted(x * 1e3 for x in run.latencies)
    server = ((server_after or 0.0) - (server_before or 0.0)) / run.count * 1e6
    total = machine_after[0] - machine_before[0]
    idle = machine_after[1] - machine_before[1]
    return (
        f"p50 {percentile(ms, 50):7.2f} p99 {percentile(ms, 99):8.2f} ms; "
        f"handled {run.count / run.seconds:7,.0f}/s; "
        f"CPU us/msg client {run.cpu_seconds / run.count * 1e6:5.1f} server {server:5.1f}; "
        f"machine busy {1 - idle / max(1, total):.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=38_000.0)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--secs", type=float, default=3.0)
    args = parser.parse_args()
    count = int(args.rate * args.secs)
    with (
        LocalServer(log_level="warn") as server,
        liftbridge.Client(server.addresses, ack_wait=60.0, max_inflight=1024) as client,
    ):
        assert server.pid is not None
        for rep in range(args.reps):
            for who in ("sdk", "go"):
                stream = f"e2e-capacity-{who}-{rep}"
                client.create_stream(stream)
                driver: sdk.SdkEndToEnd | gocli.GoDriver
                if who == "sdk":
                    driver = sdk.SdkEndToEnd(client, stream, args.size, args.rate)
                else:
                    driver = gocli.GoDriver(
                        server.addresses[0], "e2e", stream, args.size, window=1024, rate=args.rate
                    )
                try:
                    line = measure(driver, count, server.pid)
                finally:
                    driver.close()
                    client.delete_stream(stream)
                print(f"{who:3} {args.rate:,.0f} msgs/s {args.size} B: {line}", flush=True)


if __name__ == "__main__":
    main()
