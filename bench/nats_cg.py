"""A measurement, not a feature: the client's instructions for a
``NatsStreamPublisher`` publish, without a Liftbridge or NATS server.

Issue 29 has two NATS rows of ``make bench`` behind: ``publish`` one at a time
(each waiting for its ack) and ``publish_async`` pipelined through the
publisher's 1,024 window, both at 100 B. This drives either against fakes in
a child process (``--peer``: grpcio answering metadata, and a NATS server that
acks every publish envelope on its ack inbox as a partition leader would), so
that under callgrind only the client runs instrumented. Count the
instructions of two ``--count`` s and take the difference per publish::

    PYTHONHASHSEED=0 valgrind --tool=callgrind --separate-threads=yes \\
        python -m bench.nats_cg --count 1000 [--pipelined]

``--pipelined``: ``publish_async`` back to back, then ``flush`` (the window
paces it), instead of ``publish``.
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import threading

import liftbridge
from bench.publish_cg import STREAM, AckingBroker, peer_ports, serve_peer
from liftbridge._core._envelope import EnvelopeType, decode_envelope, encode_envelope
from liftbridge_api import api_pb2

_INFO = b'INFO {"server_id":"cg","max_payload":1048576,"headers":true}\r\n'


def _serve_nats(sock: socket.socket) -> None:
    """One client connection: PONGs its PINGs, acks its publishes in one
    write a read, until it hangs up."""
    sock.sendall(_INFO)
    sid, buf, offset = b"1", b"", 0
    while data := sock.recv(1 << 20):
        buf += data
        out: list[bytes] = []
        while (end := buf.find(b"\r\n")) >= 0:
            line = buf[:end]
            if line.startswith(b"PUB "):
                size = int(line.rsplit(b" ", 1)[1])
                if len(buf) < end + size + 4:
                    break
                payload = buf[end + 2 : end + 2 + size]
                buf = buf[end + size + 4 :]
                message = api_pb2.Message.FromString(decode_envelope(payload, EnvelopeType.MESSAGE))
                offset += 1
                ack = api_pb2.Ack(
                    stream=STREAM,
                    partitionSubject=STREAM,
                    msgSubject=STREAM,
                    offset=offset,
                    ackInbox=message.ackInbox,
                    correlationId=message.correlationId,
                    ackPolicy=message.ackPolicy,
                )
                envelope = encode_envelope(EnvelopeType.ACK, ack.SerializeToString())
                out.append(
                    b"MSG %s %s %d\r\n%s\r\n"
                    % (message.ackInbox.encode(), sid, len(envelope), envelope)
                )
                continue
            buf = buf[end + 2 :]
            if line.startswith(b"SUB "):
                sid = line.rsplit(b" ", 1)[1]
            elif line == b"PING":
                out.append(b"PONG\r\n")
        if out:
            sock.sendall(b"".join(out))


def _peer() -> None:
    """Serves the fake broker and NATS server; prints their ports; ends
    when stdin closes."""
    listener = socket.create_server(("127.0.0.1", 0))

    def accept() -> None:
        while True:
            sock, _ = listener.accept()
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=_serve_nats, args=(sock,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    # The broker: only its metadata RPC is used.
    serve_peer(AckingBroker(), listener.getsockname()[1])  # type: ignore[abstract]


def drive(port: int, nats_port: int, count: int, *, pipelined: bool) -> None:
    """``count`` publishes after a warm-up, every ack in before it returns."""
    value = b"v" * 100
    with (
        liftbridge.Client(f"127.0.0.1:{port}", ack_wait=600.0, connect_timeout=300.0) as client,
        liftbridge.NatsStreamPublisher(
            client, f"nats://127.0.0.1:{nats_port}", ack_wait=600.0, connect_timeout=300.0
        ) as publisher,
    ):
        for _ in range(20):  # the stream known, every path's first time
            publisher.publish(STREAM, value)
        if pipelined:
            publish_async = publisher.publish_async
            for _ in range(count):
                publish_async(STREAM, value)
            assert publisher.flush(600.0)
        else:
            publish = publisher.publish
            for _ in range(count):
                publish(STREAM, value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--pipelined", action="store_true", help="publish_async, then flush")
    parser.add_argument("--peer", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peer:
        with contextlib.suppress(KeyboardInterrupt):
            _peer()
        return
    with peer_ports("bench.nats_cg") as (port, nats_port):
        drive(port, nats_port, args.count, pipelined=args.pipelined)


if __name__ == "__main__":
    main()
