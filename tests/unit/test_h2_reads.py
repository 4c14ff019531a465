"""How the own HTTP/2 connection reads: each read into a buffer kept for
it, and the TLS layer (``TlsLayer``) turning records back into bytes,
against a server-side ``ssl`` session in memory (the handshake over a
socket pair, the records then cut as a socket could deliver them)."""

from __future__ import annotations

import contextlib
import itertools
import random
import socket
import ssl
import struct
import sys
import threading
import time
import tracemalloc
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import trustme

from chaos import fuzz_http2
from liftbridge._transport._http2 import Http2Call
from liftbridge._transport._http2_reader import FrameReader
from liftbridge._transport._http2_tls import _PLAIN_BUFFER, TlsLayer, TlsSettings
from liftbridge._transport._http2_windows import REOPEN_AT, PeerWindows
from liftbridge._transport._http2_wire import FLOW_CONTROL_ERROR, Keepalive, StreamError
from liftbridge_api import api_pb2
from tests.unit.h2_peer import (
    ACK,
    DATA,
    HEADERS,
    PADDED,
    PING,
    STREAM,
    WAIT,
    WINDOW_UPDATE,
    Peer,
    frame,
    grpc_message,
)


@dataclass
class Pair:
    client: TlsLayer
    server: ssl.SSLObject
    sent: ssl.MemoryBIO  # the server's records, to hand to the client

    def records(self, data: bytes) -> bytes:
        """The records the server writes ``data`` as (a record per 16 KiB at most)."""
        self.server.write(data)
        return self.sent.read()


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def pair(ca: trustme.CA) -> Iterator[Pair]:
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("127.0.0.1").configure_cert(server_context)
    server_context.set_alpn_protocols(["h2"])
    server_context.num_tickets = 0  # nothing after the handshake but what a test writes
    client_context = ssl.create_default_context()
    ca.configure_trust(client_context)
    client_context.set_alpn_protocols(["h2"])
    received, sent = ssl.MemoryBIO(), ssl.MemoryBIO()
    server = server_context.wrap_bio(received, sent, server_side=True)
    ours, theirs = socket.socketpair()
    failure: list[BaseException] = []

    def serve() -> None:
        try:
            theirs.settimeout(5.0)
            while True:
                try:
                    server.do_handshake()
                except ssl.SSLWantReadError:
                    theirs.sendall(sent.read())
                    received.write(theirs.recv(65_536))
                    continue
                theirs.sendall(sent.read())
                return
        except BaseException as e:  # the test says so below
            failure.append(e)

    serving = threading.Thread(target=serve, name="test-tls-server")
    serving.start()
    try:
        client = TlsLayer(TlsSettings(client_context), "127.0.0.1")
        client.handshake(ours, time.monotonic() + 5.0)
        serving.join(5.0)
        assert not serving.is_alive() and not failure, failure
        yield Pair(client, server, sent)
    finally:
        ours.close()
        theirs.close()
        serving.join(5.0)


def _payload(seed: int) -> bytes:
    """~330 KiB in writes of 1 B to 20 KB: small records, full ones, and
    more in all than the layer's decryption buffer holds."""
    rng = random.Random(seed)
    return b"".join(rng.randbytes(size) for size in [1, 100, 2_800, 16_384, 20_000] * 8)


def test_records_read_in_one_piece_come_out_whole(pair: Pair) -> None:
    """Everything a read carried comes out of that read: nothing decryptable
    is left behind for a later read (which may never come), across more
    bytes than the decryption buffer holds."""
    data = _payload(1)
    plain = pair.client.unwrap(pair.records(data))[0]
    assert type(plain) is bytes
    assert plain == data


