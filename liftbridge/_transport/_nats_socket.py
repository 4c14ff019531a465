"""The SDK's own NATS connection: the ``liftbridge-nats-io`` thread on a plain socket.

:class:`NatsSocket` speaks the NATS client protocol itself (``INFO``, ``CONNECT``, ``PUB``,
``SUB``, ``MSG``/``HMSG``, ``PING``/``PONG``, ``+OK``, ``-ERR``) for the one thing
:class:`~liftbridge.NatsStreamPublisher` needs: writing publish envelopes to partition subjects
and reading the acks that come back on one inbox. One thread does all the I/O: it writes the
``PUB`` frames publishers queued (each built on its publisher's thread), many per ``sendall``
(:mod:`~liftbridge._transport._nats_writes`), reads with large ``recv`` calls and cuts the
inbox's payloads straight out of the buffer
(:class:`~liftbridge._transport._nats_frames.FrameParser`), answers ``PING``, pings the server
every :data:`PING_INTERVAL` to find a dead connection (by the PONGs that answer those PINGs,
never by other bytes), and reconnects (:func:`~liftbridge._transport._nats_handshake.handshake`).
A general client (nats-py) spends about as much per message on its own objects and coroutines
as the whole rest of the publish path: this module is why the NATS path needs no third-party
package (``nkeys`` only for ``.creds`` files).

What it reads or fails to write goes to its owner through one ``deliver``
function, called on the I/O thread; it never runs user code.

A server that breaks the protocol (the parser refuses what it sends) costs
its connection, never the thread: the connection is made again as after any
drop, and reconnecting gives up after the attempts allowed.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import select
import socket
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass
from time import monotonic

from liftbridge._errors import LiftbridgeError, ProtocolError, UnavailableError
from liftbridge._handover import HAND_OVER, Handover
from liftbridge._locks import start_thread
from liftbridge._transport._nats_frames import FrameParser, denied_subject, fatal, pub_prefix
from liftbridge._transport._nats_handshake import Dial, Lost, handshake
from liftbridge._transport._nats_info import DEFAULT_PORT
from liftbridge._transport._nats_writes import NatsWrites
from liftbridge._transport._nowait import send_nowait

logger = logging.getLogger(__name__)

CLOSE_TIMEOUT = 5.0
"""Seconds closing may take: writing what is queued, then joining the thread."""

PING_INTERVAL = 10.0
"""Seconds between the liveness PINGs (whatever else the server sends)."""

MAX_PINGS_OUT = 2
"""PINGs left unanswered when the next is due: the connection is then stale."""

_READ_SIZE = 1024 * 1024
"""Bytes asked of one ``recv``."""

_INBOX_SID = b"1"


@dataclass(frozen=True, slots=True)
class Refused:
    """Delivered when the server refused publishes to ``subject`` (an
    ``-ERR`` such as a permissions violation); the connection stays."""

    subject: str
    reason: str  # the server's text


@dataclass(frozen=True, slots=True)
class MaxPayload:
    """Delivered when a server's INFO changed ``max_payload`` (a later INFO,
    or the server reconnected to)."""

    size: int


class NatsSocket(NatsWrites):
    """A NATS connection on the ``liftbridge-nats-io`` thread. Thread-safe.

    Args:
        where: ``host:port`` for messages (never the credentials).
        inbox: the subject acks arrive on.
        deliver: takes, on the I/O thread, a list of raw ack payloads;
            ``(entry, error)`` for an envelope NATS did not take (``entry``
            as given to :meth:`send`); an int, the number of frames sent
            with no entry (None) that left the queue, written or dropped;
            a :class:`Refused`; a :class:`MaxPayload`. It must not block
            nor run user code.
        on_closed: called on the I/O thread when the connection closed:
            after :meth:`close`, or because reconnecting gave up.
        hand_over: frames queued for a busy I/O thread at which a sender
            waits for it to take them (:mod:`~liftbridge._handover`).
    """

    def __init__(
        self,
        where: str,
        inbox: str,
        deliver: Callable[[object], None],
        on_closed: Callable[[], None],
        *,
        hand_over: int = HAND_OVER,
    ) -> None:
        self._where = where
        self._inbox = inbox
        self._deliver = deliver
        self._on_closed = on_closed
        self._closing = False  # close() began
        self._closed = threading.Event()  # the I/O thread ended (or none will: connect failed)
        # PUB frames handed over, with their subject and entry: appended by publishers,
        # emptied by the I/O thread (deque appends and pops are atomic under the GIL).
        self._outbox: collections.deque[tuple[str, bytes, object]] = collections.deque()
        self.queue = self._outbox.append  # send_frame's append alone, a C call; send_frames wakes
        # Frames taken while disconnected, and their bytes (I/O thread only).
        self._held: list[tuple[str, bytes, object]] = []
        self._held_bytes = 0
        # Flush waiters not pinged yet (appended by callers), then those
        # awaiting their PONG in order (None for a liveness ping; I/O thread).
        self._flushes: collections.deque[threading.Event] = collections.deque()
        self._pongs: collections.deque[threading.Event | None] = collections.deque()
        self._idle = False  # the I/O thread is (about to be) asleep: senders wake it
        self._sock: socket.socket | None = None
        self._opening: socket.socket | None = None  # a connection being made (close() cuts it)
        self._max_payload = 0
        self._thread = threading.Thread(target=self._run, name="liftbridge-nats-io", daemon=True)
        self._handover = Handover(hand_over, self._thread, self._closed)
        # Connection settings (set by connect()).
        self._dial = Dial("127.0.0.1", DEFAULT_PORT, 5.0)
        self._attempts = 0
        self._wait = 0.5
        # The I/O thread sleeps in select(); a byte on this pair wakes it. Made
        # last: an interrupt (Ctrl-C) before leaves nothing open, one after is
        # for close(), which ends a connection never connected too.
        self._wake_r, self._wake_w = socket.socketpair()
        try:
            self._wake_r.setblocking(False)
            self._wake_w.setblocking(False)
        except BaseException:  # interrupted: no NatsSocket made to close them
            self._wake_r.close()
            self._wake_w.close()
            raise

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
            ProtocolError: the server broke the protocol (a malformed INFO).
            UnavailableError: no connection (the reason is in the message).
        """
        try:
            self._dial = Dial.from_url(
                url, timeout=connect_timeout, tls=tls, token=token, credentials=credentials
            )
            self._attempts = max_reconnect_attempts
            self._wait = reconnect_wait
            self._sock = self._open()
        except BaseException as e:
            self._wake_r.close()
            self._wake_w.close()
            self._closed.set()  # nothing left for close() to end
            if isinstance(e, ProtocolError):
                raise ProtocolError(
                    f"cannot connect to the NATS server at {self._where}: {_reason(e)}"
                ) from e
            if isinstance(e, OSError | Lost | UnavailableError):
                raise UnavailableError(
                    f"cannot connect to the NATS server at {self._where}: {_reason(e)}"
                ) from e
            raise
        try:
            start_thread(self._thread)
        except BaseException:  # interrupted (Ctrl-C): the thread may be under way
            self.close()
            raise

    @property
    def max_payload(self) -> int:
        """The largest message the server accepts (after :meth:`connect`)."""
        return self._max_payload

    def send(self, subject: str, envelope: bytes, entry: object) -> None:
        """Queues an envelope for the I/O thread (woken if asleep). One NATS
        does not take is delivered back as ``(entry, error)``, unless
        ``entry`` is None (then it is logged and counted as gone). One over
        the server's ``max_payload`` when written is not written: it is
        refused with :class:`MessageTooLargeError` (the server would close
        the connection)."""
        frame = b"%s%d\r\n%s\r\n" % (pub_prefix(subject), len(envelope), envelope)
        self.send_frame(subject, frame, entry)

    def send_frame(self, subject: str, frame: bytes, entry: object, waits: bool = False) -> None:
        """Queues a whole ``PUB`` frame to ``subject`` (:func:`pub_prefix`,
        the envelope's size, CRLF, the envelope, CRLF), built by the caller,
        as :meth:`send` does; waits while the I/O thread is busy and has
        not taken the last ``hand_over`` frames (:class:`Handover`).
        ``waits``: the caller waits for the ack next (wakes it the cheaper way)."""
        outbox = self._outbox
        outbox.append((subject, frame, entry))
        if self._idle:
            self._idle = False
            self._wake(not waits)
        elif len(outbox) >= self._handover.frames:
            self._handover.wait(outbox.__len__)

    def send_frames(self, items: list[tuple[str, bytes, object]]) -> None:
        """Queues many ``(subject, frame, entry)`` in order, as
        :meth:`send_frame` each, in one hand-over (a batch's part)."""
        outbox = self._outbox
        outbox.extend(items)
        if self._idle:
            self._idle = False
            self._wake()
        elif len(outbox) >= self._handover.frames:
            self._handover.wait(outbox.__len__)

    def drop_unsent(self) -> None:
        """Forgets envelopes not written yet (closing: the owner fails them)."""
        self._outbox.clear()
        self._handover.release()

    def flush(self, timeout: float | None) -> None:
        """Waits (up to ``timeout``) until what was queued is written and the
        server has seen it; gives up quietly once closed or disconnected.
        With ``timeout`` None it still ends: the PONG comes, the connection
        drops (a server that stops answering PINGs is dropped as stale), or
        the I/O thread ends, which sets every waiter it may have missed."""
        if self._closing or self._closed.is_set():
            return
        done = threading.Event()
        self._flushes.append(done)
        if self._closed.is_set():  # the I/O thread ended after the check above
            return
        self._idle = False
        self._wake()
        done.wait(timeout)

    def close(self) -> None:
        """Writes what is queued (bounded), closes the connection and joins
        the I/O thread (within ``CLOSE_TIMEOUT``). Idempotent; callable from
        any thread (the I/O thread itself is then not joined). A connection
        whose thread never started (not connected, or its start interrupted)
        has it started now: it sees the close at once and ends, closing the
        socket and the wake-up pair as it always does."""
        self._closing = True
        self._wake()
        opening = self._opening
        if opening is not None:  # a reconnect waiting for its server: cut it short
            with contextlib.suppress(OSError):
                opening.shutdown(socket.SHUT_RDWR)
        if threading.current_thread() is self._thread:
            return
        if self._thread.ident is None and not self._closed.is_set():
            start_thread(self._thread)  # once, also when a start is under way
        if self._thread.ident is not None:
            self._thread.join(CLOSE_TIMEOUT)
            if self._thread.is_alive():
                logger.warning("liftbridge-nats-io did not stop within %.0fs", CLOSE_TIMEOUT)
                with contextlib.suppress(OSError):  # unblocks a stuck sendall
                    if self._sock is not None:
                        self._sock.shutdown(socket.SHUT_RDWR)

    def _wake(self, keep: bool = True) -> None:
        # keep: keeping the GIL, the sender goes on and the I/O thread takes what is
        # queued by then (else it may get the GIL and write a frame a wake-up); one
        # about to wait for its ack lets go of it (socket.send costs less than libc's).
        try:  # noqa: SIM105 (contextlib.suppress: three calls more a paced publish)
            send_nowait(self._wake_w, b"!") if keep else self._wake_w.send(b"!")
        except OSError:  # closed (full: a wake-up is pending)
            pass

    # ------------------------------------------------------------ connecting --

    def _open(self) -> socket.socket:
        """One connection (:func:`handshake`); its INFO's ``max_payload`` taken."""
        opened = handshake(
            self._dial, self._inbox, _INBOX_SID, self._where, self._track, self._is_closing
        )
        try:
            self._set_max_payload(opened.max_payload)
            if opened.early:  # acks sent early are impossible, but never drop bytes
                self._deliver(opened.early)
        except BaseException:
            opened.sock.close()
            raise
        return opened.sock

    def _track(self, sock: socket.socket | None) -> None:
        self._opening = sock

    def _is_closing(self) -> bool:
        return self._closing

    def _set_max_payload(self, size: int) -> None:
        """Takes a server's ``max_payload``; the owner hears of a change."""
        previous, self._max_payload = self._max_payload, size
        if previous and size != previous:
            logger.info("the NATS server at %s now takes %d-byte payloads", self._where, size)
            self._deliver(MaxPayload(size))

    # -------------------------------------------------------------- I/O thread --

    def _run(self) -> None:
        try:
            while not self._closing:
                try:
                    self._serve()
                except (OSError, LiftbridgeError, Lost) as e:  # ProtocolError among them
                    if not self._closing:
                        logger.warning(
                            "NATS connection to %s lost (%s); reconnecting", self._where, _reason(e)
                        )
                except Exception:  # a defect costs the connection, never the thread
                    logger.exception("NATS connection to %s failed; reconnecting", self._where)
                self._drop_connection()
                if self._closing or not self._reconnect():
                    break
        except Exception:  # this thread must not die silently
            logger.exception("liftbridge-nats-io failed")
        finally:
            self._drop_connection()
            self._fail_held(UnavailableError(f"the NATS connection to {self._where} closed"))
            self._closed.set()
            self._handover.release()
            while self._flushes:  # appended before flush() saw _closed set
                self._flushes.popleft().set()
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
        parser = FrameParser(_INBOX_SID, self._inbox.encode(), f"the NATS server at {self._where}")
        parser.max_payload = self._max_payload
        outbox, flushes, pongs = self._outbox, self._flushes, self._pongs
        wake_r, deliver = self._wake_r, self._deliver
        # Bytes TLS decrypted already are not seen by select().
        decrypted = sock.pending if isinstance(sock, ssl.SSLSocket) else None
        ping_due = monotonic() + PING_INTERVAL
        pings_out = 0  # liveness PINGs sent since the last PONG
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
                try:  # noqa: SIM105 (as in _wake)
                    wake_r.recv(4096)
                except OSError:
                    pass
            if sock in readable:
                data = sock.recv(_READ_SIZE)
                if not data:
                    raise Lost("the server closed the connection")
                payloads = parser.feed(data)
                # INFOs first: one the server sent ahead of an ack is in force
                # by the time that ack resolves its publish.
                if parser.infos:
                    parser.infos.clear()
                    self._set_max_payload(parser.max_payload)
                if payloads:
                    deliver(payloads)
                if parser.pings:
                    sock.sendall(b"PONG\r\n" * parser.pings)
                    parser.pings = 0
                if parser.pongs:
                    pings_out = 0
                    while parser.pongs:
                        parser.pongs -= 1
                        if pongs:
                            waiter = pongs.popleft()
                            if waiter is not None:
                                waiter.set()
                if parser.errors:
                    self._server_said(parser.errors)
            # Only PONGs to our PINGs show the server alive, not other bytes
            # (a server may PING us, or send garbage, yet never answer).
            if monotonic() >= ping_due:
                if pings_out >= MAX_PINGS_OUT:
                    raise Lost(f"no PONG to {pings_out} PINGs: the connection is stale")
                pings_out += 1
                pongs.append(None)
                sock.sendall(b"PING\r\n")
                ping_due = monotonic() + PING_INTERVAL

    def _server_said(self, errors: list[str]) -> None:
        """Acts on ``-ERR``s read: a refused publish goes to the owner, one
        the server closes the connection after drops it at once."""
        said = errors[:]
        errors.clear()
        for text in said:
            subject = denied_subject(text)
            if subject is not None:
                logger.debug("the NATS server at %s said %r", self._where, text)
                self._deliver(Refused(subject, text))
            elif fatal(text):
                raise Lost(f"the server said {text!r}")
            else:
                logger.warning("the NATS server at %s said %r", self._where, text)

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
            except (OSError, LiftbridgeError, Lost) as e:  # a malformed INFO among them
                logger.warning(
                    "reconnecting to NATS at %s (attempt %d of %d): %s",
                    self._where,
                    attempt,
                    self._attempts,
                    _reason(e),
                )
                continue
            except Exception:  # a defect fails the attempt, never the thread
                logger.exception("reconnecting to NATS at %s failed", self._where)
                continue
            logger.info("NATS connection to %s re-established", self._where)
            return True
        if self._attempts:
            logger.warning(
                "gave up reconnecting to NATS at %s after %d attempts", self._where, self._attempts
            )
        return False


def _reason(error: BaseException) -> str:
    if isinstance(error, TimeoutError):
        return "timed out"
    return str(error) or repr(error)
