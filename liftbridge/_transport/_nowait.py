"""Socket reads and writes that never wait, made without letting go of the GIL.

CPython's socket methods release the GIL around every system call, so that
other threads run meanwhile. For a call that cannot block (``MSG_DONTWAIT``:
it takes or gives what the kernel has at once, a few microseconds) that
costs more than it gives when the process's other threads are busy: the GIL
goes to one of them, and the caller waits to get it back, up to the
interpreter's switch interval (5 ms) behind each thread that runs before
it. At 10,000 msgs/s a publish and its ack and delivery cross four SDK
threads that each read or write once per wake-up; those hand-overs were
most of the tail of ``make bench``'s end-to-end latency rows.

So on Linux under CPython these calls go to libc's ``send`` and ``recv``
through :class:`ctypes.PyDLL` (documented not to release the GIL), with
``MSG_DONTWAIT | MSG_NOSIGNAL``. The socket's descriptor is read for each
call under the same hold of the GIL: a socket closed by another thread reads
-1 and fails with EBADF, as its methods do; its descriptor number cannot be
reused meanwhile. ``send`` keeps no ``errno`` (ctypes' ``use_errno`` costs
every call ~250 instructions, and nearly every send succeeds): one that
fails, having written nothing, is made again by the socket's own method,
which raises what it raises or finds nothing to do now (a full buffer, rare
where these writes are made). ``recv`` keeps it: a reader holding bytes
below its low-water mark finds nothing to read often. Elsewhere they are the
socket's own methods with ``MSG_DONTWAIT`` (or, where there is none, a
blocking ``sendall``). Thread-safe as the socket is.

The exception is :func:`send_released`, a publishing thread's own write
(``Http2Call.write_now``) and ``liftbridge-h2-send``'s: those threads only
return or wait for the next request after it, and it is the readers, not
they, who must not wait for the GIL. The descriptor is read with the GIL
let go of there, so its connection keeps the socket open until that send
returned (``_own_writing``, ``_sending``).
"""

from __future__ import annotations

import errno
import os
import socket
import struct
import sys
from typing import Any

_AGAIN = frozenset((errno.EAGAIN, errno.EWOULDBLOCK, errno.EINTR))
"""What a call that does not wait answers when nothing could be done now."""


def _libc() -> tuple[Any, Any, Any] | None:
    """libc's ``send`` (no ``errno`` kept) and ``recv`` called holding the
    GIL, and ctypes' ``get_errno``; None where they are not to be had (not
    Linux and CPython, no ctypes)."""
    if not sys.platform.startswith("linux") or sys.implementation.name != "cpython":
        return None
    try:
        import ctypes

        send = ctypes.PyDLL(None).send
        recv = ctypes.PyDLL(None, use_errno=True).recv
    except (ImportError, OSError, AttributeError):
        return None
    # int send(int, const void *, size_t, int): Python ints pass as C ints
    # (lengths here are far below 2**31), bytes and ctypes arrays as pointers.
    send.restype = recv.restype = ctypes.c_ssize_t
    return send, recv, ctypes.get_errno


_LIBC = _libc()
_FLAGS = getattr(socket, "MSG_DONTWAIT", 0) | getattr(socket, "MSG_NOSIGNAL", 0)


def _failed() -> int:
    """0 when the last libc ``recv`` found nothing to do now; raises its error otherwise."""
    assert _LIBC is not None
    code = _LIBC[2]()
    if code in _AGAIN:
        return 0
    raise OSError(code, os.strerror(code))


def send_nowait(sock: socket.socket, data: bytes) -> int:
    """Writes what of ``data`` the socket takes without waiting; the count
    written (0 when its buffer is full). Where the platform has no
    MSG_DONTWAIT (Windows), it waits like sendall.

    Raises:
        OSError: the connection failed, or the socket is closed.
    """
    if _LIBC is not None:
        sent: int = _LIBC[0](sock.fileno(), data, len(data), _FLAGS)
        if sent >= 0:
            return sent
    return send_released(sock, data)  # no libc, or its error raised by the socket's own send


