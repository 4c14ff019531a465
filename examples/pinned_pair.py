"""A pinned pair: one active member, one hot standby, on a one-partition stream.

In a group whose stream has a single partition, the member that joined first
(generated consumer ids sort by join time) reads it and the other waits,
connected. The example hands over on purpose with ``release()`` (the active
member goes to the back of the line), then closes the new active member as a
failure would, and the first one takes over again at the committed offset + 1.
Every message is handled exactly once here, since every hand-over commits.

    python examples/pinned_pair.py [HOST:PORT]   (default $LIFTBRIDGE_ADDRESS)
"""

from __future__ import annotations

import os
import sys
import threading
import time
import uuid
from collections.abc import Callable

import liftbridge


class Log:
    """Who handled which offset, in order. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards entries
        self.entries: list[tuple[str, int]] = []

    def handler(self, name: str) -> liftbridge.Handler:
        def handle(message: liftbridge.Message | None, error: BaseException | None) -> None:
            if message is None:
                print(f"{name}: error {error}", flush=True)
                return
            with self._lock:
                self.entries.append((name, message.offset))
            print(f"{name} handled offset {message.offset}", flush=True)

        return handle

    def wait_count(self, count: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if len(self.entries) >= count:
                    return True
            time.sleep(0.05)
        return False


def announce(name: str, what: str) -> Callable[[tuple[object, ...]], None]:
    def callback(partitions: tuple[object, ...]) -> None:
        print(f"{name} {what} ({', '.join(map(str, partitions))})", flush=True)

    return callback


def main() -> int:
    address = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("LIFTBRIDGE_ADDRESS")
    stream = group = f"jobs-{uuid.uuid4().hex[:8]}"
    with liftbridge.Client(address or "127.0.0.1:9292") as client:
        client.create_stream(stream)  # one partition: a pinned group
        log = Log()
        primary, standby = (
            client.create_consumer(
                group,
                auto_checkpoint=1.0,
                on_assigned=announce(name, "is active"),
                on_revoked=announce(name, "is no longer active"),
            )
            for name in ("primary", "standby")
        )
        try:
            primary.subscribe(stream, log.handler("primary"))  # joins first: active
            standby.subscribe(stream, log.handler("standby"))
            for i in range(5):
                client.publish(stream, f"job {i}".encode())
            if not log.wait_count(5, 30):
                return 1

            print("primary releases the partition", flush=True)
            primary.release()  # commits, leaves, joins again at the back
            for i in range(5, 10):
                client.publish(stream, f"job {i}".encode())
            if not log.wait_count(10, 30):
                return 1

            print("standby stops (as a failure would)", flush=True)
            standby.close()  # commits and leaves: primary takes over
            for i in range(10, 15):
                client.publish(stream, f"job {i}".encode())
            if not log.wait_count(15, 30):
                return 1
        finally:
            primary.close()
            standby.close()
            client.delete_stream(stream)
    handlers = [name for name, _ in log.entries]
    offsets = [offset for _, offset in log.entries]
    print(f"handled by: {handlers}")
    if (
        offsets != list(range(15))
        or handlers != ["primary"] * 5 + ["standby"] * 5 + ["primary"] * 5
    ):
        print("unexpected hand-over")
        return 1
    print("each hand-over resumed at the committed offset + 1")
    return 0


if __name__ == "__main__":
    sys.exit(main())
