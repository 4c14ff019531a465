"""The wire pieces of the SDK's HTTP/2 calls (:mod:`liftbridge._transport._http2`):
frame types, flags, settings and error codes (RFC 9113), how an HTTP/2 ending maps to a
gRPC status (gRPC's doc/PROTOCOL-HTTP2.md and http-grpc-status-mapping.md),
the error a call ends with (one ending the connection too), the socket
options of its connection and its keepalive PING settings.
"""

from __future__ import annotations

import contextlib
import select
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass

import grpc

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
SETTINGS_ENABLE_PUSH = 0x2
SETTINGS_INITIAL_WINDOW_SIZE = 0x4
SETTINGS_MAX_FRAME_SIZE = 0x5
STREAM = 1  # the connection's one stream
# HTTP/2 error codes (RFC 9113 §7) a connection error is sent with.
PROTOCOL_ERROR, INTERNAL_ERROR, FLOW_CONTROL_ERROR = 0x1, 0x2, 0x3
FRAME_SIZE_ERROR, REFUSED_STREAM, COMPRESSION_ERROR, ENHANCE_YOUR_CALM = 0x6, 0x7, 0x9, 0xB
MAX_WINDOW = (1 << 31) - 1
"""The largest a flow-control window may get (RFC 9113 §6.9.1)."""

KEEPALIVE_IDLE, KEEPALIVE_INTERVAL, KEEPALIVE_PROBES = 300, 20, 3
"""TCP keepalive where the platform lets us set it: a connection silent for
5 minutes is probed, and given up after 3 probes 20 s apart (the client's
gRPC channels ping on that schedule; the kernel's default waits 2 hours), so
a subscription idle on a vanished broker ends with UNAVAILABLE and resubscribes."""
MAX_FRAME_IN = 16_384
"""The largest frame the peer may send us (RFC 9113 4.2: we never raise
SETTINGS_MAX_FRAME_SIZE). A bigger one is no HTTP/2: waiting for up to
16 MiB of it would hang the call on a peer that speaks something else."""
RESET_STATUS = {
    0x7: grpc.StatusCode.UNAVAILABLE,  # REFUSED_STREAM: not processed, may go elsewhere
    0x8: grpc.StatusCode.CANCELLED,  # CANCEL
    0xB: grpc.StatusCode.RESOURCE_EXHAUSTED,  # ENHANCE_YOUR_CALM
    0xC: grpc.StatusCode.PERMISSION_DENIED,  # INADEQUATE_SECURITY
}
"""The gRPC code of an RST_STREAM's HTTP/2 error code (gRPC's
doc/PROTOCOL-HTTP2.md, "Errors", as grpcio reported them); any other,
NO_ERROR included: INTERNAL."""
HTTP_STATUS = {
    "400": grpc.StatusCode.INTERNAL,
    "401": grpc.StatusCode.UNAUTHENTICATED,
    "403": grpc.StatusCode.PERMISSION_DENIED,
    "404": grpc.StatusCode.UNIMPLEMENTED,
    "429": grpc.StatusCode.UNAVAILABLE,
    "502": grpc.StatusCode.UNAVAILABLE,
    "503": grpc.StatusCode.UNAVAILABLE,
    "504": grpc.StatusCode.UNAVAILABLE,
}
"""The gRPC code of a response whose HTTP status is not 200 and that has no
grpc-status (gRPC's doc/http-grpc-status-mapping.md); any other: UNKNOWN.
An intermediary may answer so: a 404 is no broker outage to retry."""


FRAME_HEAD = struct.Struct(">IBI")
"""A frame's 9-byte header: length (24 bits) and type in one word, flags, stream."""
MESSAGE_PREFIX = struct.Struct(">BI")
"""A gRPC message's 5-byte prefix: the compressed flag and the length."""
FRAME_AND_PREFIX = struct.Struct(">IBIBI")
"""A frame's header and the gRPC prefix its payload starts with, read in one
call: a DATA frame usually carries exactly one message."""


def compressed_error() -> StreamError:
    return StreamError(grpc.StatusCode.INTERNAL, "a compressed response, never asked for")


@dataclass(frozen=True)
class Keepalive:
    """HTTP/2 PINGs after ``interval`` seconds of silence from the server;
    no ack within ``timeout`` ends the call with UNAVAILABLE (a broker hung
    though its kernel still answers TCP)."""

    interval: float
    timeout: float