def test_a_record_crossing_the_buffers_end_comes_out_whole(pair: Pair) -> None:
    """The last record of a read decrypting past the buffer's end: its rest
    waits in the session (not in what was read), and comes out too."""
    lead = 1_000
    records = pair.records(b"a" * lead)
    full = -(-(_PLAIN_BUFFER - lead) // 16_384)  # records of 16 KiB, the last one crossing
    assert (_PLAIN_BUFFER - lead) % 16_384
    records += pair.records(b"b" * (full * 16_384))
    assert pair.client.unwrap(records)[0] == b"a" * lead + b"b" * (full * 16_384)


@pytest.mark.parametrize("cut", [1, 7, 5_000, 16_405, 70_000])
def test_records_cut_anywhere_come_out_in_order(pair: Pair, cut: int) -> None:
    data = _payload(cut)[: 20_000 if cut < 100 else None]  # a call per byte costs
    records = pair.records(data)
    pieces = [pair.client.unwrap(records[at : at + cut])[0] for at in range(0, len(records), cut)]
    assert b"".join(pieces) == data
    if cut < 20:  # a piece short of a record's end has nothing to give yet
        assert b"" in pieces


def test_what_a_read_returned_is_not_changed_by_the_next(pair: Pair) -> None:
    first = pair.client.unwrap(pair.records(b"a" * 3_000))[0]
    second = pair.client.unwrap(pair.records(b"b" * 3_000))[0]
    assert (first, second) == (b"a" * 3_000, b"b" * 3_000)


def test_data_before_a_close_notify_in_the_same_read_comes_out(pair: Pair) -> None:
    """ssl reports a clean close_notify as no more data (not an error): the
    bytes read with it are kept, and the session gives nothing after it
    (the call ends on the connection's close)."""
    records = pair.records(b"last words")
    with pytest.raises(ssl.SSLWantReadError):  # close_notify sent, the peer's awaited
        pair.server.unwrap()
    records += pair.sent.read()
    assert pair.client.unwrap(records)[0] == b"last words"
    assert pair.client.unwrap(b"")[0] == b""


def test_a_corrupt_record_is_an_ssl_error(pair: Pair) -> None:
    records = bytearray(pair.records(b"x" * 500))
    records[-1] ^= 1  # the record's authentication tag
    with pytest.raises(ssl.SSLError):
        pair.client.unwrap(bytes(records))


@contextlib.contextmanager
def _subscribe_call(keepalive: Keepalive | None = None) -> Iterator[tuple[Http2Call[bytes], Peer]]:
    """A Subscribe call (one request: no sender) and the server end of its
    connection, past the opening and the response headers."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(WAIT)
    call: Http2Call[bytes] = Http2Call(
        f"127.0.0.1:{listener.getsockname()[1]}",
        "/proto.API/Subscribe",
        api_pb2.SubscribeRequest(stream="s"),
        bytes,
        connect_timeout=WAIT,
        keepalive=keepalive,
    )
    peer = Peer(listener.accept()[0])
    try:
        peer.opening()
        peer.accept()
        yield call, peer
    finally:
        call.cancel()
        peer.close()
        listener.close()


def test_small_reads_allocate_no_read_sized_object_each() -> None:
    """A subscription keeping up with its server reads a few messages per
    recv: each recv lands in the call's kept buffer (a new 256 KiB bytes
    object per recv cost more than the recv itself)."""
    with _subscribe_call() as (call, peer):
        peer.write(frame(DATA, 0, STREAM, grpc_message(b"first")))
        assert next(call) == b"first"  # what the opening allocates comes before the count
        tracemalloc.start()
        try:
            for i in range(50):
                peer.write(frame(DATA, 0, STREAM, grpc_message(b"m%d" % i)))
                assert next(call) == b"m%d" % i
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 64 * 1024, peak


@pytest.mark.skipif(
    not sys.platform.startswith("linux"),
    reason="waiting in recv is Linux-only (SO_RCVTIMEO); elsewhere the reader polls as before",
)
def test_a_unary_calls_reader_waits_in_recv_and_still_pings_a_silent_server() -> None:
    """A subscription's stream has nothing to write while it waits, so each
    wake-up is one recv (the wait and the read in one system call), with no
    poll before it; the keepalive interval bounds that recv (SO_RCVTIMEO), so
    a silent server is still PINGed and its answer read."""
    with _subscribe_call(Keepalive(interval=0.25, timeout=WAIT)) as (call, peer):
        polls: list[int] = []
        poll = call._poll

        def counted(millis: int) -> object:
            polls.append(millis)
            return poll(millis)

        call._poll = counted
        for i in range(20):
            peer.write(frame(DATA, 0, STREAM, grpc_message(b"m%d" % i)))
            assert next(call) == b"m%d" % i
        assert polls == []
        seconds, micros = struct.unpack(
            "@ll", call._sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, 16)
        )
        assert 0.25 <= seconds + micros / 1e6 < 0.3  # the kernel rounds it up to its tick
        later: list[bytes] = []
        reader = threading.Thread(target=lambda: later.append(next(call)), daemon=True)
        reader.start()  # waits in recv until the server's silence has lasted the interval
        ping = peer.read_until(PING)
        assert ping.flags == 0
        peer.write(frame(PING, ACK, 0, ping.payload) + frame(DATA, 0, STREAM, grpc_message(b"on")))
        reader.join(WAIT)
        assert later == [b"on"]
        assert not call._ping_sent  # the answer was read


def test_a_call_cancelled_while_its_reader_waits_closes_its_socket_after_the_read() -> None:
    """cancel() from another thread while the iterating thread waits in
    recv: the reader wakes with the call's end, and the socket is closed
    once it let go of the read (never while it could still be in it)."""
    with _subscribe_call() as (call, _peer):
        ended: list[BaseException] = []

        def read() -> None:
            try:
                next(call)
            except BaseException as e:  # the call's end, whatever it is
                ended.append(e)

        reader = threading.Thread(target=read, name="test-h2-reader", daemon=True)
        reader.start()
        deadline = time.monotonic() + WAIT
        while _free(call._read_lock):  # until the reader is in its read
            assert time.monotonic() < deadline
            time.sleep(0.01)
        call.cancel()
        reader.join(WAIT)
        assert not reader.is_alive()
        assert len(ended) == 1 and not isinstance(ended[0], StopIteration)
        assert call._closed and call._sock.fileno() == -1


def test_a_close_finding_a_reader_in_the_socket_is_left_to_that_reader() -> None:
    """The socket is closed under the read lock: an end recorded while a
    reader holds it leaves the socket open until that reader lets go, and
    letting go closes it."""
    with _subscribe_call() as (call, _peer):
        # Held by another thread, as a reader inside _read holds it (the
        # read lock is an RLock: this thread's cancel would take it again).
        held, let_go = threading.Event(), threading.Event()

        def reader() -> None:
            assert call._read_lock.acquire(False)
            held.set()
            let_go.wait(WAIT)
            call._let_go()

        thread = threading.Thread(target=reader, name="test-h2-reader", daemon=True)
        thread.start()
        assert held.wait(WAIT)
        call.cancel()
        assert not call._closed and call._sock.fileno() != -1
        let_go.set()
        thread.join(WAIT)
        assert not thread.is_alive()
        assert call._closed and call._sock.fileno() == -1


def _free(lock: threading.RLock) -> bool:
    """Whether no thread holds ``lock`` (taken and let go at once if so)."""
    if not lock.acquire(False):
        return False
    lock.release()
    return True


def _reader(replies: list[bytes]) -> FrameReader[int]:
    """A reader past the server's SETTINGS and headers; responses parse to their size."""
    reader: FrameReader[int] = FrameReader(
        len,
        max_message=1 << 20,
        windows=PeerWindows(),
        flow=threading.Condition(),
        reply=replies.append,
    )
    reader.feed(fuzz_http2.head())
    replies.clear()  # the SETTINGS ack
    return reader


