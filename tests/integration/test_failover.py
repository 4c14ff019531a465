"""Failover on a real three-node cluster: admin calls, subscriptions and the
PublishAsync stream survive SIGKILL of the broker they were using."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest

import liftbridge
from liftbridge.testing import LocalCluster
from tests.integration.frozen import freeze

pytestmark = pytest.mark.cluster

T = TypeVar("T")


@pytest.fixture
def healed() -> Iterator[LocalCluster]:
    """A fresh three-node cluster per test: after SIGKILL/restart cycles the
    surviving brokers of v1.9.0 can answer FetchMetadata only at the request's
    deadline (they wait for the dead peer), which would leak into later tests."""
    with LocalCluster(3) as cluster:
        yield cluster


def _wait_for_leader(
    client: liftbridge.Client, stream: str, partition: int, not_on: str, timeout: float = 30
) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = client.fetch_metadata().partition(stream, partition)
        if info is not None and info.leader and info.leader != not_on:
            return info.leader
        time.sleep(0.2)
    raise AssertionError(f"no new leader for {stream}/{partition} within {timeout}s")


def test_admin_calls_survive_the_first_broker_dying(healed: LocalCluster, unique_name: str) -> None:
    first, *_ = healed.nodes
    with liftbridge.Client([first.address, *healed.addresses[1:]], rpc_timeout=5) as client:
        client.create_stream(unique_name, replication_factor=3)
        client.fetch_partition_metadata(unique_name)  # waits for the stream's metadata
        info = client.metadata.partition(unique_name, 0)
        assert info is not None and len(info.replicas) == 3
        healed.kill(first)
        # The next admin call goes to another broker.
        client.create_stream(f"{unique_name}-after", replication_factor=2)
        deadline = time.monotonic() + 30
        while client.fetch_metadata().get_stream(f"{unique_name}-after") is None:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        with pytest.raises(liftbridge.StreamExistsError):
            client.create_stream(unique_name)


def test_subscription_is_gapless_across_leader_kill(healed: LocalCluster, unique_name: str) -> None:
    total = 600
    with liftbridge.Client(
        healed.addresses, resubscribe_wait=60, ack_wait=30, rpc_timeout=3
    ) as client:
        client.create_stream(unique_name, replication_factor=3)
        leader = client.fetch_partition_metadata(unique_name).leader  # waits for the metadata
        received: list[int] = []  # values
        offsets: list[int] = []
        errors: list[BaseException] = []
        all_in = threading.Event()

        def handler(message: liftbridge.Message | None, error: BaseException | None) -> None:
            if error is not None:
                errors.append(error)
                all_in.set()
                return
            assert message is not None
            offsets.append(message.offset)
            received.append(int(message.value))
            if len(set(received)) >= total:
                all_in.set()

        sub = client.subscribe(unique_name, handler, start=liftbridge.StartPosition.EARLIEST)
        published = 0
        while published < total // 2:
            client.publish(unique_name, b"%d" % published, ack_policy=liftbridge.AckPolicy.ALL)
            published += 1
        healed.kill(healed.node(leader))
        _wait_for_leader(client, unique_name, 0, not_on=leader)
        while published < total:
            try:
                client.publish(unique_name, b"%d" % published, ack_policy=liftbridge.AckPolicy.ALL)
            except (
                liftbridge.UnavailableError,  # includes ConnectionLostError
                liftbridge.DeadlineExceededError,  # includes AckTimeoutError
                liftbridge.NoSuchPartitionError,
            ):
                # Still failing over. The message may have been stored anyway
                # (at-least-once), so publishing it again may store it twice, at
                # a new offset; the subscription must still be gapless in offsets.
                time.sleep(0.2)
                continue
            published += 1
        assert all_in.wait(60), f"received {len(received)} of {total}"
        sub.close()
        assert errors == []
        # The partition read back exactly: offsets 0..n-1, no gap, no repeat...
        pairs = list(zip(offsets, received, strict=True))
        assert offsets == list(range(len(offsets))), (
            f"offsets skipped or repeated: {pairs[295:305]}"
        )
        # ...and every published message is there.
        assert set(received) == set(range(total))


def _eventually(what: str, attempt: Callable[[], T], timeout: float = 60) -> T:
    """Calls ``attempt`` until it returns; any SDK error during failover means
    "not yet". Fails the test after ``timeout`` seconds, naming the last error."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return attempt()
        except liftbridge.LiftbridgeError as e:
            if time.monotonic() > deadline:
                pytest.fail(f"{what} did not recover within {timeout:g}s; last error: {e!r}")
            time.sleep(0.2)


def test_publish_async_stream_recovers_after_its_broker_dies(
    healed: LocalCluster, unique_name: str
) -> None:
    first = healed.nodes[0]
    with liftbridge.Client([first.address], ack_wait=20, rpc_timeout=3) as client:
        client.create_stream(unique_name, replication_factor=3)
        assert client.publish(unique_name, b"before") is not None
        healed.kill(first)  # the PublishAsync stream was opened on it
        ack = _eventually(
            "publish_async", lambda: client.publish_async(unique_name, b"after", timeout=5).result()
        )
        assert ack is not None

        def read_back() -> list[bytes]:
            with client.subscribe(unique_name, start=0, stop=liftbridge.StopPosition.LATEST) as sub:
                return [m.value for m in sub]

        values = _eventually("subscribe", read_back)
        assert values[0] == b"before" and values[-1] == b"after"


