"""liftbridge._core._liveness against in-process gRPC servers on loopback: a broker
whose server goes away is reported down once, and up again when it is back;
a healthy broker whose idle connection closes is never reported down."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest

from liftbridge._core._liveness import BrokerWatch
from liftbridge._transport._probe import PROBE_OPTIONS, Probe


def _serve(address: str) -> tuple[grpc.Server, int]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    port = server.add_insecure_port(address)
    server.start()
    return server, port


class Watching:
    """A BrokerWatch over channels of our own, recording what it reports."""

    def __init__(self, options: list[tuple[str, int]]) -> None:
        self._options = options
        self.channels: list[grpc.Channel] = []
        self.down: list[str] = []
        self.reported = threading.Event()
        self.watch = BrokerWatch(self._probe)
        self.watch.start()
        self.watch.add_listener(self._listener)

    def _probe(self, address: str) -> Probe:
        channel = grpc.insecure_channel(address, options=[*self._options, *PROBE_OPTIONS])
        self.channels.append(channel)
        return Probe(channel, address)

    def _listener(self, address: str) -> None:
        self.down.append(address)
        self.reported.set()

    def close(self) -> None:
        self.watch.close()
        for channel in self.channels:
            channel.close()


_FAST_RECONNECT = [
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 500),
]


@pytest.fixture
def watching() -> Iterator[Watching]:
    w = Watching(_FAST_RECONNECT)
    yield w
    w.close()


def _until(condition: object, timeout: float = 10.0) -> None:
    assert callable(condition)
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.02)


def test_a_broker_that_goes_away_is_down_once_then_up_when_back(watching: Watching) -> None:
    server, port = _serve("127.0.0.1:0")
    address = f"127.0.0.1:{port}"
    try:
        watching.watch.watch(address)
        watching.watch.watch(address)  # idempotent
        assert len(watching.channels) == 1
        _until(lambda: _ready(watching, address))
        assert not watching.watch.is_down(address)
        assert not watching.watch.any_down()
    finally:
        server.stop(None).wait(5)
    assert watching.reported.wait(10), "the broker that went away was never reported"
    assert watching.down == [address]
    assert watching.watch.is_down(address)
    assert watching.watch.any_down()  # the look before asking per address
    back, _ = _serve(address)
    try:
        _until(lambda: not watching.watch.is_down(address))
        assert not watching.watch.any_down()
        assert watching.down == [address]  # reported once
    finally:
        back.stop(None).wait(5)


def _ready(watching: Watching, address: str) -> bool:
    channel = watching.channels[0]
    try:
        grpc.channel_ready_future(channel).result(timeout=0.2)
    except grpc.FutureTimeoutError:
        return False
    return not watching.watch.is_down(address)


def test_a_healthy_broker_whose_idle_connection_closes_is_never_down() -> None:
    # The client closes an idle connection after 300 ms: the channel goes
    # READY -> IDLE again and again, as after gRPC's idle timeout.
    watching = Watching([*_FAST_RECONNECT, ("grpc.client_idle_timeout_ms", 300)])
    server, port = _serve("127.0.0.1:0")
    address = f"127.0.0.1:{port}"
    try:
        watching.watch.watch(address)
        # Several idle cycles; a false "down" would be reported within one.
        assert not watching.reported.wait(3.0), watching.down
        assert not watching.watch.is_down(address)
    finally:
        watching.close()
        server.stop(None).wait(5)


def test_a_closed_watch_reports_nothing(watching: Watching) -> None:
    server, port = _serve("127.0.0.1:0")
    address = f"127.0.0.1:{port}"
    watching.watch.watch(address)
    _until(lambda: _ready(watching, address))
    watching.watch.close()
    watching.watch.watch(address)  # ignored once closed
    server.stop(None).wait(5)
    assert not watching.reported.wait(1.0)


def test_a_hung_broker_is_not_down(watching: Watching) -> None:
    """A broker that accepts connections and never answers (SIGSTOPped, or
    too busy to finish a handshake) is slow, not gone: its publishes must
    not fail as if its leader had died."""
    with socket.socket() as hung:
        hung.bind(("127.0.0.1", 0))
        hung.listen(8)  # the kernel completes handshakes; nothing ever answers
        address = f"127.0.0.1:{hung.getsockname()[1]}"
        watching.watch.watch(address)
        assert not watching.reported.wait(2.0), watching.down
        assert not watching.watch.is_down(address)
