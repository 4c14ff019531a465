"""Pull consumer and direct reads on a real three-node cluster: reads served by
followers, a frozen follower detected as a stall and recovered, and leader
failover with no gap or duplicate. The tests share one cluster; the one that
kills a node runs last."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from typing import TypeVar

import pytest

import liftbridge
from liftbridge.testing import LocalCluster

pytestmark = pytest.mark.cluster

EARLIEST = liftbridge.StartPosition.EARLIEST
T = TypeVar("T")


def _address_of(client: liftbridge.Client, broker_id: str) -> str:
    broker = client.metadata.broker(broker_id)
    assert broker is not None
    return broker.address


def _eventually(what: str, attempt: Callable[[], T], timeout: float = 60) -> T:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return attempt()
        except liftbridge.LiftbridgeError as e:
            if time.monotonic() > deadline:
                pytest.fail(f"{what} did not succeed within {timeout:g}s; last error: {e!r}")
            time.sleep(0.2)


def _replicated_stream(client: liftbridge.Client, name: str, count: int) -> str:
    """A stream on all three nodes holding ``count`` messages; returns the leader id."""
    client.create_stream(name, replication_factor=3)
    for i in range(count):
        client.publish(name, b"%d" % i, ack_policy=liftbridge.AckPolicy.ALL)
    return client.fetch_partition_metadata(name).leader


def test_reads_are_served_by_followers_with_read_replica(
    cluster: LocalCluster, unique_name: str
) -> None:
    with liftbridge.Client(cluster.addresses, rpc_timeout=5) as client:
        leader = _replicated_stream(client, unique_name, 20)
        leader_address = _address_of(client, leader)
        brokers: set[str | None] = set()
        for _ in range(30):  # each read picks one of three in-sync replicas at random
            batch = client.get_batch(unique_name, 0, max_messages=20, read_replica=True)
            assert [m.value for m in batch.messages] == [b"%d" % i for i in range(20)]
            brokers.add(batch.broker)
        assert brokers - {leader_address}, "no read was served by a follower"
        assert client.get_batch(unique_name, 5, max_messages=1).broker == leader_address
        assert client.get(unique_name, 7, read_replica=True).value == b"7"
        with client.pull(unique_name, start=EARLIEST) as consumer:
            assert consumer.brokers() == {0: leader_address}


def test_a_frozen_follower_is_detected_as_a_stall_and_recovered(
    cluster: LocalCluster, unique_name: str
) -> None:
    total = 20
    with liftbridge.Client(cluster.addresses, rpc_timeout=3, ack_wait=30) as client:
        leader = _replicated_stream(client, unique_name, 0)
        stalls: list[liftbridge.Stall] = []
        stalled = threading.Event()

        def on_stall(stall: liftbridge.Stall) -> None:
            stalls.append(stall)
            stalled.set()

        # Publishes go to the first broker in the client's list ("a"), so the
        # follower to freeze must be another one.
        frozen_id = None
        consumer = None
        for _ in range(40):
            candidate = client.pull(
                unique_name, read_replica=True, stall_timeout=1.0, on_stall=on_stall
            )
            address = candidate.brokers()[0]
            node = cluster.node_for_address(address) if address else None
            if node is not None and node.server_id not in (leader, "a"):
                consumer, frozen_id = candidate, node.server_id
                break
            candidate.close()
        assert consumer is not None and frozen_id is not None, "no suitable follower was picked"
        pid = cluster.node(frozen_id).pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        try:
            with consumer:
                for i in range(total):
                    client.publish(unique_name, b"%d" % i)
                got: list[liftbridge.Message] = []
                deadline = time.monotonic() + 60
                while len(got) < total and time.monotonic() < deadline:
                    got.extend(consumer.fetch(total - len(got), timeout=1))
                assert [m.value for m in got] == [b"%d" % i for i in range(total)]
                assert [m.offset for m in got] == list(range(total))
                assert stalled.wait(10), "no stall was reported"
                assert stalls[0].partition == 0 and stalls[0].high_watermark >= 0
                assert stalls[0].error is None and stalls[0].resumed_from == 0
                assert consumer.brokers()[0] != _address_of(client, frozen_id)
        finally:
            os.kill(pid, signal.SIGCONT)
    cluster.wait_ready()


def test_a_frozen_leader_is_a_stall_and_the_consumer_fails_over(
    cluster: LocalCluster, unique_name: str
) -> None:
    # The leader is SIGSTOPped: its TCP connections stay open and answer
    # nothing. The watcher's look at the leader gets no answer either, which
    # counts as a stall: the partition is resubscribed from the new leader.
    first, total = 30, 90
    with liftbridge.Client(cluster.addresses, rpc_timeout=3, ack_wait=30) as client:
        leader = _replicated_stream(client, unique_name, first)
        stalls: list[liftbridge.Stall] = []
        stalled = threading.Event()

        def on_stall(stall: liftbridge.Stall) -> None:
            stalls.append(stall)
            stalled.set()

        consumer = client.pull(unique_name, start=EARLIEST, stall_timeout=2, on_stall=on_stall)
        # The stall is expected at the newest offset the leader holds when it
        # freezes. That can be past first - 1: in one CI run the stall came
        # at offset 30, before any publish reached the new leader.
        newest = client.fetch_partition_metadata(unique_name).newest_offset
        assert newest >= first - 1
        got: list[liftbridge.Message] = []
        while consumer.position()[0] != newest:
            batch = consumer.fetch(newest + 1 - len(got), timeout=10)
            assert batch, "the first messages did not arrive"
            got.extend(batch)
        frozen_address = _address_of(client, leader)
        pid = cluster.node(leader).pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        try:
            with consumer:
                for i in range(first, total):

                    def publish_one(value: int = i) -> liftbridge.Ack | None:
                        return client.publish(
                            unique_name,
                            b"%d" % value,
                            ack_policy=liftbridge.AckPolicy.ALL,
                            timeout=5,
                        )

                    _eventually("publish", publish_one)
                deadline = time.monotonic() + 60
                while {m.value for m in got} < {b"%d" % i for i in range(total)}:
                    assert time.monotonic() < deadline, f"got {len(got)} of {total}"
                    got.extend(consumer.fetch(total, timeout=1))
                # Gapless, no duplicate (a publish retried after an ambiguous
                # failure may be stored twice, at two offsets).
                assert [m.offset for m in got] == list(range(len(got)))
                assert stalled.is_set(), "on_stall was not called"
                assert stalls[0].partition == 0 and stalls[0].last_offset == newest
                assert consumer.brokers()[0] != frozen_address
        finally:
            os.kill(pid, signal.SIGCONT)
    cluster.wait_ready()


def test_pull_and_get_across_a_leader_kill(cluster: LocalCluster, unique_name: str) -> None:
    """Runs last: it kills a node (restarted at the end)."""
    total = 300
    with liftbridge.Client(
        cluster.addresses, resubscribe_wait=60, ack_wait=30, rpc_timeout=3
    ) as client:
        leader = _replicated_stream(client, unique_name, 0)
        # A one-replica stream on the node about to die: direct reads of it
        # must fail with a typed error within their deadline.
        lonely = None
        for attempt in range(20):
            name = f"{unique_name}-single{attempt}"
            client.create_stream(name, replication_factor=1)
            client.publish(name, b"x")
            if client.fetch_partition_metadata(name).leader == leader:
                lonely = name
                break
        assert lonely is not None, "no one-replica stream landed on the leader"
        consumer = client.pull(unique_name, start=EARLIEST, max_buffered_messages=50)
        got: list[liftbridge.Message] = []
        published = 0
        while published < total // 2:
            client.publish(unique_name, b"%d" % published, ack_policy=liftbridge.AckPolicy.ALL)
            published += 1
        got.extend(consumer.fetch(40, timeout=10))
        cluster.kill(cluster.node(leader))
        try:
            with pytest.raises(
                (
                    liftbridge.NotLeaderError,
                    liftbridge.UnavailableError,
                    liftbridge.DeadlineExceededError,
                )
            ):
                client.get(lonely, 0, timeout=3)
            while published < total:

                def publish_one(value: int = published) -> liftbridge.Ack | None:
                    return client.publish(
                        unique_name, b"%d" % value, ack_policy=liftbridge.AckPolicy.ALL
                    )

                _eventually("publish", publish_one)
                published += 1
            deadline = time.monotonic() + 60
            while {m.value for m in got} != {b"%d" % i for i in range(total)}:
                assert time.monotonic() < deadline, f"got {len(got)} of {total}"
                got.extend(consumer.fetch(100, timeout=1))
            consumer.close()
            # No gap and no duplicate in offsets (a publish retried after an
            # ambiguous failure may be stored twice, at two offsets).
            assert [m.offset for m in got] == list(range(len(got)))
            page = client.get_batch(unique_name, 100, max_messages=10)
            assert [m.offset for m in page.messages] == list(range(100, 110))
        finally:
            cluster.restart(cluster.node(leader))
