"""The server end of one HTTP/2 connection, played frame by frame by a test.

:class:`Peer` reads what the client sent as whole frames and writes what the
"server" says as raw bytes, so a test can split, pad, interleave and
misbehave exactly as it wants (an in-process grpcio server never sends a
padded frame or a CONTINUATION on cue). Used by ``test_http2.py`` against
:class:`liftbridge._transport._http2.Http2Call`.
"""

from __future__ import annotations

import select
import socket
from dataclasses import dataclass

import hpack

WAIT = 10.0
"""Seconds any single read of the peer may wait: a client that never sends
fails the test instead of hanging it."""

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = (
    0x0,
    0x1,
    0x3,
    0x4,
    0x6,
    0x7,
    0x8,
    0x9,
)
END_STREAM = 0x1
ACK = 0x1
END_HEADERS = 0x4
PADDED = 0x8
PRIORITY = 0x20
INITIAL_WINDOW_SIZE = 0x4
MAX_FRAME_SIZE = 0x5
STREAM = 1


@dataclass(frozen=True)
class Frame:
    kind: int
    flags: int
    stream: int
    payload: bytes


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    """One frame's bytes, header included."""
    header = len(payload).to_bytes(3, "big") + bytes((kind, flags)) + stream.to_bytes(4, "big")
    return header + payload


def grpc_message(body: bytes, *, compressed: bool = False) -> bytes:
    """``body`` with gRPC's 5-byte prefix (compression flag, length)."""
    return bytes((int(compressed),)) + len(body).to_bytes(4, "big") + body


def split_messages(body: bytes) -> list[bytes]:
    """The gRPC messages of a request body that holds only whole ones."""
    found, pos = [], 0
    while pos < len(body):
        assert body[pos] == 0, "the client compressed a request"
        size = int.from_bytes(body[pos + 1 : pos + 5], "big")
        found.append(body[pos + 5 : pos + 5 + size])
        pos += 5 + size
    assert pos == len(body), "a request body ended inside a message"
    return found


def settings(*pairs: tuple[int, int]) -> bytes:
    """A SETTINGS frame (not an ack) holding ``(identifier, value)`` pairs."""
    payload = b"".join(key.to_bytes(2, "big") + value.to_bytes(4, "big") for key, value in pairs)
    return frame(SETTINGS, 0, 0, payload)


def window_update(stream: int, increment: int) -> bytes:
    return frame(WINDOW_UPDATE, 0, stream, increment.to_bytes(4, "big"))


class Peer:
    """The accepted socket of one client connection. Not thread-safe: one
    thread (the test's) plays the server.

    Attributes:
        frames: every frame read from the client so far, in order.
        data: the stream's request bytes (DATA payloads, padding removed).
        half_closed: the client sent END_STREAM.
        request_headers: the stream's request headers, once :meth:`opening` read them.
    """

    def __init__(self, sock: socket.socket, already: bytes = b"") -> None:
        self.sock = sock
        sock.settimeout(WAIT)
        self._inbox = bytearray(already)  # bytes read from the socket before
        self._encoder = hpack.Encoder()
        self._decoder = hpack.Decoder()
        self.frames: list[Frame] = []
        self.data = bytearray()
        self.half_closed = False
        self.request_headers: dict[str, str] = {}

    # ----------------------------------------------------------- reading --

    def _fill(self, size: int) -> None:
        while len(self._inbox) < size:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise EOFError("the client closed the connection")
            self._inbox += chunk

    def read_frame(self) -> Frame:
        """The client's next frame (waits up to ``WAIT`` for it)."""
        self._fill(9)
        size = int.from_bytes(self._inbox[:3], "big")
        self._fill(9 + size)
        raw = bytes(self._inbox[: 9 + size])
        del self._inbox[: 9 + size]
        got = Frame(raw[3], raw[4], int.from_bytes(raw[5:9], "big") & 0x7FFF_FFFF, raw[9:])
        self.frames.append(got)
        if got.kind == DATA:
            payload = got.payload
            if got.flags & PADDED:
                payload = payload[1 : len(payload) - payload[0]]
            self.data += payload
            self.half_closed = self.half_closed or bool(got.flags & END_STREAM)
        return got

    def read_until(self, kind: int, flags: int = 0) -> Frame:
        """Reads frames up to the next one of ``kind`` with all of ``flags``."""
        while True:
            got = self.read_frame()
            if got.kind == kind and got.flags & flags == flags:
                return got

    def pending(self, wait: float = 0.0) -> bool:
        """True if the client sent more than what was read (waiting up to ``wait``)."""
        return bool(self._inbox) or bool(select.select([self.sock], [], [], wait)[0])

    def opening(self) -> dict[str, str]:
        """Reads the client's connection preface, its SETTINGS and the
        stream's request headers, which it returns."""
        self._fill(len(PREFACE))
        assert bytes(self._inbox[: len(PREFACE)]) == PREFACE
        del self._inbox[: len(PREFACE)]
        first = self.read_frame()
        assert (first.kind, first.flags, first.stream) == (SETTINGS, 0, 0)
        block = bytearray()
        got = self.read_until(HEADERS)
        assert got.stream == STREAM
        block += got.payload
        while not got.flags & END_HEADERS:
            got = self.read_until(CONTINUATION)
            block += got.payload
        self.request_headers = {
            name.decode(): value.decode()
            for name, value in self._decoder.decode(bytes(block), raw=True)
        }
        return self.request_headers

    def client_settings(self) -> dict[int, int]:
        """The values of the client's first SETTINGS frame."""
        payload = next(f for f in self.frames if f.kind == SETTINGS and not f.flags & ACK).payload
        return {
            int.from_bytes(payload[at : at + 2], "big"): int.from_bytes(
                payload[at + 2 : at + 6], "big"
            )
            for at in range(0, len(payload), 6)
        }

    # ----------------------------------------------------------- writing --

    def write(self, data: bytes) -> None:
        self.sock.sendall(data)

    def block(self, headers: list[tuple[str, str]] | list[tuple[bytes, bytes]]) -> bytes:
        """An HPACK header block (the peer's encoder is stateful: write the
        blocks in the order they were made)."""
        encoded: bytes = self._encoder.encode(headers)
        return encoded

    def response_headers(self, status: str = "200") -> bytes:
        """A HEADERS frame opening the response."""
        block = self.block([(":status", status), ("content-type", "application/grpc")])
        return frame(HEADERS, END_HEADERS, STREAM, block)

    def trailers(self, code: int = 0, message: str | None = None) -> bytes:
        """A HEADERS frame ending the stream with a gRPC status."""
        fields = [("grpc-status", str(code))]
        if message is not None:
            fields.append(("grpc-message", message))
        return frame(HEADERS, END_HEADERS | END_STREAM, STREAM, self.block(fields))

    def accept(self) -> None:
        """Empty SETTINGS and the response headers: the usual server answer."""
        self.write(settings() + self.response_headers())

    def close(self) -> None:
        self.sock.close()
