"""Ctrl-C while a thread publishes through NATS (``NatsStreamPublisher``):
whatever step it lands on, the publish is left out (its window slot given
back, its outcome an error) or in (queued with its deadline: its ack or its
timeout frees the slot), never half, as for the gRPC publisher
(test_interrupted_submit.py). A slot left taken shrinks ``max_inflight`` for
good (a small window wedges); a publish registered without its deadline
(a timeout of its own is scheduled after the window's lock) makes ``flush()``
wait forever.

The interrupt is raised at each point of one publish where an interrupt's
handler runs, in the SDK's frames (:mod:`tests.unit.interrupts`), against
the fake NATS server of tests/unit/hostile_nats.py, which acks every publish
as a partition leader would. ``NatsPublisher`` (pynats2) publishes through
test_nats_unit's fake client.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from types import FrameType, SimpleNamespace
from typing import Any, Protocol

import pytest

import liftbridge
from bench.publish_cg import STREAM, AckingBroker
from liftbridge._publish import _nats, _pynats
from liftbridge._transport._nats_socket import NatsSocket
from tests.unit.fake_broker import serving
from tests.unit.hostile_nats import FakeNats
from tests.unit.interrupts import in_sdk, interrupted_at, sweep, sweep_whole
from tests.unit.test_nats_unit import FakeBase, FakeClient, FakeNATSError, Leader

MOST = 400  # interrupt points one publish has, at most (a bound on each sweep)
BOUND = 30.0  # seconds a flush or an ack after the interrupts may take (a loaded machine)
WINDOW = 8  # max_inflight: a slot left taken is an eighth of the window
OWN = BOUND / 2  # a publish's own timeout: its deadline goes on the timer's heap


@pytest.fixture
def publisher() -> Iterator[liftbridge.NatsStreamPublisher]:
    nats = FakeNats()
    try:
        with (
            serving(AckingBroker()) as broker,  # type: ignore[abstract, type-var]
            liftbridge.Client(f"127.0.0.1:{broker.port}") as client,
            liftbridge.NatsStreamPublisher(
                client, nats.url, max_inflight=WINDOW, ack_wait=BOUND
            ) as publisher,
        ):
            yield publisher
    finally:
        nats.close()


def _ignore(ack: liftbridge.Ack | None, error: BaseException | None) -> None:
    """The publishes' ack handler."""


def _settled(publisher: liftbridge.NatsStreamPublisher) -> None:
    """Every publish resolves, and with it every window slot is free; more
    publishes than the window holds then go through."""
    assert publisher.flush(timeout=BOUND), "a publish never resolved"
    assert publisher._window._inflight == 0, "a window slot was left taken"
    futures = [publisher.publish_async(STREAM, b"after", timeout=BOUND) for _ in range(2 * WINDOW)]
    for future in futures:
        assert isinstance(future.result(timeout=BOUND), liftbridge.Ack)


Publish = Callable[[liftbridge.NatsStreamPublisher, str], object]
"""One way to publish, with a correlation id of the sweep's."""

PUBLISHES: dict[str, tuple[Publish, set[str]]] = {
    # How each publishes, and points where the old code left it half.
    "default-timeout": (
        lambda p, cid: p.publish_async(STREAM, b"v", _ignore, correlation_id=cid),
        {"admit", "send_frame"},
    ),
    "own-timeout": (
        lambda p, cid: p.publish_async(STREAM, b"v", _ignore, correlation_id=cid, timeout=OWN),
        {"admit", "schedule", "send_frame"},
    ),
    "ack-policy-none": (
        lambda p, cid: p.publish_async(
            STREAM, b"v", ack_policy=liftbridge.AckPolicy.NONE, correlation_id=cid
        ),
        {"admit_unacked", "send_frames"},
    ),
    "blocking": (
        lambda p, cid: p.publish(STREAM, b"v", correlation_id=cid, timeout=OWN),
        {"admit", "schedule", "send_frame"},
    ),
    "batch": (
        lambda p, cid: p.publish_many_async(STREAM, [b"a", b"b", b"c"], timeout=OWN),
        {"admit_some", "free", "schedule", "send_frames"},
    ),
}


@pytest.mark.parametrize("way", PUBLISHES)
def test_a_nats_publish_interrupted_anywhere_is_out_or_in(
    publisher: liftbridge.NatsStreamPublisher, way: str
) -> None:
    """Each point in turn: a point of a publish is the n-th only if every
    run has the same ones before it, so what the first publishes of a kind
    do once (check the ack handler, make a frame's shape) is done first,
    and the correlation ids keep one length (a batch's grow with the
    process's count of batches: 100 of them first)."""
    publish, half = PUBLISHES[way]
    ids = itertools.count()
    for warm_up in range(100 if way == "batch" else 1):
        publish(publisher, f"warm-{warm_up:06d}")  # as long as the sweep's
        _settled(publisher)
    interrupted = sweep(
        lambda: publish(publisher, f"sweep-{next(ids):05d}"),
        lambda: _settled(publisher),
        in_sdk,
        MOST,
    )
    assert half <= interrupted


# ------------------------------------------------------------------ close --

WHOLE = 10  # a close sweep ends after this many runs in a row had no point left
HELD = b"held"  # a publish no one acks: close() fails it
THREADS = {  # the threads a publisher starts (the client's ack timer is the client's)
    "liftbridge-nats-io",
    "liftbridge-nats-acks",
    "liftbridge-callbacks",
    "liftbridge-ack-timer",
}


