"""Duplicates a clean join causes in a consumer group, per moved partition.

A member reads a 4-partition stream published at about 1,000 messages/s; a
second member joins, then a third (each takes partitions over while messages
keep coming), and every (partition, offset) handled more than once is counted
against the partitions that moved. Run: ``python -m bench.group_join_duplicates``.

``--without-release-mark`` measures the hand-over rule from before the release
mark (issue 26), for comparison only: the gaining member then starts reading
once the group's cursor moved at all, which the losing member's periodic
auto-checkpoint can do before its final commit. The SDK itself has no switch
for it; the old rule is put in place in this process only.
"""

from __future__ import annotations

import argparse
import collections
import threading
import time
from collections.abc import Callable

import liftbridge
from liftbridge._groups._partitions import Assigned
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


def _cursor_moved_rule(
    self: Assigned,
    committed: int,
    high_watermark: Callable[[], int],
    released: Callable[[], int],
    now: float,
) -> bool:
    """The gainer's wait before the release mark: done at the first cursor
    move after its first look (or when the cursor covers every message, or at
    the bound). ``released`` is not read."""
    if self.handover_until is None:
        return True
    first: int | None = getattr(self, "bench_cursor_seen", None)
    if first is None:
        self.bench_cursor_seen = committed  # type: ignore[attr-defined]
        done = committed >= high_watermark()
    else:
        done = committed != first
    if done or now >= self.handover_until:
        self.handover_until = None
        return True
    return False


def run(rate: float, auto_checkpoint: float, rounds: int) -> None:
    with LocalServer() as server, liftbridge.Client(server.addresses) as client:
        for r in range(rounds):
            print(f"round {r}: {one_round(client, rate, auto_checkpoint)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--auto-checkpoint", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--without-release-mark",
        action="store_true",
        help="gainers wait for any cursor move, as before the release mark (comparison only)",
    )
    args = parser.parse_args()
    if args.without_release_mark:
        Assigned.handed_over = _cursor_moved_rule  # type: ignore[method-assign]
    run(args.rate, args.auto_checkpoint, args.rounds)


if __name__ == "__main__":
    main()
