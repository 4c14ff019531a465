"""Ctrl-C while a publishing thread writes its own request on the SDK's
HTTP/2 call (``write_now``: every paced publish, and a lane's): whatever
step it lands on, the request's DATA frame is out whole, queued whole, or
not out at all with its flow-control window bytes given back; or, where
part of it may have gone (the interrupt came as a send returned), the call
ends with UNAVAILABLE. Before, an interrupt as a short send returned lost
the rest of the frame (the next frame's bytes then read as its rest: a
corrupt HTTP/2 stream), and one between taking the window and sending
leaked those window bytes for good (enough of them, and the stream's
writes wait forever for window the server never gives back). The same for
``_flush`` (the queue a reading thread writes): what a send took but the
queue still held was sent again.

The interrupt is raised at each point of one write where an interrupt's
handler runs, in the SDK's frames (:mod:`tests.unit.interrupts`), and, for
the one point no profile event marks (a send through libc returning), by a
send that raises as it returns.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import grpc
import pytest

from liftbridge._transport import _http2_conn
from liftbridge._transport._http2_conn import Http2Connection
from liftbridge._transport._nowait import send_nowait
from tests.unit.interrupts import Interrupted, in_sdk, sweep

MOST = 200  # interrupt points of one write, at most
WINDOW = 1 << 24  # the peer's windows and max frame size here: never the limit
SMALL = b"v" * 100  # a paced publish: the socket takes it whole
BIG = b"v" * (1 << 18)  # more than the socket takes at once: a short send
BUFFER = 1 << 12  # the socket pair's buffers


class _Request:
    """What write_now writes: a serialized message."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    def SerializeToString(self) -> bytes:
        return self._data


def _frame(chunk: bytes) -> bytes:
    """The DATA frame write_now makes of ``chunk`` (stream 1, no flags)."""
    size = len(chunk) + 5
    return (
        size.to_bytes(3, "big")
        + bytes([0, 0])
        + (1).to_bytes(4, "big")
        + bytes(1)
        + (len(chunk).to_bytes(4, "big"))
        + chunk
    )


class _Pair:
    """A connection whose socket's other end this test reads."""

    def __init__(self) -> None:
        ours, self.theirs = socket.socketpair()
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, BUFFER)
        self.theirs.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, BUFFER)
        self.theirs.setblocking(False)
        self.conn = Http2Connection(ours, None, iter(()), sending=False)
        peer = self.conn._peer
        peer.stream = peer.conn = peer.max_frame = WINDOW

    def received(self) -> bytes:
        """Everything the connection wrote and queued, as the peer reads it
        (the queue written as the peer reads, as the reading thread would)."""
        got = bytearray()
        for _ in range(10_000):
            try:
                data = self.theirs.recv(1 << 16)
            except BlockingIOError:
                data = b""
            got += data
            if not data:
                if not self.conn._pending or self.conn._finished:
                    return bytes(got)
                self.conn._flush()
        raise AssertionError("the queue never drained")

    def check(self, chunk: bytes) -> None:
        """The frame went whole (its window taken) or not at all (none
        taken), or the call ended UNAVAILABLE."""
        conn = self.conn
        got = self.received()
        if conn._finished:
            assert conn._error is not None and conn._error.code() is grpc.StatusCode.UNAVAILABLE
        else:
            frame = _frame(chunk)
            assert got in (b"", frame), f"{len(got)} of a {len(frame)}-byte frame went"
            taken = WINDOW - conn._peer.stream
            assert taken == (len(chunk) + 5 if got else 0), "window bytes leaked"
            assert conn._peer.conn == conn._peer.stream
        self.close()

    def close(self) -> None:
        self.conn._sock.close()
        self.theirs.close()


@contextmanager
def _pairs() -> Iterator[list[_Pair]]:
    pairs = [_Pair()]
    try:
        yield pairs
    finally:
        pairs[-1].close()


