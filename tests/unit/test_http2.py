"""The SDK's own HTTP/2 gRPC stream (:mod:`liftbridge._transport._http2`) against a
server played frame by frame on 127.0.0.1 (:mod:`tests.unit.h2_peer`): the
framing a real server may use but grpcio never does on cue (padding,
CONTINUATION, one message over many frames, many in one), every way a stream
can end, and flow control both ways.

Responses are parsed with ``bytes`` so a test can send any message body.
"""

from __future__ import annotations

import collections
import itertools
import os
import queue
import resource
import socket
import threading
import time
from collections.abc import Callable, Iterator

import grpc
import pytest

import liftbridge
from liftbridge._errors import LiftbridgeError
from liftbridge._transport import _http2_conn, _http2_wire
from liftbridge._transport._http2 import Http2Call
from liftbridge._transport._http2_wire import Keepalive, StreamError
from liftbridge._transport._nowait import send_released
from liftbridge._transport._status import from_rpc_error
from liftbridge_api import api_pb2
from tests.unit.h2_peer import (
    ACK,
    CONTINUATION,
    DATA,
    END_HEADERS,
    END_STREAM,
    GOAWAY,
    HEADERS,
    INITIAL_WINDOW_SIZE,
    PADDED,
    PING,
    PRIORITY,
    RST_STREAM,
    SETTINGS,
    STREAM,
    WAIT,
    WINDOW_UPDATE,
    Frame,
    Peer,
    frame,
    grpc_message,
    settings,
    split_messages,
    window_update,
)

pytestmark = pytest.mark.timeout(60)

METHOD = "/proto.API/PublishAsync"
Requests = queue.SimpleQueue[api_pb2.PublishRequest | None]


def request(value: bytes) -> api_pb2.PublishRequest:
    return api_pb2.PublishRequest(stream="s", value=value, correlationId=value.hex()[:32])


class Reader(threading.Thread):
    """Iterates a call on a thread of its own, as the SDK's ack thread does:
    collects the responses, then how the iteration ended."""

    def __init__(self, call: Http2Call[bytes]) -> None:
        super().__init__(name="test-h2-reader", daemon=True)
        self.call = call
        self.responses: list[bytes] = []
        self.end: BaseException | None = None
        self.start()

    def run(self) -> None:
        try:
            for response in self.call:
                self.responses.append(response)
            self.end = StopIteration()
        except BaseException as e:
            self.end = e

    def finish(self) -> BaseException:
        """How the iteration ended (it must end within ``WAIT``)."""
        self.join(WAIT)
        assert not self.is_alive(), "the call's reader is still blocked"
        assert self.end is not None
        return self.end


