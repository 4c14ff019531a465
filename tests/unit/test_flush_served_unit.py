"""flush() returns once every publish it covers has its outcome and its ack
handler and its Future's done-callbacks have been called and returned (as
confluent-kafka's flush serves every delivery callback), on the gRPC
publisher and the NATS one. The gRPC flush used to wait for a handler-only
publish's claim alone (``future=False``): it returned True before the
handler had even been handed to ``liftbridge-callbacks``; both returned
True with handlers still queued or running."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future

import pytest

import liftbridge
from liftbridge._core._callbacks import CallbackRunner
from liftbridge._publish._publisher import Publisher
from tests.unit.hostile_server import STREAM
from tests.unit.test_nats_blocking_publish import publisher as nats_publisher  # noqa: F401
from tests.unit.test_publisher_unit import (  # noqa: F401 (_close_client_threads: autouse)
    FakeServer,
    _close_client_threads,
    _soon,
    hold_settle_run,
    make,
    request,
)

WAIT = 10.0


class Blocking:
    """An ack handler (or done-callback) that holds the callbacks thread
    until released; records that it returned."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.returned = threading.Event()

    def __call__(self, *outcome: object) -> None:
        self.entered.set()
        self.release.wait(WAIT)
        self.returned.set()

    def holds_back(self, flush: Callable[[float], bool]) -> None:
        """Once this callback runs (and blocks): ``flush`` returns False
        while it does, True once it was released and returned."""
        assert self.entered.wait(WAIT)
        try:
            assert not flush(0.3)
        finally:
            self.release.set()
        assert flush(WAIT)
        assert self.returned.is_set()


def _held_server() -> FakeServer:
    server = FakeServer()
    server.ack = False
    server.hold = True
    return server


@pytest.fixture
def held() -> Iterator[tuple[FakeServer, Publisher]]:
    server = _held_server()
    p = make(server, ack_wait=30.0)
    yield server, p
    p.close(_soon())


@pytest.mark.parametrize("future", [False, True], ids=["handler only", "future and handler"])
def test_flush_waits_for_the_ack_handler_to_return(
    held: tuple[FakeServer, Publisher], future: bool
) -> None:
    server, p = held
    handler = Blocking()
    p.submit(request(0), handler, None, future)
    server.release(1)
    handler.holds_back(p.flush)  # acked; its handler blocks (the old flush waited for the claim)


def test_flush_waits_for_a_futures_done_callback_to_return(
    held: tuple[FakeServer, Publisher],
) -> None:
    server, p = held
    callback = Blocking()
    future = p.submit(request(0), None, None)
    future.add_done_callback(callback)
    server.release(1)
    callback.holds_back(p.flush)


@pytest.mark.parametrize("how", ["acked", "timed out"])
def test_flush_waits_for_a_handler_only_publish_claimed_but_not_handed_over(
    how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Claimed (out of the pending table, done) by its ack or its timeout,
    its handler not handed to liftbridge-callbacks yet: flush waits."""
    server = _held_server()
    p = make(server, ack_wait=30.0 if how == "acked" else 0.2)
    heard: list[object] = []
    p.submit(request(0), lambda ack, error: heard.append(ack or error), None, False)
    entered, go_on = hold_settle_run(monkeypatch, WAIT)
    if how == "acked":
        server.release(1)
    try:
        assert entered.wait(WAIT)
        assert not p.flush(0.3)  # True on the old code: it was claimed
    finally:
        go_on.set()
    assert p.flush(WAIT)
    assert len(heard) == 1
    assert not p._spent.unsettled
    p.close(_soon())


def test_a_handler_that_flushes_does_not_wait_for_itself(
    held: tuple[FakeServer, Publisher],
) -> None:
    server, p = held
    flushed: list[bool] = []
    done = threading.Event()

    def handler(ack: object, error: object) -> None:
        flushed.append(p.flush(WAIT))  # on liftbridge-callbacks: outcomes only
        done.set()

    p.submit(request(0), handler, None, False)
    server.release(1)
    assert done.wait(2 * WAIT)
    assert flushed == [True]  # False (after WAIT) if it waited for its own marker


def test_flush_with_many_handler_only_publishes_hears_every_handler_first(
    held: tuple[FakeServer, Publisher],
) -> None:
    server, p = held
    heard: list[object] = []
    first = Blocking()
    p.submit(request(0), first, None, False)
    for i in range(1, 200):
        p.submit(request(i), lambda ack, error: heard.append(ack), None, False)
    server.release(200)
    assert first.entered.wait(WAIT)
    flushing = threading.Thread(target=lambda: heard.append(p.flush(WAIT)))
    flushing.start()
    first.release.set()
    flushing.join(2 * WAIT)
    assert heard[-1] is True and len(heard) == 200  # every handler before flush returned


# ---------------------------------------------------------------- runner --


def test_served_is_true_at_once_when_nothing_was_handed_over() -> None:
    runner = CallbackRunner()
    assert runner.served(time.monotonic())  # deadline passed: nothing to wait for
    assert not runner._started  # no thread started for it
    runner.close(_soon())


def test_served_after_close_waits_for_what_was_queued_before() -> None:
    runner = CallbackRunner()
    blocking = Blocking()
    runner.submit(blocking)
    assert blocking.entered.wait(WAIT)
    closing = threading.Thread(target=runner.close, args=(time.monotonic() + 2 * WAIT,))
    closing.start()
    try:
        assert not runner.served(time.monotonic() + 0.3)
    finally:
        blocking.release.set()
    assert runner.served(time.monotonic() + WAIT)
    assert blocking.returned.is_set()
    closing.join(WAIT)


def test_served_on_the_late_thread_does_not_wait_for_itself() -> None:
    runner = CallbackRunner()
    runner.close(_soon())
    results: list[bool] = []
    done = threading.Event()

    def late() -> None:
        results.append(runner.served(time.monotonic() + WAIT))
        done.set()

    runner.submit(late)
    assert done.wait(2 * WAIT)
    assert results == [True]


# ------------------------------------------------------------------ NATS --


def test_nats_flush_waits_for_the_ack_handler_to_return(
    nats_publisher: liftbridge.NatsStreamPublisher,  # noqa: F811
) -> None:
    handler = Blocking()
    nats_publisher.publish_async(STREAM, b"v", handler, future=False)
    handler.holds_back(nats_publisher.flush)  # the old flush waited for the hand-over


def test_nats_flush_waits_for_a_done_callback_to_return(
    nats_publisher: liftbridge.NatsStreamPublisher,  # noqa: F811
) -> None:
    callback = Blocking()
    future: Future[liftbridge.Ack | None] = nats_publisher.publish_async(STREAM, b"v")
    future.add_done_callback(callback)
    callback.holds_back(nats_publisher.flush)
