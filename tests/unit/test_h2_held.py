"""Small frames held in the kernel on a publishing call (``HELD_BYTES``):
after a read that brought responses, a grpc-go server's WINDOW_UPDATE and BDP
PING (30 bytes) wait for the next response's read instead of waking the
reader on their own; whatever must wake it (held bytes past ``HELD_MS``, a
WINDOW_UPDATE a sender waits for, the trailers after our END_STREAM) still
does. Played frame by frame on 127.0.0.1 (:mod:`tests.unit.h2_peer`).
"""

from __future__ import annotations

import socket
import sys
import threading
import time
from collections.abc import Callable

import grpc
import pytest

from liftbridge._transport import _http2, _http2_conn, _nowait
from liftbridge._transport._http2 import Http2Call
from liftbridge._transport._http2_conn import HELD_BYTES
from tests.unit import test_http2
from tests.unit.h2_peer import (
    ACK,
    DATA,
    END_STREAM,
    INITIAL_WINDOW_SIZE,
    PING,
    RST_STREAM,
    SETTINGS,
    STREAM,
    WAIT,
    Peer,
    frame,
    grpc_message,
    settings,
    window_update,
)
from tests.unit.test_http2 import (
    Connection,
    Reader,
    ended_with,
    request,
    status_of,
    waiting_for_window,
)

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(sys.platform != "linux", reason="SO_RCVLOWAT holds bytes on Linux only"),
]

connection = test_http2.connection  # the fixture: calls to a listening socket

_BDP_PAIR = window_update(0, 143) + frame(PING, 0, 0, b"bdp-ping")
"""What grpc-go sends for a request while no BDP ping of its is out: 30 bytes."""


@pytest.fixture
def held_long(monkeypatch: pytest.MonkeyPatch) -> None:
    """Held bytes wait longer than any test: only what must wake the reader does."""
    monkeypatch.setattr(_http2, "HELD_MS", int(WAIT * 1000 * 10))


def _responding(call: Http2Call[bytes], peer: Peer, opening: bytes) -> Reader:
    """Writes ``opening`` (the server's SETTINGS and headers) and a response;
    returns the call's reader once that response is read (the read that
    brought it has returned: the mark is up)."""
    reader = Reader(call)
    peer.write(opening + frame(DATA, 0, STREAM, grpc_message(b"first")))
    deadline = time.monotonic() + WAIT
    while not reader.responses:
        assert time.monotonic() < deadline, "the response was not read"
        time.sleep(0.005)
    return reader


def _counted_feeds(call: Http2Call[bytes]) -> list[bytes]:
    """Records the bytes of each read the call's frame reader is fed."""
    fed: list[bytes] = []
    feed = call._reader.feed

    def counted(data: bytes) -> None:
        fed.append(bytes(data))
        feed(data)

    call._reader.feed = counted  # type: ignore[method-assign]
    return fed


def test_a_bdp_ping_after_a_response_comes_in_the_next_response_s_read(
    connection: Connection, held_long: None
) -> None:
    call, peer, requests = connection.open()
    fed = _counted_feeds(call)
    reader = _responding(call, peer, settings() + peer.response_headers())
    peer.read_until(SETTINGS, ACK)  # all the client sends before the PING's answer
    peer.write(_BDP_PAIR)
    # Held below HELD_BYTES: nothing wakes the reader, so nothing answers the PING yet.
    assert not peer.pending(wait=0.2)
    peer.write(frame(DATA, 0, STREAM, grpc_message(b"second")))
    assert peer.read_until(PING, ACK).payload == b"bdp-ping"
    assert reader.responses == [b"first", b"second"]
    assert fed[-1] == _BDP_PAIR + frame(DATA, 0, STREAM, grpc_message(b"second"))
    requests.put(None)
    peer.read_until(DATA, END_STREAM)
    peer.write(peer.trailers(0))
    assert isinstance(reader.finish(), StopIteration)


def _recorded(
    name: str, send: Callable[[socket.socket, bytes], int], sends: list[tuple[str, bytes]]
) -> Callable[[socket.socket, bytes], int]:
    """``send``, each call's data recorded in ``sends`` under ``name``."""

    def recorded(sock: socket.socket, data: bytes) -> int:
        sends.append((name, bytes(data)))
        return send(sock, data)

    return recorded


