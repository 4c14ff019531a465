"""The router's routing and retry rules, against in-process brokers that refuse
on cue (unavailable, not the leader), which real servers cannot be made to do
per call."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack

import grpc
import pytest

import liftbridge
from liftbridge._core._admin import Admin
from liftbridge._core._retry import RetryPolicy
from liftbridge._core._router import Deadline, Leader, Router
from liftbridge_api import api_pb2
from tests.unit.fake_broker import FakeBroker, serving


class Broker(FakeBroker):
    """A broker of a two-broker cluster ("a" and "b") whose metadata makes
    ``leader`` the leader of stream "s"; CreateStream and
    FetchPartitionMetadata answer with the scripted status codes first.
    CreateStream then creates the stream in the cluster at once (ALREADY_EXISTS
    if it is there) and answers after ``cluster.create_hang`` seconds (once)."""

    def __init__(self, name: str, cluster: Cluster) -> None:
        self.name = name
        self.cluster = cluster
        self.refusals: list[grpc.StatusCode] = []
        self.served: list[str] = []
        self.metadata_hang = 0.0  # seconds this broker's FetchMetadata takes on top
        self.metadata_hangs = -1  # how many of the next FetchMetadata calls hang so; -1: all
        self._lock = threading.Lock()

    def _refuse(self, method: str, context: grpc.ServicerContext) -> None:
        with self._lock:
            self.served.append(method)
            code = self.refusals.pop(0) if self.refusals else None
        if code is not None:
            detail = "not partition leader" if code == grpc.StatusCode.FAILED_PRECONDITION else ""
            context.abort(code, detail)

    def FetchMetadata(
        self, request: api_pb2.FetchMetadataRequest, context: grpc.ServicerContext
    ) -> api_pb2.FetchMetadataResponse:
        with self._lock:
            self.served.append("FetchMetadata")
            hang = self.metadata_hang if self.metadata_hangs else 0.0
            self.metadata_hangs -= self.metadata_hangs > 0
        time.sleep(self.cluster.metadata_delay + hang)
        return self.cluster.metadata()

    def CreateStream(
        self, request: api_pb2.CreateStreamRequest, context: grpc.ServicerContext
    ) -> api_pb2.CreateStreamResponse:
        self._refuse("CreateStream", context)
        with self.cluster.lock:
            exists = request.name in self.cluster.created
            self.cluster.created.add(request.name)
            hang, self.cluster.create_hang = self.cluster.create_hang, 0.0
        if exists:
            context.abort(grpc.StatusCode.ALREADY_EXISTS, "stream already exists")
        time.sleep(hang)  # applied, answered late
        return api_pb2.CreateStreamResponse()

    def FetchPartitionMetadata(
        self, request: api_pb2.FetchPartitionMetadataRequest, context: grpc.ServicerContext
    ) -> api_pb2.FetchPartitionMetadataResponse:
        self._refuse("FetchPartitionMetadata", context)
        return api_pb2.FetchPartitionMetadataResponse(
            metadata=api_pb2.PartitionMetadata(leader=self.name, highWatermark=7)
        )


class Cluster:
    def __init__(self) -> None:
        self.brokers: dict[str, Broker] = {}
        self.leader = "a"
        self.paused = False
        self.metadata_delay = 0.0
        self.lock = threading.Lock()  # guards created and create_hang
        self.created: set[str] = set()  # streams CreateStream made
        self.create_hang = 0.0  # seconds the next CreateStream's answer takes

    def metadata(self) -> api_pb2.FetchMetadataResponse:
        partition = api_pb2.PartitionMetadata(
            id=0, leader=self.leader, replicas=["a", "b"], isr=["a", "b"], paused=self.paused
        )
        return api_pb2.FetchMetadataResponse(
            brokers=[
                api_pb2.Broker(id=name, host="127.0.0.1", port=b.port)
                for name, b in sorted(self.brokers.items())
            ],
            streamMetadata=[
                api_pb2.StreamMetadata(name="s", subject="s", partitions={0: partition})
            ],
        )


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    cluster = Cluster()
    with ExitStack() as stack:
        for name in ("a", "b"):
            broker = Broker(name, cluster)  # type: ignore[abstract]  # only these RPCs
            cluster.brokers[name] = stack.enter_context(serving(broker))
        yield cluster


def _router(cluster: Cluster, seed: str = "a", rpc_timeout: float = 2.0) -> Router:
    router = Router(
        (f"127.0.0.1:{cluster.brokers[seed].port}",),
        tls=None,
        rpc_timeout=rpc_timeout,
        retry_policy=RetryPolicy(initial_backoff=0.01, jitter=0.0),
    )
    router.connect(5.0)
    return router


def test_unavailable_moves_on_to_the_next_broker(cluster: Cluster) -> None:
    router = _router(cluster)
    try:
        cluster.brokers["a"].refusals = [grpc.StatusCode.UNAVAILABLE]
        router.call("CreateStream", api_pb2.CreateStreamRequest(name="x"), deadline=Deadline(5))
        assert cluster.brokers["a"].served.count("CreateStream") == 1
        assert cluster.brokers["b"].served.count("CreateStream") == 1
    finally:
        router.close()


def test_a_create_whose_attempt_timed_out_is_retried_and_found_applied(
    cluster: Cluster,
) -> None:
    # The first attempt is applied but answered after the attempt deadline
    # (rpc_timeout), as a loaded server did in CI; the call's own deadline
    # has time left, so the create is tried again and "already exists" then
    # means the first attempt was applied.
    router = Router(
        (f"127.0.0.1:{cluster.brokers['a'].port}",),
        tls=None,
        rpc_timeout=0.5,
        retry_policy=RetryPolicy(initial_backoff=0.01, jitter=0.0),
    )
    router.connect(5.0)
    cluster.create_hang = 2.0
    try:
        Admin(router).create_stream(api_pb2.CreateStreamRequest(name="x"), Deadline(10))
        served = [b.served.count("CreateStream") for b in cluster.brokers.values()]
        assert sum(served) >= 2  # the late-answered attempt and a retry
        with pytest.raises(liftbridge.StreamExistsError):  # not retried: refused at once
            Admin(router).create_stream(api_pb2.CreateStreamRequest(name="x"), Deadline(10))
    finally:
        router.close()


def test_without_retry_one_attempt_only(cluster: Cluster) -> None:
    router = _router(cluster)
    try:
        cluster.brokers["a"].refusals = [grpc.StatusCode.UNAVAILABLE]
        with pytest.raises(liftbridge.UnavailableError):
            router.call(
                "CreateStream",
                api_pb2.CreateStreamRequest(name="x"),
                deadline=Deadline(5),
                retry=False,
            )
        assert cluster.brokers["b"].served.count("CreateStream") == 0
    finally:
        router.close()


def test_a_moved_leader_is_found_through_fresh_metadata(cluster: Cluster) -> None:
    router = _router(cluster)
    try:
        cluster.leader = "b"  # moved after the router cached "a"
        cluster.brokers["a"].refusals = [grpc.StatusCode.FAILED_PRECONDITION]
        response = router.call(
            "FetchPartitionMetadata",
            api_pb2.FetchPartitionMetadataRequest(stream="s", partition=0),
            target=Leader("s", 0),
            deadline=Deadline(5),
            idempotent=True,
        )
        assert response.metadata.leader == "b"
        assert router.metadata.partition("s", 0).leader == "b"  # type: ignore[union-attr]
    finally:
        router.close()


def test_not_leader_of_a_paused_partition_is_not_retried(cluster: Cluster) -> None:
    cluster.paused = True
    router = _router(cluster)
    try:
        cluster.brokers["a"].refusals = [grpc.StatusCode.FAILED_PRECONDITION] * 3
        with pytest.raises(liftbridge.NotLeaderError):
            router.call(
                "FetchPartitionMetadata",
                api_pb2.FetchPartitionMetadataRequest(stream="s", partition=0),
                target=Leader("s", 0),
                deadline=Deadline(5),
                idempotent=True,
            )
        assert cluster.brokers["a"].served.count("FetchPartitionMetadata") == 1
    finally:
        router.close()


def test_concurrent_refreshes_share_one_fetch(cluster: Cluster) -> None:
    router = _router(cluster)
    cluster.metadata_delay = 0.3  # long enough for the eight to overlap
    try:
        before = sum(b.served.count("FetchMetadata") for b in cluster.brokers.values())
        threads = [threading.Thread(target=router.refresh) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        after = sum(b.served.count("FetchMetadata") for b in cluster.brokers.values())
        assert 1 <= after - before < 8  # waiters took the refresh under way
    finally:
        router.close()


def test_a_refresh_asks_brokers_known_down_last(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    router = _router(cluster)  # its rotation starts at "a"
    down = f"127.0.0.1:{cluster.brokers['a'].port}"
    # The watch's verdict, scripted: a real "down" needs a refused connection,
    # and a refused broker would not show which broker was asked first.
    monkeypatch.setattr(router._watch, "is_down", lambda address: address == down)
    try:
        asked_a = cluster.brokers["a"].served.count("FetchMetadata")
        asked_b = cluster.brokers["b"].served.count("FetchMetadata")
        router.refresh(Deadline(5), shared=False)
        assert cluster.brokers["a"].served.count("FetchMetadata") == asked_a
        assert cluster.brokers["b"].served.count("FetchMetadata") == asked_b + 1
    finally:
        router.close()


def test_a_hung_broker_leaves_the_refresh_time_for_the_next(cluster: Cluster) -> None:
    # Its rotation starts at "a"; an attempt's own cap (rpc_timeout) is no limit here.
    router = _router(cluster, rpc_timeout=30.0)
    cluster.brokers["a"].metadata_hang = 9.0  # longer than the refresh's whole deadline
    try:
        asked_b = cluster.brokers["b"].served.count("FetchMetadata")
        # "a" gets 4 s of it, "b" the rest: seconds for a loaded machine's connect.
        router.refresh(Deadline(8.0), shared=False)
        assert cluster.brokers["b"].served.count("FetchMetadata") == asked_b + 1
    finally:
        cluster.brokers["a"].metadata_hang = 0.0
        router.close()


def test_fetch_metadata_asks_again_while_its_deadline_lasts(cluster: Cluster) -> None:
    # During a failover a live v1.9.0 broker answers FetchMetadata only at the
    # request's deadline (its survey waits for the dead peer), and at once the
    # next time. fetch_metadata raised after one pass over the brokers, each
    # timing out, with most of its deadline left (seen failing a failover test).
    router = _router(cluster, rpc_timeout=0.5)
    asked = sum(b.served.count("FetchMetadata") for b in cluster.brokers.values())
    for broker in cluster.brokers.values():
        broker.metadata_hang, broker.metadata_hangs = 5.0, 1
    try:
        metadata = Admin(router).fetch_metadata(Deadline(20))
        assert {b.id for b in metadata.brokers} == {"a", "b"}
        assert sum(b.served.count("FetchMetadata") for b in cluster.brokers.values()) == asked + 3
    finally:
        for broker in cluster.brokers.values():
            broker.metadata_hang, broker.metadata_hangs = 0.0, -1
        router.close()


def test_a_closed_router_refuses_calls(cluster: Cluster) -> None:
    router = _router(cluster)
    router.close()
    with pytest.raises(liftbridge.ClientClosedError):
        router.call("CreateStream", api_pb2.CreateStreamRequest(name="x"), deadline=Deadline(1))
    assert router.closed and not router.retrying


def test_leader_address_follows_each_metadata_refresh(cluster: Cluster) -> None:
    """The leader's address is remembered per metadata snapshot: a refresh
    that moves the leader is seen by the next publish's look-up."""
    router = _router(cluster)
    try:
        a, b = (f"127.0.0.1:{cluster.brokers[name].port}" for name in ("a", "b"))
        assert router.leader_address("s", 0) == a
        assert router.leader_address("s", 0) == a  # the snapshot's answer, again
        assert router.leader_address("s", 1) is None  # no such partition
        assert router.leader_address("t", 0) is None  # no such stream
        cluster.leader = "b"
        router.refresh(Deadline(5))
        assert router.leader_address("s", 0) == b
        cluster.leader = ""  # an election under way: no leader
        router.refresh(Deadline(5))
        assert router.leader_address("s", 0) is None
    finally:
        router.close()
