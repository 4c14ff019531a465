"""Duplicates a clean join causes in a consumer group, per moved partition.

A member reads a 4-partition stream published at about 1,000 messages/s; a
second member joins, then a third (each takes partitions over while messages
keep coming), and every (partition, offset) handled more than once is counted
against the partitions that moved. Run: ``python -m bench.group_join_duplicates``.
"""

from __future__ import annotations

import argparse
import collections
import threading
import time

import liftbridge
from liftbridge.testing import LocalServer

PARTITIONS = 4


def one_round(client: liftbridge.Client, rate: float, auto_checkpoint: float) -> str:
    stream = f"dups-{time.time_ns()}"
    client.create_stream(stream, partitions=PARTITIONS)
    seen: collections.Counter[tuple[int, int]] = collections.Counter()
    lock = threading.Lock()  # guards seen

    def handle(message: liftbridge.Message | None, error: BaseException | None) -> None:
        if message is not None:
            with lock:
                seen[(message.partition, message.offset)] += 1

    stop = threading.Event()
    published = [0]

    def produce() -> None:
        period = 0.01
        batch = max(1, round(rate * period))
        next_at = time.monotonic()
        while not stop.is_set():
            for _ in range(batch):
                client.publish_async(stream, b"x", partition=published[0] % PARTITIONS)
                published[0] += 1
            next_at += period
            stop.wait(max(0.0, next_at - time.monotonic()))

    producer = threading.Thread(target=produce, name="bench-producer")
    producer.start()
    members: list[liftbridge.Consumer] = []
    moved = 0
    try:
        for _ in range(3):
            holders = {tp for m in members for tp in m.assignment}
            member = client.create_consumer(stream, auto_checkpoint=auto_checkpoint)
            member.subscribe(stream, handle)
            members.append(member)
            time.sleep(3.0)
            moved += sum(1 for tp in member.assignment if tp in holders)
    finally:
        stop.set()
        producer.join(10)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with lock:
            if len(seen) >= published[0]:
                break
        time.sleep(0.1)
    for member in members:
        member.close()
    with lock:
        dups = sum(n - 1 for n in seen.values() if n > 1)
        missing = published[0] - len(seen)
    return (
        f"{published[0]} published, {missing} unhandled, {moved} partitions moved, "
        f"{dups} duplicates, {dups / max(1, moved):.1f} per moved partition"
    )


def run(rate: float, auto_checkpoint: float, rounds: int) -> None:
    with LocalServer() as server, liftbridge.Client(server.addresses) as client:
        for r in range(rounds):
            print(f"round {r}: {one_round(client, rate, auto_checkpoint)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--auto-checkpoint", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    run(args.rate, args.auto_checkpoint, args.rounds)


if __name__ == "__main__":
    main()
