"""Ctrl-C while a constructor runs: wherever it lands, what the constructor
took (threads, sockets, listeners, registrations) is given back before the
interrupt goes on. Before, a ``NatsStreamPublisher`` interrupted once
connected (as it took its ``max_payload`` or started ``liftbridge-nats-acks``)
left its ``liftbridge-nats-io`` thread and socket running for good; one
interrupted as it registered with its client left itself there half made
(the client's ``close()`` then failed) and its ack window on the client's
timer; a ``NatsPublisher`` interrupted in pynats2's connect left pynats2's
threads and socket running.

The interrupt is raised at each point of a constructor where an interrupt's
handler runs, in the SDK's frames and in ``Thread.start`` run on the
constructing thread (:mod:`tests.unit.interrupts`).
"""

from __future__ import annotations

import gc
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from types import FrameType

import pytest

import liftbridge
from bench.publish_cg import STREAM, AckingBroker
from liftbridge._publish._nats_events import State
from tests.unit.fake_broker import serving
from tests.unit.hostile_nats import FakeNats
from tests.unit.interrupts import in_sdk_or_thread_start, interrupted_at, sweep_whole

MOST = 3000  # interrupt points of one constructor, at most (a bound on each sweep)
BOUND = 30.0  # seconds a thread left may take to end (a loaded machine)
WHOLE = 3  # a sweep ends after this many runs in a row had no point left to interrupt
CLOSED = State.CLOSED


@pytest.fixture
def broker() -> Iterator[AckingBroker]:
    # The bench driver's broker: a port as a FakeBroker has, no subclass of it.
    with serving(AckingBroker()) as served:  # type: ignore[abstract, type-var]
        yield served


def _ended(before: set[threading.Thread], names: set[str], where: str | None) -> None:
    """Every thread named in ``names`` started since ``before`` (or starting:
    enumerate() lists those too) ends within BOUND."""
    deadline = time.monotonic() + BOUND
    while True:
        left = [t.name for t in threading.enumerate() if t.name in names and t not in before]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    assert not left, f"{left} still run (interrupted in {where})"


def _sweep_unclosed(run: Callable[[int], str | None]) -> set[str]:
    """:func:`sweep_whole` over ``run``, failing on a socket any run left to
    garbage collection (a ResourceWarning: one made and never closed; a
    collection after each run would cost ~0.1 s of CPU each)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        interrupted = sweep_whole(run, WHOLE, MOST)
        gc.collect()
    unclosed = [w for w in caught if issubclass(w.category, ResourceWarning)]
    assert not unclosed, f"sockets left to garbage collection: {unclosed[0].message}"
    return interrupted


# ------------------------------------------------------- NatsStreamPublisher --

NATS_THREADS = {"liftbridge-nats-io", "liftbridge-nats-acks", "liftbridge-callbacks"}


def test_a_nats_stream_publisher_interrupted_as_it_is_made_leaves_nothing(
    broker: AckingBroker,
) -> None:
    nats = FakeNats()
    try:
        with liftbridge.Client(f"127.0.0.1:{broker.port}") as client:
            listeners = client._router._watch._listeners
            # What the first one does once (the client's metadata, the ack
            # timer) is not among the points of the next ones.
            with liftbridge.NatsStreamPublisher(client, nats.url, ack_wait=BOUND) as first:
                assert isinstance(first.publish(STREAM, b"v"), liftbridge.Ack)
            before_listeners = list(listeners)
            watched = client._timer._watched  # the ack windows the client's timer looks at
            before_watched = list(watched)

            def run(n: int) -> str | None:
                before = set(threading.enumerate())
                made: list[liftbridge.NatsStreamPublisher] = []
                kept: list[BaseException] = []  # a notebook's last traceback
                where = interrupted_at(
                    n,
                    lambda: made.append(liftbridge.NatsStreamPublisher(client, nats.url)),
                    in_sdk_or_thread_start,
                    kept=kept,
                )
                if where is None:
                    (publisher,) = made
                    assert isinstance(publisher.publish(STREAM, b"v"), liftbridge.Ack)
                    publisher.close()
                _ended(before, NATS_THREADS, where)
                # The fake server's thread for a connection ends once the client closed it.
                _ended(set(), {"test-nats-conn"}, where)
                assert listeners == before_listeners, f"a listener was left (in {where})"
                assert watched == before_watched, f"an ack window left on the timer (in {where})"
                # The client's close() closes what it holds: nothing half made.
                left = [o for o in list(client._attached) if getattr(o, "_state", 0) is not CLOSED]
                assert not left, f"a publisher half made left on the client (in {where})"
                return where

            interrupted = _sweep_unclosed(run)
    finally:
        nats.close()
    # Once connected: the points that left the connection running.
    assert {"_set_max_payload", "start_thread"} <= interrupted


# ------------------------------------------------------------------- Client --


def test_a_client_interrupted_as_it_is_made_leaves_no_thread(broker: AckingBroker) -> None:
    """Before, ``liftbridge-broker-watch`` (started as the router was made,
    before the constructor's try) ran on for good."""
    address = f"127.0.0.1:{broker.port}"
    liftbridge.Client(address).close()  # what the first one does once

    def run(n: int) -> str | None:
        before = set(threading.enumerate())
        made: list[liftbridge.Client] = []
        where = interrupted_at(
            n, lambda: made.append(liftbridge.Client(address)), in_sdk_or_thread_start
        )
        if where is None:
            (client,) = made
            assert client.fetch_metadata(timeout=BOUND).brokers
            client.close()
        names = {t.name for t in set(threading.enumerate()) - before}
        _ended(before, {name for name in names if name.startswith("liftbridge-")}, where)
        return where

    interrupted = _sweep_unclosed(run)
    assert "start_thread" in interrupted  # the watch's start


# ------------------------------------------------------------- NatsPublisher --


_CONDITION_WAIT = threading.Condition.wait.__code__


def _or_waiting(frame: FrameType, event: str, arg: object) -> bool:
    """:func:`in_sdk_or_thread_start`, and a wait on a Condition (an Event's
    too) as its lock's acquire returns: where Ctrl-C lands on a blocked thread."""
    return in_sdk_or_thread_start(frame, event, arg) or (
        event == "c_return" and frame.f_code is _CONDITION_WAIT
    )


def test_a_nats_publisher_interrupted_as_it_is_made_leaves_nothing() -> None:
    """Before, one interrupted in pynats2's connect (as it started its reader
    or pinger thread) left pynats2's threads (not daemons: the interpreter
    waits for them at exit) and its socket running for good."""
    nats = FakeNats()
    try:
        # What the first one does once (importing pynats2) is not among the points.
        with liftbridge.NatsPublisher(nats.url, ack_wait=BOUND) as first:
            assert isinstance(first.publish("orders", b"v"), liftbridge.Ack)

        def run(n: int) -> str | None:
            before = set(threading.enumerate())
            made: list[liftbridge.NatsPublisher] = []
            where = interrupted_at(
                n,
                lambda: made.append(liftbridge.NatsPublisher(nats.url, ack_wait=BOUND)),
                _or_waiting,
            )
            if where is None:
                (publisher,) = made
                assert isinstance(publisher.publish("orders", b"v"), liftbridge.Ack)
                publisher.close()
            # Every thread it started, pynats2's and the fake server's for its connection.
            _ended(before, {t.name for t in set(threading.enumerate()) - before}, where)
            return where

        interrupted = _sweep_unclosed(run)
    finally:
        nats.close()
    # Waiting for pynats2 to connect, which before ran on this thread.
    assert {"start_thread", "wait"} <= interrupted
