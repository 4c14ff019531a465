"""One deadline per call: ``timeout=`` bounds the whole call, retries and
metadata refreshes included, against a broker that stops answering (an
in-process fake: a real server cannot be made to hang on cue per RPC)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import grpc
import pytest

import liftbridge
from liftbridge_api import api_pb2
from tests.unit.fake_broker import FakeBroker, one_partition_stream, serving


class HangingBroker(FakeBroker):
    """Answers metadata (naming itself leader of stream "s") until ``hang``
    is set; from then on every call waits without answering."""

    def __init__(self) -> None:
        self.hang = threading.Event()
        self.release = threading.Event()

    def _stall(self, context: grpc.ServicerContext) -> None:
        while context.is_active() and not self.release.wait(0.05):
            pass

    def FetchMetadata(
        self, request: api_pb2.FetchMetadataRequest, context: grpc.ServicerContext
    ) -> api_pb2.FetchMetadataResponse:
        if self.hang.is_set():
            self._stall(context)
        response = super().FetchMetadata(request, context)
        response.streamMetadata.append(one_partition_stream())
        return response

    def FetchPartitionMetadata(
        self, request: api_pb2.FetchPartitionMetadataRequest, context: grpc.ServicerContext
    ) -> api_pb2.FetchPartitionMetadataResponse:
        self._stall(context)
        return api_pb2.FetchPartitionMetadataResponse()

    def FetchCursor(
        self, request: api_pb2.FetchCursorRequest, context: grpc.ServicerContext
    ) -> api_pb2.FetchCursorResponse:
        self._stall(context)
        return api_pb2.FetchCursorResponse()


@pytest.fixture
def broker() -> Iterator[HangingBroker]:
    hanging = HangingBroker()  # type: ignore[abstract]  # only the RPCs the tests use
    with serving(hanging) as served:
        yield served
        served.release.set()


@pytest.mark.parametrize("timeout", [0.5, 1.5])
def test_a_leader_call_ends_at_its_deadline(broker: HangingBroker, timeout: float) -> None:
    """Each attempt may take rpc_timeout (10 s) and the policy allows 20 s,
    but the call's own timeout bounds it all, refreshes included."""
    policy = liftbridge.RetryPolicy(total_timeout=20.0)
    with liftbridge.Client(
        f"127.0.0.1:{broker.port}", rpc_timeout=10.0, retry_policy=policy
    ) as client:
        broker.hang.set()
        started = time.monotonic()
        with pytest.raises(liftbridge.DeadlineExceededError):
            client.fetch_partition_metadata("s", timeout=timeout)
        took = time.monotonic() - started
        broker.release.set()
    # It was 6.2 s for timeout=1 before; unbounded by it, a call here takes
    # 10 s or more. 3 s of room for a loaded CI machine.
    assert took < timeout + 3.0


def test_without_a_timeout_the_policy_total_bounds_the_call(broker: HangingBroker) -> None:
    policy = liftbridge.RetryPolicy(total_timeout=1.0)
    with liftbridge.Client(
        f"127.0.0.1:{broker.port}", rpc_timeout=10.0, retry_policy=policy
    ) as client:
        broker.hang.set()
        started = time.monotonic()
        with pytest.raises(liftbridge.DeadlineExceededError):
            client.fetch_cursor("c", "s", 0)
        took = time.monotonic() - started
        broker.release.set()
    # One policy total (1 s), not one rpc_timeout (10 s) per attempt; 3 s of
    # room for a loaded CI machine.
    assert took < 4.0


class FirstCallStalls(FakeBroker):
    """Its first FetchMetadata never answers (a survivor of a node loss whose
    metadata request waits on the dead node); later ones answer."""

    def __init__(self) -> None:
        self.calls = 0

    def FetchMetadata(
        self, request: api_pb2.FetchMetadataRequest, context: grpc.ServicerContext
    ) -> api_pb2.FetchMetadataResponse:
        self.calls += 1
        if self.calls == 1:
            while context.is_active():
                time.sleep(0.05)
        return super().FetchMetadata(request, context)


def test_connect_tries_the_seeds_again_within_connect_timeout() -> None:
    with serving(FirstCallStalls()) as stalls:  # type: ignore[abstract]
        seeds = ["127.0.0.1:1", f"127.0.0.1:{stalls.port}"]  # nothing listens on port 1
        with liftbridge.Client(seeds, connect_timeout=5) as client:
            assert client.metadata.brokers[0].port == stalls.port
        assert stalls.calls == 2


def test_connect_gives_up_at_connect_timeout() -> None:
    with pytest.raises(liftbridge.UnavailableError, match=r"within 0\.5s"):
        liftbridge.Client(["127.0.0.1:1"], connect_timeout=0.5)
