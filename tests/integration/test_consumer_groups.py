"""Consumer groups against real servers: rebalancing, member loss, restarts,
pinned hand-over, overflow members, and coordinator failover.

Servers run with 3 s consumer and coordinator timeouts (the harness default),
so members heartbeat every second and a lost member is expired after 3 s.
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

import liftbridge
from chaos.pinned_child import PinnedMemberProcess
from liftbridge._groups._consumer import AutoOffset, Consumer
from liftbridge._groups._pin import PIN_PREFIX
from liftbridge._groups._values import StreamPartition
from liftbridge.testing import LocalCluster, LocalServer
from liftbridge_api import api_pb2, api_pb2_grpc

CONSUMER_TIMEOUT = 3.0  # the harness's groups.consumer.timeout
HEARTBEAT = CONSUMER_TIMEOUT / 3
LOADED = 3.0  # seconds a timing bound allows past its figure on a busy CI machine
REPO_ROOT = Path(__file__).resolve().parents[2]


class Tally:
    """Every message handled, by member; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards events and errors
        self.events: list[tuple[str, int, int, float]] = []  # member, partition, offset, when
        self.errors: list[tuple[str, BaseException]] = []

    def handler(
        self, member: str, before: Callable[[liftbridge.Message], None] | None = None
    ) -> liftbridge.Handler:
        def handle(message: liftbridge.Message | None, error: BaseException | None) -> None:
            if message is None:
                assert error is not None
                with self._lock:
                    self.errors.append((member, error))
                return
            if before is not None:
                before(message)
            with self._lock:
                self.events.append((member, message.partition, message.offset, time.monotonic()))

        return handle

    def offsets(self, partition: int) -> set[int]:
        with self._lock:
            return {o for _, p, o, _ in self.events if p == partition}

    def by(self, member: str, partition: int | None = None) -> list[int]:
        with self._lock:
            return [o for m, p, o, _ in self.events if m == member and partition in (None, p)]

    def first_after(self, member: str, partition: int, since: float) -> tuple[int, float] | None:
        with self._lock:
            for m, p, o, t in self.events:
                if m == member and p == partition and t >= since:
                    return o, t
        return None

    def complete(self, counts: dict[int, int]) -> bool:
        return all(self.offsets(p) >= set(range(n)) for p, n in counts.items())


def raw_call(client: liftbridge.Client, method: str, request: Any, timeout: float) -> Any:
    """An RPC straight to a broker of the client's cluster, on a channel of the
    test's own (for what the SDK does not expose: the server's own view)."""
    last: Exception | None = None
    for broker in client.metadata.brokers:
        with grpc.insecure_channel(broker.address) as channel:
            try:
                return getattr(api_pb2_grpc.APIStub(channel), method)(request, timeout=timeout)
            except grpc.RpcError as e:
                last = e
    raise liftbridge.UnavailableError(f"no broker answered {method}: {last}")


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> float:
    """Polls until ``condition()``; returns the seconds it took."""
    start = time.monotonic()
    deadline = start + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {timeout:g}s: {what}")
        time.sleep(0.02)
    return time.monotonic() - start


def publish(client: liftbridge.Client, stream: str, partitions: int, per_partition: int) -> None:
    futures = [
        client.publish_async(stream, b"m", partition=p)
        for _ in range(per_partition)
        for p in range(partitions)
    ]
    for future in futures:
        future.result()


def joined(member: Consumer) -> bool:
    """Whether ``member``'s join was answered: the server has it in the group."""
    return member.member


def holder(consumers: dict[str, Consumer], tp: StreamPartition) -> str | None:
    owners = [name for name, c in consumers.items() if tp in c.assignment]
    assert len(owners) <= 1, f"{tp} held by {owners}"
    return owners[0] if owners else None


@pytest.fixture
def make_consumer(
    client: liftbridge.Client,
) -> Iterator[Callable[..., Consumer]]:
    """Creates consumers and closes every one after the test."""
    made: list[Consumer] = []

    def make(group: str, client_: liftbridge.Client | None = None, **options: object) -> Consumer:
        options.setdefault("auto_checkpoint", 0.5)
        consumer = (client_ or client).create_consumer(group, **options)  # type: ignore[arg-type]
        made.append(consumer)
        return consumer

    yield make
    for consumer in made:
        consumer.close()


# ---------------------------------------------------------------- basics --


def test_three_members_share_three_partitions_and_closing_hands_over(
    client: liftbridge.Client, unique_name: str, make_consumer: Callable[..., Consumer]
) -> None:
    client.create_stream(unique_name, partitions=3)
    tally = Tally()
    members = {}
    for name in ("a", "b", "c"):
        members[name] = make_consumer(unique_name)
        members[name].subscribe(unique_name, tally.handler(name))
    parts = [StreamPartition(unique_name, p) for p in range(3)]
    wait_for(
        lambda: all(len(m.assignment) == 1 for m in members.values()),
        5 * HEARTBEAT,
        "one partition each",
    )
    assert sorted(tp for m in members.values() for tp in m.assignment) == parts

    publish(client, unique_name, 3, 20)
    wait_for(lambda: tally.complete({0: 20, 1: 20, 2: 20}), 10, "first batch handled")

    leaving = holder(members, parts[2])
    assert leaving is not None
    closed_at = time.monotonic()
    members.pop(leaving).close()
    committed = client.fetch_cursor(f"__group:{unique_name}", unique_name, 2)
    assert committed == 19  # close() commits what its handler finished

    publish(client, unique_name, 3, 20)
    took = wait_for(
        lambda: holder(members, parts[2]) is not None, 3 * HEARTBEAT + LOADED, "hand-over"
    )
    taker = holder(members, parts[2])
    assert taker is not None
    wait_for(lambda: tally.complete({0: 40, 1: 40, 2: 40}), 10, "second batch handled")
    first = tally.first_after(taker, 2, closed_at)
    assert first is not None
    assert first[0] == committed + 1  # resumes at committed offset + 1: nothing again
    print(f"hand-over after close: {took:.2f}s")
    assert sorted(tally.offsets(2)) == list(range(40))


