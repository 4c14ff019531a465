"""A measurement, not a feature: what a Future per publish costs, and on which thread.

Issue 29 asks for ``publish_async`` returning a Future at Go's pace. This
drives, against one ``LocalServer``, in turns (1,024 publishes in flight, done
when the last outcome is in), ``Client.publish_async`` (gRPC) and
``NatsStreamPublisher.publish_async``, each with a Future per publish and with
an ack handler and ``future=False``, and prints each repetition's msgs/s and
client CPU per message, split by thread (from ``/proc/self/task``): the
publishing thread, the thread that reads acks and settles them, the
callbacks thread.

Run: ``python -m bench.future_probe [--count 20000] [--reps 3] [--size 100] [--only nats]``.
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from collections.abc import Callable

import liftbridge
from bench.countdown import CountDown
from liftbridge.testing import LocalServer

_WINDOW = 1024
_WAIT = 60.0


def thread_cpu() -> dict[str, float]:
    """CPU seconds each live thread of this process has used, by thread name
    (threads of one name summed; threads Python did not start by their id)."""
    names = {thread.native_id: thread.name for thread in threading.enumerate()}
    ticks = os.sysconf("SC_CLK_TCK")
    spent: dict[str, float] = {}
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/stat", encoding="ascii") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        name = names.get(int(task), f"native-{task}")
        head, _, tail = name.rpartition("-")
        name = head if head and tail.isdigit() else name  # one line per kind of thread
        spent[name] = spent.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / ticks
    return spent


def _per_message(before: dict[str, float], after: dict[str, float], count: int) -> str:
    used = {name: (after[name] - before.get(name, 0.0)) / count * 1e6 for name in after}
    shown = sorted(((us, name) for name, us in used.items() if us >= 0.05), reverse=True)
    return ", ".join(f"{name} {us:.1f}" for us, name in shown)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--only", choices=("grpc", "nats"), help="drive one path's two rows")
    args = parser.parse_args()
    value = b"f" * args.size

    def await_handler(outcomes: CountDown, count: int) -> None:
        if not outcomes.wait(_WAIT):
            raise RuntimeError(f"{outcomes.left} of {count} ack handler calls missing")

    with (
        LocalServer(log_level="warn") as server,
        liftbridge.Client(server.addresses, ack_wait=_WAIT, max_inflight=_WINDOW) as client,
        liftbridge.NatsStreamPublisher(
            client, server.nats_url, ack_wait=_WAIT, max_inflight=_WINDOW
        ) as nats,
    ):
        client.create_stream("future-probe")

        def grpc_future(count: int) -> None:
            for _ in range(count):
                client.publish_async("future-probe", value)
            client.flush(_WAIT)

        def grpc_handler(count: int) -> None:
            outcomes = CountDown(count)
            on_ack = outcomes.on_ack
            for _ in range(count):
                client.publish_async("future-probe", value, on_ack, future=False)
            await_handler(outcomes, count)

        def nats_future(count: int) -> None:
            for _ in range(count):
                nats.publish_async("future-probe", value)
            nats.flush(_WAIT)

        def nats_handler(count: int) -> None:
            outcomes = CountDown(count)
            on_ack = outcomes.on_ack
            for _ in range(count):
                nats.publish_async("future-probe", value, on_ack, future=False)
            await_handler(outcomes, count)

        drivers: list[tuple[str, Callable[[int], None]]] = [
            ("gRPC, Future", grpc_future),
            ("gRPC, handler", grpc_handler),
            ("NATS, Future", nats_future),
            ("NATS, handler", nats_handler),
        ]
        if args.only is not None:
            drivers = [
                (name, drive) for name, drive in drivers if name.lower().startswith(args.only)
            ]
        for _, drive in drivers:  # warm-up
            drive(args.count // 5)
        for rep in range(args.reps):
            for name, drive in drivers if rep % 2 == 0 else reversed(drivers):
                before, started, cpu = thread_cpu(), time.perf_counter(), time.process_time()
                drive(args.count)
                seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
                split = _per_message(before, thread_cpu(), args.count)
                print(
                    f"{rep} {name:14} {args.count / seconds:9,.0f} msgs/s "
                    f"{cpu / args.count * 1e6:6.1f} us/msg ({split})",
                    flush=True,
                )


if __name__ == "__main__":
    main()
