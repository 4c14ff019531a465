"""Ctrl-C while publishing: an interrupt lands between any two steps of the
caller's thread, including just after a lock was taken. The publisher must
not be left holding a lock (every later publish, and the acks thread, would
wait forever). Interrupts are a signal handler raising on the main thread,
sent often by another thread while the main thread publishes; the real
KeyboardInterrupt arrives the same way.

Only the SDK's own frames are interrupted: the standard library's (logging's
handlers, too, take their lock with acquire() then try) and the garbage
collector's callbacks are not what this checks. Logging is kept at WARNING
so that the loop is not mostly the suite's DEBUG capture.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Iterator
from types import FrameType

import pytest

import liftbridge
from bench.publish_cg import STREAM, AckingBroker
from tests.unit.fake_broker import serving
from tests.unit.interrupts import SDK, Interrupted

INTERRUPTS = 400  # how many times the publishing loop is interrupted (at most)
STORM = 30.0  # seconds the interrupts may take (a loaded machine signals slowly)


@pytest.fixture
def broker() -> Iterator[AckingBroker]:
    # The bench driver's broker: a port as a FakeBroker has, no subclass of it.
    with serving(AckingBroker()) as served:  # type: ignore[abstract, type-var]
        yield served


def _publish_until_interrupted(client: liftbridge.Client) -> int:
    """Publishes in a loop on this (the main) thread while another thread
    signals it; returns how many times a publish was interrupted. Only the
    SDK's own code is interrupted (a signal that finds the thread elsewhere,
    in the loop or in the garbage collector's callbacks, is let pass), so
    every interrupt ends the publish it hit."""
    armed = threading.Event()
    stop = threading.Event()

    def interrupt(signum: int, frame: FrameType | None) -> None:
        if armed.is_set() and frame is not None and frame.f_code.co_filename.startswith(SDK):
            raise Interrupted

    def signaller() -> None:
        while not stop.is_set():
            os.kill(os.getpid(), signal.SIGUSR1)
            time.sleep(0.0002)

    previous = signal.signal(signal.SIGUSR1, interrupt)
    thread = threading.Thread(target=signaller, name="test-signaller", daemon=True)
    interrupted = 0
    ends = time.monotonic() + STORM
    armed.set()
    thread.start()
    try:
        while interrupted < INTERRUPTS and time.monotonic() < ends:
            try:
                client.publish_async(STREAM, b"v", future=False, ack_handler=_ignore)
            except Interrupted:
                interrupted += 1
    finally:
        armed.clear()
        stop.set()
        thread.join()
        signal.signal(signal.SIGUSR1, previous)
    return interrupted


def _ignore(ack: liftbridge.Ack | None, error: BaseException | None) -> None:
    """The publishes' ack handler."""


@pytest.mark.skipif(not hasattr(signal, "SIGUSR1"), reason="needs POSIX signals")
def test_interrupts_while_publishing_leave_no_lock_held(
    broker: AckingBroker, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    with liftbridge.Client(f"127.0.0.1:{broker.port}", max_inflight=100_000) as client:
        # Connected, and the publisher's threads started, before any interrupt.
        assert isinstance(client.publish(STREAM, b"first", timeout=20), liftbridge.Ack)
        assert _publish_until_interrupted(client) > 0
        # A publish from another thread: with a lock left held it waits forever.
        outcome: list[object] = []
        after = threading.Thread(
            target=lambda: outcome.append(client.publish(STREAM, b"after", timeout=20)),
            daemon=True,
        )
        after.start()
        after.join(timeout=60)
        assert not after.is_alive(), "a publish after the interrupts never finished"
        assert outcome and isinstance(outcome[0], liftbridge.Ack)