class Connection:
    """Opens calls to a listening socket and accepts their connections;
    at teardown ends every request iterator and cancels every call."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(WAIT)
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self._calls: list[tuple[Http2Call[bytes], Requests]] = []
        self._peers: list[Peer] = []

    def open(
        self,
        requests: Requests | None = None,
        *,
        iterator: Iterator[object] | None = None,
        keepalive: Keepalive | None = None,
    ) -> tuple[Http2Call[bytes], Peer, Requests]:
        """A call, the server end of its connection (its opening read), and
        the queue its requests come from (``None`` ends them)."""
        requests = requests if requests is not None else queue.SimpleQueue()
        call: Http2Call[bytes] = Http2Call(
            self.address,
            METHOD,
            iterator if iterator is not None else iter(requests.get, None),
            bytes,
            connect_timeout=WAIT,
            keepalive=keepalive,
        )
        self._calls.append((call, requests))
        peer = Peer(self.listener.accept()[0])
        self._peers.append(peer)
        peer.opening()
        return call, peer, requests

    def close(self) -> None:
        for call, requests in self._calls:
            requests.put(None)
            call.cancel()
        for peer in self._peers:
            peer.close()
        self.listener.close()


@pytest.fixture
def connection() -> Iterator[Connection]:
    opened = Connection()
    try:
        yield opened
    finally:
        opened.close()


def ended_with(call: Http2Call[bytes]) -> BaseException:
    """How iterating ``call`` ends, once the responses before the end are read."""
    try:
        while True:
            next(call)
    except (StopIteration, LiftbridgeError) as e:
        return e


def status_of(error: BaseException) -> tuple[grpc.StatusCode, str]:
    """The gRPC status of a call's end: the SDK's error, caused by a StreamError."""
    if isinstance(error, LiftbridgeError):
        error = error.__cause__  # type: ignore[assignment]
    assert isinstance(error, StreamError), error
    return error.code(), error.details()


# --------------------------------------------------------------- opening --


def test_the_client_opens_a_grpc_stream_and_sends_length_prefixed_requests(
    connection: Connection,
) -> None:
    _, peer, requests = connection.open()
    headers = peer.request_headers
    assert headers[":method"] == "POST"
    assert headers[":scheme"] == "http"
    assert headers[":path"] == METHOD
    assert headers[":authority"] == connection.address
    assert headers["content-type"] == "application/grpc"
    assert headers["te"] == "trailers"
    # Our receive windows are opened wide, and push is refused.
    assert peer.client_settings() == {0x2: 0, INITIAL_WINDOW_SIZE: 1 << 24, 0x6: 1 << 16}
    opening_update = next(f for f in peer.frames if f.kind == WINDOW_UPDATE)
    assert opening_update.stream == 0
    assert int.from_bytes(opening_update.payload, "big") == (1 << 24) - 65_535

    sent = [request(b"one"), request(b""), request(b"three" * 8000)]
    for each in sent:
        requests.put(each)
    requests.put(None)
    while not peer.half_closed:
        peer.read_frame()
    got = [api_pb2.PublishRequest.FromString(m) for m in split_messages(bytes(peer.data))]
    assert got == sent
    # The client's default frame size limit (RFC 9113: 16 KiB) holds.
    assert max(len(f.payload) for f in peer.frames if f.kind == DATA) <= 16_384


class ReadyIterator:
    """A request iterator with ``next_ready`` (as the publisher's outbox)."""

    def __init__(self, queued: list[api_pb2.PublishRequest]) -> None:
        self._queued = list(queued)
        self.done = threading.Event()

    def __iter__(self) -> ReadyIterator:
        return self

    def __next__(self) -> api_pb2.PublishRequest:
        if self._queued:
            return self._queued.pop(0)
        self.done.wait(WAIT)
        raise StopIteration

    def next_ready(self) -> api_pb2.PublishRequest | None:
        return self._queued.pop(0) if self._queued else None


def test_every_ready_request_goes_in_one_data_frame(connection: Connection) -> None:
    sent = [request(b"%d" % i) for i in range(50)]
    ready = ReadyIterator(sent)
    call, peer, _ = connection.open(iterator=ready)
    first = peer.read_until(DATA)
    assert split_messages(first.payload) == [r.SerializeToString() for r in sent]
    ready.done.set()
    peer.read_until(DATA, END_STREAM)
    call.cancel()


def test_a_failing_request_iterator_ends_the_call_with_internal(
    connection: Connection, caplog: pytest.LogCaptureFixture
) -> None:
    def failing() -> Iterator[api_pb2.PublishRequest]:
        yield request(b"first")
        raise RuntimeError("the outbox broke")

    call, _, _ = connection.open(iterator=failing())
    reader = Reader(call)
    code, details = status_of(reader.finish())
    assert code == grpc.StatusCode.INTERNAL
    assert "sender" in details
    assert "the HTTP/2 sender failed" in caplog.text
    assert "the outbox broke" in caplog.text


# ------------------------------------------------------------- responses --


def test_a_response_split_over_frames_and_many_in_one_frame(connection: Connection) -> None:
    call, peer, _ = connection.open()
    big = grpc_message(b"B" * 50_000)
    many = b"".join(grpc_message(b"m%d" % i) for i in range(100))
    peer.accept()
    # Cut inside the prefix, then inside the body (frames of at most 16 KiB).
    cuts = [0, 3, 7, 16_000, 32_000, 48_000, len(big)]
    for start, end in itertools.pairwise(cuts):
        peer.write(frame(DATA, 0, STREAM, big[start:end]))
    peer.write(frame(DATA, 0, STREAM, many))
    peer.write(peer.trailers(0))
    assert next(call) == b"B" * 50_000
    assert [next(call) for _ in range(100)] == [b"m%d" % i for i in range(100)]
    assert isinstance(ended_with(call), StopIteration)


def test_take_ready_gives_the_responses_already_read_in_order_and_never_reads(
    connection: Connection,
) -> None:
    call, peer, _ = connection.open()
    peer.accept()
    peer.write(frame(DATA, 0, STREAM, b"".join(grpc_message(b"r%d" % i) for i in range(6))))
    run: list[bytes] = []
    call.take_ready(run, 10)
    assert run == []  # on the socket, not read yet
    run = [next(call)]  # one read: the frame's six responses
    call.take_ready(run, 3)  # up to the limit, the run's own included
    assert run == [b"r0", b"r1", b"r2"]
    call.take_ready(run, 3)  # full: nothing taken
    assert run == [b"r0", b"r1", b"r2"]
    run = []
    call.take_ready(run, 10)  # the rest, and no more
    assert run == [b"r3", b"r4", b"r5"]
    call.take_ready(run, 10)
    assert run == [b"r3", b"r4", b"r5"]
    peer.write(peer.trailers(0))
    assert isinstance(ended_with(call), StopIteration)


def test_frames_cut_into_small_writes_are_put_back_together(connection: Connection) -> None:
    call, peer, _ = connection.open()
    script = (
        settings()
        + peer.response_headers()
        + frame(DATA, 0, STREAM, grpc_message(b"first") + grpc_message(b"second" * 30))
        + frame(PING, 0, 0, b"12345678")
        + frame(DATA, 0, STREAM, grpc_message(b""))
        + peer.trailers(0)
    )
    reader = Reader(call)
    for at in range(0, len(script), 7):
        peer.write(script[at : at + 7])
    assert isinstance(reader.finish(), StopIteration)
    assert reader.responses == [b"first", b"second" * 30, b""]


def test_padded_data_and_padded_headers_with_priority(connection: Connection) -> None:
    call, peer, _ = connection.open()
    block = peer.block([(":status", "200"), ("content-type", "application/grpc")])
    # HEADERS: pad length, priority (stream dependency 4 bytes + weight), block, padding.
    headers = bytes((4,)) + (0).to_bytes(4, "big") + bytes((15,)) + block + b"\0" * 4
    peer.write(settings() + frame(HEADERS, END_HEADERS | PADDED | PRIORITY, STREAM, headers))
    body = grpc_message(b"padded") + grpc_message(b"twice")
    peer.write(frame(DATA, PADDED, STREAM, bytes((200,)) + body + b"\0" * 200))
    peer.write(frame(DATA, PADDED, STREAM, bytes((0,)) + grpc_message(b"no padding")))
    trailer = peer.block([("grpc-status", "0")])
    peer.write(
        frame(HEADERS, END_HEADERS | END_STREAM | PADDED, STREAM, b"\x03" + trailer + b"xyz")
    )
    assert [next(call), next(call), next(call)] == [b"padded", b"twice", b"no padding"]
    assert isinstance(ended_with(call), StopIteration)


def test_header_blocks_continued_in_continuation_frames(connection: Connection) -> None:
    call, peer, _ = connection.open()
    block = peer.block(
        [(":status", "200"), ("content-type", "application/grpc"), ("x-long", "v" * 300)]
    )
    peer.write(
        settings()
        + frame(HEADERS, 0, STREAM, block[:10])
        + frame(CONTINUATION, 0, STREAM, block[10:20])
        + frame(CONTINUATION, END_HEADERS, STREAM, block[20:])
        + frame(DATA, 0, STREAM, grpc_message(b"after the headers"))
    )
    assert next(call) == b"after the headers"
    trailer = peer.block([("grpc-status", "5"), ("grpc-message", "no such stream")])
    # END_STREAM rides on the HEADERS frame; the block ends in CONTINUATION.
    peer.write(
        frame(HEADERS, END_STREAM, STREAM, trailer[:2])
        + frame(CONTINUATION, END_HEADERS, STREAM, trailer[2:])
    )
    error = ended_with(call)
    assert status_of(error) == (grpc.StatusCode.NOT_FOUND, "no such stream")
    assert isinstance(error.__cause__, StreamError)
    assert isinstance(error, liftbridge.NoSuchStreamError)


# ------------------------------------------------------------------ ends --


def test_trailers_only_unavailable_with_a_percent_encoded_message(
    connection: Connection,
) -> None:
    call, peer, _ = connection.open()
    block = peer.block(
        [
            (":status", "200"),
            ("content-type", "application/grpc"),
            ("grpc-status", "14"),
            ("grpc-message", "broker%20going%20away%3A%20100%25%20%E2%9C%93"),
        ]
    )
    peer.write(settings() + frame(HEADERS, END_HEADERS | END_STREAM, STREAM, block))
    error = ended_with(call)
    assert status_of(error) == (grpc.StatusCode.UNAVAILABLE, "broker going away: 100% \u2713")
    assert isinstance(error.__cause__, StreamError)
    assert isinstance(error.__cause__, grpc.RpcError)
    assert isinstance(error, liftbridge.UnavailableError)  # the stream raises the SDK's errors
    assert "broker going away" in str(error)
    # The end is kept: iterating again says the same.
    assert ended_with(call) is error


def test_ok_trailers_end_the_iteration_after_the_responses(connection: Connection) -> None:
    call, peer, _ = connection.open()
    peer.accept()
    peer.write(frame(DATA, 0, STREAM, grpc_message(b"a") + grpc_message(b"b")) + peer.trailers(0))
    assert list(call) == [b"a", b"b"]
    assert call.done()


def test_ok_trailers_after_a_cut_message_are_internal(connection: Connection) -> None:
    """An ack cut short is not a clean end: the publishes waiting for it
    must hear that the stream broke."""
    call, peer, _ = connection.open()
    peer.accept()
    cut = grpc_message(b"an ack that never ends")[:12]
    peer.write(frame(DATA, 0, STREAM, grpc_message(b"whole") + cut) + peer.trailers(0))
    assert next(call) == b"whole"
    code, details = status_of(ended_with(call))
    assert code == grpc.StatusCode.INTERNAL
    assert "inside a response (12 bytes" in details


def test_data_with_end_stream_and_no_trailers_is_internal(connection: Connection) -> None:
    call, peer, _ = connection.open()
    peer.accept()
    peer.write(frame(DATA, END_STREAM, STREAM, grpc_message(b"last words")))
    assert next(call) == b"last words"
    code, details = status_of(ended_with(call))
    assert code == grpc.StatusCode.INTERNAL
    assert "without a gRPC status" in details


def test_trailers_without_grpc_status_are_unknown(connection: Connection) -> None:
    call, peer, _ = connection.open()
    peer.accept()
    peer.write(frame(HEADERS, END_HEADERS | END_STREAM, STREAM, peer.block([("x-other", "1")])))
    assert status_of(ended_with(call))[0] == grpc.StatusCode.UNKNOWN


@pytest.mark.parametrize(
    ("error_code", "status"),
    [
        (0x0, grpc.StatusCode.INTERNAL),
        (0x2, grpc.StatusCode.INTERNAL),
        (0x7, grpc.StatusCode.UNAVAILABLE),
        (0x8, grpc.StatusCode.CANCELLED),
        (0xB, grpc.StatusCode.RESOURCE_EXHAUSTED),
        (0xC, grpc.StatusCode.PERMISSION_DENIED),
    ],
    ids=[
        "NO_ERROR",
        "INTERNAL_ERROR",
        "REFUSED_STREAM",
        "CANCEL",
        "ENHANCE_YOUR_CALM",
        "INADEQUATE_SECURITY",
    ],
)
def test_rst_stream(connection: Connection, error_code: int, status: grpc.StatusCode) -> None:
    call, peer, _ = connection.open()
    peer.accept()
    peer.write(frame(DATA, 0, STREAM, grpc_message(b"before the reset")))
    peer.write(frame(RST_STREAM, 0, STREAM, error_code.to_bytes(4, "big")))
    assert next(call) == b"before the reset"
    code, details = status_of(ended_with(call))
    assert code == status
    assert f"HTTP/2 error {error_code}" in details


def test_rst_stream_of_a_stream_never_opened_is_a_connection_error(
    connection: Connection,
) -> None:
    """RFC 9113 5.1: a frame other than HEADERS or PRIORITY on an idle
    stream is a connection error (PROTOCOL_ERROR), not an answer."""
    call, peer, _ = connection.open()
    peer.accept()
    peer.write(frame(RST_STREAM, 0, 3, (0x8).to_bytes(4, "big")) + peer.trailers(0))
    code, details = status_of(ended_with(call))
    assert code == grpc.StatusCode.INTERNAL
    assert "stream 3" in details
    goaway = peer.read_until(GOAWAY)
    assert int.from_bytes(goaway.payload[4:8], "big") == 0x1  # PROTOCOL_ERROR


def test_goaway_that_drops_our_stream_is_unavailable(connection: Connection) -> None:
    call, peer, _ = connection.open()
    peer.accept()
    # Last stream 0: stream 1 was not and will not be processed.
    peer.write(frame(GOAWAY, 0, 0, (0).to_bytes(4, "big") + (0).to_bytes(4, "big")))
    error = ended_with(call)
    code, details = status_of(error)
    assert code == grpc.StatusCode.UNAVAILABLE
    assert "GOAWAY" in details
    assert isinstance(error.__cause__, StreamError)
    assert isinstance(error, liftbridge.UnavailableError)


def test_goaway_with_an_error_code_is_unavailable(connection: Connection) -> None:
    call, peer, _ = connection.open()
    peer.accept()
    # ENHANCE_YOUR_CALM (too_many_pings, as the Go server says it).
    peer.write(frame(GOAWAY, 0, 0, (1).to_bytes(4, "big") + (0xB).to_bytes(4, "big") + b"ping"))
    code, details = status_of(ended_with(call))
    assert code == grpc.StatusCode.UNAVAILABLE
    assert "HTTP/2 error 11" in details


def test_a_graceful_goaway_lets_our_stream_finish(connection: Connection) -> None:
    call, peer, _ = connection.open()
    peer.accept()
    peer.write(frame(GOAWAY, 0, 0, (2**31 - 1).to_bytes(4, "big") + (0).to_bytes(4, "big")))
    peer.write(frame(DATA, 0, STREAM, grpc_message(b"still served")))
    peer.write(frame(GOAWAY, 0, 0, (1).to_bytes(4, "big") + (0).to_bytes(4, "big")))
    peer.write(peer.trailers(0))
    assert list(call) == [b"still served"]


@pytest.mark.parametrize("cut", ["between frames", "inside a frame", "inside a message"])
def test_the_server_closing_mid_stream_is_unavailable(connection: Connection, cut: str) -> None:
    call, peer, _ = connection.open()
    peer.accept()
    whole = frame(DATA, 0, STREAM, grpc_message(b"whole"))
    tail = {
        "between frames": b"",
        "inside a frame": frame(DATA, 0, STREAM, grpc_message(b"lost"))[:12],
        "inside a message": frame(DATA, 0, STREAM, grpc_message(b"lost" * 10)[:8]),
    }[cut]
    peer.write(whole + tail)
    peer.close()
    reader = Reader(call)
    error = reader.finish()
    code, details = status_of(error)
    assert reader.responses == [b"whole"]
    assert code == grpc.StatusCode.UNAVAILABLE
    assert "closed the connection" in details
    assert isinstance(error.__cause__, StreamError)
    assert isinstance(error, liftbridge.UnavailableError)


def test_a_compressed_message_is_internal(connection: Connection) -> None:
    call, peer, _ = connection.open()
    peer.accept()
    peer.write(
        frame(DATA, 0, STREAM, grpc_message(b"plain") + grpc_message(b"zzz", compressed=True))
    )
    assert next(call) == b"plain"
    code, details = status_of(ended_with(call))
    assert code == grpc.StatusCode.INTERNAL
    assert "compressed" in details


def test_a_peer_that_is_not_http2_fails_at_once(connection: Connection) -> None:
    """A frame header past our 16 KiB frame size limit (here the NATS
    greeting read as one) ends the call instead of waiting for megabytes
    that never come."""
    call, peer, _ = connection.open()
    peer.write(b'INFO {"server_id":"N","version":"2.10.0","max_payload":1048576}\r\n')
    code, details = status_of(Reader(call).finish())
    assert code == grpc.StatusCode.INTERNAL
    assert "frame" in details


def test_a_grpc_message_that_is_not_utf8_keeps_the_status(connection: Connection) -> None:
    call, peer, _ = connection.open()
    peer.accept()
    block = peer.block([(b"grpc-status", b"9"), (b"grpc-message", b"caf\xe9")])
    peer.write(frame(HEADERS, END_HEADERS | END_STREAM, STREAM, block))
    code, details = status_of(ended_with(call))
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    assert details.startswith("caf")


def test_an_unparsable_response_is_internal(connection: Connection) -> None:
    requests: Requests = queue.SimpleQueue()
    call: Http2Call[api_pb2.PublishResponse] = Http2Call(
        connection.address,
        METHOD,
        iter(requests.get, None),
        api_pb2.PublishResponse.FromString,
        connect_timeout=WAIT,
    )
    peer = Peer(connection.listener.accept()[0])
    try:
        peer.opening()
        peer.accept()
        peer.write(frame(DATA, 0, STREAM, grpc_message(b"\xff\xff\xff not protobuf")))
        with pytest.raises(liftbridge.ServerError) as caught:
            next(call)
        assert status_of(caught.value)[0] == grpc.StatusCode.INTERNAL
    finally:
        requests.put(None)
        call.cancel()
        peer.close()


@pytest.mark.parametrize(
    ("status", "code"),
    [
        ("503", grpc.StatusCode.UNAVAILABLE),
        ("404", grpc.StatusCode.UNIMPLEMENTED),
        ("401", grpc.StatusCode.UNAUTHENTICATED),
        ("403", grpc.StatusCode.PERMISSION_DENIED),
        ("400", grpc.StatusCode.INTERNAL),
        ("500", grpc.StatusCode.UNKNOWN),
    ],
)
def test_a_non_200_status_maps_as_grpc_says(
    connection: Connection, status: str, code: grpc.StatusCode
) -> None:
    call, peer, _ = connection.open()
    peer.write(settings() + peer.response_headers(status))
    got, details = status_of(ended_with(call))
    assert got == code
    assert f"HTTP status {status}" in details


def test_a_non_200_status_with_a_grpc_status_keeps_the_grpc_status(
    connection: Connection,
) -> None:
    call, peer, _ = connection.open()
    block = peer.block([(":status", "503"), ("grpc-status", "8"), ("grpc-message", "slow down")])
    peer.write(settings() + frame(HEADERS, END_HEADERS | END_STREAM, STREAM, block))
    assert status_of(ended_with(call)) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "slow down")


