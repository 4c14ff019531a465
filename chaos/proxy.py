"""A small TCP proxy on 127.0.0.1, standard library only, that injects link
faults: reset every connection, blackhole (keep connections open, forward
nothing), add latency, or pass traffic through.

Two ways in:

* a fixed ``target``: the proxy forwards every connection there (between a
  broker and the nats-server, say);
* no target: the proxy speaks HTTP ``CONNECT`` first, so gRPC clients reach
  every broker through it when ``grpc_proxy=http://127.0.0.1:<port>`` is in
  their environment (gRPC honours it for every channel it makes). The
  brokers advertise their own addresses in metadata, so a plain forwarder
  would be bypassed after the first call.

Thread-safety: :meth:`set_mode` and :meth:`reset` may be called from any thread.
"""

from __future__ import annotations

import contextlib
import enum
import select
import socket
import threading
import time
from collections.abc import Callable

_BUFFER = 65536


class Mode(enum.Enum):
    PASS = "pass"
    BLACKHOLE = "blackhole"  # connections stay open; nothing is forwarded
    LATENCY = "latency"  # every chunk is held back for the latency first
    REFUSE = "refuse"  # new connections are closed at once (with reset)


class FaultProxy:
    """See the module docstring. Use as a context manager."""

    def __init__(
        self,
        target: Callable[[], tuple[str, int]] | None = None,
        *,
        latency: float = 0.2,
    ) -> None:
        """Binds a free port on 127.0.0.1; serves once entered.

        Args:
            target: where to forward, asked at each connection (so it may be
                known only after the proxy exists); None for HTTP CONNECT.
            latency: seconds each chunk is held back in LATENCY mode.
        """
        self.target = target
        self.latency = latency
        self._mode = Mode.PASS
        self._lock = threading.Lock()  # guards _mode and _links
        self._links: list[tuple[socket.socket, socket.socket]] = []
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(128)
        self._listener.settimeout(0.2)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.port: int = self._listener.getsockname()[1]

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``, for ``grpc_proxy``."""
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> FaultProxy:
        self._spawn(self._accept_loop, "chaos-proxy-accept")
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def set_mode(self, mode: Mode) -> None:
        with self._lock:
            self._mode = mode

    @property
    def mode(self) -> Mode:
        with self._lock:
            return self._mode

    def reset(self) -> int:
        """Closes every open connection with a TCP reset; returns how many."""
        with self._lock:
            links, self._links = self._links, []
        for pair in links:
            for sock in pair:
                _abort(sock)
        return len(links)

    def close(self) -> None:
        self._stop.set()
        self.reset()
        for thread in self._threads:
            thread.join(5)
        self._listener.close()

    # ---------------------------------------------------------- private --

    def _spawn(self, target: object, name: str, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)  # type: ignore[arg-type]
        self._threads = [t for t in self._threads if t.is_alive()]
        self._threads.append(thread)
        thread.start()

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if self.mode is Mode.REFUSE:
                _abort(client)
                continue
            self._spawn(self._open, "chaos-proxy-link", client)

    def _open(self, client: socket.socket) -> None:
        try:
            target = self.target() if self.target is not None else _read_connect(client)
            upstream = socket.create_connection(target, timeout=5)
        except (OSError, ValueError):
            _abort(client)
            return
        upstream.settimeout(None)
        client.settimeout(None)
        if self.target is None:
            client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        with self._lock:
            self._links.append((client, upstream))
        self._pump(client, upstream)

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        """Forwards both ways until either side closes or the proxy stops."""
        peers = {a: b, b: a}
        try:
            while not self._stop.is_set():
                mode = self.mode
                if mode is Mode.BLACKHOLE:
                    # Read nothing: the kernel buffers fill and the peers wait.
                    self._stop.wait(0.2)
                    continue
                readable, _, _ = select.select([a, b], [], [], 0.2)
                for sock in readable:
                    data = sock.recv(_BUFFER)
                    if not data:
                        return
                    if mode is Mode.LATENCY:
                        time.sleep(self.latency)
                    peers[sock].sendall(data)
        except (OSError, ValueError):  # ValueError: reset() closed a socket under select
            return
        finally:
            for sock in (a, b):
                _abort(sock)


def _read_connect(client: socket.socket) -> tuple[str, int]:
    """Reads an HTTP CONNECT request; returns its target."""
    client.settimeout(5)
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = client.recv(1024)
        if not chunk or len(head) > 8192:
            raise ValueError("no CONNECT request")
        head += chunk
    line = head.split(b"\r\n", 1)[0].decode("ascii", "replace").split()
    if len(line) < 2 or line[0] != "CONNECT":
        raise ValueError(f"not a CONNECT request: {line}")
    host, _, port = line[1].rpartition(":")
    if host != "127.0.0.1":
        raise ValueError(f"the proxy only reaches 127.0.0.1, not {host}")
    return host, int(port)


def _abort(sock: socket.socket) -> None:
    """Closes with a TCP reset (SO_LINGER 0), ignoring a socket already closed."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    with contextlib.suppress(OSError):
        sock.close()
