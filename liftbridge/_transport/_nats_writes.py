"""How ``liftbridge-nats-io`` writes the frames publishers queue: the
:class:`NatsWrites` half of :class:`~liftbridge._transport._nats_socket.NatsSocket`
(whose state it reads: the outbox, the frames held, the flush waiters, the
server's ``max_payload`` and the owner's ``deliver``).

Connected, queued frames go out many per ``sendall`` (up to
:data:`_WRITE_CHUNK` bytes each), then a ``PING`` for each flush waiting.
Disconnected, they are held (up to :data:`RECONNECT_BUFFER` bytes) for the
next connection. A frame that cannot go (over a ``max_payload`` the server
lowered, past the buffer, or the connection closed for good) goes back to its
owner with the error; one without an entry (AckPolicy.NONE) is only logged
and counted. Every method here runs on the I/O thread.
"""

from __future__ import annotations

import collections
import logging
import socket
import threading
from collections.abc import Callable

from liftbridge._errors import MessageTooLargeError, UnavailableError
from liftbridge._handover import Handover

logger = logging.getLogger(__name__)

RECONNECT_BUFFER = 8 * 1024 * 1024
"""Bytes of frames (envelopes and PUB lines) held while reconnecting; past them a send fails."""

_WRITE_CHUNK = 1024 * 1024
"""Bytes of frames gathered for one ``sendall`` at most."""


class NatsWrites:
    """The NATS connection's writing of queued frames (see the module docstring)."""

    _deliver: Callable[[object], None]
    _outbox: collections.deque[tuple[str, bytes, object]]
    _held: list[tuple[str, bytes, object]]
    _held_bytes: int
    _flushes: collections.deque[threading.Event]
    _pongs: collections.deque[threading.Event | None]
    _handover: Handover
    _max_payload: int

    def _write(self, sock: socket.socket) -> None:
        """Writes held frames, then queued ones (many per ``sendall``), then
        a PING for each flush waiting. Frames without an entry that left
        the queue are counted to the owner, even when a write fails."""
        outbox = self._outbox
        limit = self._max_payload  # a frame no longer is smaller than that: no check
        frames: list[bytes] = []
        size = unacked = 0
        held, self._held, self._held_bytes = self._held, [], 0
        try:
            for index, item in enumerate(held):
                frame = item[1]
                if item[2] is None:
                    unacked += 1
                if len(frame) > limit and self._over_limit(item, limit):
                    continue
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
                item = outbox.popleft()
                frame = item[1]
                length = len(frame)
                if item[2] is None:
                    unacked += 1
                if length > limit and self._over_limit(item, limit):
                    continue
                frames.append(frame)
                size += length
                if size >= _WRITE_CHUNK:
                    sock.sendall(b"".join(frames))
                    frames, size = [], 0
            if self._handover.waiting:  # the sender makes more while this thread writes
                self._handover.release()
            flushes = self._flushes
            while flushes:
                self._pongs.append(flushes.popleft())
                frames.append(b"PING\r\n")
            if frames:
                sock.sendall(b"".join(frames))
        finally:
            if unacked:
                self._deliver(unacked)

    def _over_limit(self, item: tuple[str, bytes, object], limit: int) -> bool:
        """Refuses a frame whose payload is over ``max_payload`` (lowered by
        the server since it was made): the server would close the connection."""
        frame = item[1]
        line = frame[: frame.find(b"\r\n")]
        payload = int(line.rsplit(b" ", 1)[1])
        if payload <= limit:
            return False
        self._refuse(
            item,
            MessageTooLargeError(
                f"the envelope is {payload} bytes, over the NATS server's max_payload of "
                f"{limit} bytes (nothing was sent)"
            ),
        )
        return True

    def _hold(self) -> None:
        """Moves queued frames to the reconnect buffer; fails those past it."""
        outbox = self._outbox
        dropped = 0
        while outbox:
            item = outbox.popleft()
            if self._held_bytes + len(item[1]) > RECONNECT_BUFFER:
                dropped += self._refuse(item, UnavailableError("the NATS reconnect buffer is full"))
            else:
                self._held.append(item)
                self._held_bytes += len(item[1])
        self._handover.release()
        if dropped:
            self._deliver(dropped)
        while self._flushes:
            self._flushes.popleft().set()

    def _fail_held(self, error: Exception) -> None:
        held, self._held, self._held_bytes = self._held, [], 0
        outbox = self._outbox
        while outbox:  # popped one by one: a publisher may be appending
            held.append(outbox.popleft())
        self._handover.release()
        dropped = sum(self._refuse(item, error) for item in held)
        if dropped:
            self._deliver(dropped)

    def _refuse(self, item: tuple[str, bytes, object], error: Exception) -> int:
        """Gives a frame not written back to its owner with ``error``;
        returns 1 for a frame without an entry (only logged), else 0."""
        subject, _, entry = item
        if entry is None:
            logger.warning("dropped an AckPolicy.NONE publish on %s: %r", subject, error)
            return 1
        self._deliver((entry, error))
        return 0
