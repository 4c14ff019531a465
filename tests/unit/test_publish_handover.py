"""A producer publishing back to back hands the PublishAsync stream's sender
the GIL every quarter of the window, ``HAND_OVER`` at most, from a window of
256 up, every half of it from 32 up (``liftbridge._handover``,
``_sending.sender_step``): it
never has more than that queued for a busy sender (``publish_many_async``
batches too from 256 up, a step cut out of them), and its wait ends when
the sender pulls, when the publisher closes, and after ``WAIT`` at most."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future

import pytest

from liftbridge import ClientClosedError, _handover
from liftbridge._handover import HAND_OVER
from liftbridge._publish._batch import Batch
from liftbridge._publish._pending import Pending
from liftbridge._publish._request_bytes import Request
from liftbridge._publish._sending import Unsent, sender_step
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
@pytest.mark.parametrize(("max_inflight", "step"), [(8192, HAND_OVER), (256, 64)])
def test_a_producer_back_to_back_never_queues_more_than_a_step_for_the_sender(
    monkeypatch: pytest.MonkeyPatch, max_inflight: int, step: int
) -> None:
    monkeypatch.setattr(_handover, "WAIT", 60.0)  # never runs out here: the sender pulls
    server = FakeServer()
    p = make(server, max_inflight=max_inflight)
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
    # Before: the whole 5,120 at once (8192); before the quarter step, the
    # window's 256 (the producer kept the GIL until the window was full).
    assert max(queued) <= step


class _CountingOutbox(Unsent):
    """The outbox, counting the requests producers queue (a batch's part: each of its)."""

    def __init__(self) -> None:
        super().__init__()
        self.queued = 0

    def put(self, item: Pending | list[Pending] | None) -> None:
        if isinstance(item, list):
            self.queued += len(item)
        elif item is not None:
            self.queued += 1
        super().put(item)


@pytest.mark.usefixtures("_no_switch")
@pytest.mark.parametrize(("max_inflight", "most"), [(256, 128), (32, 32)])
def test_a_producer_of_batches_back_to_back_hands_the_sender_a_step_at_a_time(
    monkeypatch: pytest.MonkeyPatch, max_inflight: int, most: int
) -> None:
    monkeypatch.setattr(_handover, "WAIT", 60.0)  # never runs out here: the sender pulls
    p = make(FakeServer(), max_inflight=max_inflight)
    outbox = p._outbox = _CountingOutbox()
    between: list[int] = []  # requests queued since the sender's last pull, at each pull
    last = 0
    pull = p._next_requests

    def counting(generation: int, *, block: bool) -> list[Request]:
        nonlocal last
        between.append(outbox.queued - last)
        last = outbox.queued
        return pull(generation, block=block)

    monkeypatch.setattr(p, "_next_requests", counting)
    batches = [Batch(Future(), 100) for _ in range(20)]
    for b, batch in enumerate(batches):
        requests: list[Request] = [request(b * 100 + i) for i in range(100)]
        p.submit_many(requests, batch, None, one_partition=True)
    assert p.flush(10)
    p.close(time.monotonic() + 5)
    acks = [ack for batch in batches for ack in batch.future.result()]
    assert [ack.correlation_id for ack in acks] == [f"c{i}" for i in range(2000)]
    # From 256: a step (64) for the idle sender (its part wakes it) and a
    # step while it is busy, then the producer waits. Before: the window's
    # 256 at once (the producer kept the GIL until the window was full).
    # Below 256 parts are not cut: at most the window.
    assert max(between) <= most


@pytest.mark.parametrize(
    ("max_inflight", "step", "resume_at"),
    [
        (1, 2, 0),
        (16, 17, 14),
        (31, 32, 28),
        (32, 16, 16),
        (255, 127, 128),
        (256, 64, 224),
        (512, 128, 448),
        (1024, HAND_OVER, 896),
        (8192, HAND_OVER, 7168),
    ],
)
def test_the_step_is_a_quarter_of_the_window_from_256_up_half_from_32_and_none_below(
    max_inflight: int, step: int, resume_at: int
) -> None:
    """Where the sender takes halves, a producer blocked on the full window
    goes on at half of it free (an eighth elsewhere): each half is made and
    written whole."""
    assert sender_step(max_inflight) == step  # above the window: the producer never waits
    p = make(FakeServer(), max_inflight=max_inflight)
    assert p._sender_takes.frames == step
    assert p._window._resume_at == resume_at
    p.close(time.monotonic() + 5)


@pytest.mark.usefixtures("_no_switch")
def test_a_publish_that_fills_the_window_does_not_wait_for_the_sender(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The next publish waits for room, and the sender gets the GIL then: a
    hand-over there too was a second wait (and wake) for every half window."""
    monkeypatch.setattr(_handover, "WAIT", 0.5)
    server = FakeServer()
    held = threading.Event()
    server.gates["c0"] = held  # the sender is held up with c0 in hand: busy, nothing acked
    server.direct = False
    p = make(server, max_inflight=32)
    used_at_wait: list[int] = []  # the window's used slots at each hand-over
    wait = _handover.Handover.wait

    def counting(self: _handover.Handover, queued: Callable[[], int]) -> None:
        used_at_wait.append(p._window.used)
        wait(self, queued)

    monkeypatch.setattr(_handover.Handover, "wait", counting)
    futures = [p.submit(request(i), None, None) for i in range(32)]
    held.set()
    assert p.flush(10)
    p.close(time.monotonic() + 5)
    assert [f.result() is not None for f in futures] == [True] * 32
    assert used_at_wait  # the first half's hand-over
    assert max(used_at_wait) < 32  # before: 32 (c31 filled the window, and waited)


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
