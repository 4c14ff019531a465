"""Ctrl-C as a client's first publish starts the ``liftbridge-acks`` thread:
wherever it lands (in the SDK's frames that start it, and in
``Thread.start`` itself where this thread runs it: its call, before the
thread is started, or the return of the call that started it), the next
publish is acked, and one acks thread runs. Before, the publisher marked its
threads started before ``Thread.start`` ran: interrupted there, no thread
read the stream for good and every publish timed out.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType

import pytest

import liftbridge
from bench.publish_cg import STREAM, AckingBroker
from liftbridge._core._callbacks import CallbackRunner
from liftbridge._publish._inbox import InboxPool
from tests.unit.fake_broker import serving
from tests.unit.interrupts import SDK, sweep

MOST = 400  # interrupt points of a first publish in the frames below, at most
BOUND = 30.0  # seconds a publish after the interrupt may take (a loaded machine)

_START = threading.Thread.start.__code__
_FIRST = {"submit", "_admit_part", "start_thread"}
"""The SDK's functions a first publish starts the acks thread in."""


def _starting(frame: FrameType, event: str, arg: object) -> bool:
    """A point where an interrupt's handler runs in the frames that start the acks thread."""
    if event not in ("call", "c_return"):
        return False
    code = frame.f_code
    return code is _START or (code.co_name in _FIRST and "liftbridge" in code.co_filename)


@pytest.fixture
def broker() -> Iterator[AckingBroker]:
    # The bench driver's broker: a port as a FakeBroker has, no subclass of it.
    with serving(AckingBroker()) as served:  # type: ignore[abstract, type-var]
        yield served


def _acks_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "liftbridge-acks" and t.is_alive()]


@pytest.mark.parametrize("batch", [False, True], ids=["publish_async", "publish_many_async"])
def test_a_first_publish_interrupted_as_it_starts_the_acks_thread(
    broker: AckingBroker, batch: bool
) -> None:
    clients: list[liftbridge.Client] = []

    def fresh() -> None:
        client = liftbridge.Client(f"127.0.0.1:{broker.port}")
        client.fetch_metadata(timeout=BOUND)  # not in the first publish's points
        clients.append(client)

    def first() -> None:
        if batch:
            clients[-1].publish_many_async(STREAM, [b"v"], timeout=BOUND)
        else:
            clients[-1].publish_async(STREAM, b"v", timeout=BOUND)

    def check() -> None:
        client = clients[-1]
        after: Callable[[], object] = lambda: client.publish_async(  # noqa: E731
            STREAM, b"after", timeout=BOUND
        ).result(BOUND)
        assert isinstance(after(), liftbridge.Ack)
        assert len(_acks_threads()) == 1
        client.close()
        fresh()

    fresh()
    try:
        interrupted = sweep(first, check, _starting, MOST)
    finally:
        clients[-1].close()
    # The SDK's own steps, and where the acks thread's start is made.
    assert {"_admit_part" if batch else "submit", "start_thread"} <= interrupted


def _named(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == name and t.is_alive()]


def _submit_starting(frame: FrameType, event: str, arg: object) -> bool:
    """A point in ``CallbackRunner.submit``, ``start_thread``, or ``Thread.start`` run here."""
    if event not in ("call", "c_return"):
        return False
    code = frame.f_code
    return code is _START or (
        code.co_name in ("submit", "start_thread") and code.co_filename.startswith(SDK)
    )


def test_a_first_callback_interrupted_as_it_starts_the_callbacks_thread() -> None:
    """``CallbackRunner.submit`` set its thread and then started it: an
    interrupt at ``Thread.start``'s call left a thread never started that
    every later callback was queued for, never to run."""
    runners = [CallbackRunner()]

    def check() -> None:
        ran = threading.Event()
        runners[-1].submit(ran.set)
        assert ran.wait(BOUND), "a callback handed over after the interrupt never ran"
        assert len(_named("liftbridge-callbacks")) == 1
        runners[-1].close(time.monotonic() + BOUND)
        assert not _named("liftbridge-callbacks")
        runners.append(CallbackRunner())

    try:
        interrupted = sweep(lambda: runners[-1].submit(_nothing), check, _submit_starting, MOST)
    finally:
        runners[-1].close(time.monotonic() + BOUND)
    # The SDK's step, and where the start is made (old code: Thread.start here).
    assert "submit" in interrupted and interrupted & {"start_thread", "start"}


