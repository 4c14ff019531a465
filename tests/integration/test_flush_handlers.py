"""``flush()`` against a real server returns once every ack handler of the
publishes it covers has been called and returned (confluent-kafka's flush
serves every delivery callback), over gRPC and NATS, also for handler-only
publishes (``future=False``): the gRPC flush used to return once their acks
were in, their handlers still queued or running."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import pytest

import liftbridge
from liftbridge.testing import LocalServer

DEADLINE = 30.0
COUNT = 300

Publisher = tuple[Callable[..., object], Callable[[float], bool]]


@pytest.fixture(params=["grpc", "nats"])
def publisher(
    request: pytest.FixtureRequest, server: LocalServer, client: liftbridge.Client
) -> Iterator[Publisher]:
    if request.param == "grpc":
        yield client.publish_async, client.flush
        return
    with liftbridge.NatsStreamPublisher(client, server.nats_url, ack_wait=DEADLINE) as nats:
        yield nats.publish_async, nats.flush


def test_flush_returns_after_every_handler_returned(publisher: Publisher, stream: str) -> None:
    publish_async, flush = publisher
    entered, release = threading.Event(), threading.Event()
    heard: list[liftbridge.Ack | None] = []

    def first(ack: liftbridge.Ack | None, error: BaseException | None) -> None:
        entered.set()
        release.wait(DEADLINE)
        heard.append(ack)

    def handler(ack: liftbridge.Ack | None, error: BaseException | None) -> None:
        assert error is None
        heard.append(ack)

    publish_async(stream, b"first", first, future=False)
    for i in range(COUNT - 1):
        publish_async(stream, b"%d" % i, handler, future=False)
    assert entered.wait(DEADLINE)  # the first ack is in; its handler holds the rest back
    try:
        assert not flush(0.5)  # the acks may all be in; their handlers are not all served
    finally:
        release.set()
    assert flush(DEADLINE)
    assert len(heard) == COUNT and all(ack is not None for ack in heard)
    assert [ack.offset for ack in heard if ack is not None] == sorted(
        ack.offset for ack in heard if ack is not None
    )