def test_a_clean_join_hands_over_at_the_old_owners_final_commit(
    client: liftbridge.Client, unique_name: str, make_consumer: Callable[..., Consumer]
) -> None:
    # No periodic commits: the old owner's only commit of a partition is the
    # one it makes when it loses it, so the newcomer must start right after it.
    client.create_stream(unique_name, partitions=2)
    tally = Tally()
    old = make_consumer(unique_name, auto_checkpoint=None)
    old.subscribe(unique_name, tally.handler("old", lambda m: time.sleep(0.005)))
    wait_for(lambda: len(old.assignment) == 2, 5, "the first member holds both")
    publish(client, unique_name, 2, 400)  # about 4 s of work: still reading at the join
    wait_for(lambda: len(tally.by("old")) > 20, 5, "reading")
    new = make_consumer(unique_name, auto_checkpoint=None)
    new.subscribe(unique_name, tally.handler("new"))
    wait_for(lambda: len(new.assignment) == 1, 3 * HEARTBEAT + LOADED, "the newcomer takes one")
    moved = new.assignment[0].partition
    wait_for(lambda: tally.complete({0: 400, 1: 400}), 20, "everything handled")
    by_old, by_new = tally.by("old", moved), tally.by("new", moved)
    assert by_new, "the newcomer read the partition it took"
    # The old owner's final commit + 1; under load its thread for the moved
    # partition may not have handled any of it yet, and then nothing was committed.
    assert by_new[0] == (max(by_old) + 1 if by_old else 0)
    assert sorted(by_old + by_new) == list(range(400))  # nothing handled twice


def test_group_offsets_use_the_go_cursor_id(
    client: liftbridge.Client, unique_name: str, make_consumer: Callable[..., Consumer]
) -> None:
    client.create_stream(unique_name, partitions=2)
    publish(client, unique_name, 2, 5)
    tally = Tally()
    consumer = make_consumer("grp-" + unique_name, auto_checkpoint=None)
    assert consumer.cursor_id == f"__group:grp-{unique_name}"
    consumer.subscribe([unique_name], tally.handler("a"))
    wait_for(lambda: tally.complete({0: 5, 1: 5}), 10, "handled")
    assert client.fetch_cursor(consumer.cursor_id, unique_name, 0) is None  # no auto commit
    consumer.checkpoint()
    for partition in (0, 1):
        assert client.fetch_cursor(f"__group:grp-{unique_name}", unique_name, partition) == 4
    assert consumer.backlog() == liftbridge.Backlog(0, 0)


def test_handler_errors_are_retried_never_skipped(
    client: liftbridge.Client, unique_name: str, make_consumer: Callable[..., Consumer]
) -> None:
    client.create_stream(unique_name)
    publish(client, unique_name, 1, 6)
    failures: list[int] = []

    def flaky(message: liftbridge.Message) -> None:
        if message.offset == 3 and len(failures) < 2:
            failures.append(message.offset)
            raise RuntimeError("not yet")

    tally = Tally()
    consumer = make_consumer(unique_name)
    consumer.subscribe(unique_name, tally.handler("a", flaky))
    wait_for(lambda: tally.complete({0: 6}), 10, "handled after retries")
    assert failures == [3, 3]
    assert tally.by("a") == [0, 1, 2, 3, 4, 5]

    # The tally is written inside the handler, a moment before the member counts
    # the message as handled: checkpoint until the last one is committed.
    def committed_to_the_end() -> bool:
        consumer.checkpoint()
        return client.fetch_cursor(consumer.cursor_id, unique_name, 0) == 5

    wait_for(committed_to_the_end, 5, "the cursor at the last handled offset")


def test_auto_offset_policies(
    client: liftbridge.Client, unique_name: str, make_consumer: Callable[..., Consumer]
) -> None:
    client.create_stream(unique_name)
    publish(client, unique_name, 1, 3)

    errors = Tally()
    strict = make_consumer("error-" + unique_name, auto_offset=AutoOffset.ERROR)
    strict.subscribe(unique_name, errors.handler("strict"))
    wait_for(lambda: bool(errors.errors), 5, "NoCursorError")
    assert isinstance(errors.errors[0][1], liftbridge.NoCursorError)
    assert errors.events == []
    strict.close()

    # NEW_ONLY pins the group's start: a member taking over continues there.
    tally = Tally()
    fresh = make_consumer("new-" + unique_name, auto_offset=AutoOffset.NEW_ONLY)
    fresh.subscribe(unique_name, tally.handler("fresh"))
    wait_for(lambda: fresh.assignment != (), 5, "assigned")
    wait_for(lambda: client.fetch_cursor(fresh.cursor_id, unique_name, 0) == 2, 5, "pinned")
    publish(client, unique_name, 1, 2)
    wait_for(lambda: tally.offsets(0) == {3, 4}, 5, "new messages only")

    latest = Tally()
    last = make_consumer("latest-" + unique_name, auto_offset=AutoOffset.LATEST)
    last.subscribe(unique_name, latest.handler("last"))
    wait_for(lambda: latest.offsets(0) == {4}, 5, "the newest message, then new ones")


# ----------------------------------------------------------- member loss --


def test_lost_member_partitions_move_within_the_consumer_timeout(
    client: liftbridge.Client, unique_name: str, make_consumer: Callable[..., Consumer]
) -> None:
    client.create_stream(unique_name, partitions=2)
    tally = Tally()
    survivor = make_consumer(unique_name)
    survivor.subscribe(unique_name, tally.handler("survivor"))
    doomed = make_consumer(unique_name)
    doomed.subscribe(unique_name, tally.handler("doomed"))
    wait_for(
        lambda: len(doomed.assignment) == len(survivor.assignment) == 1,
        5 * HEARTBEAT,
        "one partition each",
    )
    (lost,) = doomed.assignment
    publish(client, unique_name, 2, 10)
    wait_for(lambda: tally.complete({0: 10, 1: 10}), 10, "handled")

    doomed._abandon()  # its thread stops heartbeating: no commit, no leave
    lost_at = time.monotonic()
    publish(client, unique_name, 2, 10)
    took = wait_for(
        lambda: tally.first_after("survivor", lost.partition, lost_at) is not None,
        CONSUMER_TIMEOUT + 5 * HEARTBEAT + LOADED,
        "the survivor reads the lost partition",
    )
    print(f"takeover after member loss: {took:.2f}s")
    # Expiry, the next heartbeat, and the wait for a final commit that never
    # comes (a heartbeat period + 0.5 s: the partition has messages past it),
    # with the room a loaded 2-core CI machine needs (LOADED).
    assert took <= CONSUMER_TIMEOUT + 3.5 * HEARTBEAT + 0.5 + LOADED
    wait_for(lambda: tally.complete({0: 20, 1: 20}), 10, "everything handled")