def keep_alive(sock: socket.socket) -> None:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for option, value in (
        ("TCP_KEEPIDLE", KEEPALIVE_IDLE),
        ("TCP_KEEPINTVL", KEEPALIVE_INTERVAL),
        ("TCP_KEEPCNT", KEEPALIVE_PROBES),
    ):
        if hasattr(socket, option):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, option), value)


def frame_header(kind: int, flags: int, stream: int, length: int) -> bytes:
    """The 9-byte header of a frame whose payload is ``length`` bytes."""
    return (length << 48 | kind << 40 | flags << 32 | stream).to_bytes(9, "big")


def frame_bytes(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return frame_header(kind, flags, stream, len(payload)) + payload


def host_port(address: str) -> tuple[str, int]:
    """``"host:port"`` or ``"[v6 address]:port"`` as a (host, port) pair.

    Raises:
        ValueError: no port number.
    """
    host, _, port = address.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


class StreamError(grpc.RpcError, grpc.Call):
    """How an HTTP/2 stream ended when it did not end well: a gRPC status
    code and its details, read by :func:`liftbridge._transport._status.from_rpc_error`
    like grpcio's own errors.

    Attributes:
        goaway: the HTTP/2 error code of a connection error we detected (the
            GOAWAY we send), or None.
        unprocessed: the server said it never processed the stream
            (REFUSED_STREAM, or a GOAWAY whose last stream is below ours,
            RFC 9113 §8.7): nothing sent on it was applied.
    """

    def __init__(
        self,
        code: grpc.StatusCode,
        details: str,
        *,
        goaway: int | None = None,
        unprocessed: bool = False,
    ) -> None:
        super().__init__(f"{code.name}: {details}")
        self._code = code
        self._details = details
        self.goaway = goaway
        self.unprocessed = unprocessed

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def initial_metadata(self) -> tuple[()]:
        return ()

    def trailing_metadata(self) -> tuple[()]:
        return ()

    def is_active(self) -> bool:
        return False

    def time_remaining(self) -> float:
        return 0.0

    def cancel(self) -> bool:
        return False

    def add_callback(self, callback: Callable[[], None]) -> bool:
        return False


def connection_error(code: int, details: str, status: grpc.StatusCode | None = None) -> StreamError:
    """A protocol violation by the peer that ends the whole connection: a
    GOAWAY with ``code`` goes back; the call fails with INTERNAL (gRPC's
    mapping of HTTP/2 errors) unless ``status`` says otherwise."""
    return StreamError(status or grpc.StatusCode.INTERNAL, details, goaway=code)


def read_poll(sock: socket.socket) -> Callable[[int], object]:
    """A wait for ``sock`` to be readable (or closed, or failed): called with
    a timeout in milliseconds (-1: no bound), truthy when it is. One poll
    object registered once serves every wait of a call (a new one per wait
    cost a registration and a few Python calls per read); select where there
    is no poll. ``sock`` must stay open while it is used."""
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        return poller.poll
    return lambda millis: wait_ready(sock, None if millis < 0 else millis / 1000, write=False)[0]


def wait_ready(sock: socket.socket, timeout: float | None, *, write: bool) -> tuple[bool, bool]:
    """Waits up to ``timeout`` seconds (None: no bound) for ``sock`` to be
    readable (or closed, or failed), or writable too when ``write``.
    Returns (readable, writable). poll where there is one: select refuses
    descriptors past FD_SETSIZE (1024), which a process with many files
    open hands out."""
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(sock, select.POLLIN | (select.POLLOUT if write else 0))
        events = 0
        for _, event in poller.poll(None if timeout is None else max(0, int(timeout * 1000))):
            events |= event
        return bool(events & ~select.POLLOUT), bool(events & select.POLLOUT)
    readers, writers, errors = select.select([sock], [sock] if write else [], [sock], timeout)
    return bool(readers or errors), bool(writers)


def grpc_status(value: bytes | str | None) -> grpc.StatusCode:
    try:
        number = int(value or b"")
    except ValueError:
        return grpc.StatusCode.UNKNOWN
    for code in grpc.StatusCode:
        if code.value[0] == number:
            return code
    return grpc.StatusCode.UNKNOWN