@pytest.fixture
def replies_wait_long(monkeypatch: pytest.MonkeyPatch) -> None:
    """A holding reader's answers wait longer than any test for a request."""
    monkeypatch.setattr(_http2, "REPLY_WAIT", WAIT * 10)


def test_a_holding_reader_s_ping_answer_goes_out_with_the_next_request(
    connection: Connection,
    held_long: None,
    replies_wait_long: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """In the request's own send, the one that lets go of the GIL (not
    _flush's, which keeps it)."""
    call, peer, requests = connection.open()
    # The SETTINGS ack, queued in the read that brought the first response, waits too.
    reader = _responding(call, peer, settings() + peer.response_headers())
    peer.write(_BDP_PAIR + frame(DATA, 0, STREAM, grpc_message(b"second")))
    # Read with the response, answered by nobody yet: it waits for a request.
    assert not peer.pending(wait=0.2)
    assert reader.responses == [b"first", b"second"]
    sends: list[tuple[str, bytes]] = []
    for name in ("send_released", "send_nowait"):
        monkeypatch.setattr(_http2_conn, name, _recorded(name, getattr(_http2_conn, name), sends))
    assert call.write_now(request(b"carrier"))  # a publisher's own write takes them first
    assert [name for name, _ in sends] == ["send_released"]
    assert sends[0][1].startswith(frame(SETTINGS, ACK, 0) + frame(PING, ACK, 0, b"bdp-ping"))
    assert peer.read_frame().kind == SETTINGS
    assert peer.read_frame().kind == PING
    peer.read_until(DATA)
    assert bytes(peer.data) == grpc_message(request(b"carrier").SerializeToString())
    requests.put(None)
    peer.read_until(DATA, END_STREAM)
    peer.write(peer.trailers(0))
    assert isinstance(reader.finish(), StopIteration)


@pytest.mark.parametrize("cut", [4, 26, 30], ids=["in-the-answers", "after-them", "in-the-frame"])
def test_a_request_sent_in_part_with_the_answers_before_it_goes_on_in_order(
    connection: Connection,
    held_long: None,
    replies_wait_long: None,
    monkeypatch: pytest.MonkeyPatch,
    cut: int,
) -> None:
    """The socket takes only ``cut`` bytes of the answers (26 bytes: the
    SETTINGS and PING acks) and the request sent together: the rest goes
    next, answers first, whole frames in order."""
    call, peer, requests = connection.open()
    reader = _responding(call, peer, settings() + peer.response_headers())
    peer.write(_BDP_PAIR + frame(DATA, 0, STREAM, grpc_message(b"second")))
    assert not peer.pending(wait=0.2)
    send = _nowait.send_released
    monkeypatch.setattr(_http2_conn, "send_released", lambda sock, data: send(sock, data[:cut]))
    assert call.write_now(request(b"carrier"))
    assert peer.read_frame().kind == SETTINGS
    assert peer.read_frame().payload == b"bdp-ping"
    peer.read_until(DATA)
    assert bytes(peer.data) == grpc_message(request(b"carrier").SerializeToString())
    assert not peer.pending(wait=0.2)  # nothing twice
    monkeypatch.setattr(_http2_conn, "send_released", send)
    requests.put(None)
    peer.read_until(DATA, END_STREAM)
    peer.write(peer.trailers(0))
    assert isinstance(reader.finish(), StopIteration)


def test_a_holding_reader_answers_itself_when_no_request_comes_and_keeps_holding(
    connection: Connection, held_long: None
) -> None:
    call, peer, requests = connection.open()
    reader = _responding(call, peer, settings() + peer.response_headers())
    peer.read_until(SETTINGS, ACK)
    peer.write(_BDP_PAIR + frame(DATA, 0, STREAM, grpc_message(b"second")))
    assert peer.read_until(PING, ACK).payload == b"bdp-ping"  # within REPLY_WAIT
    # Still holding: a lone pair after it wakes nobody.
    peer.write(_BDP_PAIR)
    assert not peer.pending(wait=0.2)
    assert reader.responses == [b"first", b"second"]
    requests.put(None)
    peer.read_until(DATA, END_STREAM)
    peer.write(peer.trailers(0))
    assert isinstance(reader.finish(), StopIteration)


def test_a_holding_reader_answers_many_pings_at_once(
    connection: Connection, held_long: None, replies_wait_long: None
) -> None:
    call, peer, _ = connection.open()
    _responding(call, peer, settings() + peer.response_headers())  # its SETTINGS ack waits
    pings = [b"ping-%03d" % i for i in range(_http2.REPLY_HELD_BYTES // 17 + 1)]
    peer.write(b"".join(frame(PING, 0, 0, p) for p in pings))
    assert [peer.read_until(PING, ACK).payload for _ in pings] == pings


def test_held_bytes_with_no_response_after_them_are_read_within_the_bound(
    connection: Connection,
) -> None:
    assert len(_BDP_PAIR) < HELD_BYTES
    call, peer, _ = connection.open()
    reader = _responding(call, peer, settings() + peer.response_headers())
    peer.write(_BDP_PAIR)
    assert peer.read_until(PING, ACK).payload == b"bdp-ping"
    # A lone RST_STREAM (13 bytes) still ends the call, with its typed error.
    peer.write(frame(RST_STREAM, 0, STREAM, (2).to_bytes(4, "big")))
    end = reader.finish()
    assert status_of(end)[0] == grpc.StatusCode.INTERNAL
    assert reader.responses == [b"first"]


def test_done_sees_a_lone_rst_stream_held_after_a_response(
    connection: Connection, held_long: None
) -> None:
    # A lane asks done() before it sends on a call: an end the server sent
    # must count even while it is held below the mark.
    call, peer, _ = connection.open()
    peer.accept()
    peer.write(frame(DATA, 0, STREAM, grpc_message(b"first")))
    assert next(call) == b"first"
    assert call._held
    peer.write(frame(RST_STREAM, 0, STREAM, (2).to_bytes(4, "big")))
    deadline = time.monotonic() + WAIT
    while not call.done():
        assert time.monotonic() < deadline, "done() did not see the RST_STREAM"
        time.sleep(0.005)
    assert status_of(ended_with(call))[0] == grpc.StatusCode.INTERNAL


def test_a_sender_waiting_for_window_is_woken_by_a_lone_window_update(
    connection: Connection, held_long: None
) -> None:
    call, peer, requests = connection.open()
    flow = call._flow
    bounded = flow.wait
    flow.wait = lambda timeout=None: bounded(None)  # type: ignore[method-assign]
    reader = _responding(call, peer, settings((INITIAL_WINDOW_SIZE, 0)) + peer.response_headers())
    sent = request(b"waits for window")
    requests.put(sent)
    waiting_for_window(call)
    peer.write(window_update(STREAM, 1000))  # 13 bytes: below HELD_BYTES
    peer.read_until(DATA)
    assert bytes(peer.data) == grpc_message(sent.SerializeToString())
    requests.put(None)
    peer.write(peer.trailers(0))
    assert isinstance(reader.finish(), StopIteration)


def test_small_trailers_after_the_end_of_the_requests_end_the_call(
    connection: Connection, held_long: None
) -> None:
    call, peer, requests = connection.open()
    reader = _responding(call, peer, settings() + peer.response_headers())
    requests.put(None)
    while not peer.half_closed:
        peer.read_frame()
    trailers = peer.trailers(0)
    assert len(trailers) < HELD_BYTES
    peer.write(trailers)
    assert isinstance(reader.finish(), StopIteration)


def test_a_reader_that_writes_its_own_requests_holds_nothing(connection: Connection) -> None:
    # A lane's thread writes a request and reads its answer: nothing is held
    # for it once it writes; another thread's own write (a producer beside
    # liftbridge-acks) leaves the hold as it is.
    call, peer, _ = connection.open()
    peer.accept()
    assert call.write_now(request(b"one"))
    peer.write(frame(DATA, 0, STREAM, grpc_message(b"first")))
    assert next(call) == b"first"
    assert call._held
    producer = threading.Thread(target=call.write_now, args=(request(b"two"),))
    producer.start()
    producer.join(WAIT)
    assert call._held
    assert call.write_now(request(b"three"))
    assert not call._held
    peer.write(frame(DATA, 0, STREAM, grpc_message(b"second")))
    assert next(call) == b"second"
    assert not call._held
