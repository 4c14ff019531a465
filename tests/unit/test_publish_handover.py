"""A producer publishing back to back hands the PublishAsync stream's sender
the GIL every ``HAND_OVER`` publishes (``liftbridge._transport._handover``):
it never has more than that queued for a busy sender, and its wait ends when
the sender pulls, when the publisher closes, and after ``WAIT`` at most."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator

import pytest

from liftbridge import ClientClosedError
from liftbridge._publish._request_bytes import Request
from liftbridge._transport import _handover
from liftbridge._transport._handover import HAND_OVER
from tests.unit.test_publisher_unit import FakeServer, _close_client_threads, make, request

__all__ = ["_close_client_threads"]  # the autouse fixture closing the client's threads


@pytest.fixture
def _no_switch() -> Iterator[None]:
    """Threads switch only when one blocks: a producer back to back keeps the GIL."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1000.0)
    try:
        yield
    finally:
        sys.setswitchinterval(interval)


@pytest.mark.usefixtures("_no_switch")
def test_a_producer_back_to_back_never_queues_more_than_a_hand_over_for_the_sender(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_handover, "WAIT", 60.0)  # never runs out here: the sender pulls
    server = FakeServer()
    p = make(server, max_inflight=8192)
    queued: list[int] = []  # requests queued each time the sender pulls
    pull = p._next_requests

    def counting(generation: int, *, block: bool) -> list[Request]:
        queued.append(p._outbox._queue.qsize())
        return pull(generation, block=block)

    monkeypatch.setattr(p, "_next_requests", counting)
    count = 20 * HAND_OVER
    futures = [p.submit(request(i), None, None) for i in range(count)]
    assert p.flush(10)
    p.close(time.monotonic() + 5)
    acks = [future.result() for future in futures]
    assert [ack.correlation_id for ack in acks if ack is not None] == [
        f"c{i}" for i in range(count)
    ]
    assert max(queued) <= HAND_OVER  # before: the whole 5,120 at once


def test_close_lets_a_producer_waiting_for_a_held_up_sender_go(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_handover, "WAIT", 3600.0)
    server = FakeServer()
    held = threading.Event()
    server.gates["c0"] = held  # the sender is held up with c0 in hand
    server.direct = False
    p = make(server)
    outcome: list[BaseException] = []

    def produce() -> None:
        try:
            for i in range(2 * HAND_OVER):
                p.submit(request(i), None, None)
        except ClientClosedError as e:
            outcome.append(e)

    producer = threading.Thread(target=produce, name="producer", daemon=True)
    producer.start()
    while not p._sender_takes.waiting:
        producer.join(0.01)
    assert producer.is_alive()  # waits for the sender, which does not pull
    p.close(time.monotonic() + 5)
    producer.join(5)
    held.set()
    assert not producer.is_alive()
    assert len(outcome) == 1  # its next publish found the publisher closed
