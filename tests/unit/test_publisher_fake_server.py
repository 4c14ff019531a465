"""The PublishAsync stream breaking at an exact moment, scripted on an
in-process fake server (the real one cannot be made to do this on cue).

What must hold: publishes already sent on the broken stream fail promptly with
ConnectionLostError (not at their ack timeout); the stream is re-established;
later publishes succeed on the new stream.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import grpc
import pytest

import liftbridge
from liftbridge_api import api_pb2
from tests.unit.fake_broker import FakeBroker, serving


class ScriptedBroker(FakeBroker):
    """Answers metadata; the first PublishAsync stream takes `swallow` requests
    without acking them, then aborts with UNAVAILABLE. Later streams ack all."""

    def __init__(self, swallow: int) -> None:
        self.swallow = swallow
        self.streams = 0
        self.lock = threading.Lock()

    def PublishAsync(
        self, request_iterator: Iterator[api_pb2.PublishRequest], context: grpc.ServicerContext
    ) -> Iterator[api_pb2.PublishResponse]:
        with self.lock:
            self.streams += 1
            first = self.streams == 1
        seen = 0
        for request in request_iterator:
            seen += 1
            if first:
                if seen == self.swallow:
                    context.abort(grpc.StatusCode.UNAVAILABLE, "scripted broker failure")
                continue
            yield api_pb2.PublishResponse(
                correlationId=request.correlationId,
                ack=api_pb2.Ack(
                    stream=request.stream, offset=seen - 1, correlationId=request.correlationId
                ),
            )


@pytest.fixture
def broker() -> Iterator[ScriptedBroker]:
    servicer = ScriptedBroker(swallow=3)  # type: ignore[abstract]  # only two RPCs needed
    with serving(servicer) as served:
        yield served


def test_sent_publishes_fail_promptly_when_the_stream_breaks(broker: ScriptedBroker) -> None:
    with liftbridge.Client(f"127.0.0.1:{broker.port}", ack_wait=300.0) as client:
        # ack_wait far beyond the test: an outcome within 10 s can only come
        # from the break itself, not from the ack timeout.
        doomed = [client.publish_async("s", b"%d" % i) for i in range(3)]
        errors = [f.exception(timeout=10) for f in doomed]
        assert all(isinstance(e, liftbridge.ConnectionLostError) for e in errors), errors
        # Sent, then lost: maybe stored, so not safe to send again blindly.
        assert all(
            e.maybe_applied and not e.retriable
            for e in errors
            if isinstance(e, liftbridge.LiftbridgeError)
        )
        assert "may or may not have been stored" in str(errors[0])
        # The next publish goes out on a re-established stream.
        ack = client.publish("s", b"after", correlation_id="after")
        assert ack is not None and ack.correlation_id == "after"
        assert broker.streams == 2


def test_handler_learns_of_the_break_too(broker: ScriptedBroker) -> None:
    seen: list[BaseException | None] = []
    done = threading.Event()

    def on_ack(ack: liftbridge.Ack | None, error: BaseException | None) -> None:
        seen.append(error)
        if len(seen) == 3:
            done.set()

    with liftbridge.Client(f"127.0.0.1:{broker.port}", ack_wait=30.0) as client:
        for i in range(3):
            client.publish_async("s", b"%d" % i, on_ack)
        assert done.wait(10)
    assert all(isinstance(e, liftbridge.ConnectionLostError) for e in seen)
