"""``Client.publish`` on its thread's own stream (a lane), against an
in-process fake server that can stay silent, break or end a stream on cue,
which the real server cannot be made to do.

What must hold: the ack or the server's refusal comes back typed; a missing
ack fails at the publish's timeout; a broken stream fails what was sent on it
and the next publish opens a new one; a stream found ended before sending is
replaced without losing the message; closing the client releases a waiting
publish; a thread's lane ends with its thread; past the lane limit,
publishes use the shared stream.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Iterator

import grpc
import pytest

import liftbridge
from liftbridge import _client
from liftbridge_api import api_pb2
from tests.unit.fake_broker import FakeBroker, one_partition_stream, serving


class ScriptedBroker(FakeBroker):
    """Acks every request, except by value: ``silent`` gets no answer,
    ``break`` aborts the stream, ``end`` is acked and then ends the stream,
    ``refuse`` gets an async NOT_FOUND error."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.streams = 0  # PublishAsync streams opened so far
        self.open = 0  # of which still open
        self.values: list[bytes] = []

    def PublishAsync(
        self, request_iterator: Iterator[api_pb2.PublishRequest], context: grpc.ServicerContext
    ) -> Iterator[api_pb2.PublishResponse]:
        with self.lock:
            self.streams += 1
            self.open += 1
        try:
            for request in request_iterator:
                with self.lock:
                    self.values.append(request.value)
                    offset = len(self.values) - 1
                if request.value == b"silent":
                    continue
                if request.value == b"break":
                    context.abort(grpc.StatusCode.UNAVAILABLE, "scripted broker failure")
                if request.value == b"refuse":
                    yield api_pb2.PublishResponse(
                        correlationId=request.correlationId,
                        asyncError=api_pb2.PublishAsyncError(
                            code=api_pb2.PublishAsyncError.NOT_FOUND, message="no such partition"
                        ),
                    )
                    continue
                yield api_pb2.PublishResponse(
                    correlationId=request.correlationId,
                    ack=api_pb2.Ack(
                        stream=request.stream,
                        offset=offset,
                        correlationId=request.correlationId,
                        ackPolicy=request.ackPolicy,
                    ),
                )
                if request.value == b"end":
                    return
        finally:
            with self.lock:
                self.open -= 1


@pytest.fixture
def broker() -> Iterator[ScriptedBroker]:
    servicer = ScriptedBroker()  # type: ignore[abstract]  # only two RPCs needed
    with serving(servicer) as served:
        yield served


def _until(condition: object, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return True
        time.sleep(0.02)
    return False


def test_publishes_from_one_thread_share_its_lane(broker: ScriptedBroker) -> None:
    with liftbridge.Client(f"127.0.0.1:{broker.port}") as client:
        acks = [client.publish("s", b"%d" % i) for i in range(5)]
        assert [a.offset for a in acks if a is not None] == [0, 1, 2, 3, 4]
        assert broker.streams == 1


def test_a_refusal_is_typed_and_the_lane_stays_open(broker: ScriptedBroker) -> None:
    with liftbridge.Client(f"127.0.0.1:{broker.port}") as client:
        with pytest.raises(liftbridge.NoSuchPartitionError):
            client.publish("s", b"refuse")
        assert client.publish("s", b"ok") is not None
        assert broker.streams == 1


def test_a_missing_ack_fails_at_the_timeout_and_a_new_lane_follows(
    broker: ScriptedBroker,
) -> None:
    with liftbridge.Client(f"127.0.0.1:{broker.port}", ack_wait=300.0) as client:
        started = time.monotonic()
        with pytest.raises(liftbridge.AckTimeoutError, match="may or may not have been stored"):
            client.publish("s", b"silent", timeout=0.3)
        assert time.monotonic() - started < 10  # the timeout, not ack_wait
        ack = client.publish("s", b"after")
        assert ack is not None and ack.offset == 1
        assert broker.streams == 2


def test_the_default_timeout_is_ack_wait(broker: ScriptedBroker) -> None:
    with (
        liftbridge.Client(f"127.0.0.1:{broker.port}", ack_wait=0.5) as client,
        pytest.raises(liftbridge.AckTimeoutError),
    ):
        client.publish("s", b"silent")


def test_a_broken_stream_fails_the_publish_sent_on_it(broker: ScriptedBroker) -> None:
    with liftbridge.Client(f"127.0.0.1:{broker.port}", ack_wait=300.0) as client:
        with pytest.raises(liftbridge.ConnectionLostError, match="may or may not"):
            client.publish("s", b"break")
        assert client.publish("s", b"after") is not None
        assert broker.streams == 2


def test_a_stream_found_ended_is_replaced_before_sending(broker: ScriptedBroker) -> None:
    with liftbridge.Client(f"127.0.0.1:{broker.port}") as client:
        assert client.publish("s", b"end") is not None
        assert _until(lambda: broker.open == 0)
        # The client has seen the stream's end (a fixed pause stood in for
        # this; a busy machine's reading thread can be later than any pause).
        lane = client._lanes._local.lane
        assert _until(lambda: not lane.usable())
        ack = client.publish("s", b"next")  # no error: it was never sent on the ended stream
        assert ack is not None and ack.offset == 1
        assert broker.values == [b"end", b"next"]


def test_closing_the_client_releases_a_waiting_publish(broker: ScriptedBroker) -> None:
    client = liftbridge.Client(f"127.0.0.1:{broker.port}", ack_wait=300.0)
    outcome: list[BaseException] = []

    def publish() -> None:
        try:
            client.publish("s", b"silent")
        except liftbridge.LiftbridgeError as e:
            outcome.append(e)

    thread = threading.Thread(target=publish)
    thread.start()
    assert _until(lambda: broker.values == [b"silent"])
    client.close()
    thread.join(10)
    assert not thread.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], liftbridge.ClientClosedError)