def test_connecting_to_a_closed_port_is_unavailable() -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
    with pytest.raises(StreamError) as caught:
        Http2Call(f"127.0.0.1:{port}", METHOD, iter(()), bytes, connect_timeout=WAIT)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    assert f"127.0.0.1:{port}" in caught.value.details()
    assert isinstance(from_rpc_error(caught.value), liftbridge.UnavailableError)
    assert not [t for t in threading.enumerate() if t.name == "liftbridge-h2-send"]


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("127.0.0.1:9292", ("127.0.0.1", 9292)),
        ("broker-1.example:9293", ("broker-1.example", 9293)),
        ("[::1]:9292", ("::1", 9292)),  # parsed only: the tests talk to 127.0.0.1 alone
        ("[fe80::1%eth0]:7", ("fe80::1%eth0", 7)),
    ],
)
def test_addresses_split_into_host_and_port(address: str, expected: tuple[str, int]) -> None:
    assert _http2_wire.host_port(address) == expected


def test_the_connection_asks_for_keepalive_probes(connection: Connection) -> None:
    call, _, _ = connection.open()
    assert call._sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1


def test_a_keepalive_ping_left_unanswered_ends_the_call_unavailable_in_its_timeout(
    connection: Connection,
) -> None:
    """A broker hung while its kernel still answers TCP: the call PINGs after
    ``interval`` of silence; an answered PING keeps it open (a second PING
    follows the next silence), an unanswered one ends it with a typed error
    within ``timeout`` (+3 s: a loaded 2-core CI machine can be that late
    to run the reading thread; a call never ended fails ``finish``'s 10 s
    wait, and the default keepalive timeout is far past both), however long the call
    itself may live."""
    keepalive = Keepalive(interval=0.3, timeout=0.5)
    call, peer, _ = connection.open(keepalive=keepalive)
    peer.write(settings() + peer.response_headers() + frame(DATA, 0, STREAM, grpc_message(b"x")))
    reader = Reader(call)
    first = peer.read_until(PING)
    assert (first.flags, first.stream, len(first.payload)) == (0, 0, 8)
    peer.write(frame(PING, ACK, 0, first.payload))  # answered: the call stays
    second = peer.read_until(PING)  # the next silence: another PING, never answered
    sent = time.monotonic()
    assert second.flags == 0 and reader.end is None
    error = reader.finish()
    took = time.monotonic() - sent
    assert reader.responses == [b"x"]
    assert isinstance(error, liftbridge.UnavailableError), repr(error)
    assert f"did not answer a keepalive PING within {keepalive.timeout} s" in str(error)
    assert took <= keepalive.timeout + 3.0, f"ended {took:.2f} s after the PING"


