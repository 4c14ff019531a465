"""PublishAsync on the SDK's own HTTP/2 connection (:mod:`liftbridge._transport._http2`)
against the real server: values far past one flow-control window and one
DATA frame come back exact, a full window of publishes in flight is acked in
order, and the stream really is on that connection for a plaintext client
(thread ``liftbridge-h2-send``); the TLS client's stays on grpcio
(``tests/integration/test_tls.py``). On Linux the real server's small frames
(its WINDOW_UPDATE and BDP PING a request) are held for the next ack on the
shared stream, not on a thread's lane."""

from __future__ import annotations

import hashlib
import socket
import sys
import threading
import time
from concurrent.futures import Future
from typing import Any

import pytest

import liftbridge
from liftbridge._core import _validate
from liftbridge._transport._http2_conn import HELD_BYTES, Http2Connection
from liftbridge_api import api_pb2

SENDER = "liftbridge-h2-send"


def _senders() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == SENDER]


def _value(seed: int, size: int) -> bytes:
    """``size`` bytes that differ everywhere from another seed's (a shifted or
    spliced frame would not compare equal)."""
    block = b"".join(hashlib.sha256(b"%d-%d" % (seed, i)).digest() for i in range(size // 32 + 1))
    return block[:size]


def _largest(stream: str, correlation_id: str) -> int:
    """The largest value the client's default limit lets through (as in
    test_message_size.py)."""
    probe = api_pb2.PublishRequest(
        stream=stream, value=b"", correlationId=correlation_id, expectedOffset=-1
    )
    return _validate.SERVER_MAX_MESSAGE - _validate.ENVELOPE_ALLOWANCE - probe.ByteSize() - 4


def _values(client: liftbridge.Client, stream: str, last: int) -> list[bytes]:
    with client.subscribe(stream, start=0, stop=last) as sub:
        return [m.value for m in sub]


def test_values_near_the_max_message_size_come_back_exact(
    client: liftbridge.Client, stream: str
) -> None:
    correlation = "c" * 32
    largest = _largest(stream, correlation)
    # Each ~1 MiB value is 16 times the stream's first flow-control window
    # and 64 DATA frames; several in flight at once share the connection's.
    sizes = [largest, largest - 1, 300_000, largest, 65_536, largest]
    values = [_value(i, size) for i, size in enumerate(sizes)]
    futures = [
        client.publish_async(stream, value, correlation_id=f"{i:032d}")
        for i, value in enumerate(values[:4])
    ]
    acks = [f.result(timeout=60) for f in futures]
    assert [a.offset for a in acks if a is not None] == [0, 1, 2, 3]
    # A synchronous publish goes on this thread's own stream (a lane).
    for value in values[4:]:
        ack = client.publish(stream, value, correlation_id=correlation, timeout=60)
        assert ack is not None
    assert _values(client, stream, len(values) - 1) == values


def test_a_full_window_in_flight_twenty_times_over_is_acked_in_order(
    client: liftbridge.Client, stream: str
) -> None:
    """20,000 publishes through the default window (max_inflight 1024): the
    producer blocks on a full window, the stream never stalls, and the acks
    come back for every publish, in the order of its offsets."""
    count = 20_000
    futures: list[Future[liftbridge.Ack | None]] = [
        client.publish_async(stream, b"%d" % i) for i in range(count)
    ]
    acks = [f.result(timeout=120) for f in futures]
    assert [a.offset if a is not None else None for a in acks] == list(range(count))
    tail = _values(client, stream, count - 1)[-3:]
    assert tail == [b"%d" % i for i in range(count - 3, count)]


def test_a_plaintext_clients_publish_stream_is_its_own_connection(
    client: liftbridge.Client, stream: str
) -> None:
    assert _senders() == []  # no stream before the first publish
    ack = client.publish_async(stream, b"first").result(timeout=30)
    assert ack is not None and ack.offset == 0
    assert len(_senders()) == 1  # the shared PublishAsync stream, open for more
    ack = client.publish(stream, b"second")
    assert ack is not None and ack.offset == 1
    assert len(_senders()) == 2  # and this thread's lane
    client.close()
    deadline = time.monotonic() + 10
    for sender in _senders():
        sender.join(max(0.0, deadline - time.monotonic()))
    assert _senders() == []


@pytest.mark.skipif(sys.platform != "linux", reason="SO_RCVLOWAT holds bytes on Linux only")
def test_the_shared_publish_stream_holds_small_frames_and_a_lane_does_not(
    client: liftbridge.Client, stream: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A connection's id: the connection, and its SO_RCVLOWAT after each hold.
    holds: dict[int, tuple[Any, list[int]]] = {}
    hold = Http2Connection._hold

    def recording(self: Any) -> None:
        hold(self)
        mark = self._sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT)
        holds.setdefault(id(self), (self, []))[1].append(mark)

    monkeypatch.setattr(Http2Connection, "_hold", recording)
    for i in range(20):  # this thread's lane: it writes its requests and reads their acks
        client.publish(stream, b"%d" % i)
    lanes = [connection for connection, _ in holds.values()]
    assert lanes, "the lane's first ack read never offered to hold"
    for connection in lanes:  # its own next write turned the hold off for good
        assert connection._sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT) == 1
    lane_ids = set(holds)
    futures = [client.publish_async(stream, b"y" * 100) for _ in range(500)]
    for future in futures:
        future.result(timeout=30)
    shared = [marks for key, (_, marks) in holds.items() if key not in lane_ids]
    assert any(HELD_BYTES in marks for marks in shared), shared