_MEMBER_SCRIPT = textwrap.dedent(
    """
    import sys, threading, liftbridge
    address, group, stream, consumer_id = sys.argv[1:5]
    client = liftbridge.Client(address)
    def handle(message, error):
        if message is not None:
            print("offset", message.partition, message.offset, flush=True)
    consumer = client.create_consumer(
        group, consumer_id=consumer_id, auto_checkpoint=0.2,
        on_assigned=lambda parts: print("assigned", len(parts), flush=True),
    )
    consumer.subscribe(stream, handle)
    threading.Event().wait()
    """
)


def test_killed_member_process_is_replaced(
    client: liftbridge.Client,
    server: LocalServer,
    unique_name: str,
    make_consumer: Callable[..., Consumer],
) -> None:
    client.create_stream(unique_name, partitions=2)
    tally = Tally()
    local = make_consumer(unique_name)
    local.subscribe(unique_name, tally.handler("local"))
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    child = subprocess.Popen(
        [sys.executable, "-c", _MEMBER_SCRIPT, server.address, unique_name, unique_name, "child"],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    remote: list[tuple[int, int]] = []
    assigned = threading.Event()

    def read() -> None:
        assert child.stdout is not None
        for line in child.stdout:
            words = line.split()
            if words[:1] == ["assigned"]:
                assigned.set()
            elif words[:1] == ["offset"]:
                remote.append((int(words[1]), int(words[2])))

    reader = threading.Thread(target=read, name="test-child-reader", daemon=True)
    reader.start()
    try:
        assert assigned.wait(20), "the child never got a partition"
        wait_for(lambda: len(local.assignment) == 1, 5 * HEARTBEAT, "local gave one up")
        publish(client, unique_name, 2, 10)
        wait_for(lambda: len(remote) >= 10, 10, "the child handled its share")
        time.sleep(0.5)  # let its auto-checkpoint run
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(10)
        reader.join(5)
        assert child.stdout is not None
        child.stdout.close()
    took = wait_for(
        lambda: len(local.assignment) == 2, CONSUMER_TIMEOUT + 3 * HEARTBEAT, "takeover"
    )
    print(f"takeover after SIGKILL: {took:.2f}s")
    publish(client, unique_name, 2, 10)
    handled = {(p, o) for p, o in remote}
    wait_for(
        lambda: all(
            {(p, o) for o in tally.offsets(p)} | handled >= {(p, o) for o in range(20)}
            for p in (0, 1)
        ),
        10,
        "every message handled by one of them",
    )


def test_restart_with_the_same_id_waits_for_the_old_membership(
    client: liftbridge.Client, unique_name: str, make_consumer: Callable[..., Consumer]
) -> None:
    client.create_stream(unique_name)
    tally = Tally()
    first = make_consumer(unique_name, consumer_id="worker-1")
    first.subscribe(unique_name, tally.handler("first"))
    wait_for(lambda: first.assignment != (), 5, "assigned")
    first._abandon()  # a crash: the server still lists worker-1

    again = make_consumer(unique_name, consumer_id="worker-1", join_timeout=20.0)
    started = time.monotonic()
    again.subscribe(unique_name, tally.handler("again"))  # waits out the old membership
    waited = time.monotonic() - started
    print(f"re-join with the same id after: {waited:.2f}s")
    assert waited > 0.5  # it did wait for the server to expire worker-1
    publish(client, unique_name, 1, 3)
    wait_for(lambda: tally.by("again") == [0, 1, 2], 10, "the restarted member reads")


def test_restart_with_the_same_id_gives_up_after_join_timeout(
    client: liftbridge.Client, unique_name: str, make_consumer: Callable[..., Consumer]
) -> None:
    client.create_stream(unique_name)
    first = make_consumer(unique_name, consumer_id="twin")
    first.subscribe(unique_name, Tally().handler("first"))
    twin = make_consumer(unique_name, consumer_id="twin", join_timeout=1.0)
    with pytest.raises(liftbridge.ConsumerGroupError, match="already a member"):
        twin.subscribe(unique_name, Tally().handler("twin"))
    assert twin.closed


def test_expired_member_joins_again(
    client: liftbridge.Client,
    unique_name: str,
    make_consumer: Callable[..., Consumer],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client.create_stream(unique_name)
    tally = Tally()
    consumer = make_consumer(unique_name, consumer_id="expiring")
    consumer.subscribe(unique_name, tally.handler("a"))
    wait_for(lambda: consumer.assignment != (), 5, "assigned")
    # Count the member's joins from here on (a quick re-join can hide the
    # empty assignment in between from polling).
    session = consumer._member._session  # type: ignore[union-attr]
    joins: list[object] = []
    join = session.join

    def counting_join(consumer_id: str, timeout: float) -> Any:
        membership = join(consumer_id, timeout)
        joins.append(membership)
        return membership

    monkeypatch.setattr(session, "join", counting_join)
    # What the coordinator does when a member times out: a LeaveConsumerGroup
    # on the member's behalf (the Go client never comes back from this).
    raw_call(
        client,
        "LeaveConsumerGroup",
        api_pb2.LeaveConsumerGroupRequest(groupId=unique_name, consumerId="expiring"),
        5.0,
    )
    wait_for(
        lambda: joins != [] and consumer.assignment != (),
        3 * CONSUMER_TIMEOUT,
        "the member joined again",
    )
    publish(client, unique_name, 1, 3)
    wait_for(lambda: tally.offsets(0) == {0, 1, 2}, 5, "reading again")


# ------------------------------------------------------------------ pinned --


def test_pinned_group_standby_takes_over_and_release_hands_over(
    client: liftbridge.Client, unique_name: str, make_consumer: Callable[..., Consumer]
) -> None:
    client.create_stream(unique_name)  # one partition: a pinned group
    tp = StreamPartition(unique_name, 0)
    tally = Tally()
    members = {}
    for name in ("first", "second", "third"):
        members[name] = make_consumer(unique_name)
        members[name].subscribe(unique_name, tally.handler(name))
        # In the group before the next subscribes: generated ids sort by
        # creation, but each member's group thread joins on its own, and on a
        # busy machine a later one joining first holds the partition until
        # the first joins (a move this test does not expect).
        wait_for(functools.partial(joined, members[name]), 10, f"{name} joined")
    wait_for(
        lambda: holder(members, tp) == "first", 3 * HEARTBEAT + LOADED, "the first joiner holds it"
    )
    publish(client, unique_name, 1, 10)
    wait_for(lambda: tally.complete({0: 10}), 5, "handled by the active member")
    assert tally.by("second") == [] and tally.by("third") == []

    # release(): the partition goes to the next in join order, not back.
    released_at = time.monotonic()
    members["first"].release()
    assert members["first"].member
    took = wait_for(
        lambda: holder(members, tp) == "second", 3 * HEARTBEAT + LOADED, "second takes over"
    )
    print(f"pinned hand-over on release: {took:.2f}s")
    publish(client, unique_name, 1, 10)
    wait_for(lambda: tally.complete({0: 20}), 5, "handled by the new active member")
    taken = tally.first_after("second", 0, released_at)
    assert taken is not None and taken[0] == 10  # at the released member's commit + 1
    time.sleep(HEARTBEAT)
    assert holder(members, tp) == "second"  # the released member waits at the back

    # The active member closes: the next in line (third) takes over at cursor + 1.
    closed_at = time.monotonic()
    members.pop("second").close()
    took = wait_for(
        lambda: holder(members, tp) == "third", 3 * HEARTBEAT + LOADED, "third takes over"
    )
    print(f"pinned takeover on close: {took:.2f}s")
    publish(client, unique_name, 1, 10)
    wait_for(lambda: tally.complete({0: 30}), 5, "handled after the takeover")
    first = tally.first_after("third", 0, closed_at)
    assert first is not None and first[0] == 20
    assert sorted(tally.offsets(0)) == list(range(30))
    assert [o for m, _, o, _ in tally.events].count(10) == 1  # nothing handled twice


def test_pinned_new_standby_does_not_steal(
    client: liftbridge.Client, unique_name: str, make_consumer: Callable[..., Consumer]
) -> None:
    client.create_stream(unique_name)
    tp = StreamPartition(unique_name, 0)
    tally = Tally()
    members = {"old": make_consumer(unique_name)}
    members["old"].subscribe(unique_name, tally.handler("old"))
    wait_for(lambda: holder(members, tp) == "old", 3 * HEARTBEAT + LOADED, "held")
    members["new"] = make_consumer(unique_name)
    members["new"].subscribe(unique_name, tally.handler("new"))
    publish(client, unique_name, 1, 5)
    wait_for(lambda: tally.complete({0: 5}), 5, "handled")
    time.sleep(2 * HEARTBEAT)
    assert holder(members, tp) == "old"
    assert tally.by("new") == []


def test_release_needs_a_generated_id(
    client: liftbridge.Client, unique_name: str, make_consumer: Callable[..., Consumer]
) -> None:
    client.create_stream(unique_name)
    chosen = make_consumer(unique_name, consumer_id="chosen")
    chosen.subscribe(unique_name, Tally().handler("chosen"))
    with pytest.raises(liftbridge.InvalidArgumentError, match="generated consumer id"):
        chosen.release()


class PinLog:
    """One member's pin events, and the threads they arrived on; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards events and threads
        self.events: list[liftbridge.PinEvent] = []
        self.threads: set[str] = set()

    def callback(self, event: liftbridge.PinEvent) -> None:
        with self._lock:
            self.events.append(event)
            self.threads.add(threading.current_thread().name)

    def kinds(self) -> list[tuple[str, str | None]]:
        """``(kind, reason)`` of every event so far."""
        with self._lock:
            return [(e.kind.value, e.reason.value if e.reason else None) for e in self.events]


def pinned_member(
    make_consumer: Callable[..., Consumer], group: str, **options: object
) -> tuple[Consumer, PinLog]:
    log = PinLog()
    return make_consumer(group, pinned=True, on_pin=log.callback, **options), log


def in_election(client: liftbridge.Client, group: str, member: Consumer) -> bool:
    """Whether ``member`` is in ``group``'s pin election, as the server's
    activity stream tells it."""
    description = client.describe_group(PIN_PREFIX + group)
    members = description.members if description is not None else None
    return members is not None and member.consumer_id in {m.consumer_id for m in members}


def is_pinned(member: Consumer) -> bool:
    """Whether ``member``'s own view says it holds the pin."""
    return member.pin is not None and member.pin.pinned


def pinned_holder(members: dict[str, Consumer]) -> str | None:
    """The one member whose own view says it holds the pin; None when none
    does, or while a handover shows in two views at once (the member losing
    the pin learns so at its next heartbeat; reading is fenced by the group
    epoch meanwhile)."""
    pinned = [name for name, c in members.items() if is_pinned(c)]
    return pinned[0] if len(pinned) == 1 else None


def test_pinned_group_of_three_partitions_moves_whole_on_release(
    client: liftbridge.Client, unique_name: str, make_consumer: Callable[..., Consumer]
) -> None:
    client.create_stream(unique_name, partitions=3)
    tally = Tally()
    members, logs = {}, {}
    for name in ("first", "second", "third"):
        members[name], logs[name] = pinned_member(make_consumer, unique_name)
        members[name].subscribe(unique_name, tally.handler(name))
        # Each in the election before the next subscribes: on a busy machine
        # the group threads could join in another order, and a later member
        # alone in the election holds the pin until the first joins (pin
        # events this test does not expect; seen once under load).
        joined = functools.partial(in_election, client, unique_name, members[name])
        wait_for(joined, 10, f"{name} in the election")
    parts = tuple(StreamPartition(unique_name, p) for p in range(3))
    wait_for(lambda: members["first"].assignment == parts, 5, "the first holds all three")
    assert members["second"].assignment == () and members["third"].assignment == ()
    state = members["first"].pin
    assert state is not None and state.pinned and state.pin_id and state.pinned_at
    assert state.consumer_id == members["first"].consumer_id
    publish(client, unique_name, 3, 10)
    wait_for(lambda: tally.complete({0: 10, 1: 10, 2: 10}), 5, "handled by the pinned member")
    assert len(tally.by("first")) == 30

    members["first"].release()  # the pin moves whole to the next in line
    wait_for(lambda: members["second"].assignment == parts, 5, "the second holds all three")
    wait_for(lambda: members["first"].assignment == (), 5, "the first holds nothing")
    assert pinned_holder(members) == "second"
    publish(client, unique_name, 3, 10)
    wait_for(lambda: tally.complete({0: 20, 1: 20, 2: 20}), 10, "handled after the move")
    for p in range(3):
        assert tally.by("second", p) == list(range(10, 20))  # committed + 1, nothing twice
    wait_for(lambda: len(logs["second"].kinds()) == 1, 5, "the pinned event")
    assert logs["first"].kinds() == [("pinned", None), ("unpinned", "released")]
    assert logs["second"].kinds() == [("pinned", None)]
    assert logs["third"].kinds() == []
    for log in logs.values():
        assert log.threads <= {f"liftbridge-pin-{unique_name}"}  # never the group thread


def test_stuck_handler_loses_the_pin_within_pin_timeout(
    client: liftbridge.Client,
    unique_name: str,
    make_consumer: Callable[..., Consumer],
    caplog: pytest.LogCaptureFixture,
) -> None:
    client.create_stream(unique_name, partitions=2)
    tally = Tally()
    gate = threading.Event()

    def stick_at_5(message: liftbridge.Message) -> None:
        if message.offset == 5 and message.partition == 0:
            gate.wait(30)

    stuck, log = pinned_member(make_consumer, unique_name, pin_timeout=1.5)
    stuck.subscribe(unique_name, tally.handler("stuck", stick_at_5))
    wait_for(functools.partial(is_pinned, stuck), 10, "stuck is pinned")  # before the next stands
    standby, _ = pinned_member(make_consumer, unique_name)
    standby.subscribe(unique_name, tally.handler("standby"))
    wait_for(lambda: len(stuck.assignment) == 2, 5, "the first member is pinned")
    try:
        publish(client, unique_name, 2, 10)
        wait_for(lambda: len(tally.by("stuck", 0)) == 5, 5, "stuck at offset 5")
        stuck_at = time.monotonic()
        took = wait_for(
            lambda: len(standby.assignment) == 2,
            1.5 + 4 * HEARTBEAT + LOADED,
            "the standby takes over",
        )
        print(f"pin moved {took:.2f}s after the handler stuck (pin_timeout 1.5s)")
        wait_for(lambda: tally.complete({0: 10, 1: 10}), 10, "handled by the standby")
        assert tally.by("standby", 0)[0] <= 5  # the stuck message is handled again
        assert time.monotonic() - stuck_at < 1.5 + 6 * HEARTBEAT + LOADED
        assert "pin_timeout" in caplog.text
        assert log.kinds()[:2] == [("pinned", None), ("unpinned", "timeout")]
    finally:
        gate.set()
    wait_for(lambda: stuck.pin is not None and stuck.member is False, 5, "the stuck one waits")


def test_unpin_from_outside_moves_the_pin_and_events_come_in_order(
    client: liftbridge.Client,
    server: LocalServer,
    unique_name: str,
    make_consumer: Callable[..., Consumer],
) -> None:
    client.create_stream(unique_name)
    tally = Tally()
    members, logs = {}, {}
    for name in ("a", "b"):
        members[name], logs[name] = pinned_member(make_consumer, unique_name)
        members[name].subscribe(unique_name, tally.handler(name))
        if name == "a":  # pinned before b stands, or b may take the pin first
            wait_for(functools.partial(is_pinned, members[name]), 10, "a is pinned first")
    wait_for(lambda: pinned_holder(members) == "a", 15, "a is pinned")
    first_pin = members["a"].pin
    assert first_pin is not None and first_pin.pin_id
    with liftbridge.Client(server.addresses) as operator:  # not a member
        operator.unpin(unique_name)
        took = wait_for(lambda: pinned_holder(members) == "b", 6 * HEARTBEAT, "b is pinned")
        print(f"pin moved {took:.2f}s after unpin")
        second_pin = members["b"].pin
        assert second_pin is not None and second_pin.pin_id != first_pin.pin_id
        assert second_pin.pinned_at is not None and first_pin.pinned_at is not None
        assert second_pin.pinned_at > first_pin.pinned_at
        operator.unpin(unique_name)  # back to a: b now stands behind it
        wait_for(lambda: pinned_holder(members) == "a", 6 * HEARTBEAT, "a is pinned again")
    publish(client, unique_name, 1, 5)
    wait_for(lambda: tally.complete({0: 5}), 15, "handled")
    assert tally.by("a") == list(range(5)) and tally.by("b") == []
    wait_for(lambda: len(logs["a"].kinds()) == 3, 15, "a's third event")
    assert logs["a"].kinds() == [("pinned", None), ("unpinned", "admin"), ("pinned", None)]
    assert logs["b"].kinds() == [("pinned", None), ("unpinned", "admin")]
    with pytest.raises(liftbridge.ArgumentTypeError, match="group_id"):
        client.unpin(3)  # type: ignore[arg-type]


# ------------------------------------------------------------ group state --


def test_describe_group_during_a_rebalance(
    client: liftbridge.Client, unique_name: str, make_consumer: Callable[..., Consumer]
) -> None:
    client.create_stream(unique_name, partitions=3)
    assert client.describe_group(unique_name) is None  # no such group yet
    tally = Tally()
    members = {}
    for name in ("a", "b"):
        members[name] = make_consumer(unique_name)
        members[name].subscribe(unique_name, tally.handler(name))
    wait_for(lambda: sum(len(m.assignment) for m in members.values()) == 3, 5, "assigned")

    def views_agree(description: liftbridge.GroupDescription | None) -> bool:
        assert description is not None and description.members is not None
        described = {m.consumer_id: m.assignment for m in description.members}
        own = {m.consumer_id: m.assignment for m in members.values()}
        return described == own

    before = client.describe_group(unique_name)
    assert before is not None and before.coordinator == client.metadata.brokers[0].id
    wait_for(lambda: views_agree(client.describe_group(unique_name)), 5, "a and b described")

    # A third member joins; describe the group while the rebalance goes on.
    members["c"] = make_consumer(unique_name)
    members["c"].subscribe(unique_name, tally.handler("c"))
    epochs, seen = [before.epoch], []
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        now = client.describe_group(unique_name, timeout=5)
        assert now is not None and now.members is not None
        epochs.append(now.epoch)
        seen.append(len(now.members))
        if len(now.members) == 3 and views_agree(now):
            break
    else:
        pytest.fail(f"descriptions never matched the members' own views: {seen}")
    assert epochs == sorted(epochs) and epochs[-1] > before.epoch
    described = client.describe_group(unique_name)
    assert described is not None and described.members is not None
    assert [m.consumer_id for m in described.members] == [
        members[n].consumer_id for n in ("a", "b", "c")
    ]  # join order
    assert all(m.streams == (unique_name,) for m in described.members)
    assert described.pinned is None


def test_describe_group_tells_who_holds_the_pin(
    client: liftbridge.Client, unique_name: str, make_consumer: Callable[..., Consumer]
) -> None:
    client.create_stream(unique_name, partitions=2)
    members = {}
    for name in ("a", "b"):
        members[name], _ = pinned_member(make_consumer, unique_name)
        members[name].subscribe(unique_name, Tally().handler(name))
        if name == "a":  # pinned before b stands, or b may take the pin first
            wait_for(functools.partial(is_pinned, members[name]), 10, "a is pinned first")
    wait_for(lambda: pinned_holder(members) == "a", 5, "a is pinned")

    def pinned_is(name: str) -> bool:
        description = client.describe_group(unique_name)
        return description is not None and description.pinned == members[name].consumer_id

    wait_for(lambda: pinned_is("a"), 5, "described as pinned")
    description = client.describe_group(unique_name)
    assert description is not None and description.members is not None
    assert [m.consumer_id for m in description.members] == [members["a"].consumer_id]
    client.unpin(unique_name)
    wait_for(lambda: pinned_is("b"), 3 * HEARTBEAT + 5, "b described as pinned")


# -------------------------------------------------------------------- pull --


def test_pulling_members_share_partitions_and_commit_what_was_taken_before(
    client: liftbridge.Client, unique_name: str, make_consumer: Callable[..., Consumer]
) -> None:
    client.create_stream(unique_name, partitions=2)
    first = make_consumer(unique_name, auto_checkpoint=None)
    first.subscribe(unique_name)  # no handler: pull
    wait_for(lambda: len(first.assignment) == 2, 5, "the first member holds both")
    publish(client, unique_name, 2, 10)
    taken: list[tuple[int, int]] = []
    while len(taken) < 20:
        batch = first.fetch(7, timeout=5)
        assert batch, "messages within the timeout"
        assert len(batch) <= 7
        taken += [(m.partition, m.offset) for m in batch]
    assert sorted(taken) == [(p, o) for p in range(2) for o in range(10)]
    cursor = f"__group:{unique_name}"
    first.checkpoint()  # marks the last batch handled and commits
    assert [client.fetch_cursor(cursor, unique_name, p) for p in range(2)] == [9, 9]
    with pytest.raises(liftbridge.DeadlineExceededError):
        first.next(timeout=0.2)

    # A second pulling member takes a partition over at the commit + 1.
    second = make_consumer(unique_name, auto_checkpoint=None)
    second.subscribe(unique_name)
    wait_for(lambda: len(second.assignment) == 1, 3 * HEARTBEAT + LOADED, "the second takes one")
    moved = second.assignment[0].partition
    # The first learns of the move at its next heartbeat; until then it still
    # reads the moved partition (under load, that window caught the next publishes).
    wait_for(lambda: len(first.assignment) == 1, 3 * HEARTBEAT + LOADED, "the first gives one up")
    assert first.assignment[0].partition == 1 - moved
    publish(client, unique_name, 2, 5)
    message = second.next(timeout=5)
    assert (message.partition, message.offset) == (moved, 10)
    second.checkpoint()  # marks what was taken as handled, and commits it
    assert client.fetch_cursor(cursor, unique_name, moved) == 10
    got = [first.next(timeout=5) for _ in range(5)]
    assert {(m.partition, m.offset) for m in got} == {(1 - moved, o) for o in range(10, 15)}
    second.close()
    first.close()
    with pytest.raises(liftbridge.ClientClosedError):
        first.fetch(timeout=0.1)


def test_iterating_a_pulling_member_ends_when_it_closes(
    client: liftbridge.Client, unique_name: str, make_consumer: Callable[..., Consumer]
) -> None:
    client.create_stream(unique_name)
    consumer = make_consumer(unique_name, auto_checkpoint=None)
    consumer.subscribe(unique_name)
    publish(client, unique_name, 1, 3)
    offsets = []
    for message in consumer:
        offsets.append(message.offset)
        if len(offsets) == 2:
            break  # left early: the third, buffered, was not seen
    consumer.checkpoint()
    assert client.fetch_cursor(consumer.cursor_id, unique_name, 0) == 1
    for message in consumer:
        offsets.append(message.offset)
        if len(offsets) == 3:
            consumer.close()
    assert offsets == [0, 1, 2]
    handler_member = make_consumer(unique_name)
    handler_member.subscribe(unique_name, Tally().handler("h"))
    with pytest.raises(liftbridge.InvalidArgumentError, match="without a handler"):
        handler_member.fetch()


def test_iterating_a_pulling_member_yields_many_messages_in_order_without_loss(
    client: liftbridge.Client, unique_name: str, make_consumer: Callable[..., Consumer]
) -> None:
    # More messages per partition than the member buffers (1,000), so the
    # partitions' threads fill the buffer and wait for the iterating one.
    partitions, per_partition = 3, 2_500
    client.create_stream(unique_name, partitions=partitions)
    futures = [
        client.publish_async(unique_name, f"{p}:{i}".encode(), partition=p)
        for i in range(per_partition)
        for p in range(partitions)
    ]
    for future in futures:
        future.result(30)
    consumer = make_consumer(unique_name, auto_checkpoint=None)
    consumer.subscribe(unique_name)
    seen: dict[int, list[int]] = {p: [] for p in range(partitions)}
    for taken, message in enumerate(consumer, start=1):
        assert message.value == f"{message.partition}:{message.offset}".encode()
        seen[message.partition].append(message.offset)
        if taken == partitions * per_partition:
            break
    assert seen == {p: list(range(per_partition)) for p in range(partitions)}
    consumer.checkpoint()  # the last one taken counts as handled now
    cursors = [client.fetch_cursor(consumer.cursor_id, unique_name, p) for p in range(partitions)]
    assert cursors == [per_partition - 1] * partitions
    assert consumer.fetch(10, timeout=0.2) == []


# ---------------------------------------------------------------- overflow --


def test_overflow_member_joins_under_backlog_and_leaves_when_drained(
    client: liftbridge.Client, unique_name: str, make_consumer: Callable[..., Consumer]
) -> None:
    client.create_stream(unique_name, partitions=2)
    slow = threading.Event()

    def pace(message: liftbridge.Message) -> None:
        # 0.2 s a message while slow: the burst's backlog (120) stays over the
        # helper's 40 for about 16 s of the regular member alone, so a loaded
        # machine's slow join still finds a backlog to join for.
        if slow.is_set():
            time.sleep(0.2)

    tally = Tally()
    regular = make_consumer(unique_name, auto_checkpoint=0.2)
    regular.subscribe(unique_name, tally.handler("regular", pace))
    helper = make_consumer(unique_name, min_pending=40, low_pending=4, auto_checkpoint=0.2)
    helper.subscribe(unique_name, tally.handler("helper"))
    wait_for(lambda: len(regular.assignment) == 2, 5, "the regular member holds both")

    publish(client, unique_name, 2, 10)  # backlog 20 < 40: the helper stays out
    wait_for(lambda: tally.complete({0: 10, 1: 10}), 5, "handled")
    time.sleep(1.5)
    assert not helper.member and tally.by("helper") == []

    slow.set()
    published_at = time.monotonic()
    publish(client, unique_name, 2, 60)  # backlog 120 >= 40: the helper joins
    took = wait_for(lambda: helper.assignment != (), 5 + LOADED, "the helper joins")
    print(f"overflow join after the burst: {took:.2f}s")
    wait_for(
        lambda: tally.by("helper") != [], 5 + LOADED, "the helper reads while the regular is slow"
    )
    slow.clear()
    wait_for(lambda: tally.complete({0: 70, 1: 70}), 20, "the burst handled")
    took = wait_for(lambda: not helper.member, 5 + LOADED, "the helper leaves when drained")
    print(f"overflow leave after draining: {took:.2f}s")
    assert tally.by("helper"), "the helper did some of the work"
    assert tally.first_after("helper", 0, published_at) or tally.first_after(
        "helper", 1, published_at
    )
    wait_for(lambda: len(regular.assignment) == 2, 5, "the regular member holds both again")
    assert helper.backlog().pending <= 4


def test_overflow_member_created_first_takes_nothing_from_regular_members(
    client: liftbridge.Client, unique_name: str, make_consumer: Callable[..., Consumer]
) -> None:
    client.create_stream(unique_name, partitions=2)
    tally = Tally()
    helper = make_consumer(unique_name, min_pending=1000)  # created before the regular ones
    helper.subscribe(unique_name, tally.handler("helper"))
    regulars = {}
    gate = threading.Event()

    def stuck(message: liftbridge.Message) -> None:
        gate.wait(30)

    for name in ("a", "b"):
        regulars[name] = make_consumer(unique_name)
        regulars[name].subscribe(unique_name, tally.handler(name, stuck))
    wait_for(
        lambda: all(len(r.assignment) == 1 for r in regulars.values()), 5, "one partition each"
    )
    publish(client, unique_name, 2, 50)  # each regular member stuck on its first message
    time.sleep(2 * HEARTBEAT)  # the backlog (98 pending) is below 1000: the helper stays out
    assert not helper.member and tally.by("helper") == []
    wait_for(lambda: helper.backlog().pending == 98, 5, "positions reported")

    # Thresholds lowered on the running member: it joins, and still takes
    # nothing, for its id sorts after the regular members' (who got here later).
    helper.set_overflow(min_pending=10, low_pending=0)
    wait_for(lambda: helper.member, 5, "the helper joins")
    time.sleep(2 * HEARTBEAT)
    assert helper.assignment == () and tally.by("helper") == []
    assert all(len(r.assignment) == 1 for r in regulars.values())
    assert helper.consumer_id > max(r.consumer_id for r in regulars.values())

    helper.set_overflow(min_pending=1000)  # 98 <= 500: it leaves again
    wait_for(lambda: not helper.member, 5, "the helper leaves")
    gate.set()
    wait_for(lambda: tally.complete({0: 50, 1: 50}), 10, "handled by the regular members")
    assert tally.by("helper") == []


def test_overflow_member_joins_on_ack_pending(
    client: liftbridge.Client, unique_name: str, make_consumer: Callable[..., Consumer]
) -> None:
    client.create_stream(unique_name, partitions=2)
    tally = Tally()
    regular = make_consumer(unique_name, auto_checkpoint=None)  # commits only when asked
    regular.subscribe(unique_name, tally.handler("regular"))
    helper = make_consumer(unique_name, min_ack_pending=20)
    helper.subscribe(unique_name, tally.handler("helper"))
    wait_for(lambda: len(regular.assignment) == 2, 5, "the regular member holds both")
    publish(client, unique_name, 2, 15)
    wait_for(lambda: tally.complete({0: 15, 1: 15}), 5, "handled, not committed")
    # Nothing pending, 30 handled and not committed (ack pending): the helper joins.
    wait_for(lambda: helper.member, 5, "the helper joins on ack pending")
    backlog = helper.backlog()
    assert backlog.pending == 0 and backlog.ack_pending > 10
    regular.checkpoint()
    wait_for(lambda: helper.backlog() == liftbridge.Backlog(0, 0), 5, "committed")
    wait_for(lambda: not helper.member, 5, "the helper leaves once it is committed")


# ----------------------------------------------------------------- cluster --


@pytest.mark.cluster
def test_killing_the_coordinator_does_not_stop_consumption(
    cluster: LocalCluster, unique_name: str
) -> None:
    with liftbridge.Client(cluster.addresses, ack_wait=10.0) as client:
        client.create_stream(unique_name, partitions=3, replication_factor=3)
        tally = Tally()
        members = []
        coordinator = None
        try:
            for name in ("a", "b", "c"):
                consumer = client.create_consumer(unique_name, auto_checkpoint=0.5)
                consumer.subscribe(unique_name, tally.handler(name))
                members.append(consumer)
            wait_for(lambda: all(len(m.assignment) == 1 for m in members), 10, "balanced")
            publish(client, unique_name, 3, 10)
            wait_for(lambda: tally.complete({0: 10, 1: 10, 2: 10}), 10, "first batch")

            info = raw_call(
                client, "FetchMetadata", api_pb2.FetchMetadataRequest(groups=[unique_name]), 5.0
            ).groupMetadata[0]
            coordinator = info.coordinator
            cluster.kill(coordinator)
            killed_at = time.monotonic()
            counts = {p: 10 for p in range(3)}
            for _ in range(10):
                for p in range(3):
                    _publish_retrying(client, unique_name, p)
                    counts[p] += 1
            wait_for(lambda: tally.complete(counts), 30, "consumption continued")
            print(f"all handled {time.monotonic() - killed_at:.2f}s after the kill")

            def new_coordinator() -> bool:
                try:
                    response = raw_call(
                        client,
                        "FetchMetadata",
                        api_pb2.FetchMetadataRequest(groups=[unique_name]),
                        2.0,
                    )
                except liftbridge.LiftbridgeError:
                    return False
                return response.groupMetadata[0].coordinator not in ("", coordinator)

            wait_for(new_coordinator, 20, "a new coordinator")
            print(f"coordinator {coordinator} replaced within {time.monotonic() - killed_at:.2f}s")
            assert all(m.member for m in members)
            assert sorted(tp for m in members for tp in m.assignment) == [
                StreamPartition(unique_name, p) for p in range(3)
            ]
        finally:
            for consumer in members:
                consumer.close()
            if coordinator is not None:
                cluster.restart(coordinator)


def _publish_retrying(client: liftbridge.Client, stream: str, partition: int) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            client.publish(stream, b"m", partition=partition, timeout=2.0)
            return
        except liftbridge.LiftbridgeError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_client_close_commits_and_leaves_for_its_consumers(
    server: LocalServer, unique_name: str
) -> None:
    """Closing the client first still lets its consumers commit and leave."""
    done = threading.Event()
    handled: list[int] = []

    def handler(message: liftbridge.Message | None, error: BaseException | None) -> None:
        if message is not None:
            handled.append(message.offset)
            if len(handled) == 5:
                done.set()

    client = liftbridge.Client(server.address)
    client.create_stream(unique_name)
    for i in range(5):
        client.publish(unique_name, b"%d" % i)
    consumer = client.create_consumer(f"{unique_name}-g", auto_checkpoint=None)
    consumer.subscribe(unique_name, handler)
    assert done.wait(30)
    client.close()  # not consumer.close()
    assert consumer.closed
    with liftbridge.Client(server.address) as other:
        assert other.fetch_cursor(consumer.cursor_id, unique_name, 0) == 4


def test_a_pinned_puller_that_stops_pulling_loses_the_pin_and_comes_back_as_standby(
    client: liftbridge.Client, unique_name: str, make_consumer: Callable[..., Consumer]
) -> None:
    # Record 003: a pinned client that makes no pull for the priority
    # timeout loses the pin; when it pulls again it does so as a standby.
    client.create_stream(unique_name)
    first, log = pinned_member(make_consumer, unique_name, pin_timeout=1.5)
    first.subscribe(unique_name)
    wait_for(functools.partial(is_pinned, first), 10, "first is pinned")  # second stands behind
    second, _ = pinned_member(make_consumer, unique_name, pin_timeout=1.5)
    second.subscribe(unique_name)
    parts = (StreamPartition(unique_name, 0),)
    seconds: list[int] = []
    stop = threading.Event()

    def keep_pulling() -> None:
        while not stop.is_set():
            seconds.extend(m.offset for m in second.fetch(10, timeout=0.2))

    puller = threading.Thread(target=keep_pulling, name="test-puller")
    puller.start()
    try:
        publish(client, unique_name, 1, 5)
        firsts: list[int] = []
        deadline = time.monotonic() + 10
        while len(firsts) < 5:  # the first in line holds the pin and pulls
            assert time.monotonic() < deadline, f"the pinned member pulled {firsts}"
            firsts.extend(m.offset for m in first.fetch(5, timeout=0.5))
        assert firsts == [0, 1, 2, 3, 4] and first.assignment == parts
        first.checkpoint()
        wait_for(lambda: second.assignment == parts, 1.5 + 8 * HEARTBEAT, "the standby takes over")
        assert log.kinds()[:2] == [("pinned", None), ("unpinned", "timeout")]
        publish(client, unique_name, 1, 5)
        wait_for(lambda: sorted(seconds) == [5, 6, 7, 8, 9], 10, "the new holder pulls the rest")
        # The first pulls again, for longer than a heartbeat period: as a standby.
        came_back: list[int] = []
        until = time.monotonic() + 3 * HEARTBEAT
        while time.monotonic() < until:
            came_back.extend(m.offset for m in first.fetch(5, timeout=0.3))
        assert came_back == []
        assert not first.assignment and second.assignment == parts
        assert first.pin is not None and not first.pin.pinned
        assert second.pin is not None and second.pin.pinned
    finally:
        stop.set()
        puller.join(5)


def test_an_expired_pinned_member_comes_back_as_a_standby(
    client: liftbridge.Client,
    server: LocalServer,
    unique_name: str,
    make_consumer: Callable[..., Consumer],
) -> None:
    # Record 003: a pinned client the server switched away from clears its
    # id and pulls as a standby: frozen past the consumer timeout and thawed,
    # it must not take the pin back from the member that took over.
    client.create_stream(unique_name)
    member = PinnedMemberProcess(server.address, unique_name)
    child, lines = member.process, member.lines
    try:
        wait_for(lambda: ["pin", "pinned", "-"] in lines, 20, "the child is pinned")
        tally = Tally()
        standby, log = pinned_member(make_consumer, unique_name)
        standby.subscribe(unique_name, tally.handler("standby"))
        publish(client, unique_name, 1, 5)
        wait_for(lambda: len([w for w in lines if w[0] == "offset"]) == 5, 10, "child handled 5")
        # Its auto-checkpoint (every 0.2 s) has committed them: a fixed pause
        # stood in for this, and a busy machine can run the child later.
        committed = functools.partial(client.fetch_cursor, f"__group:{unique_name}", unique_name, 0)
        wait_for(lambda: committed() == 4, 10, "the child's commit of offset 4")
        assert standby.pin is not None and not standby.pin.pinned
        child.send_signal(signal.SIGSTOP)
        took = wait_for(
            lambda: standby.pin is not None and standby.pin.pinned,
            CONSUMER_TIMEOUT + 6 * HEARTBEAT,
            "the standby takes the pin of the frozen member",
        )
        print(f"pin moved {took:.2f}s after the freeze")
        child.send_signal(signal.SIGCONT)
        wait_for(lambda: ["pin", "unpinned", "lost"] in lines, 5 * HEARTBEAT, "the child lost it")
        time.sleep(3 * HEARTBEAT)  # the thawed member stands again: behind the holder
        publish(client, unique_name, 1, 5)
        wait_for(lambda: len(tally.by("standby")) >= 5, 10, "the holder handles the rest")
        time.sleep(HEARTBEAT)  # nothing more comes to either
        assert standby.pin is not None and standby.pin.pinned
        assert log.kinds() == [("pinned", None)]
        pins = [w for w in lines if w[0] == "pin"]
        assert pins == [["pin", "pinned", "-"], ["pin", "unpinned", "lost"]]
        child_offsets = [int(w[1]) for w in lines if w[0] == "offset"]
        assert child_offsets == [0, 1, 2, 3, 4]
        assert tally.by("standby") == [5, 6, 7, 8, 9]  # from the frozen member's commit
    finally:
        member.stop()
