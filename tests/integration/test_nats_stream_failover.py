"""NatsStreamPublisher across a leader's death on a real three-node cluster.

The cluster's nats-server is its own process, so the NATS connection survives
the broker's SIGKILL; the partition's new leader listens on the same subject.
What is checked: every publish returns within its ack timeout, and every
message acked before, during and after the failover is stored.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator

import pytest

import liftbridge
from liftbridge.testing import LocalCluster

pytestmark = pytest.mark.cluster


@pytest.fixture
def fresh_cluster() -> Iterator[LocalCluster]:
    """A cluster of its own: after a SIGKILL, v1.9.0's survivors can be slow to
    answer metadata for a while, which would leak into other tests."""
    with LocalCluster(3) as cluster:
        yield cluster


def _new_leader(client: liftbridge.Client, stream: str, not_on: str, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = client.fetch_metadata().partition(stream, 0)
        if info is not None and info.leader and info.leader != not_on:
            return info.leader
        time.sleep(0.2)  # polling the cluster from a test, not a stoppable loop
    raise AssertionError(f"no new leader for {stream} within {timeout:g}s")


def test_nothing_acked_is_lost_when_the_leader_dies(
    fresh_cluster: LocalCluster, unique_name: str
) -> None:
    total, timeout = 400, 2.0
    acked: set[int] = set()
    with liftbridge.Client(fresh_cluster.addresses, rpc_timeout=3, ack_wait=30) as client:
        client.create_stream(unique_name, replication_factor=3)
        leader = client.fetch_partition_metadata(unique_name).leader
        with liftbridge.NatsStreamPublisher(
            client, fresh_cluster.nats_url, ack_wait=timeout
        ) as publisher:

            def publish(value: int) -> bool:
                started = time.monotonic()
                try:
                    publisher.publish(
                        unique_name, b"%d" % value, ack_policy=liftbridge.AckPolicy.ALL
                    )
                except (liftbridge.AckTimeoutError, liftbridge.LeaderLostError):
                    return False  # failing over; it may be stored anyway (at-least-once)
                finally:
                    assert time.monotonic() - started < timeout + 5, "publish overran its bound"
                acked.add(value)
                return True

            for value in range(total // 2):
                assert publish(value)
            fresh_cluster.kill(fresh_cluster.node(leader))
            _new_leader(client, unique_name, not_on=leader)
            value = total // 2
            give_up = time.monotonic() + 120
            while value < total:
                assert time.monotonic() < give_up, f"only {len(acked)} acked after the failover"
                if publish(value):
                    value += 1

        stored: set[int] = set()
        done = threading.Event()

        def handler(message: liftbridge.Message | None, error: BaseException | None) -> None:
            if message is not None:
                stored.add(int(message.value))
                if acked <= stored:
                    done.set()

        with client.subscribe(unique_name, handler, start=liftbridge.StartPosition.EARLIEST):
            assert done.wait(60), f"{len(acked - stored)} acked messages are missing"
    assert acked == set(range(total))


def test_publishes_awaiting_a_killed_leader_fail_fast(
    fresh_cluster: LocalCluster, unique_name: str
) -> None:
    """The leader is stopped (no acks), publishes pile up, then it is killed:
    each resolves long before its 30 s ack timeout, with LeaderLostError (it
    may have been stored) or its ack; before the client watched leaders, each waited
    out the 30 s."""
    ack_timeout = 30.0
    with liftbridge.Client(fresh_cluster.addresses, rpc_timeout=3) as client:
        client.create_stream(unique_name, replication_factor=3, min_isr=2)
        leader = client.fetch_partition_metadata(unique_name).leader
        node = fresh_cluster.node(leader)
        assert node.pid is not None
        with liftbridge.NatsStreamPublisher(
            client, fresh_cluster.nats_url, ack_wait=ack_timeout
        ) as publisher:
            assert publisher.publish_async(unique_name, b"warm-up").result(timeout=ack_timeout)
            os.kill(node.pid, signal.SIGSTOP)
            try:
                futures = [
                    publisher.publish_async(
                        unique_name, b"%d" % i, ack_policy=liftbridge.AckPolicy.ALL
                    )
                    for i in range(200)
                ]
                assert publisher.flush(0.5) is False  # none can be acked
            finally:
                fresh_cluster.kill(node)  # SIGKILL ends a stopped process too
            bound = time.monotonic() + ack_timeout / 2
            errors = [f.exception(timeout=max(0.0, bound - time.monotonic())) for f in futures]
    # An ack is a right answer too (a publish that reached the leader before
    # SIGSTOP took hold); anything else must be LeaderLostError.
    failed = [e for e in errors if e is not None]
    assert failed, "the stopped leader acked every publish"
    others = [(i, e) for i, e in enumerate(failed) if not isinstance(e, liftbridge.LeaderLostError)]
    assert not others, others[:3]
