"""Rate and CPU per message of a consumer-group member read by iteration.

One real server; per round a fresh 1-partition stream is filled with
``--messages`` values of ``--size`` bytes, then a pulling member (no handler)
iterates it from the earliest offset. The clock starts at the first message
(joining the group takes a second or two, which would swamp the read) and
stops at the last; CPU is the whole process's (every thread), read with
``time.process_time``, over the same span. Prints each round, the medians and the load
average. ``--plain`` times an iterated ``Client.subscribe`` of the same
partition instead, for reference. Run: ``python -m bench.group_pull``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from concurrent.futures import Future

import liftbridge
from liftbridge.testing import LocalServer


def fill(client: liftbridge.Client, stream: str, count: int, size: int) -> None:
    value = b"x" * size
    pending: list[Future[liftbridge.Ack | None]] = []
    for _ in range(count):
        pending.append(client.publish_async(stream, value))
        if len(pending) >= 1000:
            for future in pending:
                future.result(30)
            pending.clear()
    for future in pending:
        future.result(30)


def one_round(client: liftbridge.Client, count: int, size: int, plain: bool) -> tuple[float, float]:
    """(messages/s, µs of CPU per message) of one iterated group read."""
    stream = f"gpull-{time.time_ns()}"
    client.create_stream(stream)
    fill(client, stream, count, size)
    if plain:
        with client.subscribe(stream, start=liftbridge.StartPosition.EARLIEST) as subscription:
            wall = cpu = 0.0
            for message in subscription:
                if message.offset == 0:
                    wall, cpu = time.perf_counter(), time.process_time()
                if message.offset + 1 == count:
                    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                    break
        client.delete_stream(stream)
        return (count - 1) / wall, cpu / (count - 1) * 1e6
    consumer = client.create_consumer(stream, auto_checkpoint=None)
    try:
        consumer.subscribe(stream)
        wall = cpu = 0.0
        for seen, message in enumerate(consumer):
            if seen == 0:
                wall, cpu = time.perf_counter(), time.process_time()
            if message.offset != seen:
                raise AssertionError(f"offset {message.offset}, expected {seen}")
            if seen + 1 == count:
                break
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    finally:
        consumer.close()
    client.delete_stream(stream)
    return (count - 1) / wall, cpu / (count - 1) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--plain", action="store_true", help="an iterated subscription instead")
    args = parser.parse_args()
    rates, cpus = [], []
    with LocalServer() as server, liftbridge.Client(server.address) as client:
        for i in range(args.rounds):
            rate, cpu = one_round(client, args.messages, args.size, args.plain)
            rates.append(rate)
            cpus.append(cpu)
            print(f"round {i + 1}: {rate:,.0f} msgs/s, {cpu:.1f} µs CPU/msg", flush=True)
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"median of {args.rounds}: {statistics.median(rates):,.0f} msgs/s, "
        f"{statistics.median(cpus):.1f} µs CPU/msg (load average {load})"
    )


if __name__ == "__main__":
    main()
