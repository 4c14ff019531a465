"""Streaming gRPC calls on the SDK's own HTTP/2 connection.

grpcio moves every message of a stream through its core's completion queue
and a Python thread hand-over: about 130 µs per publish on the PublishAsync
stream, a tenth of what the official Go client gets from the same server
(``make bench``). The wire format is simple, though: a gRPC message is a
5-byte prefix (a compression flag and a length) and the protobuf, carried in
HTTP/2 DATA frames. So a stream here (PublishAsync, Subscribe) owns a TCP
connection of its own, writes every request that is ready in one ``sendall``
(many messages per DATA frame), and parses every response that arrived in
one ``recv``.

What it speaks of HTTP/2 (RFC 9113) is what one client stream needs: the
preface and SETTINGS (acked both ways), one stream (id 1) opened by a
HEADERS frame, DATA both ways within the peer's flow-control windows, our
own windows reopened by WINDOW_UPDATE, PING answered (and sent, as a
keepalive, on a connection silent for a while), RST_STREAM and GOAWAY
obeyed. What the server sends is read and checked by
:class:`liftbridge._transport._http2_reader.FrameReader`. No compression is
offered, so the server sends none. With TLS the socket stays plain and
:mod:`liftbridge._transport._http2_tls` turns frames into TLS records and back
in memory, so everything below holds for TLS too. The socket, everything
written to it and the call's end are
:class:`~liftbridge._transport._http2_conn.Http2Connection`'s; this module
connects, iterates and reads.

Threads: the thread that iterates the call reads the socket (as grpcio's
single-threaded unary-stream option does); ``liftbridge-h2-send`` pulls the
requests from the request iterator and writes them (a unary request goes
with the headers, and a lane writes its own with ``write_now`` when the
window takes it whole). ``cancel`` may come from any thread.

A thread that reads never waits to write: what it sends (acks, window
updates, PINGs, a lane's request) is queued and written as the socket takes
it while it polls; only ``liftbridge-h2-send`` blocks in ``sendall``.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import grpc
import hpack
from google.protobuf.message import Message

from liftbridge._locks import start_thread
from liftbridge._transport._http2_conn import HELD_MS, Http2Connection
from liftbridge._transport._http2_reader import DEFAULT_MAX_MESSAGE, MAX_HEADER_LIST, FrameReader
from liftbridge._transport._http2_tls import TlsClosed, TlsLayer, TlsSettings
from liftbridge._transport._http2_windows import PEER_WINDOW, RECEIVE_WINDOW
from liftbridge._transport._http2_wire import (
    DATA,
    END_HEADERS,
    END_STREAM,
    HEADERS,
    PING,
    PREFACE,
    SETTINGS,
    SETTINGS_ENABLE_PUSH,
    SETTINGS_INITIAL_WINDOW_SIZE,
    STREAM,
    WINDOW_UPDATE,
    Keepalive,
    StreamError,
    frame_bytes,
    host_port,
    keep_alive,
    read_poll,
    wait_ready,
)
from liftbridge._transport._nowait import Inbox, receive_timeout
from liftbridge._transport._stream import ReadyResponses

_log = logging.getLogger(__name__)

T = TypeVar("T")

_READ_SIZE = 1 << 18
_FIRST_FRAME_MAX = 16_384
"""The largest frame a peer must accept before its SETTINGS say otherwise."""
_SETTINGS_MAX_HEADER_LIST_SIZE = 0x6
_LOCK_BUSY_WAIT = 0.05
"""Seconds a reader with bytes to send waits for readable data while the
sender holds the socket (the sender writes what is queued before it lets go)."""
_KEEPALIVE_PAYLOAD = b"lb-alive"
REPLY_WAIT = 0.05
"""Seconds the answers a holding reader queued (a grpc-go server's BDP PING's,
about one a read at 10,000 msgs/s) wait for a request to carry them, while
the call's publishers write often: one ``send`` the less on the reading
thread, most reads. Past it, or if they come to more than ``REPLY_HELD_BYTES``
(a PING flood), the reader writes them itself."""
REPLY_HELD_BYTES = 64
"""The most bytes of answers that may wait so (a PING's answer is 17)."""


class Http2Call(Http2Connection, ReadyResponses[T]):
    """One bidirectional gRPC call on a connection of its own.

    Iterating it yields the responses (parsed by ``parse``) and ends with
    StopIteration on an OK status, or raises the
    :class:`~liftbridge._errors.LiftbridgeError` its status maps to (the
    :class:`StreamError` as ``__cause__``): a
    :class:`~liftbridge._transport._stream.Stream`.
    ``cancel`` ends it from any thread. Only one thread iterates it.

    ``requests`` is an iterator of request messages, sent by a thread of the
    call's own, or the one request of a unary-request call (Subscribe): that
    one goes out with the headers, and no thread is started.

    ``max_message`` caps one response (checked from its length prefix, before
    its body is kept); ``keepalive`` pings a silent connection.

    Raises:
        StreamError: (from the constructor) UNAVAILABLE when the broker
            cannot be reached within ``connect_timeout``.
    """

    def __init__(
        self,
        address: str,
        method: str,
        requests: Iterator[Any] | Message,
        parse: Callable[[bytes], T],
        *,
        connect_timeout: float,
        max_message: int = DEFAULT_MAX_MESSAGE,
        keepalive: Keepalive | None = None,
        tls: TlsSettings | None = None,
    ) -> None:
        unary = b""
        if isinstance(requests, Message):
            chunk = requests.SerializeToString()
            if len(chunk) + 5 <= _FIRST_FRAME_MAX:
                unary = len(chunk).to_bytes(5, "big") + chunk
                requests = iter(())
            else:  # more than the server's frame size may allow: the sender thread splits it
                requests = iter((requests,))
        self._keepalive = keepalive
        connect_by = time.monotonic() + connect_timeout
        layer: TlsLayer | None = None
        try:
            host, port = host_port(address)
            sock = socket.create_connection((host, port), timeout=connect_timeout)
        except (OSError, ValueError) as e:
            raise StreamError(grpc.StatusCode.UNAVAILABLE, f"could not reach {address}: {e}") from e
        # From here on the socket is this call's to close, also when an
        # interrupt (Ctrl-C) lands before the call is returned: dropped to
        # garbage collection, it stayed open (and the sender ran) for good.
        try:
            if tls is not None:
                try:
                    layer = TlsLayer(tls, host)
                    layer.handshake(sock, connect_by)
                except (OSError, ValueError) as e:  # ssl.SSLError is an OSError
                    raise StreamError(
                        grpc.StatusCode.UNAVAILABLE, f"TLS with {address} failed: {e}"
                    ) from e
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            # A broker that vanished without closing (power loss, a cut link) is
            # found by the kernel's keepalive probes too, not only by ack timeouts.
            keep_alive(sock)
            super().__init__(sock, layer, requests, sending=not unary)

            # The reading state below is guarded by _read_lock (Http2Connection's):
            # held by the iterating thread while it reads, or by done() peeking.
            self._reader = FrameReader(
                parse,
                max_message=max_message,
                windows=self._peer,
                flow=self._flow,
                reply=self._queue,
                flow_lock=self._flow_lock,
            )
            self._ready = self._reader.ready
            self._inbox = Inbox(_READ_SIZE)  # kept: no 256 KiB object per recv
            self._poll = read_poll(sock)  # one poll object for every wait of the call
            every = -1 if keepalive is None else int(keepalive.interval * 1000)
            # The keepalive interval (-1: none) and the longest wait on held bytes
            # (HELD_MS, within that interval), in ms: one attribute, not two (a call
            # keeps its attributes inline below 30: test_inline_attributes).
            self._wait_ms = (every, HELD_MS if keepalive is None else min(HELD_MS, every))
            self._end: BaseException | None = None  # raised once _ready is empty
            self._ping_sent = 0.0  # when our unanswered keepalive PING went; 0.0: none
            # time.monotonic() by which answers this reader queued while holding
            # (a PING's) must be written; 0.0: none waits (see _read).
            self._reply_by = 0.0
            self._pongs = 0  # PING acks seen when it went

            block = hpack.Encoder().encode(
                [
                    (b":method", b"POST"),
                    (b":scheme", b"https" if tls is not None else b"http"),
                    (b":path", method.encode()),
                    (b":authority", address.encode()),
                    (b"content-type", b"application/grpc"),
                    (b"te", b"trailers"),
                    (b"user-agent", b"liftbridge-python"),
                ]
            )
            settings = b"".join(
                key.to_bytes(2, "big") + value.to_bytes(4, "big")
                for key, value in (
                    (SETTINGS_ENABLE_PUSH, 0),
                    (SETTINGS_INITIAL_WINDOW_SIZE, RECEIVE_WINDOW),
                    (_SETTINGS_MAX_HEADER_LIST_SIZE, MAX_HEADER_LIST),
                )
            )
            opening = (
                PREFACE
                + frame_bytes(SETTINGS, 0, 0, settings)
                + frame_bytes(
                    WINDOW_UPDATE, 0, 0, (RECEIVE_WINDOW - PEER_WINDOW).to_bytes(4, "big")
                )
                + frame_bytes(HEADERS, END_HEADERS, STREAM, block)
            )
            if unary:  # the request and the end of the sending half
                opening += frame_bytes(DATA, END_STREAM, STREAM, unary)
                self._peer.stream -= len(unary)
                self._peer.conn -= len(unary)
            try:
                # The opening fits any socket buffer; still bounded by the connect time.
                self._sock.settimeout(max(0.05, connect_by - time.monotonic()))
                self._sock.sendall(self._wrap(opening))
                self._sock.settimeout(None)
            except OSError as e:
                raise StreamError(grpc.StatusCode.UNAVAILABLE, f"{address}: {e}") from e
            # A unary call's reader has nothing to write while it waits (no sender,
            # no hold): it waits in recv itself, one system call a wake-up instead
            # of a poll and a recv; the keepalive interval bounds the wait.
            self._wait_in_recv = bool(unary) and receive_timeout(
                self._sock, None if keepalive is None else keepalive.interval
            )
        except BaseException:  # a failure above (StreamError) or an interrupt
            sock.close()  # no other thread in it yet
            raise
        if not unary:
            # start_thread: Thread.start interrupted as its with block ends
            # leaves a thread never started listed for good (threading._limbo).
            sender = threading.Thread(
                target=self._send_loop, name="liftbridge-h2-send", daemon=True
            )
            try:
                start_thread(sender)
            except BaseException:  # started or not: a sender that runs now ends at once
                self.cancel()
                raise

    # ------------------------------------------------------------- StreamCall --

    def __iter__(self) -> Iterator[T]:
        # A generator: resuming it per response costs less than a __next__
        # call, and it reads as __next__ does without calling it (at a paced
        # rate each response is a read of its own: the call through next()
        # and the type's slot would come with every one).
        ready = self._ready
        popleft = ready.popleft
        read_lock = self._read_lock
        while True:
            while ready:
                yield popleft()
            end = self._end
            if end is not None:
                if ready:  # done() read the last responses and the end meanwhile
                    continue
                if isinstance(end, StopIteration):
                    return
                raise end
            # _let_go, written out (once per read). A with, not acquire() then
            # try: an interrupt (Ctrl-C) between them would keep the lock held.
            try:
                with read_lock:
                    self._read(wait=True)
            finally:
                if self._finished:
                    self._close_when_idle()

    def __next__(self) -> T:
        ready = self._ready
        while not ready:
            if self._end is not None:
                if ready:  # done() read the last responses and the end meanwhile
                    break
                raise self._end
            try:
                with self._read_lock:
                    self._read(wait=True)
            finally:
                if self._finished:
                    self._close_when_idle()
        return ready.popleft()

    def cancel(self) -> bool:
        """Ends the call (CANCELLED), waking its reader and sender. Idempotent;
        returns whether this call ended it. On a call cancelled before whose
        socket is still open (a cancel interrupted, Ctrl-C, after it ended
        the call) it wakes them again, as that cancel did not."""
        if self._finish(StreamError(grpc.StatusCode.CANCELLED, "the call was cancelled")):
            self._shutdown()
            self._close_when_idle()
            return True
        error = self._error
        if error is not None and error.code() is grpc.StatusCode.CANCELLED and not self._closed:
            self._shutdown()
            self._close_when_idle()
        return False

    def done(self) -> bool:
        """True once the call ended. Reads what already arrived (never
        waiting, never blocking on a write) when no other thread is reading,
        so an end the server sent is seen without iterating."""
        if self._finished:
            return True
        try:
            own = self._read_lock.acquire(False)
        except BaseException:  # an interrupt (Ctrl-C), maybe just after the lock was taken
            self._drop_read()
            raise
        if own:
            try:
                if not self._closed:
                    self._read(wait=False)
            except (OSError, ValueError):  # closed meanwhile: _finished says so
                pass
            finally:
                self._let_go()
        return self._finished

    # ---------------------------------------------------------------- reading --

    def _read(self, *, wait: bool) -> None:
        """One read of the socket (waiting for data if ``wait``, else only
        if some is there), fed to the reader; the call's end recorded.

        The caller holds ``_read_lock`` (so the socket stays open: see
        ``_close_when_idle``) and closes an ended call's socket when it lets
        go of it (``_let_go``). It runs once per read on the iterating
        thread, often just woken from a sleep in poll with its caches cold:
        every step it takes shows in the subscription's CPU per message, so
        the usual read is kept to a poll and a ``recv`` (a unary call's, a
        subscription's: one ``recv`` that waits, no poll); writing and
        keepalive steps only when due."""
        if self._finished:
            self._end = self._ending()
            return
        received: memoryview | None = None
        failure = "the server closed the connection"
        try:
            count = None
            if not wait:
                if self._pending:
                    self._flush()
                # Bytes held below HELD_BYTES do not make poll say readable: recv looks.
                can_read = self._held or bool(self._poll(0))
            elif self._wait_in_recv and not self._pending and not self._ping_sent:
                # Waits with the GIL let go, as a poll does (a blocking socket,
                # bounded by receive_timeout); read here, not through a method:
                # a paced subscription comes this way once per message.
                try:
                    count = self._sock.recv_into(self._inbox.view)
                except BlockingIOError:  # silent for the keepalive interval (SO_RCVTIMEO)
                    count = None
                can_read = count is None and self._until_readable(silent=True)
            elif self._held and self._reply_by and not self._ping_sent:
                # Answers queued wait for a request to carry them, until _reply_by.
                millis = int((self._reply_by - time.monotonic()) * 1000)
                if millis > 0 and self._poll(millis):
                    can_read = True
                else:  # none came: written now, and bytes stay held
                    self._reply_by = 0.0
                    if self._pending:
                        self._flush()
                    can_read = self._until_readable()
            elif self._held and not self._pending and not self._ping_sent:
                # _until_readable's first wait, written out: liftbridge-acks waits
                # so for nearly every read (a Python call the less a read).
                held_ms = self._wait_ms[1]
                can_read = bool(self._poll(held_ms)) or self._until_readable(held_waited=True)
            else:
                can_read = self._until_readable()
            if can_read and not self._finished:
                count = self._inbox.recv(self._sock)
            if count is not None:
                received = self._inbox.view[:count]
        except OSError as e:
            received = self._inbox.view[:0]
            failure = f"the connection failed: {e}"
        if received is None:  # nothing read: a keepalive, cancel or done() without data
            if self._finished:
                self._end = self._ending()
            return
        if not received:
            self._finish(StreamError(grpc.StatusCode.UNAVAILABLE, failure))
            self._end = self._ending()
            return
        data = received.tobytes() if self._tls is None else self._decrypted(received)
        if not data:  # no TLS record whole yet, or the session ended
            return
        reader = self._reader
        try:
            reader.feed(data)
        except StreamError as e:
            if e.goaway is not None:
                _log.warning("HTTP/2 connection error from the server: %s", e.details())
                self._goaway(e.goaway)
            self._finish(e)
        else:
            if reader.ended:
                self._finish(reader.end)
            elif self._can_hold and self._ready and not self._held:
                self._hold()
        if self._ping_sent and reader.pongs != self._pongs:  # our keepalive PING answered
            self._ping_sent = 0.0
        if self._pending:
            # A holding reader (liftbridge-acks) leaves its few answers to the
            # next request written (a publisher's own write or the sender's
            # run takes the queue first), until REPLY_WAIT: see its wait above.
            if not self._held or self._finished or len(self._pending) > REPLY_HELD_BYTES:
                self._flush()
            elif not self._reply_by:
                self._reply_by = time.monotonic() + REPLY_WAIT
            elif time.monotonic() >= self._reply_by:
                self._flush()
        else:
            self._reply_by = 0.0
        if self._finished:
            self._shutdown()
            self._end = self._ending()

    def _decrypted(self, records: memoryview) -> bytes | None:
        """The bytes TLS records read carry; None when there are none yet, or
        the session ended (the call with it)."""
        assert self._tls is not None
        try:
            with self._out_lock:
                plain, reply = self._tls.unwrap(records)
                self._pending += reply
        except (TlsClosed, OSError) as e:
            self._finish(StreamError(grpc.StatusCode.UNAVAILABLE, f"the TLS session ended: {e}"))
            self._shutdown()
            self._end = self._ending()
            return None
        return plain

    def _until_readable(self, *, silent: bool = False, held_waited: bool = False) -> bool:
        """Waits until the socket has data (or an end) to read, writing what
        is queued meanwhile as the socket takes it, and keeping the
        connection alive. False when the call ended meanwhile (keepalive
        timeout, cancel).

        The usual wait (nothing queued, no PING out) is one poll bounded by
        the keepalive interval; the server counts as silent from when the
        wait began, so a poll that times out sends the PING (``silent``: the
        caller's own wait timed out so). Bytes held below ``HELD_BYTES`` wait
        ``HELD_MS`` at most (``held_waited``: the caller waited so already),
        then every byte wakes it again."""
        keepalive = self._keepalive
        since = 0.0  # when the server's silence began, for the keepalive
        if silent:
            if keepalive is not None:
                since = time.monotonic() - keepalive.interval
        elif held_waited or (not self._pending and not self._ping_sent):
            millis, held_ms = self._wait_ms
            if held_waited or self._held:  # (as they were when the caller's wait began)
                if not held_waited and self._poll(held_ms):
                    return True
                with self._flow_lock:
                    self._release()
                millis = -1 if millis < 0 else millis - held_ms
            if self._poll(millis):
                return True
            if keepalive is not None:  # silent for a whole interval
                since = time.monotonic() - keepalive.interval
        if self._held:  # a write or a PING's answer to wait for: no bytes held back
            with self._flow_lock:
                self._release()
        if not since:
            since = time.monotonic()
        while not self._finished:
            flushed = self._flush() if self._pending else True
            timeout = None if flushed else _LOCK_BUSY_WAIT
            if keepalive is not None:
                due = self._keepalive_due(keepalive, since)
                if due is None:
                    return False
                timeout = due if timeout is None else min(timeout, due)
            if flushed and self._pending:  # the socket's buffer is full: wait for room too
                can_read = wait_ready(self._sock, timeout, write=True)[0]
            else:
                can_read = bool(self._poll(-1 if timeout is None else max(0, int(timeout * 1000))))
            if can_read:
                return True
        return False

    def _keepalive_due(self, keepalive: Keepalive, since: float) -> float | None:
        """Sends a PING when the server has been silent for the interval
        (since ``since``); seconds until the next keepalive step, or None
        (the call ended) when the last PING went unanswered past its timeout."""
        now = time.monotonic()
        if self._ping_sent:
            left = self._ping_sent + keepalive.timeout - now
            if left > 0:
                return left
            self._finish(
                StreamError(
                    grpc.StatusCode.UNAVAILABLE,
                    f"the server did not answer a keepalive PING within {keepalive.timeout} s",
                )
            )
            self._shutdown()
            return None
        left = since + keepalive.interval - now
        if left > 0:
            return left
        self._ping_sent = now
        self._pongs = self._reader.pongs
        self._queue(frame_bytes(PING, 0, 0, _KEEPALIVE_PAYLOAD))
        return keepalive.timeout
