"""The SDK's own NATS connection: the ``liftbridge-nats-io`` thread on a plain socket.

:class:`NatsSocket` speaks the NATS client protocol itself (``INFO``,
``CONNECT``, ``PUB``, ``SUB``, ``MSG``/``HMSG``, ``PING``/``PONG``, ``+OK``,
``-ERR``) for the one thing :class:`~liftbridge.NatsStreamPublisher` needs:
writing publish envelopes to partition subjects and reading the acks that
come back on one inbox. One thread does all the I/O: it writes the ``PUB``
frames publishers queued (each built on its publisher's thread), many per
``sendall``, reads with
large ``recv`` calls and cuts the inbox's payloads straight out of the
buffer (:class:`FrameParser`), answers ``PING``, pings an idle server to
find a dead connection, and reconnects. A general client (nats-py) spends
about as much per message on its own objects and coroutines as the whole
rest of the publish path: this module is why the NATS path needs no
third-party package (``nkeys`` only for ``.creds`` files).

What it reads or fails to write goes to its owner through one ``deliver``
function, called on the I/O thread; it never runs user code.
"""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import select
import socket
import ssl
import threading
from collections.abc import Callable
from time import monotonic
from typing import Any
from urllib.parse import unquote, urlsplit

from liftbridge.__version__ import __version__
from liftbridge._errors import UnavailableError
from liftbridge._transport._nats_creds import Credentials
from liftbridge._transport._nats_frames import FrameParser, ProtocolError, pub_prefix
from liftbridge._transport._nats_info import DEFAULT_PORT, server_info

logger = logging.getLogger(__name__)

CLOSE_TIMEOUT = 5.0
"""Seconds closing may take: writing what is queued, then joining the thread."""

PING_INTERVAL = 10.0
"""Seconds without a byte from the server before it is pinged."""

MAX_PINGS_OUT = 2
"""Pings left unanswered when the next is due: the connection is then dead."""

RECONNECT_BUFFER = 8 * 1024 * 1024
"""Bytes of frames (envelopes and their PUB lines) held while reconnecting;
past them a send fails."""

_WRITE_CHUNK = 1024 * 1024
"""Bytes of frames gathered for one ``sendall`` at most."""

_READ_SIZE = 1024 * 1024
"""Bytes asked of one ``recv``."""

_INBOX_SID = b"1"


