"""Ctrl-C as a stream is opened on a connection of the SDK's own
(``Router.open_stream``: ``Channels.open_stream`` making an ``Http2Call``):
wherever it lands in the SDK's frames and in ``Thread.start`` run on this
thread, once the call's socket (and, for PublishAsync, its
``liftbridge-h2-send`` thread) exist, the call is ended before the interrupt
goes on: its socket closed, its sender ended. Before, both were left to
garbage collection: a sender that ran kept its call, and so its socket, for
good.
"""

from __future__ import annotations

import gc
import queue
import socket
import threading
import time
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

import liftbridge
from bench.publish_cg import AckingBroker
from liftbridge._core._targets import ANY, Deadline
from liftbridge_api import api_pb2
from tests.unit.fake_broker import serving
from tests.unit.interrupts import in_sdk_or_thread_start, sweep

MOST = 1000  # interrupt points of one open_stream, at most
BOUND = 30.0  # seconds a sender may take to end (a loaded machine)


@pytest.fixture
def broker() -> Iterator[AckingBroker]:
    # The bench driver's broker: a port as a FakeBroker has, no subclass of it.
    with serving(AckingBroker()) as served:  # type: ignore[abstract, type-var]
        yield served


def _senders() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "liftbridge-h2-send" and t.is_alive()]


def _open_sockets(port: int) -> list[socket.socket]:
    """The Python sockets still open to the broker (the SDK's own connections:
    gRPC's channels are no Python sockets)."""
    found = []
    for thing in gc.get_objects():
        if isinstance(thing, socket.socket) and thing.fileno() != -1:
            try:
                if thing.getpeername()[1] == port:
                    found.append(thing)
            except OSError:  # not connected
                continue
    return found


@pytest.mark.parametrize("method", ["PublishAsync", "Subscribe"])
def test_a_stream_open_interrupted_anywhere_leaves_nothing_running(
    broker: AckingBroker, method: str
) -> None:
    outboxes: list[queue.SimpleQueue[Any]] = []
    opened: list[Any] = []

    with liftbridge.Client(f"127.0.0.1:{broker.port}") as client:
        client.fetch_metadata(timeout=BOUND)
        router = client._router

        def open_stream() -> None:
            # Requests as a lane sends them, a fresh outbox each time.
            outbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
            outboxes.append(outbox)
            request: Any = iter(outbox.get, None)
            if method == "Subscribe":  # a unary request: no sender thread
                request = api_pb2.SubscribeRequest(stream="s")
            try:
                opened.append(
                    router.open_stream(method, request, target=ANY, deadline=Deadline(BOUND))
                )
            except BaseException:  # the caller's part: it ends its request iterator
                outbox.put(None)
                raise

        def check() -> None:
            ends = time.monotonic() + BOUND
            while _senders() and time.monotonic() < ends:
                time.sleep(0.01)
            assert not _senders(), "an interrupted open left its sender running"
            gc.collect()
            assert not _open_sockets(broker.port), "an interrupted open left its socket open"

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ResourceWarning)
            interrupted = sweep(open_stream, check, in_sdk_or_thread_start, MOST)
            gc.collect()
        unclosed = [w for w in caught if issubclass(w.category, ResourceWarning)]
        assert not unclosed, f"sockets left to garbage collection: {unclosed[0].message}"
        # The open that ran whole: its stream works as any (cancelled here).
        ((_, stream),) = opened
        stream.cancel()
        outboxes[-1].put(None)
    assert {"open_stream", "__init__"} <= interrupted
