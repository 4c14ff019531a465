"""The connection half of the SDK's HTTP/2 calls (:mod:`liftbridge._transport._http2`):
one call's socket, everything written to it, and how the call ends.

Writes never interleave: whoever writes holds ``_write_lock``. A thread that
reads never waits to write: its frames (acks, window updates, PINGs, a lane's
own request) are queued whole in ``_pending`` and written as far as the
socket takes them at once (``_flush``); ``liftbridge-h2-send`` (``_send_loop``)
writes the requests within the peer's flow-control windows (letting go of
the GIL for each send, as ``write_now``), waiting in ``sendall`` as long as
it takes, and the queue with them. The call's end is
recorded once (``_finish``), wakes every thread on the socket (``_shutdown``),
and the socket is closed only when no thread is in it (``_close_when_idle``):
the sender says so in ``_sending``, a reader by holding ``_read_lock``.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import struct
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import grpc

from liftbridge._locks import drop
from liftbridge._transport._http2_reader import MAX_PENDING_REPLIES
from liftbridge._transport._http2_tls import TlsLayer
from liftbridge._transport._http2_windows import PeerWindows
from liftbridge._transport._http2_wire import (
    DATA,
    END_STREAM,
    ENHANCE_YOUR_CALM,
    GOAWAY,
    STREAM,
    StreamError,
    connection_error,
    frame_bytes,
    frame_header,
)
from liftbridge._transport._nowait import send_nowait, send_released
from liftbridge._transport._status import from_rpc_error
from liftbridge._transport._stream import Serializable

_log = logging.getLogger(__name__)

_BATCH_BYTES = 1 << 16
"""At most this many request bytes are gathered into one write."""

_pack_data_head = struct.Struct(">I5sxI").pack
"""The 14 bytes before a lone request in its DATA frame: the frame's length
(24 bits, checked against the peer's max frame size) and type, its flags and
stream id (:data:`_NO_FLAGS_STREAM`), then the message's gRPC prefix (not
compressed, its length). One pack, where shifting and or-ing the same into
one int and ``to_bytes`` cost ~1,200 instructions more (callgrind)."""
_NO_FLAGS_STREAM = bytes(1) + STREAM.to_bytes(4, "big")
_pack_frame_head = struct.Struct(">I5s").pack
"""The 9-byte header of a sender's run, one DATA frame (:meth:`Http2Connection._send_run`):
the frame's length and type, then :data:`_NO_FLAGS_STREAM`. One pack, where
``frame_header``'s call, its shifts and or-ings of a 72-bit int and
``to_bytes`` cost ~1,600 instructions more (callgrind, 10,000 headers)."""


HELD_BYTES = 31
"""The socket's SO_RCVLOWAT while a call's responses flow (Linux, no TLS):
for each request it reads while no ping of its is out, a grpc-go server
sends a connection WINDOW_UPDATE and a BDP PING (30 bytes), 0.1-0.7 ms
before the response. Held below this mark in the kernel, they come in the
response's read instead of waking the reading thread on their own."""
HELD_MS = 50
"""Milliseconds a reader waits on held bytes before it reads them anyway (a
lone PING, WINDOW_UPDATE, RST_STREAM, GOAWAY or small trailers)."""