class Closeable(Protocol):
    def close(self) -> None: ...


def _each_close_point(
    make: Callable[[], tuple[Closeable, Future[liftbridge.Ack | None]]],
    closed: Callable[[Closeable], bool],
) -> set[str]:
    """For each point of ``close()`` in turn, on a fresh publisher with a
    publish awaiting its ack: the interrupt there, then ``close()`` twice
    more, then each thread the publisher started ends within BOUND, the held
    publish fails with ClientClosedError and ``closed(publisher)`` holds
    (its connection closed). Returns the functions interrupted."""

    def run(n: int) -> str | None:
        before = set(threading.enumerate())
        publisher, held = make()
        where = interrupted_at(n, publisher.close, in_sdk)
        publisher.close()
        publisher.close()  # harmless
        deadline = time.monotonic() + BOUND
        for thread in set(threading.enumerate()) - before:
            if thread.name in THREADS:
                thread.join(max(0.0, deadline - time.monotonic()))
                assert not thread.is_alive(), f"{thread.name} still runs (interrupted in {where})"
        error = held.exception(timeout=BOUND)
        assert isinstance(error, liftbridge.ClientClosedError), f"interrupted in {where}"
        assert closed(publisher), f"its connection is open (interrupted in {where})"
        return where

    return sweep_whole(run, WHOLE, MOST)


def test_a_stream_publishers_close_interrupted_anywhere_is_finished_by_the_next() -> None:
    nats = FakeNats({HELD: lambda connection, message, subject: None})
    try:
        with (
            serving(AckingBroker()) as broker,  # type: ignore[abstract, type-var]
            liftbridge.Client(f"127.0.0.1:{broker.port}") as client,
        ):

            def make() -> tuple[Closeable, Future[liftbridge.Ack | None]]:
                publisher = liftbridge.NatsStreamPublisher(client, nats.url, ack_wait=BOUND)
                assert isinstance(publisher.publish(STREAM, b"v"), liftbridge.Ack)
                return publisher, publisher.publish_async(STREAM, HELD)

            first, _ = make()  # the client's ack timer started
            first.close()

            def closed(publisher: Closeable) -> bool:
                assert isinstance(publisher, liftbridge.NatsStreamPublisher)
                connection = publisher._nats
                assert isinstance(connection, NatsSocket)
                return connection._sock is None and "closed" in repr(publisher)

            interrupted = _each_close_point(make, closed)
    finally:
        nats.close()
    assert {"close", "refuse", "stop"} <= interrupted


@pytest.fixture
def clients(monkeypatch: pytest.MonkeyPatch) -> list[FakeClient]:
    """NatsPublisher on test_nats_unit's fake pynats2 client, which acks a
    publish (but :data:`HELD`) as it is made, on the publishing thread."""
    made: list[FakeClient] = []

    def make(url: str, **kwargs: Any) -> FakeClient:
        client = FakeClient(url, **kwargs)
        leader = Leader()
        client.responder = lambda subject, m: None if m.value == HELD else leader(subject, m)
        made.append(client)
        return client

    fake = SimpleNamespace(NATSClient=make, NATSError=FakeNATSError, NATSNoSubscribeClient=FakeBase)
    monkeypatch.setattr(_pynats, "import_pynats2", lambda: fake)
    monkeypatch.setattr(_nats, "server_info", lambda host, port, timeout: {"max_payload": 4096})
    return made


def _outside_acks(frame: FrameType, event: str, arg: object) -> bool:
    """A point of the publishing thread's own (the fake client hands it
    each ack, which pynats2 hands a worker thread of its own)."""
    if not in_sdk(frame, event, arg):
        return False
    caller: FrameType | None = frame
    while caller is not None:
        if caller.f_code is liftbridge.NatsPublisher._on_ack.__code__:
            return False
        caller = caller.f_back
    return True


@pytest.mark.parametrize("timeout", [None, OWN], ids=["default-timeout", "own-timeout"])
def test_a_nats_publisher_publish_interrupted_anywhere_is_out_or_in(
    clients: list[FakeClient], timeout: float | None
) -> None:
    """NatsPublisher registers a publish, then puts its deadline in the
    timer's queue (in order, or on the heap after its lock) and sends it: an
    interrupt in between left one that never expired (its Future never
    resolved). Each publish the fake client took is acked at once: none may
    be left pending."""
    with liftbridge.NatsPublisher("nats://127.0.0.1:4333", ack_wait=BOUND) as publisher:

        def check() -> None:
            assert not publisher._pending, "a publish was left pending"
            assert isinstance(publisher.publish("orders", b"after"), liftbridge.Ack)

        check()
        interrupted = sweep(
            lambda: publisher.publish_async("orders", b"v", timeout=timeout),
            check,
            _outside_acks,
            MOST,
        )
    assert ("append" if timeout is None else "schedule") in interrupted


def test_a_nats_publishers_close_interrupted_anywhere_is_finished_by_the_next(
    clients: list[FakeClient],
) -> None:

    def make() -> tuple[Closeable, Future[liftbridge.Ack | None]]:
        publisher = liftbridge.NatsPublisher("nats://127.0.0.1:4333", ack_wait=BOUND)
        assert isinstance(publisher.publish("orders", b"v"), liftbridge.Ack)
        return publisher, publisher.publish_async("orders", HELD)

    def closed(publisher: Closeable) -> bool:
        return clients[-1].closed and "closed" in repr(publisher)

    interrupted = _each_close_point(make, closed)
    assert {"close", "stop_pynats2"} <= interrupted