def send_released(sock: socket.socket, data: bytes) -> int:
    """:func:`send_nowait` letting go of the GIL for the system call (the
    socket's own ``send``, MSG_DONTWAIT): for a thread with nothing to do
    after it but return, whose system call's kernel work (~9 us for a
    loopback TCP write: the peer's receive path and wake-up run in it)
    other threads can use the GIL meanwhile.

    A publishing thread's own write (``Http2Call.write_now``) holding the
    GIL through that call kept the SDK's readers off it: at 10,000 msgs/s
    end to end (a paced loop, a subscription in the same process), the
    subscription thread waited for the GIL 1 ms or more 137, 76 and 115
    times in 40,000 messages (its p99 wait 2.1-2.7 ms), and 14, 25, 25
    times (0.5-1.3 ms) with this (futex waits on the GIL's condition, perf,
    three alternations at load 2.7-3.8, the change as a patch; a later pair
    on the code itself: 31 -> 6, p99 0.73 -> 0.46 ms); the acks thread's
    130, 64, 105 -> 6, 24, 15 (27 -> 6). The publishing thread waits to
    have the GIL back instead, after its frame is out.

    ``liftbridge-h2-send``'s writes (pipelined ``publish_async``) use it
    too: 1,024 publishes in flight, 100 B, median msgs/s 65,000-66,500 ->
    68,500-86,000 and client CPU 7.3-8.5 -> 7.3-7.9 us a message over three
    rounds of alternated runs (bench.future_probe, under load).

    Raises:
        OSError: the connection failed, or the socket is closed.
    """
    if not _FLAGS:
        sock.sendall(data)
        return len(data)
    try:
        return sock.send(data, _FLAGS)
    except BlockingIOError:
        return 0


class Inbox:
    """A buffer of ``size`` bytes that a socket is read into without waiting.
    Used by one reading thread at a time."""

    __slots__ = ("_array", "view")

    def __init__(self, size: int) -> None:
        buffer = bytearray(size)
        self.view = memoryview(buffer)
        """The buffer; the first n bytes of it are what :meth:`recv` read."""
        self._array: Any = None  # the same bytes as a ctypes array, for libc's recv
        if _LIBC is not None:
            import ctypes

            self._array = (ctypes.c_char * size).from_buffer(buffer)

    def recv(self, sock: socket.socket) -> int | None:
        """Reads what ``sock`` has into the buffer, without waiting: the
        count read (0: the peer closed the connection), None when there was
        nothing to read.

        Raises:
            OSError: the connection failed, or the socket is closed.
        """
        if self._array is not None:
            assert _LIBC is not None
            read: int = _LIBC[1](sock.fileno(), self._array, len(self.view), _FLAGS)
            if read >= 0:
                return read
            _failed()
            return None
        try:
            return sock.recv_into(self.view, 0, _FLAGS)
        except BlockingIOError:
            return None


def receive_timeout(sock: socket.socket, seconds: float | None) -> bool:
    """Bounds a waiting ``recv`` on the blocking ``sock`` to ``seconds``
    (SO_RCVTIMEO; None: no bound): such a ``recv`` that times out raises
    BlockingIOError (a paced subscription's reader waits so,
    :meth:`liftbridge._transport._http2.Http2Call._read`). False where that
    cannot be had (not Linux, or the option refused): wait with poll then."""
    if not sys.platform.startswith("linux") or sock.gettimeout() is not None:
        return False
    if seconds is None:
        return True
    try:
        whole = int(seconds)
        micros = int((seconds - whole) * 1_000_000)
        if not whole and not micros:  # a zero timeval means no bound
            micros = 1
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("@ll", whole, micros))
    except (OSError, OverflowError, ValueError, struct.error):
        return False
    return True
