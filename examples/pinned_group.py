"""A pinned group on a three-partition stream, moved by an operator.

Two members with ``pinned=True``: the first to stand reads all three
partitions, the other waits. Pin events arrive on their own thread. An
operator (another client, not a member) asks for an unpin with
``client.unpin(group)`` and sees, with ``describe_group``, who holds the pin
before and after; the standby then reads everything, from the committed
offsets + 1.

    python examples/pinned_group.py [HOST:PORT]   (default $LIFTBRIDGE_ADDRESS)
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


class Work:
    """Who handled which (partition, offset). Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards handled
        self.handled: dict[tuple[int, int], str] = {}

    def handler(self, name: str) -> liftbridge.Handler:
        def handle(message: liftbridge.Message | None, error: BaseException | None) -> None:
            if message is None:
                print(f"{name}: error {error}", flush=True)
                return
            with self._lock:
                self.handled[(message.partition, message.offset)] = name

        return handle

    def count(self) -> int:
        with self._lock:
            return len(self.handled)

    def by(self, name: str) -> int:
        with self._lock:
            return sum(1 for who in self.handled.values() if who == name)


def announce(name: str) -> Callable[[liftbridge.PinEvent], None]:
    def on_pin(event: liftbridge.PinEvent) -> None:  # on liftbridge-pin-<group>
        reason = f" ({event.reason.value})" if event.reason else ""
        print(f"{name}: {event.kind.value}{reason}", flush=True)

    return on_pin


def wait(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def publish(client: liftbridge.Client, stream: str, count: int) -> None:
    for i in range(count):
        client.publish(stream, b"job", partition=i % PARTITIONS)


def main() -> int:
    address = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("LIFTBRIDGE_ADDRESS")
    address = address or "127.0.0.1:9292"
    stream = group = f"orders-{uuid.uuid4().hex[:8]}"
    work = Work()
    with liftbridge.Client(address) as client, liftbridge.Client(address) as operator:
        client.create_stream(stream, partitions=PARTITIONS)
        members = {
            name: client.create_consumer(group, pinned=True, on_pin=announce(name))
            for name in ("primary", "standby")
        }
        try:
            for name, member in members.items():
                member.subscribe(stream, work.handler(name))
            if not wait(lambda: len(members["primary"].assignment) == PARTITIONS, 15):
                print("the primary never took the pin")
                return 1
            publish(client, stream, 30)
            if not wait(lambda: work.count() == 30, 30):
                return 1
            described = operator.describe_group(group)
            holder = described.pinned if described else None
            print(f"pinned: primary={holder == members['primary'].consumer_id}", flush=True)

            operator.unpin(group)
            if not wait(lambda: len(members["standby"].assignment) == PARTITIONS, 15):
                print("the pin never moved")
                return 1
            pin = members["standby"].pin
            print(f"standby holds pin {pin.pin_id if pin else None}", flush=True)
            publish(client, stream, 30)
            if not wait(lambda: work.count() == 60, 30):
                return 1
        finally:
            for member in members.values():
                member.close()
            client.delete_stream(stream)
    print(f"primary handled {work.by('primary')}, standby {work.by('standby')}")
    if work.by("primary") != 30 or work.by("standby") != 30:
        print("unexpected hand-over")
        return 1
    print("the pin moved whole: every partition, each message once")
    return 0


if __name__ == "__main__":
    sys.exit(main())