def test_only_an_ack_after_the_keepalive_ping_answers_it(connection: Connection) -> None:
    """A PING ACK the server sent before our PING, and data after it, do
    not count as the answer: the unanswered PING still ends the call."""
    keepalive = Keepalive(interval=0.3, timeout=0.5)
    call, peer, _ = connection.open(keepalive=keepalive)
    peer.write(settings() + peer.response_headers() + frame(DATA, 0, STREAM, grpc_message(b"x")))
    peer.write(frame(PING, ACK, 0, b"unasked!"))
    reader = Reader(call)
    ping = peer.read_until(PING)
    assert ping.flags == 0
    peer.write(frame(DATA, 0, STREAM, grpc_message(b"y")))  # talking, but no answer
    error = reader.finish()
    assert reader.responses == [b"x", b"y"]
    assert isinstance(error, liftbridge.UnavailableError), repr(error)
    assert "did not answer a keepalive PING" in str(error)


# ------------------------------------------------------ control frames --


def test_ping_is_answered_with_its_payload_and_settings_are_acked(
    connection: Connection,
) -> None:
    # Iterated as the acks thread does: a reader that holds (after a read that
    # brought responses) may leave its answers for its next wait.
    call, peer, _ = connection.open()
    reader = Reader(call)
    peer.write(settings((INITIAL_WINDOW_SIZE, 1000)) + peer.response_headers())
    peer.write(frame(PING, 0, 0, b"\x01\x02\x03\x04\x05\x06\x07\x08"))
    peer.write(frame(PING, ACK, 0, b"ignored!"))  # an ack is not answered
    peer.write(frame(PING, 0, 0, b"second p"))
    peer.write(frame(DATA, 0, STREAM, grpc_message(b"x")))
    acks = [peer.read_until(SETTINGS, ACK)]
    pongs = [peer.read_until(PING), peer.read_until(PING)]
    assert [(f.flags, f.stream, f.payload) for f in pongs] == [
        (ACK, 0, b"\x01\x02\x03\x04\x05\x06\x07\x08"),
        (ACK, 0, b"second p"),
    ]
    assert acks[0].payload == b""
    peer.write(settings())  # every SETTINGS frame is acked
    peer.write(frame(SETTINGS, ACK, 0))  # an ack is not
    peer.write(frame(DATA, 0, STREAM, grpc_message(b"y")))
    peer.read_until(SETTINGS, ACK)
    assert not peer.pending(0.2)
    assert reader.responses == [b"x", b"y"]


