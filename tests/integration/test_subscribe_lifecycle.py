"""``subscribe(timeout=)`` bounds the wait for the first handshake, and a
subscribe whose handler closed the client returns its subscription (issue 25)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

import liftbridge
from liftbridge.testing import LocalServer


@pytest.fixture
def own_server() -> Iterator[LocalServer]:
    """A server of this test's own, which it may kill."""
    with LocalServer() as server:
        yield server


def test_subscribe_timeout_bounds_the_first_handshake(
    own_server: LocalServer, unique_name: str
) -> None:
    with liftbridge.Client(own_server.address, resubscribe_wait=30) as client:
        client.create_stream(unique_name)
        client.fetch_partition_metadata(unique_name)  # the metadata is cached
        own_server.kill()
        started = time.monotonic()
        with pytest.raises((liftbridge.UnavailableError, liftbridge.DeadlineExceededError)):
            client.subscribe(unique_name, start=liftbridge.StartPosition.EARLIEST, timeout=1)
        # Bounded by the 1 s asked for, not by resubscribe_wait (30 s).
        assert time.monotonic() - started < 10


def test_subscribe_timeout_is_checked(client: liftbridge.Client, unique_name: str) -> None:
    with pytest.raises(liftbridge.InvalidArgumentError, match="timeout"):
        client.subscribe(unique_name, timeout=-1)


def test_a_handler_closing_the_client_does_not_make_subscribe_raise(
    server: LocalServer, unique_name: str
) -> None:
    with liftbridge.Client(server.address) as filler:
        filler.create_stream(unique_name)
        for i in range(3):
            filler.publish(unique_name, b"%d" % i)
    for _ in range(5):  # the handler's close races subscribe's return: try it several times
        _subscribe_and_close_from_the_handler(server, unique_name)


def _subscribe_and_close_from_the_handler(server: LocalServer, stream: str) -> None:
    client = liftbridge.Client(server.address)
    seen: list[int] = []
    closed = threading.Event()

    def handler(message: liftbridge.Message | None, error: BaseException | None) -> None:
        if message is not None:
            seen.append(message.offset)
            if len(seen) == 3:
                client.close()
                closed.set()

    subscription = client.subscribe(stream, handler, start=liftbridge.StartPosition.EARLIEST)
    assert closed.wait(10)
    assert subscription.wait(10)
    assert seen == [0, 1, 2]
    assert client.closed
