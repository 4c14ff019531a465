"""TLS under the SDK's own HTTP/2 connection, as memory buffers.

The connection's socket stays a plain one: :class:`TlsLayer` turns the bytes
a call writes into TLS records and the records it reads back into bytes
(``ssl.SSLObject`` over two ``MemoryBIO``), so a thread that reads still
never waits on a write and non-blocking sends work as without TLS. ALPN
offers ``h2`` and the server must pick it (gRPC requires it).

Not thread-safe: the call holds its ``_out_lock`` around every use, which
also keeps the records in the order they are queued.
"""

from __future__ import annotations

import socket
import ssl
import time
from dataclasses import dataclass
from typing import cast

_RECORD_READ = 1 << 18
_PLAIN_BUFFER = 1 << 16
"""Bytes of the buffer records are decrypted into: four records' worth at
least (a record carries 16 KiB at most)."""


class TlsClosed(Exception):
    """The server closed the TLS session (close_notify)."""


@dataclass(frozen=True)
class TlsSettings:
    """How a call's connection speaks TLS.

    Attributes:
        context: certificates to trust, the client's own for mTLS, ALPN ``h2``.
        server_name: the name the server's certificate must carry (SNI too);
            ``None``: the host dialed.
    """

    context: ssl.SSLContext
    server_name: str | None = None


class TlsLayer:
    """One connection's TLS session. See the module docstring."""

    def __init__(self, settings: TlsSettings, host: str) -> None:
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._session = settings.context.wrap_bio(
            self._incoming, self._outgoing, server_hostname=settings.server_name or host
        )
        # What records decrypt to lands here first (see unwrap).
        self._plain = memoryview(bytearray(_PLAIN_BUFFER))

    def handshake(self, sock: socket.socket, deadline: float) -> None:
        """Runs the handshake on ``sock`` (blocking), by ``deadline`` (a
        ``time.monotonic()`` reading).

        Raises:
            ssl.SSLError: the handshake failed (the certificate, say) or the
                server did not choose h2.
            OSError: the connection failed or the deadline passed.
        """
        while True:
            try:
                self._session.do_handshake()
                break
            except ssl.SSLWantReadError:
                pass
            self._send_pending(sock, deadline)
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            chunk = sock.recv(_RECORD_READ)
            if not chunk:
                raise ConnectionError("the server closed the connection in the TLS handshake")
            self._incoming.write(chunk)
        self._send_pending(sock, deadline)
        protocol = self._session.selected_alpn_protocol()
        if protocol != "h2":
            raise ssl.SSLError(f"the server chose ALPN {protocol!r}, not h2")

    def _send_pending(self, sock: socket.socket, deadline: float) -> None:
        pending = self._outgoing.read()
        if pending:
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            sock.sendall(pending)

    def wrap(self, data: bytes) -> bytes:
        """The TLS records carrying ``data``, to write in this order."""
        if data:
            self._session.write(data)
        return self._outgoing.read()

    def unwrap(self, records: bytes | memoryview) -> tuple[bytes, bytes]:
        """The bytes carried by what was read (b"" while a record is
        incomplete), and any TLS records the session must send back.

        ``ssl`` returns one record per read, so a read full of small records
        costs a call each: they decrypt into one buffer kept for it (a new
        256 KiB bytes object per record cost more than decrypting a small
        one), copied out once. A close_notify reads as no more bytes; the
        call then ends when the server closes the connection.

        Raises:
            TlsClosed: ssl reported the session's end as an error.
            ssl.SSLError: a record was corrupt.
        """
        incoming = self._incoming
        incoming.write(records)
        plain, session = self._plain, self._session
        chunks = []
        size = 0
        while True:
            if size == len(plain):  # full: keep what it holds and read on
                chunks.append(plain.tobytes())
                size = 0
            try:
                # Into a buffer, read returns the count (typeshed says bytes).
                count = cast(int, session.read(len(plain) - size, plain[size:]))
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError as e:
                raise TlsClosed("the server closed the TLS session") from e
            if not count:
                break
            size += count
            if not incoming.pending and not session.pending():
                break  # every record was whole and is read: spare the failing read
        chunks.append(plain[:size].tobytes())
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        return data, self._outgoing.read()
