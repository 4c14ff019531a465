"""Streaming gRPC calls on the SDK's own HTTP/2 connection.

grpcio moves every message of a stream through its core's completion queue
and a Python thread hand-over: about 130 µs per publish on the PublishAsync
stream, a tenth of what the official Go client gets from the same server
(``make bench``). The wire format is simple, though: a gRPC message is a
5-byte prefix (a compression flag and a length) and the protobuf, carried in
HTTP/2 DATA frames. So a stream here (PublishAsync, Subscribe) owns a TCP
connection of its own, writes every request that is ready in one ``sendall``
(many messages per DATA frame), and parses every response that arrived in
one ``recv``.

What it speaks of HTTP/2 (RFC 9113) is what one client stream needs: the
preface and SETTINGS (acked both ways), one stream (id 1) opened by a
HEADERS frame, DATA both ways within the peer's flow-control windows, our
own windows reopened by WINDOW_UPDATE, PING answered, RST_STREAM and GOAWAY
obeyed, header blocks (CONTINUATION included) decoded with ``hpack``. No
compression is offered, so the server sends none. Plaintext only: a client
with TLS keeps grpcio for every call.

Threads: the thread that iterates the call reads the socket (as grpcio's
single-threaded unary-stream option does); ``liftbridge-h2-send`` pulls the
requests from the request iterator and writes them (a unary request goes
with the headers, and a lane writes its own with ``write_now`` when the
window takes it whole). ``cancel`` may come from any thread.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar
from urllib.parse import unquote

import grpc
import hpack
from google.protobuf.message import Message

from liftbridge._transport._http2_wire import (
    ACK,
    CONTINUATION,
    DATA,
    END_HEADERS,
    END_STREAM,
    FRAME_HEAD,
    GOAWAY,
    HEADERS,
    HTTP_STATUS,
    MAX_FRAME_IN,
    MESSAGE_PREFIX,
    PADDED,
    PING,
    PREFACE,
    PRIORITY,
    RESET_STATUS,
    RST_STREAM,
    SETTINGS,
    SETTINGS_ENABLE_PUSH,
    SETTINGS_INITIAL_WINDOW_SIZE,
    SETTINGS_MAX_FRAME_SIZE,
    STREAM,
    WINDOW_UPDATE,
    StreamError,
    compressed_error,
    frame_bytes,
    grpc_status,
    host_port,
    keep_alive,
    readable,
)

_log = logging.getLogger(__name__)

T = TypeVar("T")

_RECEIVE_WINDOW = 1 << 24
"""Our stream's and connection's receive window: 16 MiB of responses may be
on their way before the server waits for a WINDOW_UPDATE."""
_REOPEN_AT = _RECEIVE_WINDOW // 4
"""Bytes read before the windows are reopened by what was read."""
_PEER_WINDOW = 65_535
"""The peer's windows until its SETTINGS say otherwise (RFC 9113 6.9.2)."""
_BATCH_BYTES = 1 << 16
"""At most this many request bytes are gathered into one write."""
_READ_SIZE = 1 << 18
_FIRST_FRAME_MAX = 16_384
"""The largest frame a peer must accept before its SETTINGS say otherwise."""


