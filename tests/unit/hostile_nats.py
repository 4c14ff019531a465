"""A hostile NATS server on 127.0.0.1: it speaks enough of the protocol to
stand in for NATS and a Liftbridge partition leader at once (every publish
envelope it reads is acked on its ack inbox, as the leader would), and
breaks the protocol on cue, which a real server never does.

A publish scripts its connection by its value (:data:`SCRIPTS` names what
each one does instead of acking); every other connection, and every other
publish, is served as a real server would. ``info`` is the INFO line each
new connection is greeted with; tests change it between connections.
"""

from __future__ import annotations

import contextlib
import functools
import json
import socket
import threading
from collections.abc import Callable

from liftbridge._core._envelope import EnvelopeType, decode_envelope, encode_envelope
from liftbridge_api import api_pb2

GOOD_INFO = b'INFO {"server_id":"hostile","max_payload":1048576,"headers":true}\r\n'


class Connection:
    """One client connection as the fake server sees it (its thread's alone,
    but for ``send`` from a script and ``close``)."""

    def __init__(self, sock: socket.socket, server: FakeNats) -> None:
        self.sock = sock
        self.server = server
        self.sid = b"1"  # the ack inbox's subscription id, from its SUB
        self.answer_pings = True  # PONG to the client's PINGs
        self.reading = True  # False: never recv again (a peer whose reads stall)
        self.received = 0  # bytes read from the client

    def send(self, data: bytes) -> None:
        with contextlib.suppress(OSError):
            self.sock.sendall(data)

    def msg(self, inbox: str, payload: bytes, *, before: bytes = b"") -> None:
        """Sends ``payload`` to the client's inbox subscription, well formed,
        in one write with the bytes ``before`` it."""
        frame = b"MSG %s %s %d\r\n%s\r\n" % (inbox.encode(), self.sid, len(payload), payload)
        self.send(before + frame)

    def flood(self, chunk: bytes, limit: int) -> int:
        """Sends ``chunk`` again and again (``limit`` bytes at most) until
        the client hangs up; returns the bytes sent."""
        sent = 0
        while sent < limit and not self.server.stop.is_set():
            try:
                self.sock.sendall(chunk)
            except OSError:
                break
            sent += len(chunk)
        return sent


Script = Callable[[Connection, api_pb2.Message, str], None]
"""What the server does for a publish (the connection, the message, its subject)."""


def ack(
    connection: Connection, message: api_pb2.Message, subject: str, *, before: bytes = b""
) -> None:
    """What a partition leader does: the ack envelope on the message's ack
    inbox (in one write with the bytes ``before`` it)."""
    pb = api_pb2.Ack(
        stream="hostile",
        partitionSubject=subject,
        msgSubject=subject,
        offset=connection.server.next_offset(),
        ackInbox=message.ackInbox,
        correlationId=message.correlationId,
        ackPolicy=message.ackPolicy,
    )
    payload = encode_envelope(EnvelopeType.ACK, pb.SerializeToString())
    connection.msg(message.ackInbox, payload, before=before)


class FakeNats:
    """See the module docstring. ``scripts`` maps a publish's value to what
    the server does instead of acking it."""

    def __init__(self, scripts: dict[bytes, Script] | None = None) -> None:
        self.scripts = dict(scripts or {})
        self.info = GOOD_INFO
        self.next_infos: list[bytes] = []  # greet the next connections with these first
        self.stop = threading.Event()
        self._lock = threading.Lock()  # guards connections, _offset
        self.connections: list[Connection] = []
        self._offset = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)
        self.port = self._listener.getsockname()[1]
        self.url = f"nats://127.0.0.1:{self.port}"
        self._threads = [threading.Thread(target=self._accept, name="test-nats-accept")]
        self._threads[0].start()

    def next_offset(self) -> int:
        with self._lock:
            self._offset += 1
            return self._offset

    def connected(self) -> int:
        """Connections accepted so far."""
        with self._lock:
            return len(self.connections)

    def start(self, target: Callable[[], None], name: str) -> None:
        """Runs ``target`` on a thread of the server's (joined by close())."""
        thread = threading.Thread(target=target, name=name, daemon=True)
        with self._lock:
            self._threads.append(thread)
        thread.start()

    def close(self) -> None:
        self.stop.set()
        with self._lock:
            connections = list(self.connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.sock.shutdown(socket.SHUT_RDWR)
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(10)
        self._listener.close()
        for connection in connections:
            connection.sock.close()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                sock, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            connection = Connection(sock, self)
            with self._lock:
                self.connections.append(connection)
            self.start(functools.partial(self._serve, connection), "test-nats-conn")

    def _serve(self, connection: Connection) -> None:
        sock = connection.sock
        sock.settimeout(0.1)
        with self._lock:
            info = self.next_infos.pop(0) if self.next_infos else self.info
        connection.send(info)
        buf = b""
        while not self.stop.is_set():
            if not connection.reading:
                self.stop.wait(0.1)
                continue
            try:
                data = sock.recv(1 << 20)
            except TimeoutError:
                continue
            except OSError:
                return
            if not data:
                return
            connection.received += len(data)
            buf += data
            buf = self._frames(connection, buf)

    def _frames(self, connection: Connection, buf: bytes) -> bytes:
        """Acts on the whole frames in ``buf``; returns what is left."""
        while connection.reading:
            end = buf.find(b"\r\n")
            if end < 0:
                return buf
            line = buf[:end]
            op = line.split(b" ", 1)[0].upper()
            if op == b"PUB":
                fields = line.split()
                size = int(fields[-1])
                if len(buf) < end + 2 + size + 2:
                    return buf
                payload = buf[end + 2 : end + 2 + size]
                buf = buf[end + 2 + size + 2 :]
                self._publish(connection, fields[1].decode(), payload)
                continue
            buf = buf[end + 2 :]
            if op == b"SUB":
                connection.sid = line.split()[-1]
            elif op == b"PING" and connection.answer_pings:
                connection.send(b"PONG\r\n")
            elif op == b"CONNECT":
                json.loads(line[8:])  # a client that sends garbage fails the test
        return buf

    def _publish(self, connection: Connection, subject: str, payload: bytes) -> None:
        try:
            message = api_pb2.Message.FromString(decode_envelope(payload, EnvelopeType.MESSAGE))
        except Exception:  # a plain NATS message (the ack inbox's own test frames)
            return
        script = self.scripts.get(message.value)
        if script is None:
            if message.ackInbox:
                ack(connection, message, subject)
        else:
            script(connection, message, subject)
