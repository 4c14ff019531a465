"""Instructions a subscription's thread spends a message, from the socket
read to the handler call, for callgrind (issue 29: wall clock is noise on a
loaded machine, instruction counts are not).

A listening socket on 127.0.0.1 plays the server: it answers the SDK's own
HTTP/2 call (:class:`liftbridge._transport._http2.Http2Call`, as
``Channels.open_stream`` makes it for Subscribe: keepalive 300 s) with
SETTINGS, the response headers and the empty handshake message, then DATA
frames each carrying one gRPC-framed ``api_pb2.Message`` (100 B value).
:meth:`Subscription._consume` reads them on this one thread, as the
subscription's thread does, and calls the handler, which writes the next run
of ``RUN`` frames (1: a paced subscription, one message a read; 8: pipelined)
before it returns, so each read finds exactly one run. The frames are built
before the loop.

``base`` mode writes the same runs and reads them with one plain ``recv``:
the driver's own share, to subtract.

Usage (per message: the difference of two counts over 4,000 messages)::

    for n in 1000 5000; do PYTHONHASHSEED=0 PYTHONPATH=$PWD valgrind --tool=callgrind \\
        --callgrind-out-file=/tmp/cg.$n .venv/bin/python scripts/measure_sub_thread.py sub $n 1
    done
    # (Ir(5000) - Ir(1000)) / 4000
"""

from __future__ import annotations

import socket
import sys
from typing import Any

import hpack

from liftbridge._consume._subscription import Subscription, _Request
from liftbridge._core._messages import Message
from liftbridge._transport._http2 import Http2Call
from liftbridge._transport._http2_wire import Keepalive
from liftbridge_api import api_pb2

STREAM_NAME = "orders"


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    header = len(payload).to_bytes(3, "big") + bytes((kind, flags)) + stream.to_bytes(4, "big")
    return header + payload


def data_frame(body: bytes) -> bytes:
    return frame(0x0, 0, 1, b"\0" + len(body).to_bytes(4, "big") + body)


def varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def runs(count: int, size: int) -> list[bytes]:
    """``count`` messages (offsets from 1), one DATA frame each, joined
    ``size`` frames a run. Each is its offset's field (first, as Go's
    protobuf writes it) before the same serialized rest: cheap to make, so
    that making them weighs little in the counts."""
    rest = api_pb2.Message(
        value=b"v" * 100,
        timestamp=1_700_000_000_000_000_000,
        stream=STREAM_NAME,
        partition=0,
        subject=STREAM_NAME,
        headers={"subject": STREAM_NAME.encode(), "reply": b""},
    ).SerializeToString()
    frames = [data_frame(b"\x08" + varint(offset) + rest) for offset in range(1, count + 1)]
    return [b"".join(frames[i : i + size]) for i in range(0, count, size)]


def main() -> None:
    mode, count, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    chunks = runs(count, size)
    listener = socket.create_server(("127.0.0.1", 0))
    address = f"127.0.0.1:{listener.getsockname()[1]}"
    if mode == "base":
        client = socket.create_connection(listener.getsockname())
        server, _ = listener.accept()
        buffer = bytearray(1 << 18)
        for chunk in chunks:
            server.sendall(chunk)
            client.recv_into(buffer)
        return
    call: Http2Call[api_pb2.Message] = Http2Call(
        address,
        "/proto.API/Subscribe",
        api_pb2.SubscribeRequest(stream=STREAM_NAME, partition=0),
        api_pb2.Message.FromString,
        connect_timeout=5.0,
        keepalive=Keepalive(300.0, 20.0),
    )
    server, _ = listener.accept()
    headers = hpack.Encoder().encode([(":status", "200"), ("content-type", "application/grpc")])
    server.sendall(frame(0x4, 0, 0) + frame(0x1, 0x4, 1, headers) + data_frame(b""))
    next(call)  # the handshake, as Subscription._open reads it
    router: Any = None  # never used: the stream is read to the end, no resubscribe
    subscription: Subscription
    sent = 1
    handled = 0

    def handler(message: Message | None, error: BaseException | None) -> None:
        nonlocal sent, handled
        handled += 1
        if handled == count:
            subscription._signal_close()
        elif handled % size == 0:
            server.sendall(chunks[sent])
            sent += 1

    subscription = Subscription(
        router,
        _Request(STREAM_NAME, 0, api_pb2.SubscribeRequest(stream=STREAM_NAME, partition=0)),
        handler,
        resubscribe_wait=1.0,
        open_timeout=1.0,
    )
    server.sendall(chunks[0])
    subscription._consume(call)
    assert handled == count, handled


if __name__ == "__main__":
    main()