@pytest.mark.parametrize("chunk", [SMALL, BIG], ids=["whole-send", "short-send"])
def test_a_write_interrupted_anywhere_goes_whole_or_not_at_all(chunk: bytes) -> None:
    with _pairs() as pairs:

        def check() -> None:
            pairs[-1].check(chunk)
            pairs.append(_Pair())

        interrupted = sweep(lambda: pairs[-1].conn.write_now(_Request(chunk)), check, in_sdk, MOST)
        assert pairs[-1].received() == _frame(chunk)  # the sweep's last run ran whole
    assert "write_now" in interrupted


def _interrupted_send(sock: socket.socket, data: bytes) -> int:
    """A send interrupted as it returns: what it wrote is written."""
    send_nowait(sock, data)
    raise Interrupted


@pytest.mark.parametrize("chunk", [SMALL, BIG], ids=["whole-send", "short-send"])
@pytest.mark.parametrize("queued", [False, True], ids=["write_now", "_flush"])
def test_a_write_interrupted_as_its_send_returns_goes_whole_or_ends_the_call(
    monkeypatch: pytest.MonkeyPatch, chunk: bytes, queued: bool
) -> None:
    pair = _Pair()
    conn = pair.conn
    write: Callable[[], object]
    if queued:  # as a reading thread's frames wait: whole frames, window taken
        conn._pending += _frame(chunk)
        conn._peer.stream -= len(chunk) + 5
        conn._peer.conn -= len(chunk) + 5
        write = conn._flush
    else:
        write = lambda: conn.write_now(_Request(chunk))  # noqa: E731
    # write_now's send lets go of the GIL (send_released), _flush's keeps it.
    monkeypatch.setattr(_http2_conn, "send_nowait", _interrupted_send)
    monkeypatch.setattr(_http2_conn, "send_released", _interrupted_send)
    with pytest.raises(Interrupted):
        write()
    monkeypatch.setattr(_http2_conn, "send_nowait", send_nowait)
    monkeypatch.setattr(_http2_conn, "send_released", send_nowait)
    got = pair.received()
    if conn._finished:
        assert conn._error is not None and conn._error.code() is grpc.StatusCode.UNAVAILABLE
    else:
        assert got == _frame(chunk), f"{len(got)} bytes of a {len(_frame(chunk))}-byte frame"
    pair.close()


class _InterruptedTls:
    """A TLS layer interrupted as its ``wrap`` returns: the record it made
    (its sequence counted) is lost, and no later record would decrypt."""

    def wrap(self, data: bytes) -> bytes:
        raise Interrupted


def test_an_answer_interrupted_as_its_tls_record_is_made_ends_the_call() -> None:
    """``_queue`` (a reading thread's answers: a lane's own thread reads)
    went on after such a record was lost; the server then failed to decrypt
    everything after it."""
    ours, theirs = socket.socketpair()
    conn = Http2Connection(ours, _InterruptedTls(), iter(()), sending=False)  # type: ignore[arg-type]
    try:
        with pytest.raises(Interrupted):
            conn._queue(b"\x00" * 17)
        assert conn._finished
        assert conn._error is not None and conn._error.code() is grpc.StatusCode.UNAVAILABLE
    finally:
        ours.close()
        theirs.close()


def test_an_answer_interrupted_anywhere_is_queued_whole_or_not_at_all() -> None:
    frame = _frame(SMALL)
    with _pairs() as pairs:

        def check() -> None:
            conn = pairs[-1].conn
            assert bytes(conn._pending) in (b"", frame) and not conn._finished
            assert conn._out_lock.acquire(False)
            conn._out_lock.release()
            pairs[-1].close()
            pairs.append(_Pair())

        interrupted = sweep(lambda: pairs[-1].conn._queue(frame), check, in_sdk, MOST)
        assert bytes(pairs[-1].conn._pending) == frame
    assert "_queue" in interrupted
