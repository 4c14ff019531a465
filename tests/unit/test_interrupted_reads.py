"""Ctrl-C while a read opens its stream: wherever it lands once the stream
is open (its handshake taken, its first messages read, the subscription's
thread started), the stream is cancelled and no ``liftbridge-*`` thread is
left before the interrupt goes on. Before, a ``subscribe`` or a direct read
(``Client.get``) interrupted there dropped its open stream: no one could end
it (a live stream's socket stays open on the SDK's own connection).

The interrupt is raised at each point of the opening call where an
interrupt's handler runs, in the SDK's frames and in ``Thread.start`` run on
the calling thread (:mod:`tests.unit.interrupts`), on a fake router's
streams (no network).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import liftbridge
from liftbridge._consume import _direct
from liftbridge._consume._positions import subscribe_request
from liftbridge._consume._subscription import Subscription, start_subscription
from liftbridge._core._admin import Admin
from liftbridge._core._router import Deadline, Target
from tests.unit.fake_router import FakeRouter, FakeStream, handshake, message, metadata_with
from tests.unit.interrupts import (
    in_sdk_or_thread_start,
    interrupted_at,
    sdk_threads_left,
    sweep_whole,
)

STREAM = "orders"
MOST = 1000  # interrupt points of one opening call, at most (a bound on each sweep)
BOUND = 30.0  # seconds a read's threads may take to end (a loaded machine)
WHOLE = 3  # a sweep ends after this many runs in a row had no point left to interrupt


class _Router(FakeRouter):
    """The fake router, also for reads that share a connection (``shared``)."""

    def open_stream(
        self, method: str, request: Any, *, target: Target, deadline: Deadline, shared: bool = False
    ) -> tuple[str, FakeStream]:
        return super().open_stream(method, request, target=target, deadline=deadline)


def _sweep(
    read: Callable[[_Router], Callable[[], object]],
    whole: Callable[[], object] = lambda: None,
) -> set[str]:
    """For each point of a fresh read in turn (``read(router)`` makes it, on
    a router with one stream that has a handshake and offsets 0 and 1): the
    interrupt there, then the stream, once opened, is cancelled (after a
    read that ran whole, ``whole()`` ends it) and every liftbridge-* thread
    started ends within BOUND."""

    def run(n: int) -> str | None:
        before = set(threading.enumerate())
        router = _Router(metadata=metadata_with({STREAM: 1}))
        stream = FakeStream([handshake(), message(STREAM, 0), message(STREAM, 1)])
        router.streams.append(stream)
        where = interrupted_at(n, read(router), in_sdk_or_thread_start)
        if where is None:
            whole()
        left = sdk_threads_left(before, BOUND)
        assert not left, f"{left} still run (interrupted in {where})"
        if not router.streams:  # opened
            assert stream.done(), f"an open stream was left (interrupted in {where})"
        return where

    return sweep_whole(run, WHOLE, MOST)


def test_a_subscribe_interrupted_anywhere_leaves_no_stream_open() -> None:
    made: list[Subscription] = []
    got = threading.Event()

    def handler(message: liftbridge.Message | None, error: BaseException | None) -> None:
        got.set()

    def read(router: _Router) -> Callable[[], object]:
        got.clear()
        made.clear()
        request = subscribe_request(STREAM, 0, 0, None, False, False)
        return lambda: made.append(
            start_subscription(
                router.as_router(),
                request,
                handler,
                resubscribe_wait=BOUND,
                open_timeout=BOUND,
            )
        )

    def whole() -> None:
        assert got.wait(BOUND)  # the subscription works as any
        made[0].close()

    interrupted = _sweep(read, whole)
    # The points past the opening: its handshake taken, its thread's start.
    assert {"_open", "start_thread"} <= interrupted


def test_a_direct_read_interrupted_anywhere_leaves_no_stream_open() -> None:
    def read(router: _Router) -> Callable[[], object]:
        def get() -> None:
            found = _direct.get(
                router.as_router(),
                Admin(router.as_router()),
                STREAM,
                0,
                deadline=Deadline(BOUND),
            )
            assert found.offset == 0

        return get

    interrupted = _sweep(read)
    # The points past the opening: its handshake taken, a message read and taken.
    assert {"_scan", "message_from_proto", "take"} <= interrupted
