"""The Client: a thin facade over the routing core.

It owns the client's lifecycle (connect, ordered close, ``flush``) and
composes the families of operations, each written next to the feature that
does the work: streams and metadata in ``_core/_client_api.py`` (over
:mod:`liftbridge._core._admin`), publishing in ``_publish/_client_api.py``
(over :mod:`liftbridge._publish._publishing`), subscriptions, cursors, pull
consumers and direct reads in ``_consume/_client_api.py``, consumer groups in
``_groups/_client_api.py``. All of them reach the cluster through one
:class:`~liftbridge._core._router.Router`.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass

from liftbridge._consume._client_api import ReadMethods
from liftbridge._consume._cursors import Cursors
from liftbridge._consume._pull import PullConsumer
from liftbridge._consume._subscription import Subscription, close_all
from liftbridge._core import _validate as check
from liftbridge._core._admin import Admin
from liftbridge._core._callbacks import CallbackRunner
from liftbridge._core._client_api import ClientState, Closeable
from liftbridge._core._closing import close_together
from liftbridge._core._deadlines import AckTimer
from liftbridge._core._retry import DEFAULT_RETRY_POLICY, RetryPolicy
from liftbridge._core._router import DEFAULT_MAX_MESSAGE, Keepalive, Router, TLSConfig
from liftbridge._errors import ArgumentTypeError, InvalidArgumentError
from liftbridge._groups._client_api import GroupMethods
from liftbridge._groups._consumer import Consumer
from liftbridge._publish._client_api import PublishMethods
from liftbridge._publish._lanes import Lanes
from liftbridge._publish._publisher import Publisher
from liftbridge._publish._publishing import Publishing

_log = logging.getLogger(__name__)

_MAX_LANES = 32
"""Threads per client whose ``publish`` calls get a PublishAsync stream of their own."""

_CLOSE_TIMEOUT = 10.0
"""Seconds ``close()`` waits in all for the SDK's threads (handlers finishing)."""


@dataclass(frozen=True, slots=True)
class Core:
    """What a feature made with a client stands on: the client's router and
    its ``liftbridge-ack-timer``."""

    router: Router
    ack_timer: AckTimer


def core_of(client: object) -> Core:
    """The core of ``client`` for a feature made with it (the NATS stream
    publisher). Takes nothing: the feature builds itself on it, then
    :func:`attach` registers it for the client's close.

    With :func:`attach`, this is the one seam through which a feature built
    outside the client reaches the client's parts; it lives here so no other
    module touches the client's privates.

    Raises:
        ArgumentTypeError: ``client`` is not a :class:`Client`.
        ClientClosedError: the client is closing or closed.
    """
    if not isinstance(client, Client):
        raise ArgumentTypeError(f"client must be a liftbridge.Client, got {type(client).__name__}")
    with client._state_lock:
        client._check_open()
    return Core(client._router, client._timer)


def attach(client: Client, owner: Closeable) -> None:
    """Has the client's :meth:`~Client.close` close ``owner``, a feature made
    with it, before it stops the ack timer ``owner`` registers deadlines on.
    ``owner`` must be closable from then on (its ``close()`` copes with steps
    not taken yet: it is called when its making is interrupted too).

    Raises:
        ClientClosedError: the client is closing or closed.
    """
    with client._state_lock:
        client._check_open()
        client._attached.add(owner)