def check_tls_required(url: str, timeout: float) -> None:
    """Refuses a server that does not require TLS when TLS is asked for,
    before anything else is set up (the connection checks again).

    Raises:
        UnavailableError: the server cannot be reached or does not require TLS.
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


class _Lost(Exception):
    """The connection is gone (EOF, a stale connection, a fatal -ERR)."""


class NatsSocket:
    """A NATS connection on the ``liftbridge-nats-io`` thread. Thread-safe.

    Args:
        where: ``host:port`` for messages (never the credentials).
        inbox: the subject acks arrive on.
        deliver: takes, on the I/O thread, a list of raw ack payloads, or
            ``(entry, error)`` for an envelope NATS did not take (``entry``
            as given to :meth:`send`). It must not block nor run user code.
        on_closed: called on the I/O thread when the connection closed:
            after :meth:`close`, or because reconnecting gave up.
    """

    def __init__(
        self,
        where: str,
        inbox: str,
        deliver: Callable[[object], None],
        on_closed: Callable[[], None],
    ) -> None:
        self._where = where
        self._inbox = inbox
        self._deliver = deliver
        self._on_closed = on_closed
        self._closing = False  # close() began
        self._closed = threading.Event()  # the I/O thread ended
        # PUB frames handed over, with their subject and entry: appended by
        # publishers, emptied by the I/O thread (deque appends and pops are
        # atomic under the GIL).
        self._outbox: collections.deque[tuple[str, bytes, object]] = collections.deque()
        # Frames taken while disconnected, and their bytes (I/O thread only).
        self._held: list[tuple[str, bytes, object]] = []
        self._held_bytes = 0
        # Flush waiters not pinged yet (appended by callers), then those
        # awaiting their PONG in order (None for a liveness ping; I/O thread).
        self._flushes: collections.deque[threading.Event] = collections.deque()
        self._pongs: collections.deque[threading.Event | None] = collections.deque()
        # The I/O thread sleeps in select(); a byte on this pair wakes it.
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._idle = False  # the I/O thread is (about to be) asleep: senders wake it
        self._sock: socket.socket | None = None
        self._opening: socket.socket | None = None  # a connection being made (close() cuts it)
        self._max_payload = 0
        self._thread = threading.Thread(target=self._run, name="liftbridge-nats-io", daemon=True)
        # Connection settings (set by connect()).
        self._host = ""
        self._port = DEFAULT_PORT
        self._tls: ssl.SSLContext | None = None
        self._auth: dict[str, Any] = {}
        self._credentials: Credentials | None = None
        self._timeout = 5.0
        self._attempts = 0
        self._wait = 0.5

    # ------------------------------------------------------ caller's thread --

    def connect(
        self,
        url: str,
        *,
        connect_timeout: float,
        tls: ssl.SSLContext | None = None,
        token: str | None = None,
        credentials: str | None = None,
        max_reconnect_attempts: int = 60,
        reconnect_wait: float = 0.5,
    ) -> None:
        """Connects, subscribes to the inbox and starts the I/O thread.

        Args:
            url: ``nats://`` or ``tls://`` (TLS), with ``user:password@`` or
                ``token@`` for credentials.
            connect_timeout: seconds for each connection attempt.
            tls: an SSL context (implies TLS).
            token: an authentication token.
            credentials: a ``.creds`` file (needs the ``nkeys`` package).
            max_reconnect_attempts: attempts after a drop before giving up.
            reconnect_wait: seconds between reconnection attempts.

        Raises:
            MissingDependencyError: credentials without ``nkeys``.
            UnavailableError: no connection (the reason is in the message).
        """
        try:
            self._configure(url, tls, token, credentials)
            self._timeout = connect_timeout
            self._attempts = max_reconnect_attempts
            self._wait = reconnect_wait
            self._sock = self._open()
        except BaseException as e:
            self._wake_r.close()
            self._wake_w.close()
            if isinstance(e, OSError | ProtocolError | _Lost | UnavailableError):
                raise UnavailableError(
                    f"cannot connect to the NATS server at {self._where}: {_reason(e)}"
                ) from e
            raise
        self._thread.start()

    def _configure(
        self, url: str, tls: ssl.SSLContext | None, token: str | None, credentials: str | None
    ) -> None:
        parts = urlsplit(url)
        self._host, self._port = parts.hostname or "127.0.0.1", parts.port or DEFAULT_PORT
        if tls is None and parts.scheme == "tls":
            tls = ssl.create_default_context()
        self._tls = tls
        if parts.username and parts.password is not None:
            self._auth = {"user": unquote(parts.username), "pass": unquote(parts.password)}
        elif parts.username:
            self._auth = {"auth_token": unquote(parts.username)}
        if token is not None:
            self._auth["auth_token"] = token
        if credentials is not None:
            self._credentials = Credentials.read(credentials)

    @property
    def max_payload(self) -> int:
        """The largest message the server accepts (after :meth:`connect`)."""
        return self._max_payload

    def send(self, subject: str, envelope: bytes, entry: object) -> None:
        """Queues an envelope for the I/O thread (woken if asleep). One NATS
        does not take is delivered back as ``(entry, error)``, unless
        ``entry`` is None (then it is logged)."""
        frame = b"%s%d\r\n%s\r\n" % (pub_prefix(subject), len(envelope), envelope)
        self.send_frame(subject, frame, entry)

    def send_frame(self, subject: str, frame: bytes, entry: object) -> None:
        """Queues a whole ``PUB`` frame to ``subject`` (:func:`pub_prefix`,
        the envelope's size, CRLF, the envelope, CRLF), built by the caller,
        as :meth:`send` does."""
        self._outbox.append((subject, frame, entry))
        if self._idle:
            self._idle = False
            self._wake()

    def drop_unsent(self) -> None:
        """Forgets envelopes not written yet (closing: the owner fails them)."""
        self._outbox.clear()

    def flush(self, timeout: float | None) -> None:
        """Waits (up to ``timeout``) until what was queued is written and the
        server has seen it; gives up quietly once closed or disconnected."""
        if self._closing or self._closed.is_set():
            return
        done = threading.Event()
        self._flushes.append(done)
        self._idle = False
        self._wake()
        done.wait(timeout)

    def close(self) -> None:
        """Writes what is queued (bounded), closes the connection and joins
        the I/O thread (within ``CLOSE_TIMEOUT``). Idempotent; callable from
        any thread (the I/O thread itself is then not joined)."""
        self._closing = True
        self._wake()
        opening = self._opening
        if opening is not None:  # a reconnect waiting for its server: cut it short
            with contextlib.suppress(OSError):
                opening.shutdown(socket.SHUT_RDWR)
        if self._thread.ident is not None and threading.current_thread() is not self._thread:
            self._thread.join(CLOSE_TIMEOUT)
            if self._thread.is_alive():
                logger.warning("liftbridge-nats-io did not stop within %.0fs", CLOSE_TIMEOUT)
                with contextlib.suppress(OSError):  # unblocks a stuck sendall
                    if self._sock is not None:
                        self._sock.shutdown(socket.SHUT_RDWR)

    def _wake(self) -> None:
        with contextlib.suppress(OSError):  # full (a wake-up is pending) or closed
            self._wake_w.send(b"!")

    # ------------------------------------------------------------ connecting --

    def _open(self) -> socket.socket:
        """One connection: INFO, TLS, CONNECT, SUB, then PING until its PONG."""
        where = self._where
        sock = socket.create_connection((self._host, self._port), timeout=self._timeout)
        self._opening = sock
        try:
            if self._closing:  # close() came first and did not see this socket
                raise _Lost("closing")
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            parser = FrameParser(_INBOX_SID)
            deadline = monotonic() + self._timeout
            pending = self._read_until(sock, parser, deadline, lambda: bool(parser.infos))
            info = parser.infos.pop(0)
            if self._tls is not None and not info.get("tls_required"):
                raise UnavailableError(_no_tls_message(where))
            if info.get("tls_required"):
                context = self._tls or ssl.create_default_context()
                sock = context.wrap_socket(sock, server_hostname=self._host)
                self._opening = sock
            connect: dict[str, Any] = {
                "verbose": False,
                "pedantic": False,
                "name": "liftbridge-python",
                "lang": "python",
                "version": __version__,
                "protocol": 1,
                "headers": True,
                "no_responders": False,
                "tls_required": self._tls is not None or bool(info.get("tls_required")),
                **self._auth,
            }
            if self._credentials is not None:
                connect.update(self._credentials.sign(str(info.get("nonce", ""))))
            sock.sendall(
                b"CONNECT "
                + json.dumps(connect, separators=(",", ":")).encode()
                + b"\r\nSUB "
                + self._inbox.encode()
                + b" "
                + _INBOX_SID
                + b"\r\nPING\r\n"
            )
            pending += self._read_until(
                sock, parser, deadline, lambda: parser.pongs > 0 or bool(parser.errors)
            )
            if parser.errors:
                raise _Lost(f"the server said {parser.errors[0]!r}")
            self._max_payload = int(info.get("max_payload") or 1024 * 1024)
            if parser.pings:
                sock.sendall(b"PONG\r\n" * parser.pings)
            if pending:  # acks sent early are impossible, but never drop bytes
                self._deliver(pending)
            sock.settimeout(self._timeout)  # bounds sendall; reads wait in select()
            return sock
        except BaseException:
            sock.close()
            raise
        finally:
            self._opening = None

    @staticmethod
    def _read_until(
        sock: socket.socket, parser: FrameParser, deadline: float, done: Callable[[], bool]
    ) -> list[bytes]:
        payloads: list[bytes] = []
        while not done():
            left = deadline - monotonic()
            if left <= 0:
                raise _Lost("no answer in time")
            sock.settimeout(left)
            data = sock.recv(65536)
            if not data:
                raise _Lost(
                    "the server closed the connection"
                    + (f": {parser.errors[0]!r}" if parser.errors else "")
                )
            payloads += parser.feed(data)
        return payloads

    # -------------------------------------------------------------- I/O thread --

    def _run(self) -> None:
        try:
            while not self._closing:
                try:
                    self._serve()
                except (OSError, ProtocolError, _Lost, ValueError) as e:
                    if not self._closing:
                        logger.warning(
                            "NATS connection to %s lost (%s); reconnecting", self._where, _reason(e)
                        )
                self._drop_connection()
                if self._closing or not self._reconnect():
                    break
        except Exception:  # this thread must not die silently
            logger.exception("liftbridge-nats-io failed")
        finally:
            self._drop_connection()
            self._fail_held(UnavailableError(f"the NATS connection to {self._where} closed"))
            self._closed.set()
            for end in (self._wake_r, self._wake_w):
                end.close()
            try:
                self._on_closed()
            except Exception:
                logger.exception("the NATS connection's on_closed failed")

    def _serve(self) -> None:
        """Writes and reads until the connection drops or close() is called."""
        sock = self._sock
        assert sock is not None
        parser = FrameParser(_INBOX_SID, self._inbox.encode())
        outbox, flushes, pongs = self._outbox, self._flushes, self._pongs
        wake_r, deliver = self._wake_r, self._deliver
        # Bytes TLS decrypted already are not seen by select().
        decrypted = sock.pending if isinstance(sock, ssl.SSLSocket) else None
        ping_due = monotonic() + PING_INTERVAL
        self._write(sock)  # what was held while reconnecting
        while True:
            if self._closing:
                self._write(sock)
                return
            if outbox or flushes:
                self._write(sock)
            self._idle = True
            if outbox or flushes or self._closing:
                # More to write: only look for what was read (acks must not
                # wait for a busy writer), without sleeping.
                self._idle = False
                wait = 0.0
            else:
                wait = max(0.0, ping_due - monotonic())
            if decrypted is not None and decrypted():
                readable = [sock]
            else:
                readable, _, _ = select.select([sock, wake_r], [], [], wait)
            self._idle = False
            if wake_r in readable:
                with contextlib.suppress(OSError):
                    wake_r.recv(4096)
            if sock in readable:
                data = sock.recv(_READ_SIZE)
                if not data:
                    raise _Lost("the server closed the connection")
                payloads = parser.feed(data)
                if payloads:
                    deliver(payloads)
                ping_due = monotonic() + PING_INTERVAL
                if parser.pings:
                    sock.sendall(b"PONG\r\n" * parser.pings)
                    parser.pings = 0
                while parser.pongs:
                    parser.pongs -= 1
                    if pongs:
                        waiter = pongs.popleft()
                        if waiter is not None:
                            waiter.set()
                if parser.errors:
                    for error in parser.errors:
                        logger.warning("the NATS server at %s said %r", self._where, error)
                    parser.errors.clear()
                if parser.infos:
                    self._max_payload = int(
                        parser.infos[-1].get("max_payload") or self._max_payload
                    )
                    parser.infos.clear()
            elif monotonic() >= ping_due:
                if len(pongs) >= MAX_PINGS_OUT:
                    raise _Lost(f"no PONG to {len(pongs)} PINGs")
                pongs.append(None)
                sock.sendall(b"PING\r\n")
                ping_due = monotonic() + PING_INTERVAL

    def _write(self, sock: socket.socket) -> None:
        """Writes held frames, then queued ones (many per ``sendall``), then
        a PING for each flush waiting."""
        outbox = self._outbox
        frames: list[bytes] = []
        size = 0
        held, self._held, self._held_bytes = self._held, [], 0
        for index, (_, frame, _) in enumerate(held):
            frames.append(frame)
            size += len(frame)
            if size >= _WRITE_CHUNK:
                try:
                    sock.sendall(b"".join(frames))
                except BaseException:
                    # Those not in this write wait for the next connection
                    # (those in it may have been written: never re-sent).
                    self._held = held[index + 1 :]
                    self._held_bytes = sum(len(item[1]) for item in self._held)
                    raise
                frames, size = [], 0
        while outbox:
            frame = outbox.popleft()[1]
            frames.append(frame)
            size += len(frame)
            if size >= _WRITE_CHUNK:
                sock.sendall(b"".join(frames))
                frames, size = [], 0
        flushes = self._flushes
        while flushes:
            self._pongs.append(flushes.popleft())
            frames.append(b"PING\r\n")
        if frames:
            sock.sendall(b"".join(frames))

    def _drop_connection(self) -> None:
        """Closes the socket; flush waiters give up."""
        sock, self._sock = self._sock, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()
        for waiter in self._pongs:
            if waiter is not None:
                waiter.set()
        self._pongs.clear()
        while self._flushes:
            self._flushes.popleft().set()

    def _reconnect(self) -> bool:
        """Tries the server up to ``max_reconnect_attempts`` times, holding
        what publishers send meanwhile; False when it gave up (or closing)."""
        for attempt in range(1, self._attempts + 1):
            deadline = monotonic() + self._wait
            while not self._closing:
                self._idle = True  # a send wakes this loop to hold its envelope
                self._hold()
                left = deadline - monotonic()
                if left <= 0:
                    break
                readable, _, _ = select.select([self._wake_r], [], [], left)
                self._idle = False
                if readable:
                    with contextlib.suppress(OSError):
                        self._wake_r.recv(4096)
            if self._closing:
                return False
            try:
                self._sock = self._open()
            except (OSError, ProtocolError, _Lost, UnavailableError) as e:
                logger.warning(
                    "reconnecting to NATS at %s (attempt %d of %d): %s",
                    self._where,
                    attempt,
                    self._attempts,
                    _reason(e),
                )
                continue
            logger.info("NATS connection to %s re-established", self._where)
            return True
        if self._attempts:
            logger.warning(
                "gave up reconnecting to NATS at %s after %d attempts", self._where, self._attempts
            )
        return False

    def _hold(self) -> None:
        """Moves queued frames to the reconnect buffer; fails those past it."""
        outbox = self._outbox
        while outbox:
            item = outbox.popleft()
            if self._held_bytes + len(item[1]) > RECONNECT_BUFFER:
                self._refuse(item, UnavailableError("the NATS reconnect buffer is full"))
            else:
                self._held.append(item)
                self._held_bytes += len(item[1])
        while self._flushes:
            self._flushes.popleft().set()

    def _fail_held(self, error: Exception) -> None:
        held, self._held, self._held_bytes = self._held, [], 0
        held += self._outbox
        self._outbox.clear()
        for item in held:
            self._refuse(item, error)

    def _refuse(self, item: tuple[str, bytes, object], error: Exception) -> None:
        subject, _, entry = item
        if entry is None:
            logger.warning("dropped an AckPolicy.NONE publish on %s: %r", subject, error)
        else:
            self._deliver((entry, error))


def _reason(error: BaseException) -> str:
    if isinstance(error, TimeoutError):
        return "timed out"
    return str(error) or repr(error)