def test_new_only_subscription_loses_nothing_when_the_leader_dies_first(
    healed: LocalCluster, unique_name: str
) -> None:
    """Killed before its first message, a NEW_ONLY subscription resumes at the
    offset it started at, not at the new leader's "new only"."""
    with liftbridge.Client(
        healed.addresses, resubscribe_wait=60, ack_wait=30, rpc_timeout=3
    ) as client:
        client.create_stream(unique_name, replication_factor=3)
        client.publish(unique_name, b"old", ack_policy=liftbridge.AckPolicy.ALL)
        leader = client.fetch_partition_metadata(unique_name).leader
        got: list[bytes] = []
        arrived = threading.Event()

        def handler(message: liftbridge.Message | None, error: BaseException | None) -> None:
            if message is not None:
                got.append(message.value)
                if len(got) == 3:
                    arrived.set()

        sub = client.subscribe(unique_name, handler)  # NEW_ONLY: nothing delivered yet
        healed.kill(healed.node(leader))
        _wait_for_leader(client, unique_name, 0, not_on=leader)
        for value in (b"n1", b"n2", b"n3"):

            def publish_one(v: bytes = value) -> liftbridge.Ack | None:
                return client.publish(unique_name, v, ack_policy=liftbridge.AckPolicy.ALL)

            _eventually("publish", publish_one)
        assert arrived.wait(60), f"got {got}"
        sub.close()
        # Every message published during the outage arrives (a publish retried
        # after an ambiguous failure may arrive twice); nothing from before.
        assert set(got) >= {b"n1", b"n2", b"n3"}
        assert b"old" not in got


def _stream_not_led_by(client: liftbridge.Client, broker_id: str, name: str) -> tuple[str, str]:
    """A new stream whose partition 0 another broker than ``broker_id`` leads:
    (its name, its leader's id)."""
    for attempt in range(8):
        stream = f"{name}-{attempt}"
        client.create_stream(stream, replication_factor=3, min_isr=2)
        leader = client.fetch_partition_metadata(stream).leader  # waits for the metadata
        if leader != broker_id:
            return stream, leader
    raise AssertionError(f"every new stream was led by {broker_id}")


def test_publishes_in_flight_at_a_leader_kill_fail_fast(
    healed: LocalCluster, unique_name: str
) -> None:
    """The publishes go out through the client's PublishAsync stream on one
    broker, which forwards them to the partition leader (another broker);
    that leader is stopped (so none of them is acked) and then killed. The
    stream stays healthy: before the SDK watched leaders, every publish
    waited out its 30 s ack timeout. Now each resolves long before it, with
    LeaderLostError (the message may have been stored) or its ack. A
    synchronous publish (on its thread's own stream) fails the same way."""
    ack_wait = 30.0
    with liftbridge.Client(healed.addresses, ack_wait=ack_wait, rpc_timeout=5) as client:
        # The PublishAsync stream opens on the first broker of the metadata.
        stream_broker = client.metadata.brokers[0].id
        stream, leader = _stream_not_led_by(client, stream_broker, unique_name)
        client.publish(stream, b"warm-up", ack_policy=liftbridge.AckPolicy.ALL)
        assert client.publish_async(stream, b"warm-up-async").result(timeout=ack_wait)
        node = healed.node(leader)
        assert node.pid is not None
        freeze(node.pid)
        sync_outcome: list[BaseException | None] = []
        sync_started = threading.Event()

        def publish_sync() -> None:
            sync_started.set()
            try:
                client.publish(stream, b"sync", ack_policy=liftbridge.AckPolicy.ALL)
                sync_outcome.append(None)
            except liftbridge.LiftbridgeError as e:
                sync_outcome.append(e)

        sync = threading.Thread(target=publish_sync, name="test-sync-publish")
        try:
            sync.start()
            assert sync_started.wait(10)
            futures = [
                client.publish_async(stream, b"%d" % i, ack_policy=liftbridge.AckPolicy.ALL)
                for i in range(200)
            ]
            time.sleep(0.5)  # all sent, none can be acked
            assert not any(f.done() for f in futures)
        finally:
            healed.kill(node)  # SIGKILL ends a stopped process too
        bound = time.monotonic() + ack_wait / 2
        outcomes: list[BaseException | None] = []
        for future in futures:
            # An AckTimeoutError would need the full 30 s: the bound catches it.
            outcomes.append(future.exception(timeout=max(0.0, bound - time.monotonic())))
        sync.join(max(0.0, bound - time.monotonic()))
        assert not sync.is_alive(), "the synchronous publish waited for its ack timeout"
        assert len(sync_outcome) == 1
        assert isinstance(sync_outcome[0], liftbridge.LeaderLostError), sync_outcome
        errors = [e for e in outcomes if e is not None]
        assert errors, "the stopped leader acked publishes"
        others = [
            (i, e) for i, e in enumerate(errors) if not isinstance(e, liftbridge.LeaderLostError)
        ]
        assert not others, others[:3]
        lost = errors[0]
        assert isinstance(lost, liftbridge.LeaderLostError)
        assert lost.maybe_applied and not lost.retriable
        assert lost.address == node.address
        # Made now, with its leader known down, a synchronous publish is held
        # back until another broker leads the partition and is acked there:
        # sent to the dead leader, it could only wait out its 30 s ack timeout.
        started = time.monotonic()
        ack = client.publish(stream, b"after the kill")
        took = time.monotonic() - started
        assert ack is not None and took < ack_wait / 2, (ack, took)
        new_leader = client.fetch_partition_metadata(stream).leader
        assert new_leader != leader
        print(f"publish held back {took:.2f}s for the new leader {new_leader}")