class Client(ReadMethods, PublishMethods, GroupMethods):
    """A connection to a Liftbridge cluster. Thread-safe; share one per process.

    The client connects through the first seed address that answers, learns
    every broker from the cluster metadata, and keeps one gRPC channel per
    broker. Every RPC carries a deadline. Calls that may go to any broker are
    retried on another broker when one is unavailable; calls that need a
    partition leader refresh the metadata and retry when leadership moved.

    Use it as a context manager, or call :meth:`close`.

    Example:
        >>> with liftbridge.Client(["127.0.0.1:9292"]) as client:
        ...     client.create_stream("orders")
    """

    def __init__(
        self,
        addresses: str | Sequence[str],
        *,
        tls: TLSConfig | None = None,
        connect_timeout: float = 5.0,
        rpc_timeout: float = 10.0,
        retry_policy: RetryPolicy | None = None,
        ack_wait: float = 5.0,
        max_inflight: int = 1024,
        resubscribe_wait: float = 30.0,
        max_message_size: int = check.SERVER_MAX_MESSAGE,
        max_receive_message_size: int = DEFAULT_MAX_MESSAGE,
        keepalive_interval: float | None = 300.0,
        keepalive_timeout: float = 20.0,
    ) -> None:
        """Connects to the cluster.

        Args:
            addresses: one ``"host:port"`` or several seed addresses; any one
                that answers is enough.
            tls: TLS settings; ``None`` for plaintext.
            connect_timeout: seconds to connect in all: every seed is tried,
                in turn and again, until one answers.
            rpc_timeout: the longest one attempt of an RPC may take. A call's
                own ``timeout`` is for the whole call, retries included;
                without one, the retry policy's ``total_timeout`` is.
            retry_policy: how resilient RPCs are retried; ``None`` for
                :data:`DEFAULT_RETRY_POLICY`.
            ack_wait: default seconds a publish waits for its ack.
            max_inflight: most publishes awaiting acks at once (every
                ``publish_async``, with an ``ack_inbox`` or not). A publish
                beyond it blocks until an eighth of the window has completed
                (at its timeout it takes any free slot, else raises
                :class:`PublishWindowFullError`), which bounds memory.
            resubscribe_wait: seconds a subscription keeps trying to
                re-establish itself after its broker fails.
            max_message_size: the server's limit on one message in bytes
                (default 1 MiB, its ``clustering.replication.max.bytes`` and
                NATS ``max_payload``); a publish whose serialized request plus
                1200 bytes for the server's envelope exceeds it raises
                :class:`MessageTooLargeError` before sending. At most 4 MiB
                (the server's gRPC limit); raise it only with the server's.
            max_receive_message_size: the largest message a broker may send
                the client, in bytes (default 64 MiB, grpcio's). A stream whose
                next message says it is larger ends with a typed error before
                any of it is kept, on every transport.
            keepalive_interval: seconds a long-lived stream (subscriptions,
                publish streams) may hear nothing from its broker before the
                client sends an HTTP/2 PING; ``None``: no pings. The server
                answers pings more often than every 5 minutes with GOAWAY
                unless it sends data in between (Liftbridge v1.9.0's default
                gRPC keepalive policy): lower it only for servers that allow it.
            keepalive_timeout: seconds a PING's answer may take; past that
                the stream ends with :class:`UnavailableError` (a broker that
                hangs though its kernel still answers TCP) and subscriptions
                resubscribe.

        Raises:
            InvalidArgumentError: an option is out of range.
            UnavailableError: no seed answered.
        """
        seeds = self._seed_list(addresses)
        if tls is not None and not isinstance(tls, TLSConfig):
            raise ArgumentTypeError(f"tls must be a TLSConfig or None, got {type(tls).__name__}")
        if retry_policy is not None and not isinstance(retry_policy, RetryPolicy):
            raise ArgumentTypeError(
                f"retry_policy must be a RetryPolicy or None, got {type(retry_policy).__name__}"
            )
        connect_timeout = check.seconds(connect_timeout, arg="connect_timeout")
        self._ack_wait = check.seconds(ack_wait, arg="ack_wait")
        self._resubscribe_wait = check.seconds(resubscribe_wait, arg="resubscribe_wait")
        max_inflight = check.positive_int(max_inflight, arg="max_inflight")
        self._max_message_size = check.message_size_limit(max_message_size)
        max_receive = check.int32(
            max_receive_message_size, arg="max_receive_message_size", minimum=1 << 16
        )
        keepalive = None
        if keepalive_interval is not None:
            keepalive = Keepalive(
                interval=check.seconds(keepalive_interval, arg="keepalive_interval"),
                timeout=check.seconds(keepalive_timeout, arg="keepalive_timeout"),
            )
        self._router = Router(
            seeds,
            tls=tls,
            rpc_timeout=check.seconds(rpc_timeout, arg="rpc_timeout"),
            retry_policy=retry_policy or DEFAULT_RETRY_POLICY,
            max_receive=max_receive,
            keepalive=keepalive,
        )
        self._callbacks = CallbackRunner()
        self._timer = AckTimer()
        self._admin = Admin(self._router)
        self._cursors = Cursors(self._router)
        self._publisher = Publisher(
            self._router,
            self._callbacks,
            self._timer,
            ack_wait=self._ack_wait,
            max_inflight=max_inflight,
        )
        self._lanes = Lanes(
            self._router, self._timer, ack_wait=self._ack_wait, max_lanes=_MAX_LANES
        )
        self._publishing = Publishing(
            self._router,
            self._publisher,
            self._lanes,
            self._callbacks,
            ack_wait=self._ack_wait,
            max_message_size=self._max_message_size,
        )
        # _state_lock guards _state, _subscriptions, _consumers, _pulls, _attached and _closer;
        # _closed is set once a close() has run all its steps (a second close() waits for it).
        self._state_lock = threading.Lock()
        self._state = ClientState.OPEN
        self._closed = threading.Event()
        self._closer: threading.Thread | None = None  # the thread running close()'s steps
        self._subscriptions: weakref.WeakSet[Subscription] = weakref.WeakSet()
        self._consumers: weakref.WeakSet[Consumer] = weakref.WeakSet()
        self._pulls: weakref.WeakSet[PullConsumer] = weakref.WeakSet()
        self._attached: weakref.WeakSet[Closeable] = weakref.WeakSet()  # see attach()
        try:
            self._router.connect(connect_timeout)
        except BaseException:
            self._state = ClientState.CLOSED
            self._router.close()
            self._closed.set()
            raise

    @staticmethod
    def _seed_list(addresses: str | Sequence[str]) -> tuple[str, ...]:
        if isinstance(addresses, str):
            addresses = [addresses]
        if isinstance(addresses, bytes | bytearray | memoryview):
            raise ArgumentTypeError(
                f"addresses must be a 'host:port' str or a list of them, got "
                f"{type(addresses).__name__} {bytes(addresses)[:60]!r}: decode it first"
            )
        if not isinstance(addresses, Sequence) or not addresses:
            raise InvalidArgumentError(
                "addresses must be a 'host:port' str or a non-empty list of them"
            )
        for a in addresses:
            if not isinstance(a, str):
                raise ArgumentTypeError(f"addresses must hold str, got {type(a).__name__}")
            if "://" in a:
                raise InvalidArgumentError(
                    f"addresses: {a!r} has a scheme; give 'host:port' (TLS is tls=TLSConfig(...))"
                )
            check.address(a)
        return tuple(dict.fromkeys(addresses))

    # ------------------------------------------------------------ lifecycle --

    def close(self) -> None:
        """Closes everything the client opened, in order: consumers (they
        commit and leave their groups), pull consumers and the
        :class:`NatsStreamPublisher` objects made with it, all at once; then
        publishes (unacked ones fail with :class:`ClientClosedError`),
        subscriptions, then the connections.

        Every thread is told to stop first, then all are waited for together,
        10 seconds at most in all (what has not finished by then is logged
        and left to end on its own). Idempotent and safe from any thread; a
        second call waits for the first to finish. A close interrupted
        (Ctrl-C) is finished by the next call, which runs every step again.
        Operations called afterwards raise :class:`ClientClosedError`.
        """
        self._close_within(_CLOSE_TIMEOUT)

    def _close_within(self, wait: float) -> None:
        """close(), waiting ``wait`` seconds at most for the threads it stops."""
        me = threading.current_thread()
        run = False
        try:
            with self._state_lock:
                if self._state is ClientState.OPEN:
                    self._state = ClientState.CLOSING
                closer = self._closer
                # One that ended without setting _closed was interrupted: run it again.
                run = not self._closed.is_set() and (closer is None or not closer.is_alive())
                if run:
                    self._closer = me
            if run:
                self._close(time.monotonic() + wait)
            elif closer is not me and not self._callbacks.on_callback_thread:
                self._closed.wait(wait)
        finally:
            # No call before the store, so no interrupt skips it (a close
            # nested in this one's steps leaves the mark to it).
            if run and self._closer is me:
                self._closer = None

    def _close(self, deadline: float) -> None:
        """close()'s steps, each of which a second run finishes or finds done."""
        try:
            self._router.stop_retrying()
            with self._state_lock:
                consumers = list(self._consumers)
                pulls = list(self._pulls)
                subscriptions = list(self._subscriptions)
                attached = list(self._attached)
            # All at once, against the one deadline (see close_together). The
            # NATS stream publishers' deadlines are on _timer: closed before it.
            close_together(
                [(repr(c), c.close) for c in consumers]
                # What a pull consumer buffered can still be fetched.
                + [(repr(p), functools.partial(p.close, discard=False)) for p in pulls]
                + [(repr(o), o.close) for o in attached],
                deadline,
            )
            self._publisher.close(deadline)
            self._lanes.close()
            self._publishing.close()
            self._timer.close(deadline)
            close_all(subscriptions, deadline)
            self._callbacks.close(deadline)
        finally:
            self._router.close()
        # Inbox publishes under way end as the connections close. Not waited
        # for after an interrupt: a pool not told to stop yet would not end.
        self._publishing.join(deadline)
        with self._state_lock:
            self._state = ClientState.CLOSED
        self._closed.set()

    def flush(self, timeout: float | None = None) -> bool:
        """Waits until every publish accepted before this call has its outcome
        and its ack handler and its Future's done-callbacks have been called
        and returned, as confluent-kafka's ``flush`` serves every delivery
        callback (publishes other threads make meanwhile are not waited
        for). Called from an ack handler or done-callback (on
        ``liftbridge-callbacks``), it cannot wait for the callbacks queued
        behind that one: it waits for the outcomes only.

        Args:
            timeout: seconds to wait at most; None to wait as long as it takes
                (each publish has its own ack timeout, so this ends once the
                last of their callbacks returns).

        Returns:
            True when all of that is done, False on timeout.
        """
        if timeout is not None:
            timeout = check.seconds(timeout, arg="timeout", allow_zero=True)
        return self._publisher.flush(timeout)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.close()
        except BaseException:
            # Interrupted (Ctrl-C): what is left is told to stop, without
            # waiting for it, before the interrupt goes on.
            self._close_within(0.0)
            raise

    def __repr__(self) -> str:
        brokers = ", ".join(f"{b.id}@{b.address}" for b in self._router.metadata.brokers)
        return f"<liftbridge.Client {self._state.value} brokers=[{brokers}]>"