# ----------------------------------------------------------- flow control --


def _granted_reads(
    peer: Peer, total: int, grant: Callable[[int], int], *, window: int
) -> list[int]:
    """Reads the client's DATA until ``total`` request bytes came, granting
    more window with ``grant(received)`` each time the client used up what it
    had; asserts the client never went past its window. Returns the sizes of
    the DATA frames."""
    received, sizes = 0, []
    while received < total:
        got = peer.read_frame()
        if got.kind != DATA:
            continue
        received += len(got.payload)
        sizes.append(len(got.payload))
        assert received <= window, f"the client sent {received} bytes into a {window}-byte window"
        if received == window and received < total:
            window += grant(received)
    return sizes


def test_the_client_stays_within_a_small_stream_window(connection: Connection) -> None:
    call, peer, requests = connection.open()
    peer.write(settings((INITIAL_WINDOW_SIZE, 100)) + peer.response_headers())
    reader = Reader(call)  # reads the SETTINGS; the client acks them
    peer.read_until(SETTINGS, ACK)
    sent = [request(bytes([i]) * 250) for i in range(3)]
    total = sum(r.ByteSize() + 5 for r in sent)
    for each in sent:
        requests.put(each)

    sizes = _granted_reads(peer, total, lambda _: _grant(peer, 100), window=100)
    assert max(sizes) <= 100
    assert split_messages(bytes(peer.data)) == [r.SerializeToString() for r in sent]
    peer.write(peer.trailers(0))
    assert isinstance(reader.finish(), StopIteration)


