"""The NATS connection a NATS stream publisher owns, opened through the core.

Features stand on the core, never on the transport: as the router opens their
gRPC streams (:meth:`~liftbridge._core._router.Router.open_stream`, a
:class:`~liftbridge._core._router.Stream`), :func:`open_nats` makes
the NATS connection of a :class:`~liftbridge.NatsStreamPublisher`, typed by
:class:`NatsConnection`: what the publisher needs of it. Its implementation is
the transport's :class:`~liftbridge._transport._nats_socket.NatsSocket` (the
``liftbridge-nats-io`` thread), returned as is: a publish calls its methods
with no layer between.

The NATS names both publishers need are re-exported here: how a ``PUB`` frame
starts (:func:`pub_prefix`), the TLS check made before connecting
(:func:`check_tls_required`), the server's greeting (:func:`server_info`),
NATS's :data:`DEFAULT_PORT`, the connection's :data:`CLOSE_TIMEOUT`, and what
the connection delivers besides acks (:class:`MaxPayload`, :class:`Refused`).
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from typing import Protocol

from liftbridge._transport._nats_frames import pub_prefix as pub_prefix
from liftbridge._transport._nats_handshake import check_tls_required as check_tls_required
from liftbridge._transport._nats_info import DEFAULT_PORT as DEFAULT_PORT
from liftbridge._transport._nats_info import server_info as server_info
from liftbridge._transport._nats_socket import CLOSE_TIMEOUT as CLOSE_TIMEOUT
from liftbridge._transport._nats_socket import MaxPayload as MaxPayload
from liftbridge._transport._nats_socket import NatsSocket
from liftbridge._transport._nats_socket import Refused as Refused


class NatsConnection(Protocol):
    """A NATS connection on its ``liftbridge-nats-io`` thread: what a NATS
    stream publisher needs of it. Thread-safe.

    What it reads or fails to write goes to the ``deliver`` function it was
    opened with (:func:`open_nats`), on the I/O thread.
    """

    @property
    def max_payload(self) -> int:
        """The largest message the server accepts (after :meth:`connect`)."""
        ...

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

        Raises:
            MissingDependencyError: credentials without ``nkeys``.
            ProtocolError: the server broke the protocol (a malformed INFO).
            UnavailableError: no connection (the reason is in the message).
        """
        ...

    def send_frame(self, subject: str, frame: bytes, entry: object, waits: bool = False) -> None:
        """Queues a whole ``PUB`` frame to ``subject`` for the I/O thread;
        ``waits``: the caller waits for the ack next."""
        ...

    def send_frames(self, items: list[tuple[str, bytes, object]]) -> None:
        """Queues many ``(subject, frame, entry)`` in order, in one hand-over."""
        ...

    queue: Callable[[tuple[str, bytes, object]], None]
    """Queues one ``(subject, frame, entry)`` and wakes no one (``send_frames([])``
    does, next): a C call, which an owner may make under its own lock right
    after counting the frame, with no call between where an interrupt lands."""

    def drop_unsent(self) -> None:
        """Forgets frames not written yet (closing: the owner fails them)."""
        ...

    def flush(self, timeout: float | None) -> None:
        """Waits (up to ``timeout``) until what was queued is written and the
        server has seen it; gives up quietly once closed or disconnected."""
        ...

    def close(self) -> None:
        """Writes what is queued (bounded), closes the connection and joins
        the I/O thread (within :data:`CLOSE_TIMEOUT`). Idempotent."""
        ...


def open_nats(
    where: str,
    inbox: str,
    deliver: Callable[[object], None],
    on_closed: Callable[[], None],
) -> NatsConnection:
    """A NATS connection, not connected yet: :meth:`NatsConnection.connect`
    makes it (held first, so a close racing with connecting can cut it).

    Args:
        where: ``host:port`` for messages (never the credentials).
        inbox: the subject acks arrive on.
        deliver: takes, on the I/O thread, a list of raw ack payloads;
            ``(entry, error)`` for a frame NATS did not take; an int, the
            number of frames sent with no entry that left the queue; a
            :class:`Refused`; a :class:`MaxPayload`. It must not block nor
            run user code.
        on_closed: called on the I/O thread when the connection closed:
            after :meth:`~NatsConnection.close`, or because reconnecting gave up.
    """
    return NatsSocket(where, inbox, deliver, on_closed)