class Http2Connection:
    """The socket of one call (connected, TLS handshaken), its writes and its end.

    The base of :class:`~liftbridge._transport._http2.Http2Call`, which reads.
    ``requests`` is what ``liftbridge-h2-send`` sends, when ``sending`` (the
    caller starts that thread on :meth:`_send_loop`). Thread-safe: every
    method may be called from any of the call's threads.
    """

    def __init__(
        self,
        sock: socket.socket,
        tls: TlsLayer | None,
        requests: Iterator[Any],
        *,
        sending: bool,
    ) -> None:
        self._sock = sock
        self._tls = tls
        self._requests = requests
        # _write_lock: held by whoever writes to the socket, so frames never
        # interleave. An RLock only so that a thread interrupted as it took the
        # lock without waiting can let go of it (drop); nobody takes it twice.
        self._write_lock = threading.RLock()
        # _out_lock guards _pending: whole frames queued by threads that must
        # not wait to write; taken from its head only under _write_lock.
        self._out_lock = threading.Lock()
        self._pending = bytearray()
        # _flow guards the peer's windows (_peer) and the ends below; the
        # sender waits on it for window. _flow_lock is its lock, taken
        # directly where nobody waits (a C-level round, not the Condition's two calls).
        self._flow_lock = threading.Lock()
        self._flow = threading.Condition(self._flow_lock)
        self._peer = PeerWindows()
        self._error: StreamError | None = None  # why the call ended, if not OK
        self._finished = False  # ended (any way): nothing more is sent or read
        # liftbridge-h2-send is running: set by that thread itself, unless the
        # call ended first (then it never touches the socket nor the requests),
        # so that a call whose opener was interrupted (Ctrl-C) as the thread
        # started or not closes its socket either way.
        self._sending = False
        # Held by the thread reading the socket (the call's iterator, or
        # done() peeking), so also by whoever closes it (_close_when_idle);
        # whoever lets go of it closes an ended call's socket (_let_go). An
        # RLock only so that a thread interrupted as it took the lock without
        # waiting can let go of it (_drop_read); nobody takes it twice.
        self._read_lock = threading.RLock()
        self._closed = False  # the socket is closed
        # write_now is under way (its send lets go of the GIL): the socket stays
        # open (_close_when_idle) until it ends, and then closes it if the call
        # ended meanwhile. Set under _flow_lock with the call not ended.
        self._own_writing = False
        # Bytes below HELD_BYTES may wait in the kernel (a sending call on a
        # plain socket, until its sending half ends or its reader writes too);
        # _held: they do now; _holder: the thread that read when they began to.
        self._can_hold = sending and tls is None and sys.platform == "linux"
        self._held = False
        self._holder = 0

    def _wrap(self, data: bytes) -> bytes:
        """``data`` as written: TLS records with TLS (under ``_out_lock``, in order)."""
        return data if self._tls is None else self._tls.wrap(data)

    # --------------------------------------------------------------- holding --

    def _hold(self) -> None:
        """Lets frames below HELD_BYTES wait in the kernel for the next
        response (after a read that brought responses), unless a sender
        waits for window: the WINDOW_UPDATE it waits for must wake the reader.

        Only for a reader that never writes requests (``liftbridge-acks``):
        a lane's thread writes one and reads its answer, and there the PING's
        answer went out just before its next request, in the way of it (one
        at a time, 100 B: 6,100 -> 5,150 msgs/s); ``write_now`` turns it off."""
        with self._flow_lock:
            if self._held or not self._can_hold or self._finished or self._peer.waiting:
                return
            try:
                self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, HELD_BYTES)
            except OSError:  # not on this socket (or it closed): read every byte as it comes
                self._can_hold = False
                return
            self._held = True
            self._holder = threading.get_ident()

    def _release(self) -> None:
        """Every byte wakes the reader again; a reader asleep in poll wakes at
        once if held bytes are there (Linux checks when the mark is set).
        The caller holds ``_flow_lock``."""
        if self._held:
            self._held = False
            with contextlib.suppress(OSError):  # closed: nobody reads it any more
                self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, 1)

    # ---------------------------------------------------------------- sending --

    def _queue(self, frame: bytes) -> None:
        """Queues a whole frame for :meth:`_flush` (a thread that reads never
        waits on a write).

        An interrupt (Ctrl-C: a lane's thread reads its own answers) as a
        TLS record was made (its sequence counted) may lose it, and no record
        after it would decrypt: the call then ends (:meth:`_write_failed`),
        as for ``write_now``. Without TLS the frame is queued whole or not.

        Raises:
            StreamError: the server let more than ``MAX_PENDING_REPLIES``
                bytes of answers pile up unread (ENHANCE_YOUR_CALM).
        """
        wrapping = False  # set with no call between it and the record's making
        try:
            with self._out_lock:
                if len(self._pending) > MAX_PENDING_REPLIES:
                    raise connection_error(
                        ENHANCE_YOUR_CALM,
                        "the server sends control frames faster than it reads their answers",
                        grpc.StatusCode.RESOURCE_EXHAUSTED,
                    )
                # _wrap's, written out: an answer (a PING's) is queued about once a read.
                if self._tls is None:
                    self._pending += frame
                else:
                    wrapping = True
                    self._pending += self._tls.wrap(frame)
                    wrapping = False
        except BaseException:
            if wrapping:
                self._write_failed()
            raise

    def _flush(self) -> bool:
        """Writes what is queued as far as the socket takes it without
        waiting. True when the socket was ours to write (nothing left, or
        its buffer is full); False when the sender holds it (it writes the
        queue before it lets go)."""
        write_lock = self._write_lock
        try:
            if not write_lock.acquire(False):
                return False
        except BaseException:  # an interrupt, maybe just after the lock was taken
            drop(write_lock)
            raise
        sending = False  # what the socket took is not yet dropped from the queue
        try:
            with self._out_lock:
                data = bytes(self._pending)
            if data:
                sending = True
                sent = send_nowait(self._sock, data)
                with self._out_lock:
                    del self._pending[:sent]
                    sending = False
        except OSError as e:
            self._finish(StreamError(grpc.StatusCode.UNAVAILABLE, f"the connection failed: {e}"))
        except BaseException:  # an interrupt (Ctrl-C): sent again, what went would repeat
            if sending:
                self._write_failed()
            raise
        finally:
            write_lock.release()
        return True

    def _goaway(self, code: int) -> None:
        """Tells the server why we end the connection, if the socket takes it now."""
        with contextlib.suppress(StreamError):
            self._queue(frame_bytes(GOAWAY, 0, 0, (0).to_bytes(4, "big") + code.to_bytes(4, "big")))
        self._flush()

    def _send_loop(self) -> None:
        """Thread ``liftbridge-h2-send``: writes the requests as they come,
        each batch of ready ones in one write; ends the stream's sending half
        when the request iterator ends."""
        with self._flow:
            if self._finished:  # ended before this thread ran: the socket is its closer's
                return
            self._sending = True
        requests = self._requests
        more: Callable[[], Any] | None = getattr(requests, "next_ready", None)
        try:
            for request in requests:
                chunk = request.SerializeToString()
                # parts[0]: room for the DATA frame's header (_send_run).
                parts = [b"", len(chunk).to_bytes(5, "big"), chunk]
                size = len(chunk) + 5
                while more is not None and size < _BATCH_BYTES:
                    request = more()
                    if request is None:
                        break
                    chunk = request.SerializeToString()
                    parts += (len(chunk).to_bytes(5, "big"), chunk)
                    size += len(chunk) + 5
                if not self._send_run(parts, size):
                    return
            self._send_data(b"", end_stream=True)
        except Exception:  # never die silently: the call ends, its reader says why
            _log.exception("the HTTP/2 sender failed")
            self._finish(StreamError(grpc.StatusCode.INTERNAL, "the request sender failed"))
            self._shutdown()
        finally:
            with self._flow:
                self._sending = False
            self._close_when_idle()

    def write_now(self, request: Serializable) -> bool:
        """Sends one request from the calling thread, without a hand-over to
        ``liftbridge-h2-send``, when the server's flow-control windows take
        it whole at once; False (nothing sent) when they do not or the call
        has ended: then send it through the request iterator (a thread that
        also reads the call must not wait for window: the update it waits
        for comes in on what it would read). Never waits to write: with
        nobody else writing and nothing queued, the frame goes straight to
        the socket (one frame, one ``send``: the usual paced publish); what
        the socket does not take at once goes while the thread reads. Only for a
        caller that is the call's one writer apart from that iterator, one
        request at a time.

        Interrupted (Ctrl-C, on a publishing thread) anywhere in it, the
        frame is out whole or queued whole, or nothing of it went and its
        window bytes are given back, or, when some of it may have gone (a
        send the interrupt cut short), the call ends (UNAVAILABLE): its
        stream could not go on past a part of a frame (:meth:`_write_failed`).
        """
        chunk = request.SerializeToString()
        size = len(chunk) + 5
        # The DATA frame's header and the message's length prefix in one pack,
        # made before its window is taken: from there on, no call whose
        # interrupt would lose the frame without its window (see `done` below).
        frame = _pack_data_head(size << 8 | DATA, _NO_FLAGS_STREAM, len(chunk)) + chunk
        # 0: nothing taken; 1: the window taken, nothing of the frame out;
        # 2: some of it may be out; 3: all of it out or queued. Set with no
        # call between it and the step it names.
        done = 0
        try:
            with self._flow_lock:
                if self._held and self._holder == threading.get_ident():  # a lane: see _hold
                    self._can_hold = False
                    self._release()
                # _take_window written out: a Python call the less a publish.
                peer = self._peer
                finished, max_frame = self._finished, peer.max_frame
                if finished or size > max_frame or size > peer.stream or size > peer.conn:
                    return False
                peer.stream -= size
                peer.conn -= size
                done = 1
                self._own_writing = True
            write_lock = self._write_lock
            # acquire(False), not blocking=False: a keyword makes the call build a
            # dict and parse it (~960 instructions an acquire under callgrind).
            try:
                own = self._tls is None and write_lock.acquire(False)
            except BaseException:  # an interrupt, maybe just after the lock was taken
                drop(write_lock)
                raise
            if own:
                try:  # the usual own write: nobody else writes
                    # What a reader queued (a PING's answer left for the next request,
                    # most paced publishes) goes first, in the same send: through
                    # _flush, that send kept the GIL.
                    with self._out_lock:
                        held = len(self._pending)
                        data = bytes(self._pending) + frame if held else frame
                    done = 2
                    # The GIL let go of for the system call: the readers run
                    # meanwhile (_nowait.send_released says why).
                    sent = send_released(self._sock, data)
                    if held or sent < size + 9:  # what went leaves the queue; the rest first in it
                        with self._out_lock:
                            if sent < held:  # the frame right after the answers' rest
                                del self._pending[:sent]
                                self._pending[held - sent : held - sent] = frame
                            else:  # before anything queued meanwhile
                                del self._pending[:held]
                                self._pending[0:0] = data[sent:]
                            done = 3
                    done = 3
                except OSError as e:
                    self._finish(
                        StreamError(grpc.StatusCode.UNAVAILABLE, f"the connection failed: {e}")
                    )
                    return True
                except BaseException:
                    if done == 2:  # ended before another writer adds to the part
                        self._write_failed()
                        done = 3  # dealt with
                    raise
                finally:
                    write_lock.release()
                if done == 3:
                    if self._pending:  # queued by a reader while this thread wrote
                        self._flush()
                    return True
            with self._out_lock:
                if self._tls is None:
                    self._pending += frame
                else:
                    done = 2  # a TLS record made (its sequence counted) may be lost
                    self._pending += self._tls.wrap(frame)
                done = 3
            self._flush()
            return True
        except BaseException:
            if done == 1:  # nothing of the frame out: its window back
                with self._flow_lock:
                    self._peer.stream += size
                    self._peer.conn += size
            elif done == 2:
                self._write_failed()
            raise
        finally:
            if done:
                self._own_writing = False
                if self._finished:  # ended meanwhile: its closer left the socket to this thread
                    self._close_when_idle()

    def _write_failed(self) -> None:
        """An interrupt (Ctrl-C) cut a frame's write short, some of it maybe
        sent: the HTTP/2 stream cannot go on past a part of a frame, so the
        call ends (its reader raises UNAVAILABLE) and its socket is shut."""
        self._finish(
            StreamError(
                grpc.StatusCode.UNAVAILABLE,
                "a write was interrupted midway; the connection was dropped",
            )
        )
        self._shutdown()

    def _take_window(self, size: int) -> bool:
        """Takes ``size`` bytes of the stream's and the connection's windows
        for one DATA frame; False (nothing taken) once the call has ended, or
        when the frame is over the peer's max frame size or a window. The
        caller holds ``_flow_lock``. (:meth:`write_now` has it written out.)"""
        peer = self._peer
        if self._finished or size > peer.max_frame or size > peer.stream or size > peer.conn:
            return False
        peer.stream -= size
        peer.conn -= size
        return True

    def _send_run(self, parts: list[bytes], size: int) -> bool:
        """Writes the length-prefixed requests ``parts[1:]`` (``size`` bytes;
        ``parts[0]`` is b"") as DATA; False once the call has ended.

        The usual run fits one frame and the peer's windows: its header goes
        into ``parts[0]`` and the frame is joined once, straight from the
        requests (through :meth:`_send_data`, the payload was joined, then
        the frames were joined from views of it: two copies and a round of
        the flow Condition a run). Anything else takes :meth:`_send_data`."""
        with self._flow_lock:  # taken directly where nobody waits (as write_now)
            fits = self._take_window(size)
        if not fits:
            return self._send_data(b"".join(parts), end_stream=False)
        parts[0] = _pack_frame_head(size << 8 | DATA, _NO_FLAGS_STREAM)
        return self._send(b"".join(parts))

    def _send_data(self, payload: bytes, *, end_stream: bool) -> bool:
        """Writes ``payload`` as DATA frames within the peer's windows; False
        once the call has ended."""
        view = memoryview(payload)
        pos = 0
        peer = self._peer
        if end_stream:  # the trailers that follow are small: let them wake the reader
            with self._flow:
                self._can_hold = False
                self._release()
        while True:
            frames: list[bytes | memoryview] = []
            with self._flow:
                while not self._finished and pos < len(payload):
                    if min(peer.stream, peer.conn) > 0:
                        break
                    self._release()
                    peer.waiting += 1
                    try:
                        self._flow.wait(1.0)
                    finally:
                        peer.waiting -= 1
                if self._finished:
                    return False
                while pos < len(payload):
                    size = min(len(payload) - pos, peer.stream, peer.conn, peer.max_frame)
                    if size <= 0:
                        break
                    peer.stream -= size
                    peer.conn -= size
                    flags = END_STREAM if end_stream and pos + size == len(payload) else 0
                    # The header, then a view of the payload: the join below is
                    # the one copy (frame_bytes over a sliced copy made three).
                    frames += (frame_header(DATA, flags, STREAM, size), view[pos : pos + size])
                    pos += size
            if end_stream and not payload:
                frames.append(frame_bytes(DATA, END_STREAM, STREAM))
            if frames and not self._send(b"".join(frames)):
                return False
            if pos >= len(payload):
                return True

    def _send(self, data: bytes) -> bool:
        """Writes ``data`` after what is queued, waiting as long as it takes
        (only ``liftbridge-h2-send`` does; ``cancel`` wakes it), then what
        was queued meanwhile."""
        try:
            with self._write_lock:
                with self._out_lock:
                    if self._tls is not None:
                        data = self._tls.wrap(data)
                    if self._pending:
                        data = bytes(self._pending) + data
                        self._pending.clear()
                while data:
                    # The GIL let go of for the system call, as write_now's
                    # (_nowait.send_released); only what it did not take waits.
                    # The socket stays open meanwhile: _sending is set.
                    sent = send_released(self._sock, data)
                    if sent < len(data):
                        self._sock.sendall(data[sent:])
                    with self._out_lock:
                        if not self._pending:  # the usual: nothing queued meanwhile
                            break
                        data = bytes(self._pending)
                        self._pending.clear()
        except OSError as e:
            self._finish(StreamError(grpc.StatusCode.UNAVAILABLE, f"the connection failed: {e}"))
            return False
        return True

    # ------------------------------------------------------------------- ends --

    def _ending(self) -> BaseException:
        """What iterating the ended call raises: StopIteration after an OK
        status, else the SDK's error for the status."""
        error = self._error
        if error is None:
            return StopIteration()
        mapped = from_rpc_error(error)
        mapped.__cause__ = error
        return mapped

    def _finish(self, error: StreamError | None) -> bool:
        """Records how the call ended; False if it had ended already."""
        with self._flow:
            if self._finished:
                return False
            self._finished = True
            self._error = error
            self._flow.notify_all()
            return True

    def _shutdown(self) -> None:
        """Wakes a thread in recv, poll or sendall on the socket; it stays open."""
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)

    def _close_when_idle(self) -> None:
        """Closes the socket once the call ended and neither the sender, a
        reader nor :meth:`write_now` uses it (closing a socket another thread
        is in could let a new one reuse its descriptor under that thread: a
        send that lets go of the GIL reads the descriptor after it did).
        Never called by a thread holding ``_read_lock``.

        A reader is in the socket only while it holds ``_read_lock``, so the
        socket is closed under that lock, taken without waiting. When another
        thread holds it, that thread closes the socket after it lets go: a
        reader (``_let_go``) sees the end and the sender's end recorded before
        this call (the GIL orders the threads' steps; ``_finished`` changes
        once, and ``_sending`` goes up only before it, both under ``_flow``,
        then down once), a closer saw them itself."""
        if self._closed or not self._finished or self._sending or self._own_writing:
            return
        read_lock = self._read_lock
        try:
            if not read_lock.acquire(False):
                return
        except BaseException:  # an interrupt, maybe just after the lock was taken
            self._drop_read()
            raise
        try:
            with self._flow:
                if self._closed or self._own_writing:  # see write_now's send
                    return
                self._closed = True
            self._sock.close()
        finally:
            read_lock.release()

    def _let_go(self) -> None:
        """Lets go of ``_read_lock`` (held to read); closes the socket if the
        call ended meanwhile, or before, and it is idle."""
        self._read_lock.release()
        if self._finished:
            self._close_when_idle()

    def _drop_read(self) -> None:
        """:meth:`_let_go` if this thread holds ``_read_lock``: after an
        exception that may have been raised just as a try to take it without
        waiting succeeded (a closer that found it held meanwhile left the
        socket to this thread)."""
        if drop(self._read_lock) and self._finished:
            self._close_when_idle()