def test_a_read_completing_an_earlier_frame_is_not_copied_behind_it() -> None:
    """The frame a read cut is completed from the next read's start and read
    alone; the rest of that read is parsed where it lies (joining the two
    copied every byte a second time)."""
    reader = _reader([])
    one = frame(DATA, 0, STREAM, grpc_message(b"m" * 1000))
    data = one * 200
    first, second = data[:500], data[500:]  # half a frame, then the rest
    reader.feed(first)
    tracemalloc.start()
    try:
        reader.feed(second)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert list(reader.ready) == [1000] * 200
    assert peak < len(data) // 4, peak


def test_the_windows_reopen_by_every_data_byte_read_padding_included() -> None:
    """DATA frames read by the reader's own loop and padded ones (checked
    apart) count alike: once REOPEN_AT bytes came, both windows reopen by
    exactly what came (RFC 9113 §6.9.1: the whole frame payload counts)."""
    replies: list[bytes] = []
    reader = _reader(replies)
    plain = frame(DATA, 0, STREAM, grpc_message(b"p" * 16_000))
    padded = frame(DATA, PADDED, STREAM, bytes((200,)) + grpc_message(b"q" * 10_000) + bytes(200))
    sent = 0
    for one in itertools.cycle((plain, padded)):
        reader.feed(one)
        sent += len(one) - 9
        if sent >= REOPEN_AT:
            break
    assert not reader.ended
    assert reader.ready.count(16_000) + reader.ready.count(10_000) == len(reader.ready)
    increment = sent.to_bytes(4, "big")
    assert replies == [
        frame(WINDOW_UPDATE, 0, 0, increment) + frame(WINDOW_UPDATE, 0, STREAM, increment)
    ]


