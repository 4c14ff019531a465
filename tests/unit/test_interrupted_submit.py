"""Ctrl-C while a publish is being submitted: whatever step it lands on, the
publish is left out (its window slot given back, nothing of it left to
wait for) or in (queued or sent, with its deadline: its outcome frees the
slot), never half. A slot left taken shrinks the ``max_inflight`` window for
good (a small window ends up wedged: every publish waits for room that never
frees); a publish registered but never queued nor given a deadline makes
``flush()`` wait forever.

The interrupt is an exception raised on this thread where an interrupt's
handler runs: at the start of a Python function (``call``) and as a C call
returns (``c_return``), in the SDK's own frames. :func:`~tests.unit.interrupts.sweep` raises it at
each such point of one operation in turn, as tests/unit/test_interrupted_locks.py
does at each lock acquire; the storm test sends real signals, at most one
interrupt a publish, to a loop publishing into a small window.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from types import FrameType

import pytest

import liftbridge
from bench.publish_cg import STREAM, AckingBroker
from liftbridge._publish._lanes import _Lane
from liftbridge._publish._publisher import Publisher
from tests.unit.fake_broker import serving
from tests.unit.interrupts import SDK, Interrupted, in_sdk, sweep

MOST = 400  # interrupt points one operation has, at most (a bound on each sweep)
BOUND = 30.0  # seconds a flush or a publish after the interrupts may take (a loaded machine)
WINDOW = 8  # max_inflight: a slot left taken is an eighth of the window
INTERRUPTS = 300  # signal interrupts in the storm, at most
STORM = 30.0  # seconds the storm may take

_SIGNALLER = """
import os, sys, time
pid, signum = int(sys.argv[1]), int(sys.argv[2])
while True:
    os.kill(pid, signum)
    time.sleep(0.0002)
"""
"""The storm's signaller, a child process: ``python -c _SIGNALLER <pid> <signal>``."""

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGUSR1"), reason="needs POSIX signals")


@pytest.fixture
def broker() -> Iterator[AckingBroker]:
    # The bench driver's broker: a port as a FakeBroker has, no subclass of it.
    with serving(AckingBroker()) as served:  # type: ignore[abstract, type-var]
        yield served


def _ignore(ack: liftbridge.Ack | None, error: BaseException | None) -> None:
    """The publishes' ack handler."""


def _sender_idle(publisher: Publisher) -> None:
    """Waits until the stream's sender has nothing left to write: a publish
    submitted then is written on its own thread. (Right after a flush the
    sender can still be finishing its run on a loaded machine, and every
    publish of a sweep step went to it: the sweep then never reached
    ``_write``.) Only attribute reads here, no SDK call to interrupt."""
    deadline = time.monotonic() + BOUND
    while publisher._outbox.idle != publisher._generation:
        assert time.monotonic() < deadline, "the stream's sender never went idle"
        time.sleep(0.001)


def _settled(client: liftbridge.Client) -> None:
    """Every publish resolves, and with it every window slot is free; more
    publishes than the window holds then go through. (An interrupt that cut
    a write short ended the stream: publishes a sender took for it meanwhile
    fail with ConnectionLostError, as on any broken stream; the next round
    goes out on a new stream.)"""
    assert client.flush(timeout=BOUND), "a publish never resolved"
    assert client._publisher._window.used == 0, "a window slot was left taken"
    for _ in range(2):
        futures: list[Future[liftbridge.Ack | None]] = [
            client.publish_async(STREAM, b"after", timeout=BOUND) for _ in range(2 * WINDOW)
        ]
        errors = [future.exception(timeout=BOUND) for future in futures]
        if not any(errors):
            return
        assert all(e is None or isinstance(e, liftbridge.ConnectionLostError) for e in errors)
    raise AssertionError("publishes still failed on a stream opened after the interrupt")


@pytest.mark.parametrize("timeout", [None, BOUND], ids=["default-timeout", "own-timeout"])
def test_a_publish_interrupted_anywhere_is_out_or_in(
    broker: AckingBroker, timeout: float | None
) -> None:
    """The default timeout puts a publish's deadline in the timer's ordered
    queue (under the publisher's lock), its own timeout schedules it after."""
    with liftbridge.Client(f"127.0.0.1:{broker.port}", max_inflight=WINDOW) as client:
        assert isinstance(client.publish(STREAM, b"first", timeout=BOUND), liftbridge.Ack)
        _settled(client)  # the publisher's threads started
        publisher = client._publisher

        def publish() -> None:
            _sender_idle(publisher)  # so the publish is written on this thread (_write)
            client.publish_async(STREAM, b"v", timeout=timeout, ack_handler=_ignore)

        interrupted = sweep(
            publish,
            lambda: _settled(client),
            in_sdk,
            MOST,
        )
    # Points where a slot was left taken, or a publish unqueued or without a deadline.
    assert {"submit", "_direct", "_write", "write_now"} <= interrupted
    assert ("append_held" if timeout is None else "schedule") in interrupted


