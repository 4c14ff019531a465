"""Ctrl-C just as the SDK took a lock, at every such point of a path a user
thread runs: the lock must not stay held. tests/unit/test_interrupted_publish.py
sends real signals at random points of a publish_async loop; most of them
land while the thread waits in a system call (it lets go of the GIL there,
so the signalling thread runs then), seldom just after a lock was taken.
Here the exception comes exactly there, every time, without a signal.

An interrupt's handler runs as the C call that was running returns, so a
KeyboardInterrupt that comes as ``lock.acquire()`` returns is raised at that
call, the lock taken and the result dropped. A profile function raising on
the call's ``c_return`` event does just that (CPython then drops the profile
function). :func:`~tests.unit.interrupts.interrupted_at` raises it as the n-th lock acquire made
by the SDK's own frames on this thread returns; each test tries every n of
one operation, then checks that the next operation finishes (with a bound:
a lock left held is a wait that never ends).
"""

from __future__ import annotations

import itertools
import signal
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

import pytest

import liftbridge
from bench.publish_cg import STREAM, AckingBroker
from liftbridge._consume._pull_buffer import PullBuffer, Reader
from liftbridge._groups._partitions import Assigned
from liftbridge._groups._values import StreamPartition
from liftbridge._transport._http2 import Http2Call
from liftbridge_api import api_pb2
from tests.unit.fake_broker import serving
from tests.unit.interrupts import acquire_returns, interrupted_at, sweep

MOST = 100  # lock acquires an operation here makes, at most (a bound on each sweep)
BOUND = 30.0  # seconds the operation after an interrupt may take (a loaded machine)

pytestmark = pytest.mark.skipif(
    not hasattr(signal, "pthread_kill"), reason="the watchdog needs POSIX signals"
)


class Wedged(BaseException):
    """The watchdog's: the main thread waited ``BOUND`` seconds."""


@contextmanager
def _watchdog(what: str) -> Iterator[None]:
    """Interrupts this (the main) thread with :class:`Wedged` if the block
    outlasts ``BOUND``: a blocking acquire of a lock held for good waits
    forever, and a signal to this thread is what ends such a wait."""
    armed = True

    def wedged(signum: int, frame: FrameType | None) -> None:
        if armed:
            raise Wedged(f"{what} waited {BOUND:g}s: a lock was left held")

    previous = signal.signal(signal.SIGUSR2, wedged)
    main = threading.get_ident()
    timer = threading.Timer(BOUND, signal.pthread_kill, (main, signal.SIGUSR2))
    timer.name = "test-watchdog"
    timer.start()
    try:
        yield
    finally:
        armed = False
        timer.cancel()
        timer.join()
        signal.signal(signal.SIGUSR2, previous)


@pytest.fixture
def broker() -> Iterator[AckingBroker]:
    # The bench driver's broker: a port as a FakeBroker has, no subclass of it.
    with serving(AckingBroker()) as served:  # type: ignore[abstract, type-var]
        yield served


def test_blocking_publishes_interrupted_as_they_take_a_lock(broker: AckingBroker) -> None:
    """``publish`` on this thread's lane: its check that the lane's stream
    still runs (``Http2Call.done``) takes the stream's read lock without
    waiting; left held, the next publish on this thread waits forever for it."""
    with liftbridge.Client(f"127.0.0.1:{broker.port}") as client:
        assert isinstance(client.publish(STREAM, b"first", timeout=BOUND), liftbridge.Ack)

        def after() -> None:
            with _watchdog("a publish after an interrupted one"):
                assert isinstance(client.publish(STREAM, b"after", timeout=BOUND), liftbridge.Ack)

        interrupted = sweep(
            lambda: client.publish(STREAM, b"v", timeout=BOUND), after, acquire_returns, MOST
        )
    assert {"done", "write_now"} <= interrupted


def test_metadata_refreshes_interrupted_as_they_take_a_lock(broker: AckingBroker) -> None:
    """A refresh takes the router's refresh lock with a timeout; left held,
    every later refresh times out waiting for it."""
    with liftbridge.Client(f"127.0.0.1:{broker.port}") as client:

        def after() -> None:
            with _watchdog("a refresh after an interrupted one"):
                assert client.fetch_metadata(timeout=BOUND).get_stream(STREAM) is not None

        interrupted = sweep(
            lambda: client.fetch_metadata(timeout=BOUND), after, acquire_returns, MOST
        )
    assert "refresh" in interrupted


def test_commits_interrupted_as_they_take_a_lock() -> None:
    """A consumer's ``checkpoint`` commits each partition under its commit
    lock, waiting for it as long as it takes; left held, the group thread's
    commits are skipped and the next checkpoint waits forever."""
    entry = Assigned(StreamPartition("s", 0))
    stored: list[int] = []

    def store(tp: StreamPartition, offset: int) -> None:
        stored.append(offset)

    offsets = itertools.count(1)

    def commit() -> None:
        entry.carried = next(offsets)  # progress to commit (no reading now)
        entry.commit(store)

    def after() -> None:
        with _watchdog("a commit after an interrupted one"):
            commit()
            assert entry.committed == stored[-1]

    interrupted = sweep(commit, after, acquire_returns, MOST)
    assert "commit" in interrupted


def test_a_pull_buffers_handler_takes_its_lock_where_no_interrupt_lands() -> None:
    """A pull consumer's subscription handler puts each message in under the
    buffer's lock. Its hot path took it by ``acquire()`` before its ``try``:
    an interrupt as that returned left it held, and every subscription and
    taker of the consumer waited forever. With ``with`` no acquire of it
    returns to an SDK frame, so there is no such point left (none below
    the buffer's own, which take it by ``with`` too)."""
    buffer = PullBuffer(1000, 500, by_bytes=False, ended=lambda: False)
    reader = Reader(0, 0, None)
    buffer.readers[0] = reader
    handle = buffer.handler(reader, reader.generation)
    offsets = itertools.count()

    def put() -> None:
        handle(liftbridge.Message(next(offsets), b"v", stream="s"), None)

    def check() -> None:
        assert not buffer.lock.locked(), "the buffer's lock was left held"

    put()
    check()
    assert sweep(put, check, acquire_returns, MOST) == set()
    assert reader.received == next(offsets) - 1  # every message went in


def test_a_cancel_interrupted_as_it_takes_the_read_lock_lets_the_reader_end() -> None:
    """``cancel`` (a lane's or a subscription's, on ``Client.close``) closes
    the socket under the call's read lock, taken without waiting; left held,
    the thread that reads the call next waits forever instead of ending."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(BOUND)
    call: Http2Call[bytes] = Http2Call(
        f"127.0.0.1:{listener.getsockname()[1]}",
        "/proto.API/Subscribe",
        api_pb2.SubscribeRequest(stream="s"),
        bytes,
        connect_timeout=BOUND,
    )
    peer = listener.accept()[0]
    try:
        assert interrupted_at(0, call.cancel, acquire_returns) == "_close_when_idle"
        ended: list[BaseException] = []

        def read() -> None:
            try:
                next(call)
            except BaseException as e:  # the call's end, whatever it is
                ended.append(e)

        reader = threading.Thread(target=read, name="test-h2-reader", daemon=True)
        reader.start()
        reader.join(BOUND)
        assert not reader.is_alive(), "the reader waited for the read lock"
        assert len(ended) == 1 and isinstance(ended[0], liftbridge.LiftbridgeError)
        assert call._closed and call._sock.fileno() == -1
    finally:
        call.cancel()
        peer.close()
        listener.close()