class Http2Call(Generic[T]):
    """One bidirectional gRPC call on a connection of its own.

    Iterating it yields the responses (parsed by ``parse``) and ends with
    StopIteration on an OK status, or raises :class:`StreamError`.
    ``cancel`` ends it from any thread. Only one thread iterates it.

    ``requests`` is an iterator of request messages, sent by a thread of the
    call's own, or the one request of a unary-request call (Subscribe): that
    one goes out with the headers, and no thread is started.

    Raises:
        StreamError: (from the constructor) UNAVAILABLE when the broker
            cannot be reached within ``connect_timeout``.
    """

    def __init__(
        self,
        address: str,
        method: str,
        requests: Iterator[Any] | Message,
        parse: Callable[[bytes], T],
        *,
        connect_timeout: float,
    ) -> None:
        self._parse = parse
        unary = b""
        if isinstance(requests, Message):
            chunk = requests.SerializeToString()
            if len(chunk) + 5 <= _FIRST_FRAME_MAX:
                unary = len(chunk).to_bytes(5, "big") + chunk
                requests = iter(())
            else:  # more than the server's frame size may allow: the sender thread splits it
                requests = iter((requests,))
        self._requests: Iterator[Any] = requests
        try:
            self._sock = socket.create_connection(host_port(address), timeout=connect_timeout)
        except (OSError, ValueError) as e:
            raise StreamError(grpc.StatusCode.UNAVAILABLE, f"cannot reach {address}: {e}") from e
        self._sock.settimeout(None)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # A broker that vanished without closing (power loss, a cut link) is
        # found by the kernel's keepalive probes too, not only by ack timeouts.
        keep_alive(self._sock)

        # _write_lock: one sendall at a time, so frames never interleave.
        self._write_lock = threading.Lock()
        # _flow guards the peer's windows and max frame size, and the ends
        # below; the sender waits on it for window.
        self._flow = threading.Condition(threading.Lock())
        self._send_window = _PEER_WINDOW  # the stream's
        self._conn_window = _PEER_WINDOW
        self._initial_window = _PEER_WINDOW
        self._max_frame = 16_384
        self._error: StreamError | None = None  # why the call ended, if not OK
        self._finished = False  # ended (any way): nothing more is sent or read
        self._sending = not unary  # liftbridge-h2-send is running
        self._reading = False  # a thread is inside recv
        self._closed = False  # the socket is closed

        # The reading thread's state below is guarded by _read_lock: held by
        # the iterating thread while it reads, or by done() peeking.
        self._read_lock = threading.Lock()
        self._rest = b""  # the start of a frame not wholly read yet
        self._body = bytearray()  # the start of a message that spans DATA frames
        self._ready: collections.deque[T] = collections.deque()
        self._header_block = bytearray()  # a header block awaiting CONTINUATION
        self._header_end_stream = False
        self._headers_seen = False
        self._unacked = 0  # DATA bytes read since the windows were last reopened
        self._end: BaseException | None = None  # raised once _ready is empty
        self._decoder = hpack.Decoder()

        authority = address.encode()
        block = hpack.Encoder().encode(
            [
                (b":method", b"POST"),
                (b":scheme", b"http"),
                (b":path", method.encode()),
                (b":authority", authority),
                (b"content-type", b"application/grpc"),
                (b"te", b"trailers"),
                (b"user-agent", b"liftbridge-python"),
            ]
        )
        settings = (
            SETTINGS_ENABLE_PUSH.to_bytes(2, "big")
            + (0).to_bytes(4, "big")
            + SETTINGS_INITIAL_WINDOW_SIZE.to_bytes(2, "big")
            + _RECEIVE_WINDOW.to_bytes(4, "big")
        )
        opening = (
            PREFACE
            + frame_bytes(SETTINGS, 0, 0, settings)
            + frame_bytes(WINDOW_UPDATE, 0, 0, (_RECEIVE_WINDOW - _PEER_WINDOW).to_bytes(4, "big"))
            + frame_bytes(HEADERS, END_HEADERS, STREAM, block)
        )
        if unary:  # the request and the end of the sending half
            opening += frame_bytes(DATA, END_STREAM, STREAM, unary)
            self._send_window -= len(unary)
            self._conn_window -= len(unary)
        try:
            self._sock.sendall(opening)
        except OSError as e:
            self._sock.close()
            raise StreamError(grpc.StatusCode.UNAVAILABLE, f"{address}: {e}") from e
        if not unary:
            threading.Thread(target=self._send_loop, name="liftbridge-h2-send", daemon=True).start()

    # ------------------------------------------------------------- StreamCall --

    def __iter__(self) -> Iterator[T]:
        return self

    def __next__(self) -> T:
        ready = self._ready
        while not ready:
            if self._end is not None:
                if ready:  # done() read the last responses and the end meanwhile
                    break
                raise self._end
            with self._read_lock:
                self._read()
        return ready.popleft()

    def cancel(self) -> bool:
        """Ends the call (CANCELLED), waking its reader and sender. Idempotent."""
        if self._finish(StreamError(grpc.StatusCode.CANCELLED, "the call was cancelled")):
            self._shutdown()
            self._close_when_idle()
            return True
        return False

    def done(self) -> bool:
        """True once the call ended. Reads what already arrived (never
        waiting) when no other thread is reading, so an end the server sent
        is seen without iterating."""
        if not self._finished and self._read_lock.acquire(blocking=False):
            try:
                if not self._closed and readable(self._sock):
                    self._read()
            except (OSError, ValueError):  # closed meanwhile: _finished says so
                pass
            finally:
                self._read_lock.release()
        return self._finished

    # ---------------------------------------------------------------- reading --

    def _read(self) -> None:
        with self._flow:
            if self._finished:
                self._end = self._error or StopIteration()
                return
            self._reading = True
        try:
            data = self._sock.recv(_READ_SIZE)
        except OSError as e:
            data = None
            failure = f"the connection failed: {e}"
        finally:
            with self._flow:
                self._reading = False
        if not data:
            if data is not None:
                failure = "the server closed the connection"
            self._finish(StreamError(grpc.StatusCode.UNAVAILABLE, failure))
            self._end = self._error or StopIteration()
            self._close_when_idle()
            return
        try:
            self._frames(self._rest + data if self._rest else data)
        except StreamError as e:
            self._finish(e)
        except Exception as e:  # a malformed frame or message: end the call, loudly
            _log.exception("unreadable HTTP/2 data from the server")
            self._finish(StreamError(grpc.StatusCode.INTERNAL, f"unreadable response: {e}"))
        if self._finished:
            self._shutdown()
            self._end = self._error or StopIteration()
            self._close_when_idle()

    def _frames(self, data: bytes) -> None:
        """Handles every whole frame in ``data`` (what was left over, then
        what arrived). Responses are sliced out of ``data`` as ``bytes``:
        protobuf parses those several times faster than memoryviews. They
        are parsed as their frame is read, so the ones that came before a
        frame ending the call (RST_STREAM, GOAWAY) come out."""
        pos, end = 0, len(data)
        body, parse, ready = self._body, self._parse, self._ready
        head, prefix = FRAME_HEAD.unpack_from, MESSAGE_PREFIX.unpack_from
        try:
            while end - pos >= 9 and not self._finished:
                word, flags, stream = head(data, pos)
                size = word >> 8
                if size > MAX_FRAME_IN:
                    raise StreamError(
                        grpc.StatusCode.INTERNAL,
                        f"a {size}-byte frame, past our {MAX_FRAME_IN}-byte limit: "
                        "the peer does not speak HTTP/2",
                    )
                start = pos + 9
                stop = start + size
                if stop > end:
                    break
                pos = stop
                if word & 0xFF != DATA:
                    self._control(word & 0xFF, flags, stream & 0x7FFF_FFFF, data[start:stop])
                    continue
                self._unacked += size
                if flags & PADDED:
                    stop -= data[start]
                    start += 1
                if not body:  # the usual case: messages parsed straight from the frame
                    while stop - start >= 5:
                        compressed, size = prefix(data, start)
                        if stop - start - 5 < size:
                            break
                        if compressed:
                            raise compressed_error()
                        start += 5 + size
                        ready.append(parse(data[start - size : start]))
                if start < stop:  # part of a message: gathered until it is whole
                    body += data[start:stop]
                    self._messages()
                if flags & END_STREAM:
                    self._finish(
                        StreamError(
                            grpc.StatusCode.INTERNAL, "the stream ended without a gRPC status"
                        )
                    )
        finally:
            self._rest = data[pos:]
        if self._unacked >= _REOPEN_AT and not self._finished:
            increment = self._unacked.to_bytes(4, "big")
            self._unacked = 0
            self._send(
                frame_bytes(WINDOW_UPDATE, 0, 0, increment)
                + frame_bytes(WINDOW_UPDATE, 0, STREAM, increment)
            )

    def _messages(self) -> None:
        """Parses the whole messages gathered in ``_body`` (ones that spanned frames)."""
        body = self._body
        pos, end = 0, len(body)
        prefix = MESSAGE_PREFIX.unpack_from
        while end - pos >= 5:
            compressed, size = prefix(body, pos)
            if end - pos - 5 < size:
                break
            if compressed:
                raise compressed_error()
            self._ready.append(self._parse(bytes(body[pos + 5 : pos + 5 + size])))
            pos += 5 + size
        del body[:pos]

    def _control(self, kind: int, flags: int, stream: int, payload: bytes) -> None:
        if kind in (HEADERS, CONTINUATION):
            if kind == HEADERS:
                if flags & PADDED:
                    payload = payload[1 : len(payload) - payload[0]]
                if flags & PRIORITY:
                    payload = payload[5:]
                self._header_block = bytearray(payload)
                self._header_end_stream = bool(flags & END_STREAM)
            else:
                self._header_block += payload
            if flags & END_HEADERS:
                self._headers(bytes(self._header_block), self._header_end_stream)
        elif kind == SETTINGS:
            if not flags & ACK:
                self._settings(payload)
        elif kind == PING:
            if not flags & ACK:
                self._send(frame_bytes(PING, ACK, 0, payload))
        elif kind == WINDOW_UPDATE:
            increment = int.from_bytes(payload[:4], "big") & 0x7FFF_FFFF
            with self._flow:
                if stream == 0:
                    self._conn_window += increment
                else:
                    self._send_window += increment
                self._flow.notify_all()
        elif kind == RST_STREAM and stream == STREAM:
            code = int.from_bytes(payload[:4], "big")
            status = RESET_STATUS.get(code, grpc.StatusCode.INTERNAL)
            raise StreamError(status, f"the server reset the stream (HTTP/2 error {code})")
        elif kind == GOAWAY:
            last = int.from_bytes(payload[:4], "big") & 0x7FFF_FFFF
            code = int.from_bytes(payload[4:8], "big")
            if last < STREAM or code != 0:
                raise StreamError(
                    grpc.StatusCode.UNAVAILABLE,
                    f"the server is closing the connection (GOAWAY, HTTP/2 error {code})",
                )

    def _headers(self, block: bytes, end_stream: bool) -> None:
        headers = {
            # Not UTF-8 (a grpc-message should be percent-encoded, not all
            # are): the status still counts.
            (name.decode(errors="replace") if isinstance(name, bytes) else name): (
                value.decode(errors="replace") if isinstance(value, bytes) else value
            )
            for name, value in self._decoder.decode(block, raw=True)
        }
        if not self._headers_seen:
            self._headers_seen = True
            status = headers.get(":status")
            if status != "200":
                if "grpc-status" not in headers:
                    raise StreamError(
                        HTTP_STATUS.get(status or "", grpc.StatusCode.UNKNOWN),
                        f"the server answered HTTP status {status}",
                    )
                end_stream = True  # a gRPC status ends the call, whatever came with it
        if not end_stream:
            return
        self._messages()
        code = grpc_status(headers.get("grpc-status"))
        if code == grpc.StatusCode.OK and self._body:
            self._finish(
                StreamError(
                    grpc.StatusCode.INTERNAL,
                    f"the stream ended inside a response ({len(self._body)} bytes of it came)",
                )
            )
        elif code == grpc.StatusCode.OK:
            self._finish(None)
        else:
            self._finish(StreamError(code, unquote(headers.get("grpc-message", ""))))

    def _settings(self, payload: bytes) -> None:
        with self._flow:
            for at in range(0, len(payload) - 5, 6):
                key = int.from_bytes(payload[at : at + 2], "big")
                value = int.from_bytes(payload[at + 2 : at + 6], "big")
                if key == SETTINGS_INITIAL_WINDOW_SIZE:
                    self._send_window += value - self._initial_window
                    self._initial_window = value
                elif key == SETTINGS_MAX_FRAME_SIZE:
                    self._max_frame = value
            self._flow.notify_all()
        self._send(frame_bytes(SETTINGS, ACK, 0))

    # ---------------------------------------------------------------- sending --

    def _send_loop(self) -> None:
        """Thread ``liftbridge-h2-send``: writes the requests as they come,
        each batch of ready ones in one write; ends the stream's sending half
        when the request iterator ends."""
        requests = self._requests
        more: Callable[[], Any] | None = getattr(requests, "next_ready", None)
        try:
            for request in requests:
                chunk = request.SerializeToString()
                parts = [len(chunk).to_bytes(5, "big"), chunk]
                size = len(chunk) + 5
                while more is not None and size < _BATCH_BYTES:
                    request = more()
                    if request is None:
                        break
                    chunk = request.SerializeToString()
                    parts += (len(chunk).to_bytes(5, "big"), chunk)
                    size += len(chunk) + 5
                if not self._send_data(b"".join(parts), end_stream=False):
                    return
            self._send_data(b"", end_stream=True)
        except Exception:  # never die silently: the call ends, its reader says why
            _log.exception("the HTTP/2 sender failed")
            self._finish(StreamError(grpc.StatusCode.INTERNAL, "the request sender failed"))
            self._shutdown()
        finally:
            with self._flow:
                self._sending = False
            self._close_when_idle()

    def write_now(self, request: Message) -> bool:
        """Sends one request from the calling thread, without a hand-over to
        ``liftbridge-h2-send``, when the server's flow-control windows take
        it whole at once; False (nothing sent) when they do not or the call
        has ended: then send it through the request iterator (a thread that
        also reads the call must not wait for window: the update it waits
        for comes in on what it would read). Only for a caller that is the
        call's one writer apart from that iterator, one request at a time.
        """
        chunk = request.SerializeToString()
        payload = len(chunk).to_bytes(5, "big") + chunk
        size = len(payload)
        with self._flow:
            if (
                self._finished
                or size > self._max_frame
                or size > self._send_window
                or size > self._conn_window
            ):
                return False
            self._send_window -= size
            self._conn_window -= size
        return self._send(frame_bytes(DATA, 0, STREAM, payload))

    def _send_data(self, payload: bytes, *, end_stream: bool) -> bool:
        """Writes ``payload`` as DATA frames within the peer's windows; False
        once the call has ended."""
        view = memoryview(payload)
        pos = 0
        while True:
            frames = []
            with self._flow:
                while not self._finished and pos < len(payload):
                    room = min(self._send_window, self._conn_window)
                    if room > 0:
                        break
                    self._flow.wait(1.0)
                if self._finished:
                    return False
                while pos < len(payload):
                    size = min(
                        len(payload) - pos, self._send_window, self._conn_window, self._max_frame
                    )
                    if size <= 0:
                        break
                    self._send_window -= size
                    self._conn_window -= size
                    last = end_stream and pos + size == len(payload)
                    frames.append(
                        frame_bytes(
                            DATA,
                            END_STREAM if last else 0,
                            STREAM,
                            bytes(view[pos : pos + size]),
                        )
                    )
                    pos += size
            if end_stream and not payload:
                frames.append(frame_bytes(DATA, END_STREAM, STREAM))
            if frames and not self._send(b"".join(frames)):
                return False
            if pos >= len(payload):
                return True

    def _send(self, data: bytes) -> bool:
        try:
            with self._write_lock:
                self._sock.sendall(data)
        except OSError as e:
            self._finish(StreamError(grpc.StatusCode.UNAVAILABLE, f"the connection failed: {e}"))
            return False
        return True

    # ------------------------------------------------------------------- ends --

    def _finish(self, error: StreamError | None) -> bool:
        """Records how the call ended; False if it had ended already."""
        with self._flow:
            if self._finished:
                return False
            self._finished = True
            self._error = error
            self._flow.notify_all()
            return True

    def _shutdown(self) -> None:
        """Wakes a thread in recv or sendall on the socket; it stays open."""
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)

    def _close_when_idle(self) -> None:
        """Closes the socket once the call ended and neither the sender nor
        a reader uses it (closing a socket another thread is in could let a
        new one reuse its descriptor under that thread)."""
        with self._flow:
            if self._closed or not self._finished or self._sending or self._reading:
                return
            self._closed = True
        self._sock.close()
