"""A consumer group: three members share a three-partition stream, and when
one leaves, another takes its partition over where it stopped.

Creates a stream, publishes 30 messages, lets three members handle them
(each holds one partition), closes one member, publishes 30 more, checks that
every message was handled, and deletes the stream.

    python examples/consumer_group.py [HOST:PORT]   (default $LIFTBRIDGE_ADDRESS)
"""

from __future__ import annotations

import os
import sys
import threading
import time
import uuid
from collections.abc import Callable

import liftbridge

PARTITIONS = 3
BATCH = 30


class Handled:
    """Offsets handled per partition, by any member. Thread-safe: every
    partition's handler runs on its own thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards _offsets
        self._offsets: dict[int, set[int]] = {p: set() for p in range(PARTITIONS)}

    def handler(self, name: str) -> liftbridge.Handler:
        def handle(message: liftbridge.Message | None, error: BaseException | None) -> None:
            if message is None:
                print(f"{name}: error {error}", flush=True)
                return
            with self._lock:
                self._offsets[message.partition].add(message.offset)

        return handle

    def wait_all(self, per_partition: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if all(o >= set(range(per_partition)) for o in self._offsets.values()):
                    return True
            time.sleep(0.05)
        return False


def announce(name: str, what: str) -> Callable[[tuple[object, ...]], None]:
    """An on_assigned / on_revoked callback that prints the partitions."""

    def callback(partitions: tuple[object, ...]) -> None:
        print(f"{name}: {what} {', '.join(map(str, partitions))}", flush=True)

    return callback


def publish(client: liftbridge.Client, stream: str, count: int) -> None:
    for i in range(count):
        client.publish(stream, f"order {i}".encode(), partition=i % PARTITIONS)


def main() -> int:
    address = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("LIFTBRIDGE_ADDRESS")
    group = stream = f"orders-{uuid.uuid4().hex[:8]}"
    with liftbridge.Client(address or "127.0.0.1:9292") as client:
        client.create_stream(stream, partitions=PARTITIONS)
        handled = Handled()
        members = {
            name: client.create_consumer(
                group,
                auto_checkpoint=1.0,
                on_assigned=announce(name, "assigned"),
                on_revoked=announce(name, "revoked"),
            )
            for name in ("ann", "bob", "cid")
        }
        try:
            for name, consumer in members.items():
                consumer.subscribe(stream, handled.handler(name))
            publish(client, stream, BATCH)
            if not handled.wait_all(BATCH // PARTITIONS, 30):
                print("timed out waiting for the first batch")
                return 1
            print(f"all {BATCH} handled; bob leaves", flush=True)
            members.pop("bob").close()  # commits, leaves: its partition moves
            publish(client, stream, BATCH)
            if not handled.wait_all(2 * BATCH // PARTITIONS, 30):
                print("timed out waiting for the second batch")
                return 1
            print(f"all {2 * BATCH} handled, none skipped", flush=True)
        finally:
            for consumer in members.values():
                consumer.close()
            client.delete_stream(stream)
    return 0


if __name__ == "__main__":
    sys.exit(main())
