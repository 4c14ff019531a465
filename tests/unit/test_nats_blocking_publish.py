"""A blocking NatsStreamPublisher.publish waits on one lock, not on a Future
(issue 24: one-at-a-time NATS publishing no slower than before), with the
same outcomes: the Ack, or the error its publish ends with."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import pytest

import liftbridge
from liftbridge import AckPolicy
from liftbridge_api import api_pb2
from tests.unit.fake_broker import serving
from tests.unit.hostile_nats import Connection, FakeNats
from tests.unit.hostile_server import STREAM, HostileBroker

pytestmark = pytest.mark.timeout(60)

WAIT = 10.0


def _no_ack(connection: Connection, message: api_pb2.Message, subject: str) -> None:
    """A leader that never acks."""


@pytest.fixture
def publisher() -> Iterator[liftbridge.NatsStreamPublisher]:
    """A publisher of a whole client (fake broker) on a fake NATS server
    that acks every publish as a partition leader would."""
    broker = HostileBroker()  # type: ignore[abstract]  # the RPCs the SDK uses here
    nats = FakeNats({b"stall": _no_ack})
    try:
        with (
            serving(broker) as served,
            liftbridge.Client(f"127.0.0.1:{served.port}") as client,
            liftbridge.NatsStreamPublisher(client, nats.url, ack_wait=WAIT) as publisher,
        ):
            yield publisher
            broker.stop.set()
    finally:
        nats.close()


@pytest.fixture
def futures_made(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The threads on which a concurrent.futures.Future got its state made
    (its ``__init__``: the SDK's Future makes it once something waits on it)."""
    made: list[str] = []
    init = Future.__init__

    def counting(self: Future[Any]) -> None:
        made.append(threading.current_thread().name)
        init(self)

    monkeypatch.setattr(Future, "__init__", counting)
    return made


def test_a_blocking_publish_makes_no_future(
    publisher: liftbridge.NatsStreamPublisher, futures_made: list[str]
) -> None:
    for index in range(20):
        ack = publisher.publish(STREAM, b"one-%d" % index)
        assert isinstance(ack, liftbridge.Ack)
    assert publisher.publish(STREAM, b"unacked", ack_policy=AckPolicy.NONE) is None
    assert futures_made == []


def test_a_future_waited_on_is_still_a_whole_future(
    publisher: liftbridge.NatsStreamPublisher, futures_made: list[str]
) -> None:
    """publish_async is unchanged: the Future it returns becomes a whole one
    when something waits on it."""
    future = publisher.publish_async(STREAM, b"async")
    assert isinstance(future.result(WAIT), liftbridge.Ack)
    assert isinstance(future, Future)


def test_a_blocking_publish_raises_what_its_publish_ends_with(
    publisher: liftbridge.NatsStreamPublisher,
) -> None:
    with pytest.raises(liftbridge.InvalidArgumentError, match="expected_offset"):
        publisher.publish(STREAM, b"x", ack_policy=AckPolicy.NONE, expected_offset=3)
    with pytest.raises(liftbridge.AckTimeoutError, match=r"no ack within 0\.2s"):
        publisher.publish(STREAM, b"stall", timeout=0.2)
    failed: list[BaseException] = []

    def publish_unacked() -> None:
        try:
            publisher.publish(STREAM, b"stall", timeout=WAIT)
        except liftbridge.LiftbridgeError as error:
            failed.append(error)

    waiting = threading.Thread(target=publish_unacked, name="test-publish")
    waiting.start()
    while publisher.flush(0):  # until its publish is in flight
        threading.Event().wait(0.01)
    publisher.close()
    waiting.join(WAIT)
    assert [type(error) for error in failed] == [liftbridge.ClientClosedError]


def test_correlation_ids_are_the_publishers_prefix_and_a_count_in_hex(
    publisher: liftbridge.NatsStreamPublisher,
) -> None:
    # Made in C (a map over itertools.count), as the gRPC publisher's.
    first, second = (publisher.publish(STREAM, b"id") for _ in range(2))
    prefix, count = first.correlation_id.split("-")
    assert re.fullmatch("[0-9a-f]{12}", prefix) and re.fullmatch("0x[0-9a-f]+", count)
    assert second.correlation_id == f"{prefix}-{hex(int(count, 16) + 1)}"
