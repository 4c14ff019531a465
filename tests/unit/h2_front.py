"""A hostile HTTP/2 front for a fake broker: connections the SDK opens for a
streaming RPC a test armed are played by a script (:class:`tests.unit.h2_peer.Peer`),
every other connection is piped to the broker behind it.

So a whole :class:`liftbridge.Client` runs against it (metadata and the
other streams go to the in-process grpcio broker and work), while one stream
meets a server that sends what RFC 9113 forbids, on cue.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable

import hpack

from tests.unit.h2_peer import (
    CONTINUATION,
    END_HEADERS,
    HEADERS,
    PREFACE,
    Peer,
)

Script = Callable[[Peer], None]
"""Plays the server of one connection; its request headers are read already.
It may raise OSError or EOFError when the client closes the connection."""

_SNIFF = 2.0
"""Seconds a new connection may take to say its first bytes. The SDK's own
streams send the preface, SETTINGS and request headers in one write; grpcio
sends its preface alone and waits for the server's SETTINGS."""


def _first_path(data: bytes) -> str | None:
    """The :path of the first header block in ``data`` (a connection's first
    bytes), or None when it has not come whole yet."""
    if not data.startswith(PREFACE):
        return None
    pos, block = len(PREFACE), b""
    while len(data) - pos >= 9:
        size = int.from_bytes(data[pos : pos + 3], "big")
        kind, flags = data[pos + 3], data[pos + 4]
        if len(data) - pos - 9 < size:
            return None
        if kind in (HEADERS, CONTINUATION):
            block += data[pos + 9 : pos + 9 + size]  # the SDK pads and prioritizes nothing
            if flags & END_HEADERS:
                headers = dict(hpack.Decoder().decode(block, raw=True))
                path = headers.get(b":path", b"")
                return path.decode() if isinstance(path, bytes) else str(path)
        pos += 9 + size
    return None


class H2Front:
    """Listens on 127.0.0.1 in front of the broker at ``backend_port``.

    Thread-safe. Its threads are named ``hostile-front-*``; :meth:`close`
    ends them all.
    """

    def __init__(self, backend_port: int) -> None:
        self._backend = ("127.0.0.1", backend_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()  # guards _scripts, _sockets, played
        self._scripts: dict[str, list[Script]] = {}
        self._sockets: list[socket.socket] = []
        self.played = 0  # connections a script played
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._spawn(self._accept_loop, "accept")

    def arm(self, method: str, script: Script, *, times: int = 1) -> None:
        """The next ``times`` connections opened for ``method`` (for example
        ``"PublishAsync"``) are played by ``script``."""
        with self._lock:
            self._scripts.setdefault(f"/proto.API/{method}", []).extend([script] * times)

    def _spawn(self, target: Callable[..., None], name: str, *args: object) -> None:
        thread = threading.Thread(
            target=target, args=args, name=f"hostile-front-{name}", daemon=True
        )
        self._threads.append(thread)
        thread.start()

    def _keep(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                sock, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self._keep(sock)
            self._spawn(self._serve, "conn", sock)

    def _serve(self, sock: socket.socket) -> None:
        sock.settimeout(_SNIFF)
        try:
            data = sock.recv(1 << 16)
        except OSError:
            data = b""
        if not data:
            sock.close()
            return
        path = _first_path(data)
        script = None
        with self._lock:
            waiting = self._scripts.get(path or "")
            if waiting:
                script = waiting.pop(0)
                self.played += 1
        if script is None:
            self._pipe(sock, data)
            return
        peer = Peer(sock, data)
        with contextlib.suppress(OSError, EOFError):
            peer.opening()
            script(peer)

    def _pipe(self, client: socket.socket, first: bytes) -> None:
        try:
            backend = socket.create_connection(self._backend, timeout=5)
        except OSError:
            client.close()
            return
        self._keep(backend)
        client.settimeout(None)
        backend.settimeout(None)
        with contextlib.suppress(OSError):
            backend.sendall(first)
        self._spawn(self._pump, "pump", backend, client)
        self._pump(client, backend)

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while chunk := source.recv(1 << 16):
                sink.sendall(chunk)
        for each in (source, sink):
            with contextlib.suppress(OSError):
                each.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._stop.set()
        self._listener.close()
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        for thread in self._threads:
            thread.join(5)
