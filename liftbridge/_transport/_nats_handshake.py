"""Making one NATS connection: the server's ``INFO``, TLS, ``CONNECT`` (with
the credentials), the ack inbox's ``SUB``, and a ``PING`` whose ``PONG`` says
the server took them all.

:func:`handshake` is how :class:`~liftbridge._transport._nats_socket.NatsSocket`
connects the first time and on every reconnect; :class:`Dial` is what it
needs, read once from the URL and options. Every wait is bounded by the
connect timeout, and what the server says goes through the same checked
:class:`~liftbridge._transport._nats_frames.FrameParser` as later frames.
"""

from __future__ import annotations

import json
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from time import monotonic
from typing import Any
from urllib.parse import unquote, urlsplit

from liftbridge.__version__ import __version__
from liftbridge._errors import UnavailableError
from liftbridge._transport._nats_creds import Credentials
from liftbridge._transport._nats_frames import FrameParser
from liftbridge._transport._nats_info import DEFAULT_PORT, server_info


class Lost(Exception):
    """The connection is gone (EOF, no answer in time, a stale connection,
    a fatal -ERR)."""


def check_tls_required(url: str, timeout: float) -> None:
    """Refuses a server that does not require TLS when TLS is asked for,
    before anything else is set up (the connection checks again).

    Raises:
        UnavailableError: the server cannot be reached or does not require TLS.
        ProtocolError: its INFO is malformed.
    """
    parts = urlsplit(url)
    host, port = parts.hostname or "", parts.port or DEFAULT_PORT
    if not server_info(host, port, timeout).get("tls_required"):
        raise UnavailableError(_no_tls_message(f"{host}:{port}"))


def _no_tls_message(where: str) -> str:
    return (
        f"TLS was asked for, but the NATS server at {where} does not require it "
        "(the connection would be in plain text): enable TLS on the server"
    )


@dataclass(frozen=True)
class Dial:
    """Where and how to connect, for the first connection and every reconnect.

    Args:
        host: the server's host.
        port: its port.
        timeout: seconds for the whole handshake (and each write after it).
        tls: an SSL context (implies TLS).
        auth: ``user``/``pass`` or ``auth_token`` fields for ``CONNECT``.
        credentials: a ``.creds`` file's JWT and seed.
    """

    host: str
    port: int
    timeout: float
    tls: ssl.SSLContext | None = None
    auth: dict[str, Any] = field(default_factory=dict, repr=False)
    credentials: Credentials | None = field(default=None, repr=False)

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        timeout: float,
        tls: ssl.SSLContext | None,
        token: str | None,
        credentials: str | None,
    ) -> Dial:
        """A dial from a ``nats://`` or ``tls://`` URL, with ``user:password@``
        or ``token@`` for credentials, and the options.

        Raises:
            MissingDependencyError: credentials without the nkeys package.
            UnavailableError: an unreadable credentials file.
        """
        parts = urlsplit(url)
        if tls is None and parts.scheme == "tls":
            tls = ssl.create_default_context()
        auth: dict[str, Any] = {}
        if parts.username and parts.password is not None:
            auth = {"user": unquote(parts.username), "pass": unquote(parts.password)}
        elif parts.username:
            auth = {"auth_token": unquote(parts.username)}
        if token is not None:
            auth["auth_token"] = token
        return cls(
            parts.hostname or "127.0.0.1",
            parts.port or DEFAULT_PORT,
            timeout,
            tls,
            auth,
            None if credentials is None else Credentials.read(credentials),
        )


@dataclass(frozen=True)
class Opened:
    """A connection :func:`handshake` made."""

    sock: socket.socket
    max_payload: int  # the server's latest INFO's, checked
    early: list[bytes]  # inbox payloads read during the handshake (never seen, never dropped)


def handshake(
    dial: Dial,
    inbox: str,
    sid: bytes,
    where: str,
    track: Callable[[socket.socket | None], None],
    closing: Callable[[], bool],
) -> Opened:
    """One connection: INFO, TLS, CONNECT, SUB, then PING until its PONG.

    Args:
        dial: where and how.
        inbox: the subject subscribed to as ``sid``.
        sid: the subscription id.
        where: the server, for messages (never the credentials).
        track: told of the socket being set up (then None), so a close
            can cut it short.
        closing: True when the owner is closing (the socket is then dropped).

    Raises:
        OSError: the socket failed or timed out.
        Lost: the server hung up, said ``-ERR``, or said nothing in time.
        ProtocolError: what it said is not the NATS protocol.
        UnavailableError: TLS asked for, and the server does not require it.
    """
    sock = socket.create_connection((dial.host, dial.port), timeout=dial.timeout)
    try:
        track(sock)
        if closing():  # the owner closed first and did not see this socket
            raise Lost("closing")
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        parser = FrameParser(sid, where=f"the NATS server at {where}")
        deadline = monotonic() + dial.timeout
        early = _read_until(sock, parser, deadline, lambda: bool(parser.infos))
        info = parser.infos.pop(0)
        if dial.tls is not None and not info.get("tls_required"):
            raise UnavailableError(_no_tls_message(where))
        if info.get("tls_required"):
            context = dial.tls or ssl.create_default_context()
            sock = context.wrap_socket(sock, server_hostname=dial.host)
            track(sock)
        sock.sendall(_greeting(dial, info, inbox, sid))
        early += _read_until(
            sock, parser, deadline, lambda: parser.pongs > 0 or bool(parser.errors)
        )
        if parser.errors:
            raise Lost(f"the server said {parser.errors[0]!r}")
        if parser.pings:
            sock.sendall(b"PONG\r\n" * parser.pings)
        sock.settimeout(dial.timeout)  # bounds sendall; reads wait in select()
        opened = Opened(sock, parser.max_payload, early)
        track(None)  # in the try: an interrupt (Ctrl-C) here must close the socket too
        return opened
    except BaseException:
        sock.close()
        track(None)
        raise


def _greeting(dial: Dial, info: dict[str, Any], inbox: str, sid: bytes) -> bytes:
    """``CONNECT``, the inbox's ``SUB`` and a ``PING``, in one write."""
    connect: dict[str, Any] = {
        "verbose": False,
        "pedantic": False,
        "name": "liftbridge-python",
        "lang": "python",
        "version": __version__,
        "protocol": 1,
        "headers": True,
        "no_responders": False,
        "tls_required": dial.tls is not None or bool(info.get("tls_required")),
        **dial.auth,
    }
    if dial.credentials is not None:
        connect.update(dial.credentials.sign(str(info.get("nonce", ""))))
    return (
        b"CONNECT "
        + json.dumps(connect, separators=(",", ":")).encode()
        + b"\r\nSUB "
        + inbox.encode()
        + b" "
        + sid
        + b"\r\nPING\r\n"
    )


def _read_until(
    sock: socket.socket, parser: FrameParser, deadline: float, done: Callable[[], bool]
) -> list[bytes]:
    payloads: list[bytes] = []
    while not done():
        left = deadline - monotonic()
        if left <= 0:
            raise Lost("no answer in time")
        sock.settimeout(left)
        data = sock.recv(65536)
        if not data:
            raise Lost(
                "the server closed the connection"
                + (f": {parser.errors[0]!r}" if parser.errors else "")
            )
        payloads += parser.feed(data)
    return payloads
