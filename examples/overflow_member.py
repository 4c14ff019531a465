"""An overflow member: it helps only while the group falls behind.

A regular member handles a two-partition stream slowly. An overflow member
(``min_pending=60``, ``low_pending=10``) stays out of the group while fewer
than 60 messages are pending (not yet given to a member's handler), joins when
a burst of 200 messages pushes them to 60 or more, takes a partition, and
leaves again once 10 or fewer are pending.

    python examples/overflow_member.py [HOST:PORT]   (default $LIFTBRIDGE_ADDRESS)
"""

from __future__ import annotations

import os
import sys
import threading
import time
import uuid
from collections.abc import Callable

import liftbridge

PARTITIONS = 2
BURST = 200


class Work:
    """Messages handled, by member. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards handled
        self.handled: dict[str, set[tuple[int, int]]] = {"regular": set(), "overflow": set()}

    def handler(self, name: str, pause: float) -> liftbridge.Handler:
        def handle(message: liftbridge.Message | None, error: BaseException | None) -> None:
            if message is None:
                print(f"{name}: error {error}", flush=True)
                return
            time.sleep(pause)  # the work
            with self._lock:
                self.handled[name].add((message.partition, message.offset))

        return handle

    def total(self) -> int:
        with self._lock:
            return len(self.handled["regular"] | self.handled["overflow"])


def announce(what: str) -> Callable[[tuple[object, ...]], None]:
    def callback(partitions: tuple[object, ...]) -> None:
        print(f"overflow member {what} {', '.join(map(str, partitions))}", flush=True)

    return callback


def wait(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def main() -> int:
    address = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("LIFTBRIDGE_ADDRESS")
    stream = group = f"jobs-{uuid.uuid4().hex[:8]}"
    with liftbridge.Client(address or "127.0.0.1:9292") as client:
        client.create_stream(stream, partitions=PARTITIONS)
        work = Work()
        regular = client.create_consumer(group, auto_checkpoint=0.5)
        overflow = client.create_consumer(
            group,
            auto_checkpoint=0.5,
            min_pending=60,
            low_pending=10,
            on_assigned=announce("joined, took"),
            on_revoked=announce("leaving, gave back"),
        )
        try:
            regular.subscribe(stream, work.handler("regular", pause=0.02))
            overflow.subscribe(stream, work.handler("overflow", pause=0.02))
            time.sleep(1.5)
            pending = overflow.backlog().pending
            print(f"pending {pending}: overflow member in group: {overflow.member}")

            for i in range(BURST):
                client.publish(stream, f"job {i}".encode(), partition=i % PARTITIONS)
            print(f"published {BURST}", flush=True)
            if not wait(lambda: overflow.member, 15):
                print("the overflow member never joined")
                return 1
            if not wait(lambda: work.total() == BURST, 60):
                print("the burst was not handled in time")
                return 1
            if not wait(lambda: not overflow.member, 15):
                print("the overflow member never left")
                return 1
        finally:
            overflow.close()
            regular.close()
            client.delete_stream(stream)
    helped = len(work.handled["overflow"])
    print(f"all {BURST} handled; the overflow member handled {helped} of them and left")
    return 0 if helped > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
