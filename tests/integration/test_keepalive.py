"""Client-side keepalive against the real server: a broker that hangs while
its kernel still answers TCP (SIGSTOP) is found by a plain handler
subscription, which then reports a typed error instead of waiting forever."""

from __future__ import annotations

import os
import queue
import signal
import time
from collections.abc import Iterator

import pytest

import liftbridge
from liftbridge.testing import LocalServer

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def own_server() -> Iterator[LocalServer]:
    """A server of this test's own: it is stopped (SIGSTOP) and continued."""
    with LocalServer() as local:
        yield local


def test_a_hung_broker_is_found_by_a_handler_subscription(
    own_server: LocalServer, unique_name: str
) -> None:
    events: queue.SimpleQueue[tuple[liftbridge.Message | None, BaseException | None]] = (
        queue.SimpleQueue()
    )
    with liftbridge.Client(
        own_server.address,
        keepalive_interval=1.0,
        keepalive_timeout=1.0,
        rpc_timeout=2.0,
        resubscribe_wait=3.0,
    ) as client:
        client.create_stream(unique_name)
        client.subscribe(
            unique_name,
            lambda message, error: events.put((message, error)),
            start=liftbridge.StartPosition.EARLIEST,
        )
        client.publish(unique_name, b"before")
        message, error = events.get(timeout=10)
        assert error is None and message is not None and message.value == b"before"
        pid = own_server.pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        stopped = time.monotonic()
        try:
            # The PING goes after 1 s of silence, its answer is missed 1 s
            # later; resubscribing to the stopped broker fails for 3 s (each
            # handshake bounded by rpc_timeout): then the handler hears it.
            message, error = events.get(timeout=30)
            took = time.monotonic() - stopped
        finally:
            os.kill(pid, signal.SIGCONT)
        assert message is None
        assert isinstance(error, liftbridge.UnavailableError), repr(error)
        assert took < 20, f"the hung broker was found after {took:.1f} s"