def test_window_updates_and_pings_between_acks_are_read_on_the_short_way() -> None:
    """What a server sends per ack at a paced rate (a WINDOW_UPDATE, a PING,
    the ack) in one read: the responses come out in order, the PING is
    answered with its payload, the peer's windows grow by the increments."""
    replies: list[bytes] = []
    reader = _reader(replies)
    windows = reader._windows
    stream, conn = windows.stream, windows.conn
    burst = (
        frame(WINDOW_UPDATE, 0, 0, (300).to_bytes(4, "big"))
        + frame(PING, 0, 0, b"bdp-ping")
        + frame(DATA, 0, STREAM, grpc_message(b"a" * 30))
        + frame(WINDOW_UPDATE, 0, STREAM, (70).to_bytes(4, "big"))
        + frame(PING, ACK, 0, b"our-ping")
        + frame(DATA, 0, STREAM, grpc_message(b"b" * 40))
    )
    reader.feed(burst)
    assert list(reader.ready) == [30, 40]
    assert replies == [frame(PING, ACK, 0, b"bdp-ping")]
    assert (windows.conn, windows.stream) == (conn + 300, stream + 70)
    assert reader.pongs == 1
    assert not reader.ended


@pytest.mark.parametrize("stream", [0, STREAM], ids=["connection", "stream"])
def test_a_window_update_on_the_short_way_past_2_31_is_a_flow_control_error(stream: int) -> None:
    """A well-formed WINDOW_UPDATE is applied in feed's own loop; one that
    takes its window past 2^31-1 still ends the connection (RFC 9113
    §6.9.1), the window left as it was; the reserved bit of its stream id is
    ignored; a sender waiting for window is woken by one that fits."""
    reader = _reader([])
    windows = reader._windows
    woken: list[bool] = []

    class Flow(threading.Condition):
        def notify_all(self) -> None:
            woken.append(True)

    reader._flow = Flow()
    windows.waiting = 1
    before = (windows.conn, windows.stream)
    reader.feed(frame(WINDOW_UPDATE, 0, stream | 1 << 31, (1000).to_bytes(4, "big")))
    assert woken == [True]
    grown = (before[0] + 1000, before[1]) if stream == 0 else (before[0], before[1] + 1000)
    assert (windows.conn, windows.stream) == grown
    before = grown
    increment = (1 << 31) - before[0 if stream == 0 else 1]
    with pytest.raises(StreamError, match="window overflowed") as caught:
        reader.feed(frame(WINDOW_UPDATE, 0, stream, increment.to_bytes(4, "big")))
    assert caught.value.goaway == FLOW_CONTROL_ERROR
    assert (windows.conn, windows.stream) == before
    assert reader.ended


@pytest.mark.parametrize(
    ("control", "says"),
    [
        (frame(WINDOW_UPDATE, 0, 0, (1).to_bytes(4, "big")), "inside a header block"),
        (frame(PING, 0, 0, b"bdp-ping"), "inside a header block"),
        (frame(PING, 0, 0, b"short"), "malformed PING"),
        (frame(PING, 0, STREAM, b"bdp-ping"), "malformed PING"),
        (frame(WINDOW_UPDATE, 0, 3, (1).to_bytes(4, "big")), "WINDOW_UPDATE on stream 3"),
        (frame(WINDOW_UPDATE, 0, 0, (1).to_bytes(5, "big")), "not 4 bytes long"),
        (frame(WINDOW_UPDATE, 0, 0, bytes(4)), "WINDOW_UPDATE of 0"),
    ],
    ids=[
        "update-in-block",
        "ping-in-block",
        "ping-7-bytes",
        "ping-on-1",
        "update-on-3",
        "update-5-bytes",
        "update-0",
    ],
)
def test_the_short_way_keeps_every_check_of_a_control_frame(control: bytes, says: str) -> None:
    reader = _reader([])
    # Trailers begun without END_HEADERS: a header block is open.
    opened = frame(HEADERS, 0, STREAM, b"\x40\x01a\x01b") if "header block" in says else b""
    with pytest.raises(StreamError, match=says) as caught:
        reader.feed(opened + control)
    assert caught.value.goaway is not None
    assert reader.ended
