"""Fault rows of issue 26: consumer groups under load.

``pinned-freeze``: a pinned member (a process of its own) is frozen with
SIGSTOP past the consumer timeout while messages keep coming, then thawed.
The standby must take the pin, the thawed member must not take it back
(design record 003), and every message must be handled by one of them.

``overflow-churn``: a slow regular member and an overflow member; bursts of
messages make the overflow member join and leave, several times. Every
message must be handled; messages handled twice are counted per hand-over.

Both run on one server (groups need no cluster to show these faults).
"""

from __future__ import annotations

import signal
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import liftbridge
from chaos.pinned_child import PinnedMemberProcess
from chaos.rows import RowResult
from liftbridge.testing import LocalServer

_ROOT = Path(__file__).resolve().parent.parent
CONSUMER_TIMEOUT = 3.0
"""The server's ``groups.consumer.timeout`` in these rows (LocalServer's default)."""
SETTLE = 20.0
"""Seconds every published message has to be handled after the load stops."""
OVERFLOW_DUPLICATES_PER_HANDOVER = 2
"""Messages a clean hand-over may handle twice per moved partition (README)."""


class _Handled:
    """Every ``(partition, offset)`` handled, by member; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards seen
        self.seen: list[tuple[str, int, int]] = []

    def add(self, member: str, partition: int, offset: int) -> None:
        with self._lock:
            self.seen.append((member, partition, offset))

    def handler(self, member: str, pause: float = 0.0) -> liftbridge.Handler:
        def handle(message: liftbridge.Message | None, error: BaseException | None) -> None:
            if message is not None:
                if pause:
                    time.sleep(pause)
                self.add(member, message.partition, message.offset)

        return handle

    def counts(self) -> Counter[tuple[int, int]]:
        with self._lock:
            return Counter((p, o) for _, p, o in self.seen)


def _publisher(
    client: liftbridge.Client, stream: str, stop: threading.Event, rate: Callable[[], float]
) -> tuple[threading.Thread, list[int]]:
    """Publishes to ``stream`` (round-robin over partitions) until ``stop``,
    ``rate()`` messages a second; returns the thread and a one-item list of
    the count acked."""
    acked = [0]

    def run() -> None:
        i = 0
        while not stop.is_set():
            client.publish(stream, f"m{i}".encode(), partitioner=liftbridge.PartitionByRoundRobin())
            acked[0] += 1
            i += 1
            per_second = rate()
            if per_second:
                stop.wait(1.0 / per_second)

    thread = threading.Thread(target=run, name="chaos-group-publish", daemon=True)
    thread.start()
    return thread, acked


def _wait(condition: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _judge(
    result: RowResult, counts: Counter[tuple[int, int]], expected: set[tuple[int, int]]
) -> int:
    """Missing messages are problems; returns how many were handled twice or more."""
    missing = expected - set(counts)
    if missing:
        result.problems.append(
            f"{len(missing)} message(s) never handled, e.g. {sorted(missing)[:5]}"
        )
    return sum(n - 1 for n in counts.values() if n > 1)


def pinned_freeze() -> RowResult:
    result = RowResult("pinned-freeze")
    with LocalServer() as server, liftbridge.Client(server.addresses) as client:
        group = f"chaos-pin-{uuid.uuid4().hex[:8]}"
        client.create_stream(group)
        member = PinnedMemberProcess(server.address, group)
        child, lines = member.process, member.lines
        handled = _Handled()
        stop = threading.Event()
        try:
            if not _wait(lambda: ["pin", "pinned", "-"] in lines, 30):
                result.problems.append("the child member never took the pin")
                return result
            standby = client.create_consumer(group, pinned=True, auto_checkpoint=0.2)
            standby.subscribe(group, handled.handler("standby"))
            thread, acked = _publisher(client, group, stop, lambda: 100.0)
            time.sleep(2.0)
            child.send_signal(signal.SIGSTOP)
            frozen_at = time.monotonic()
            moved = _wait(
                lambda: standby.pin is not None and standby.pin.pinned, 3 * CONSUMER_TIMEOUT
            )
            result.notes.append(
                f"pin moved {time.monotonic() - frozen_at:.1f}s after the freeze"
                if moved
                else "the pin did not move within 3 consumer timeouts"
            )
            if not moved:
                result.problems.append("the standby did not take the pin of the frozen member")
            time.sleep(1.0)
            child.send_signal(signal.SIGCONT)
            if not _wait(lambda: ["pin", "unpinned", "lost"] in lines, 3 * CONSUMER_TIMEOUT):
                result.problems.append("the thawed member never reported the pin lost")
            time.sleep(2 * CONSUMER_TIMEOUT)  # the thawed member stands again
            stop.set()
            thread.join(10)
            expected = {(0, o) for o in range(acked[0])}
            for words in lines:
                if words[0] == "offset":
                    handled.add("child", 0, int(words[1]))
            _wait(lambda: set(handled.counts()) >= expected, SETTLE)
            for words in lines:  # offsets the child printed meanwhile
                if words[0] == "offset" and ("child", 0, int(words[1])) not in handled.seen:
                    handled.add("child", 0, int(words[1]))
            pins = [w for w in lines if w[0] == "pin"]
            if pins != [["pin", "pinned", "-"], ["pin", "unpinned", "lost"]]:
                result.problems.append(
                    f"child pin events {pins}: the thawed member took the pin back"
                )
            if standby.pin is None or not standby.pin.pinned:
                result.problems.append("the standby does not hold the pin at the end")
            twice = _judge(result, handled.counts(), expected)
            result.notes.append(f"{acked[0]} published, {twice} handled twice (one hand-over)")
            standby.close()
        finally:
            stop.set()
            member.stop()
    return result


def overflow_churn() -> RowResult:
    result = RowResult("overflow-churn")
    partitions, cycles = 4, 3
    with LocalServer() as server, liftbridge.Client(server.addresses) as client:
        group = f"chaos-overflow-{uuid.uuid4().hex[:8]}"
        client.create_stream(group, partitions=partitions)
        handled = _Handled()
        moves = Counter[str]()

        def moved(kind: str) -> liftbridge.AssignmentCallback:
            def callback(parts: object) -> None:
                moves[kind] += len(parts)  # type: ignore[arg-type]

            return callback

        regular = client.create_consumer(group, auto_checkpoint=0.2)
        regular.subscribe(group, handled.handler("regular", pause=0.004))
        helper = client.create_consumer(
            group,
            min_pending=300,
            low_pending=30,
            auto_checkpoint=0.2,
            on_assigned=moved("assigned"),
            on_revoked=moved("revoked"),
        )
        helper.subscribe(group, handled.handler("helper", pause=0.004))
        burst = [True]
        stop = threading.Event()
        thread, _ = _publisher(client, group, stop, lambda: 0.0 if burst[0] else 20.0)
        joins = 0
        try:
            for _ in range(cycles):
                burst[0] = True
                if _wait(lambda: helper.member, 15):
                    joins += 1
                time.sleep(1.0)
                burst[0] = False
                _wait(lambda: not helper.member, 30)
        finally:
            stop.set()
            thread.join(10)
        tops = [client.fetch_partition_metadata(group, p).high_watermark for p in range(partitions)]
        expected = {(p, o) for p in range(partitions) for o in range(tops[p] + 1)}
        total = len(expected)
        _wait(lambda: set(handled.counts()) >= expected, SETTLE)
        twice = _judge(result, handled.counts(), expected)
        handovers = moves["assigned"] + moves["revoked"]
        result.notes.append(
            f"{total} published in {cycles} bursts, overflow joins {joins}, "
            f"partitions moved {handovers}, handled twice {twice}"
        )
        if joins < cycles:
            result.problems.append(f"the overflow member joined {joins} of {cycles} times")
        allowed = OVERFLOW_DUPLICATES_PER_HANDOVER * handovers
        if twice > allowed:
            result.problems.append(
                f"{twice} handled twice over {handovers} partition moves (allowed {allowed})"
            )
        helper.close()
        regular.close()
    return result