def test_the_client_stays_within_the_connection_window(connection: Connection) -> None:
    call, peer, requests = connection.open()
    # A wide stream window: the connection's (65,535 until raised) binds.
    peer.write(settings((INITIAL_WINDOW_SIZE, 1 << 20)) + peer.response_headers())
    reader = Reader(call)
    peer.read_until(SETTINGS, ACK)
    sent = [request(bytes([i]) * 30_000) for i in range(5)]
    total = sum(r.ByteSize() + 5 for r in sent)
    for each in sent:
        requests.put(each)

    def grant(received: int) -> int:
        peer.write(window_update(0, 10_000))
        return 10_000

    _granted_reads(peer, total, grant, window=65_535)
    assert split_messages(bytes(peer.data)) == [r.SerializeToString() for r in sent]
    peer.write(peer.trailers(0))
    assert isinstance(reader.finish(), StopIteration)


def test_write_now_sends_on_the_calling_thread_what_the_windows_take_whole(
    connection: Connection,
) -> None:
    call, peer, requests = connection.open()  # the request iterator never yields
    peer.write(settings((INITIAL_WINDOW_SIZE, 300)) + peer.response_headers())
    reader = Reader(call)
    peer.read_until(SETTINGS, ACK)
    small = request(b"a" * 200)
    assert call.write_now(small)
    peer.read_until(DATA)
    assert split_messages(bytes(peer.data)) == [small.SerializeToString()]
    # 300 - ~210 bytes of window left: a second one of that size is refused
    # whole (a thread that reads the call must not wait for window).
    assert not call.write_now(request(b"b" * 200))
    peer.write(frame(PING, 0, 0, b"barrier!"))
    seen = len(peer.frames)
    peer.read_until(PING, ACK)
    assert not any(f.kind == DATA for f in peer.frames[seen:])
    peer.write(peer.trailers(0))
    assert isinstance(reader.finish(), StopIteration)
    assert not call.write_now(small)  # the call has ended
    requests.put(None)