def test_a_lane_ends_with_its_thread(broker: ScriptedBroker) -> None:
    with liftbridge.Client(f"127.0.0.1:{broker.port}") as client:
        thread = threading.Thread(target=client.publish, args=("s", b"from a thread"))
        thread.start()
        thread.join(10)
        gc.collect()
        assert broker.streams == 1
        assert _until(lambda: broker.open == 0), "the thread's stream outlived it"


def test_threads_past_the_lane_limit_use_the_shared_stream(
    broker: ScriptedBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_client, "_MAX_LANES", 1)
    with liftbridge.Client(f"127.0.0.1:{broker.port}") as client:
        assert client.publish("s", b"main") is not None  # takes the only lane
        results: list[object] = []
        thread = threading.Thread(target=lambda: results.append(client.publish("s", b"other")))
        thread.start()
        thread.join(10)
        assert len(results) == 1 and isinstance(results[0], liftbridge.Ack)
        assert broker.streams == 2  # the lane and the shared stream


def test_ack_policy_none_uses_the_shared_stream(broker: ScriptedBroker) -> None:
    with liftbridge.Client(f"127.0.0.1:{broker.port}") as client:
        assert client.publish("s", b"x", ack_policy=liftbridge.AckPolicy.NONE) is None
        assert _until(lambda: broker.values == [b"x"])
        assert client.publish("s", b"y") is not None
        assert broker.streams == 2


class LaggingBroker(ScriptedBroker):
    """Lists stream "s" in its metadata but refuses the first publish of
    ``lagging`` as an unknown partition, as a broker does for a moment after
    another created the stream; ``gone`` is refused every time."""

    def FetchMetadata(
        self, request: api_pb2.FetchMetadataRequest, context: grpc.ServicerContext
    ) -> api_pb2.FetchMetadataResponse:
        response = super().FetchMetadata(request, context)
        response.streamMetadata.append(one_partition_stream())
        return response

    def PublishAsync(
        self, request_iterator: Iterator[api_pb2.PublishRequest], context: grpc.ServicerContext
    ) -> Iterator[api_pb2.PublishResponse]:
        lagged = False

        def requests() -> Iterator[api_pb2.PublishRequest]:
            nonlocal lagged
            for request in request_iterator:
                if (request.value == b"lagging" and not lagged) or request.stream == "gone":
                    lagged = True
                    request = api_pb2.PublishRequest(
                        stream=request.stream, value=b"refuse", correlationId=request.correlationId
                    )
                yield request

        return super().PublishAsync(requests(), context)


def test_a_refusal_for_a_listed_partition_is_sent_again() -> None:
    servicer = LaggingBroker()  # type: ignore[abstract]  # only three RPCs needed
    with serving(servicer) as broker, liftbridge.Client(f"127.0.0.1:{broker.port}") as client:
        ack = client.publish("s", b"lagging")
        assert ack is not None and ack.offset == 1  # offset 0 went to the refused copy
        assert broker.values == [b"refuse", b"lagging"]
        # A stream the metadata does not list is refused once, not sent again.
        with pytest.raises(liftbridge.NoSuchPartitionError):
            client.publish("gone", b"v", timeout=5)
        assert broker.values[2:] == [b"refuse"]