def test_a_lane_opening_interrupted_anywhere_leaves_no_count_up(broker: AckingBroker) -> None:
    """``Client.publish`` opens the thread's lane on its first call: a count
    of lanes being opened left up costs a lane for good. Interrupted as
    ``_lane``'s own calls return (not inside the lane's connecting, nor as
    it returns the lane: a lane dropped there is left to its finalizer)."""

    def in_lane(frame: FrameType, event: str, arg: object) -> bool:
        return event == "c_return" and frame.f_code.co_name == "_lane" and not isinstance(arg, type)

    with liftbridge.Client(f"127.0.0.1:{broker.port}") as client:
        lanes = client._lanes

        def publish() -> None:
            lane = lanes._local.__dict__.pop("lane", None)  # opened again on each call
            if lane is not None:
                lane.close()
            client.publish(STREAM, b"v", timeout=BOUND)

        def check() -> None:
            assert lanes._opening == 0, "a lane opening was left counted"

        assert sweep(publish, check, in_lane, MOST) == {"_lane"}
        publish()
        assert lanes._local.lane in lanes._lanes


def test_interrupts_into_a_small_window_leave_it_whole(broker: AckingBroker) -> None:
    """Real signals at random points of a ``publish_async`` loop into a
    window of :data:`WINDOW`, at most one interrupt a publish. The signals
    come from another process: a thread of this one would need the GIL to
    send one, which it gets when the loop waits for room, outside the SDK."""
    with liftbridge.Client(f"127.0.0.1:{broker.port}", max_inflight=WINDOW) as client:
        assert isinstance(client.publish(STREAM, b"first", timeout=BOUND), liftbridge.Ack)
        armed = threading.Event()  # set before each publish, cleared by its interrupt

        def interrupt(signum: int, frame: FrameType | None) -> None:
            if armed.is_set() and frame is not None and frame.f_code.co_filename.startswith(SDK):
                armed.clear()
                raise Interrupted

        previous = signal.signal(signal.SIGUSR1, interrupt)
        signaller = subprocess.Popen(
            [sys.executable, "-c", _SIGNALLER, str(os.getpid()), str(int(signal.SIGUSR1))]
        )
        interrupted = 0
        ends = time.monotonic() + STORM
        try:
            while interrupted < INTERRUPTS and time.monotonic() < ends:
                armed.set()
                try:
                    client.publish_async(
                        STREAM, b"v", timeout=BOUND, future=False, ack_handler=_ignore
                    )
                except Interrupted:
                    interrupted += 1
        finally:
            armed.clear()
            signaller.kill()  # its own pid; its last signals are handled as wait returns
            signaller.wait()
            signal.signal(signal.SIGUSR1, previous)
        assert interrupted > 0
        _settled(client)


def _inbox_slots_free(client: liftbridge.Client) -> None:
    """Every ack-inbox publish ends (this broker has no unary Publish: each
    fails), and with it every window slot it took is free; more of them than
    the window holds then go through."""
    window = client._publisher._window
    deadline = time.monotonic() + BOUND
    while window.used and time.monotonic() < deadline:  # a publish left in may still run
        time.sleep(0.01)
    assert window.used == 0, "a window slot was left taken"
    futures = [
        client.publish_async(STREAM, b"after", ack_inbox="inbox", timeout=BOUND)
        for _ in range(2 * WINDOW)
    ]
    for future in futures:
        assert isinstance(future.exception(timeout=BOUND), liftbridge.LiftbridgeError)


def test_an_inbox_publish_interrupted_anywhere_is_out_or_in(broker: AckingBroker) -> None:
    """A publish naming an ack inbox takes its slot (Publisher.borrow) and
    queues its job on the pool's threads: an interrupt in between, or as
    borrow lets go of the publisher's lock, kept that slot for good."""
    with liftbridge.Client(f"127.0.0.1:{broker.port}", max_inflight=WINDOW) as client:
        _inbox_slots_free(client)  # the pool's threads started
        interrupted = sweep(
            lambda: client.publish_async(
                STREAM, b"v", ack_inbox="inbox", timeout=BOUND, ack_handler=_ignore
            ),
            lambda: _inbox_slots_free(client),
            in_sdk,
            MOST,
        )
    assert {"borrow", "take", "publish_async"} <= interrupted


def test_a_lane_interrupted_as_it_connects_leaves_no_stream_running(broker: AckingBroker) -> None:
    """A lane interrupted in ``_Lane.__init__`` once its stream is open is
    dropped: its stream must end then (its sender thread with it), not run
    for good on a socket nobody reads. (Interrupted as ``_Lane()`` returns,
    where no profile event comes, the lane is freed at once and its
    finalizer ends the stream.)"""
    lane_init = _Lane.__init__.__code__

    def connected(frame: FrameType, event: str, arg: object) -> bool:
        return event in ("call", "c_return") and frame.f_code is lane_init

    with liftbridge.Client(f"127.0.0.1:{broker.port}") as client:
        lanes = client._lanes

        def publish() -> None:
            client.publish(STREAM, b"v", timeout=BOUND)

        def check() -> None:
            lane = lanes._local.__dict__.pop("lane", None)  # opened again on each call
            if lane is not None:
                lane.close()
            ends = time.monotonic() + BOUND
            while _senders() and time.monotonic() < ends:
                time.sleep(0.01)
            assert not _senders(), "a dropped lane's stream was left running"

        interrupted = sweep(publish, check, connected, MOST)
        assert interrupted == {"__init__"}
        publish()


def _senders() -> list[threading.Thread]:
    """The SDK's HTTP/2 sender threads still running (a lane's stream has one)."""
    return [t for t in threading.enumerate() if t.name == "liftbridge-h2-send" and t.is_alive()]