def test_an_own_write_the_socket_takes_in_part_goes_whole_before_frames_queued_meanwhile(
    connection: Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """write_now sends straight to the socket when nobody else writes; what
    the socket does not take goes first in the queue, so a frame a reader
    queued meanwhile (a PING ack, a WINDOW_UPDATE) never splits it."""
    call, peer, requests = connection.open()
    peer.write(settings((INITIAL_WINDOW_SIZE, 65_535)) + peer.response_headers())
    reader = Reader(call)
    peer.read_until(SETTINGS, ACK)

    def in_part(sock: socket.socket, data: bytes) -> int:
        monkeypatch.setattr(_http2_conn, "send_released", send_released)
        call._queue(frame(PING, ACK, 0, b"queued!!"))  # as a reader would, while this writes
        return send_released(sock, data[:10])

    monkeypatch.setattr(_http2_conn, "send_released", in_part)
    own = request(b"a" * 200)
    assert call.write_now(own)
    peer.read_until(PING, ACK)
    kinds = [f.kind for f in peer.frames if f.kind in (DATA, PING)]
    assert kinds == [DATA, PING]
    assert split_messages(bytes(peer.data)) == [own.SerializeToString()]
    peer.write(peer.trailers(0))
    assert isinstance(reader.finish(), StopIteration)
    requests.put(None)


@pytest.mark.parametrize("writer", ["write_now", "liftbridge-h2-send"])
def test_a_call_ending_during_a_write_keeps_its_socket_open_until_the_send_returned(
    writer: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """write_now's send and liftbridge-h2-send's let go of the GIL and read
    the socket's descriptor after they did: a reader that sees the call end
    meanwhile must not close the socket under them (a new socket could take
    the descriptor and get the frame; _own_writing and _sending keep it
    open). The writer closes it once its send returned."""
    ours, theirs = socket.socketpair()
    with theirs:
        sent = request(b"a" * 100)
        sender = writer == "liftbridge-h2-send"
        requests = iter([sent] if sender else ())
        conn = _http2_conn.Http2Connection(ours, None, requests, sending=sender)
        conn._peer.stream = conn._peer.conn = 1 << 20
        seen: list[tuple[bool, int]] = []

        def ending(sock: socket.socket, data: bytes) -> int:
            conn._finish(StreamError(grpc.StatusCode.UNAVAILABLE, "the peer went away"))
            conn._close_when_idle()  # as the reading thread does once the call ended
            seen.append((conn._closed, sock.fileno()))
            return send_released(sock, data)

        monkeypatch.setattr(_http2_conn, "send_released", ending)
        if sender:
            conn._send_loop()  # as liftbridge-h2-send runs it
        else:
            assert conn.write_now(sent)
        assert seen and not seen[0][0] and seen[0][1] >= 0, "closed under the send"
        assert conn._closed and ours.fileno() == -1  # closed by the writer, after its send
        assert len(theirs.recv(1024)) == 9 + 5 + sent.ByteSize()  # the frame went whole


def test_a_window_shrunk_below_what_was_sent_waits_to_be_positive(
    connection: Connection,
) -> None:
    call, peer, requests = connection.open()
    reader = Reader(call)
    first = api_pb2.PublishRequest(value=b"f" * 192)  # 200 bytes with its gRPC prefix
    requests.put(first)
    peer.read_until(DATA)
    assert len(peer.data) == 200
    # Only now the server's SETTINGS: the stream's window becomes 100 - 200.
    peer.write(settings((INITIAL_WINDOW_SIZE, 100)) + peer.response_headers())
    peer.read_until(SETTINGS, ACK)
    second = request(b"s" * 95)
    requests.put(second)
    peer.write(window_update(STREAM, 100))  # -100 + 100: still nothing to send
    peer.write(frame(PING, 0, 0, b"barrier!"))
    seen = len(peer.frames)
    peer.read_until(PING, ACK)  # the client has read the update
    assert not any(f.kind == DATA for f in peer.frames[seen:])
    peer.write(window_update(STREAM, 60))  # 60 bytes may go now
    sizes = _granted_reads(peer, second.ByteSize() + 5, lambda _: _grant(peer, 1000), window=60)
    assert sizes[0] == 60
    assert split_messages(bytes(peer.data)) == [r.SerializeToString() for r in (first, second)]
    peer.write(peer.trailers(0))
    assert isinstance(reader.finish(), StopIteration)


def test_a_window_update_wakes_the_sender_waiting_for_window(connection: Connection) -> None:
    # The reader notifies the condition only while a sender waits on it:
    # with the sender's wait made unbounded, a missed wake-up hangs (and the
    # test times out) instead of being covered by the wait's 1 s poll.
    call, peer, requests = connection.open()
    flow = call._flow
    bounded = flow.wait
    flow.wait = lambda timeout=None: bounded(None)  # type: ignore[method-assign]
    peer.write(settings((INITIAL_WINDOW_SIZE, 0)) + peer.response_headers())
    reader = Reader(call)
    peer.read_until(SETTINGS, ACK)
    sent = request(b"waits for window")
    requests.put(sent)
    waiting_for_window(call)
    _grant(peer, 1000)
    peer.read_until(DATA)
    assert split_messages(bytes(peer.data)) == [sent.SerializeToString()]
    assert not call._peer.waiting
    peer.write(peer.trailers(0))
    assert isinstance(reader.finish(), StopIteration)


def waiting_for_window(call: Http2Call[bytes]) -> None:
    """Waits until the call's sender has taken a request and waits for window."""
    deadline = time.monotonic() + WAIT
    while not call._peer.waiting:
        assert time.monotonic() < deadline
        time.sleep(0.01)


def _grant(peer: Peer, increment: int) -> int:
    peer.write(window_update(STREAM, increment))
    return increment


def test_our_windows_are_reopened_after_reading_a_quarter_of_them(
    connection: Connection,
) -> None:
    call, peer, _ = connection.open()
    peer.accept()
    reader = Reader(call)
    body = b"r" * (16_384 - 5)  # one message per frame of the largest size
    one, size = frame(DATA, 0, STREAM, grpc_message(body)), 16_384
    quarter = (1 << 24) // 4
    below = quarter // size - 1  # frames not reaching a quarter
    peer.write(one * below)
    peer.write(frame(PING, 0, 0, b"barrier1"))
    peer.read_until(PING, ACK)  # the client has read all of it
    assert not [f for f in peer.frames if f.kind == WINDOW_UPDATE and f.stream == STREAM]
    # Past the quarter, then on: 40 MiB in all, more than the 16 MiB window,
    # sent only within the windows the client opened.
    stream_window = conn_window = (1 << 24) - below * size
    updates: list[Frame] = []
    for _ in range(below, 2560):
        while min(stream_window, conn_window) < size:
            got = peer.read_until(WINDOW_UPDATE)
            updates.append(got)
            increment = int.from_bytes(got.payload, "big")
            if got.stream == 0:
                conn_window += increment
            else:
                stream_window += increment
        peer.write(one)
        stream_window -= size
        conn_window -= size
    peer.write(peer.trailers(0))
    assert isinstance(reader.finish(), StopIteration)
    assert len(reader.responses) == 2560
    assert reader.responses[-1] == body
    first_updates = updates[:2]
    assert sorted(f.stream for f in first_updates) == [0, STREAM]
    increments = {int.from_bytes(f.payload, "big") for f in first_updates}
    assert len(increments) == 1
    assert increments.pop() >= quarter


# ---------------------------------------------------- cancel and done() --


def test_cancel_wakes_a_blocked_reader_and_ends_the_sender(connection: Connection) -> None:
    call, peer, requests = connection.open()
    # A zero window: the sender waits for window with a request in hand.
    peer.write(settings((INITIAL_WINDOW_SIZE, 0)) + peer.response_headers())
    reader = Reader(call)
    peer.read_until(SETTINGS, ACK)
    requests.put(request(b"waits for window"))
    sender = _sender_thread()
    deadline = time.monotonic() + WAIT
    while call._peer.stream != 0 or not requests.empty():  # taken, waiting
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert call.cancel()
    assert not call.cancel()  # idempotent
    error = reader.finish()
    assert status_of(error)[0] == grpc.StatusCode.CANCELLED
    assert isinstance(error.__cause__, StreamError)
    assert isinstance(error, liftbridge.ConnectionLostError)
    sender.join(WAIT)
    assert not sender.is_alive()
    assert call.done()
    with pytest.raises(EOFError):  # the connection is closed, not left open
        while True:
            peer.read_frame()
    assert not any(f.kind == DATA for f in peer.frames)


def test_cancel_ends_a_sender_stuck_writing_to_a_server_that_does_not_read(
    connection: Connection,
) -> None:
    call, peer, requests = connection.open()
    # Windows wide open; then the server stops reading: TCP's buffers fill.
    peer.write(settings((INITIAL_WINDOW_SIZE, 1 << 30)) + peer.response_headers())
    peer.write(window_update(0, 1 << 30))
    reader = Reader(call)
    peer.read_until(SETTINGS, ACK)
    for i in range(32):
        requests.put(api_pb2.PublishRequest(value=bytes([i]) * (1 << 20)))
    deadline = time.monotonic() + WAIT
    while requests.qsize() > 32 - 4:  # several MiB written or being written
        assert time.monotonic() < deadline
        time.sleep(0.01)
    sender = _sender_thread()
    call.cancel()
    assert status_of(reader.finish())[0] == grpc.StatusCode.CANCELLED
    sender.join(WAIT)
    assert not sender.is_alive()
    assert requests.qsize() > 0  # it stopped sending: what was left stays unsent


def test_cancel_while_the_sender_waits_for_a_request(connection: Connection) -> None:
    call, peer, requests = connection.open()
    peer.accept()
    reader = Reader(call)
    call.cancel()
    assert status_of(reader.finish())[0] == grpc.StatusCode.CANCELLED
    sender = _sender_thread()
    assert sender.is_alive()  # in the request iterator: it ends when that does
    requests.put(None)
    sender.join(WAIT)
    assert not sender.is_alive()
    with pytest.raises(EOFError):
        while True:
            peer.read_frame()


def _sender_thread() -> threading.Thread:
    senders = [t for t in threading.enumerate() if t.name == "liftbridge-h2-send"]
    assert len(senders) == 1
    return senders[0]


def test_a_for_loop_yields_the_responses_of_every_read_then_raises_the_end(
    connection: Connection,
) -> None:
    """``for`` over a call (how subscriptions read it) takes the responses of
    one read, waits for the next read, and raises the call's end; a new loop
    over the ended call raises it again."""
    call, peer, _ = connection.open()
    peer.accept()
    peer.write(frame(DATA, 0, STREAM, grpc_message(b"a") + grpc_message(b"b")))
    got: list[bytes] = []
    with pytest.raises(liftbridge.UnavailableError) as ended:
        for response in call:
            got.append(response)
            if response == b"b":  # the next read has this and the end
                peer.write(frame(DATA, 0, STREAM, grpc_message(b"c")) + peer.trailers(14, "bye"))
    assert got == [b"a", b"b", b"c"]
    with pytest.raises(liftbridge.UnavailableError) as again:
        for _ in call:
            raise AssertionError("an ended call yields nothing more")
    assert again.value is ended.value


def test_done_sees_the_server_end_without_iterating(connection: Connection) -> None:
    call, peer, _ = connection.open()
    peer.accept()
    peer.write(frame(DATA, 0, STREAM, grpc_message(b"unread")))
    peer.write(frame(PING, 0, 0, b"barrier!"))
    deadline = time.monotonic() + WAIT
    while not any(f.kind == PING for f in peer.frames):  # done() read the ping
        assert not call.done()
        assert time.monotonic() < deadline
        if peer.pending(0.01):
            peer.read_frame()
    assert not call.done()
    peer.write(peer.trailers(14, "bye"))
    while not call.done():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert next(call) == b"unread"
    assert status_of(ended_with(call)) == (grpc.StatusCode.UNAVAILABLE, "bye")


def test_done_reads_a_socket_past_the_select_limit(connection: Connection) -> None:
    """A process with many files open (a broker client inside a busy
    service) gets descriptors past select()'s FD_SETSIZE (1024)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1200:
        pytest.skip(f"needs 1200 open files, RLIMIT_NOFILE is {soft}")
    fillers = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        call, peer, _ = connection.open()
    finally:
        for each in fillers:
            os.close(each)
    assert call._sock.fileno() >= 1024
    peer.accept()
    peer.write(peer.trailers(0))
    deadline = time.monotonic() + WAIT
    while not call.done():
        assert time.monotonic() < deadline, "done() never saw the end"
        time.sleep(0.01)
    assert isinstance(ended_with(call), StopIteration)


def test_an_end_done_reads_meanwhile_keeps_the_responses_before_it(
    connection: Connection,
) -> None:
    """The iterating thread finds no response ready; before it looks for an
    end, done() on another thread reads the last responses and the end.
    Those responses must still come out first."""
    call, peer, _ = connection.open()
    peer.accept()
    peer.write(frame(DATA, 0, STREAM, grpc_message(b"last ack")) + peer.trailers(0))

    class Interleaved(collections.deque[bytes]):
        checked = False

        def __len__(self) -> int:
            size = super().__len__()
            if not self.checked:  # the iterator's first "anything ready?"
                self.checked = True
                other = threading.Thread(target=_wait_done, args=(call,), name="test-h2-done")
                other.start()
                other.join(WAIT)
            return size

    call._ready = call._reader.ready = Interleaved()
    assert next(call) == b"last ack"
    assert isinstance(ended_with(call), StopIteration)


def _wait_done(call: Http2Call[bytes]) -> None:
    deadline = time.monotonic() + WAIT
    while not call.done() and time.monotonic() < deadline:
        time.sleep(0.01)


def test_done_sees_a_closed_connection(connection: Connection) -> None:
    call, peer, _ = connection.open()
    peer.accept()
    peer.close()
    deadline = time.monotonic() + WAIT
    while not call.done():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert status_of(ended_with(call))[0] == grpc.StatusCode.UNAVAILABLE


def test_the_status_table_knows_every_grpc_code() -> None:
    for code in grpc.StatusCode:
        assert _http2_wire.grpc_status(str(code.value[0]).encode()) == code
    assert _http2_wire.grpc_status(b"99") == grpc.StatusCode.UNKNOWN
    assert _http2_wire.grpc_status(None) == grpc.StatusCode.UNKNOWN
