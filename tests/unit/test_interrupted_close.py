"""Ctrl-C while a client closes: whatever step it lands on, a second
``close()`` finishes the job (every thread stopped, every connection closed),
and a ``with`` block whose exit was interrupted (anywhere but at its very
start, before any of it ran) has still told every thread to stop. Before,
an interrupted close left the client marked closed, some of its threads
running for good, and a second ``close()`` returned at once.

The interrupt is raised at each point of ``close()`` where an interrupt's
handler runs, in the SDK's frames (:mod:`tests.unit.interrupts`), on a client
whose publisher, lane and timer threads run.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from types import FrameType

import grpc
import pytest

import liftbridge
from bench.publish_cg import STREAM, AckingBroker
from liftbridge_api import api_pb2
from tests.unit.fake_broker import serving
from tests.unit.interrupts import Point, in_sdk, interrupted_at, sweep_whole

MOST = 400  # interrupt points one close has, at most (a bound on each sweep)
BOUND = 30.0  # seconds the client's threads may take to end (a loaded machine)
WHOLE = 10  # a sweep ends after this many runs in a row had no point left to interrupt


HELD = b"held"  # a publish the broker never acks: close() fails it (or its stream's end)


class HoldingBroker(AckingBroker):
    """The bench driver's acking broker, but a publish of :data:`HELD` waits
    for its ack until the client closes."""

    def PublishAsync(
        self, request_iterator: Iterator[api_pb2.PublishRequest], context: grpc.ServicerContext
    ) -> Iterator[api_pb2.PublishResponse]:
        held = (request for request in request_iterator if request.value != HELD)
        return super().PublishAsync(held, context)


@pytest.fixture
def broker() -> Iterator[AckingBroker]:
    # A port as a FakeBroker has, no subclass of it.
    with serving(HoldingBroker()) as served:  # type: ignore[abstract, type-var]
        yield served


@dataclass(frozen=True)
class Busy:
    """A client whose acks, ack-timer, broker-watch, ack-inbox pool and two
    HTTP/2 sender threads run (an async publish, one on this thread's lane,
    one with an ack inbox), with a publish awaiting its ack and the gRPC
    channels it opened."""

    client: liftbridge.Client
    held: Future[liftbridge.Ack | None]
    channels: list[grpc.Channel]

    @classmethod
    def open(cls, broker: AckingBroker) -> Busy:
        client = liftbridge.Client(f"127.0.0.1:{broker.port}")
        assert isinstance(client.publish_async(STREAM, b"a").result(BOUND), liftbridge.Ack)
        assert isinstance(client.publish(STREAM, b"b", timeout=BOUND), liftbridge.Ack)
        # An ack-inbox publish starts a pool thread (this broker has no unary Publish).
        inbox = client.publish_async(STREAM, b"c", ack_inbox="inbox", timeout=BOUND)
        assert isinstance(inbox.exception(BOUND), liftbridge.LiftbridgeError)
        held = client.publish_async(STREAM, HELD, timeout=10 * BOUND)
        router = client._router
        channels = [channel for channel, _ in router._channels._stubs.values()]
        channels += [watched.probe._channel for watched in router._watch._watched.values()]
        assert len(channels) == 2, "a channel and the watch's probe"
        return cls(client, held, channels)

    def closed(self, before: set[threading.Thread], where: str | None) -> None:
        """Every thread the client started ends within BOUND, every channel
        it opened is closed and the publish it held failed."""
        assert self.client.closed, f"the client is not closed (interrupted in {where})"
        deadline = time.monotonic() + BOUND
        for thread in threading.enumerate():
            if thread in before or not thread.name.startswith("liftbridge-"):
                continue
            thread.join(max(0.0, deadline - time.monotonic()))
            assert not thread.is_alive(), f"{thread.name} still runs (interrupted in {where})"
        for channel in self.channels:
            with pytest.raises(ValueError, match="closed channel"):  # not a call sent
                channel.unary_unary("/proto.API/Nothing", None, None)(b"", timeout=BOUND)
        error = self.held.exception(timeout=BOUND)
        assert isinstance(error, liftbridge.LiftbridgeError), f"interrupted in {where}"


def _in_exit(frame: FrameType, event: str, arg: object) -> bool:
    """A point of ``__exit__`` but its start, where none of it has run (a
    close interrupted there has not begun: the next ``close()`` runs it)."""
    return in_sdk(frame, event, arg) and not (
        event == "call" and frame.f_code is liftbridge.Client.__exit__.__code__
    )


def _each_point(
    broker: AckingBroker,
    interrupt: Callable[[liftbridge.Client], object],
    then: Callable[[liftbridge.Client], object],
    point: Point = in_sdk,
) -> set[str]:
    """For each point of ``interrupt(client)`` in turn, on a fresh busy
    client: the interrupt there, then ``then(client)``, then every thread the
    client started must end. Returns the functions interrupted."""
    before = set(threading.enumerate())

    def run(n: int) -> str | None:
        busy = Busy.open(broker)
        client = busy.client
        where = interrupted_at(n, functools.partial(interrupt, client), point)
        then(client)
        busy.closed(before, where)
        return where

    return sweep_whole(run, WHOLE, MOST)


def test_a_close_interrupted_anywhere_is_finished_by_the_next(broker: AckingBroker) -> None:
    interrupted = _each_point(broker, liftbridge.Client.close, liftbridge.Client.close)
    # The steps' own closes, not only the client's.
    assert {"stop_retrying", "close_together", "close"} <= interrupted


def test_a_with_blocks_exit_interrupted_anywhere_stops_every_thread(
    broker: AckingBroker,
) -> None:
    def leave(client: liftbridge.Client) -> None:
        client.__exit__(None, None, None)

    interrupted = _each_point(broker, leave, lambda client: None, _in_exit)
    assert {"_close_within", "stop_retrying", "close"} <= interrupted