def test_a_callback_after_close_interrupted_as_it_starts_the_late_thread() -> None:
    """After close, ``submit`` marked its late thread running and then
    started it: interrupted at ``Thread.start``'s call, no late thread ever
    ran what was handed over after close."""
    runner = CallbackRunner()
    runner.close(time.monotonic() + BOUND)

    def check() -> None:
        ran = threading.Event()
        runner.submit(ran.set)
        assert ran.wait(BOUND), "a callback handed over after close never ran"
        ends = time.monotonic() + BOUND  # the late thread ends once it has nothing left
        while _named("liftbridge-callbacks-late") and time.monotonic() < ends:
            time.sleep(0.01)
        assert not _named("liftbridge-callbacks-late")

    interrupted = sweep(lambda: runner.submit(_nothing), check, _submit_starting, MOST)
    # The SDK's step, and where the start is made (old code: Thread.start here).
    assert "submit" in interrupted and interrupted & {"start_thread", "start"}


def _nothing() -> None:
    pass


def _inbox_workers() -> list[threading.Thread]:
    return [
        t
        for t in threading.enumerate()
        if t.name.startswith("liftbridge-inbox-publish_") and t.is_alive()
    ]


def test_a_first_inbox_publish_interrupted_as_it_starts_a_worker(broker: AckingBroker) -> None:
    """The ack-inbox pool listed a worker once ``Thread.start`` returned: an
    interrupt in it after the thread was started left a worker unlisted,
    waiting for a job nobody counted it for (the next publish started one
    more) and never joined by close()."""
    inbox = os.path.join(SDK, "_publish", "_inbox.py")

    def starting(frame: FrameType, event: str, arg: object) -> bool:
        if event not in ("call", "c_return"):
            return False
        code = frame.f_code
        return (
            code is _START
            or code.co_filename == inbox
            or code.co_name in ("start_thread", "borrow")
        ) and frame.f_code.co_filename.startswith((SDK, _START.co_filename))

    clients = [liftbridge.Client(f"127.0.0.1:{broker.port}")]

    def check() -> None:
        client = clients[-1]
        window = client._publisher._window
        ends = time.monotonic() + BOUND
        while window.used and time.monotonic() < ends:  # a publish left in may still run
            time.sleep(0.01)
        assert window.used == 0, "a window slot was left taken"
        # A job withdrawn once queued is skipped by a worker, which then counts
        # itself idle: until it has, a publish would rightly start another.
        pool = client._publishing._inbox
        while not _quiet(pool) and time.monotonic() < ends:
            time.sleep(0.01)
        # This broker has no unary Publish: the publish fails, after it ran on a worker.
        after = client.publish_async(STREAM, b"after", ack_inbox="inbox", timeout=BOUND)
        assert isinstance(after.exception(timeout=BOUND), liftbridge.LiftbridgeError)
        assert len(_inbox_workers()) == 1
        client.close()
        assert not _inbox_workers(), "close() did not wait for a worker"
        clients.append(liftbridge.Client(f"127.0.0.1:{broker.port}"))

    try:
        interrupted = sweep(
            lambda: clients[-1].publish_async(STREAM, b"v", ack_inbox="inbox", timeout=BOUND),
            check,
            starting,
            MOST,
        )
    finally:
        clients[-1].close()
    # The pool's step, and where the start is made (old code: Thread.start here).
    assert "publish_async" in interrupted and interrupted & {"start_thread", "start"}


def _quiet(pool: InboxPool) -> bool:
    """Every listed worker waits for a job and is counted idle, or the last
    one listed was left with no job (counted by the next publish)."""
    return pool._idle == len(pool._threads) or pool._threads[-1] is pool._next
