"""Publishing to Liftbridge streams through NATS in batches: the fast publish path.

:class:`NatsStreamPublisher` writes publish envelopes (:mod:`liftbridge._core._envelope`)
straight to the NATS subject of a stream partition and matches the acks that
the partition leader sends to one inbox subscription. NATS carries many
envelopes per socket write, which is how the Go client's PublishAsync pace
is reached from Python; the gRPC publish path pays a round of HTTP/2 framing
and grpcio's thread hops per message instead.

It speaks the NATS protocol itself on a plain socket (:mod:`liftbridge._transport._nats_socket`;
no third-party NATS client), behind a synchronous, thread-safe API. Five kinds of thread:

- the caller's: checks the arguments, picks the partition from the
  router's metadata (the client's :class:`~liftbridge._core._router.Router`),
  builds the envelope and its ``PUB`` frame, takes a slot of the in-flight
  window, registers the pending ack and hands the frame over;
- ``liftbridge-nats-io`` (:mod:`liftbridge._transport._nats_socket`): the one thread
  owning the NATS connection. It writes whatever envelopes are waiting as
  ``PUB`` frames in one socket write, reconnects, and settles each
  batch of acks it reads: decodes them, matches them to publishes, resolves
  the futures and frees window slots (the table of pending acks and the
  window are :class:`~liftbridge._publish._nats_window.AckWindow`), all without user
  code, which would stall the connection;
- ``liftbridge-nats-acks`` (:mod:`liftbridge._publish._nats_acks`): fails publishes NATS did
  not take, or all pending ones when NATS gives up or the publisher closes;
- ``liftbridge-ack-timer`` (:mod:`liftbridge._core._deadlines`), the client's one
  thread for every ack deadline: fails late publishes with
  :class:`AckTimeoutError` and frees their slots, and fails at once with
  :class:`LeaderLostError` those awaiting a partition leader the client's
  router found down (:mod:`liftbridge._core._liveness`);
- ``liftbridge-callbacks`` (:mod:`liftbridge._core._callbacks`): ack handlers and
  the futures' done-callbacks, the only place user code runs, so a slow
  handler never holds up the NATS connection, ack matching or timeouts.

The client's :meth:`~liftbridge.Client.close` closes the publisher first
(its deadlines are on the client's timer); :func:`liftbridge._client.core_of`
is how it gets the client's router and timer, :func:`liftbridge._client.attach`
how the client learns of it.
"""

from __future__ import annotations

import itertools
import logging
import ssl
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from time import monotonic
from typing import Literal, Unpack, overload

from liftbridge._client import Client, attach, core_of
from liftbridge._core import _validate
from liftbridge._core._acks import Ack, AckPolicy
from liftbridge._core._callbacks import CallbackRunner
from liftbridge._core._futures import Waiter
from liftbridge._core._nats_connection import CLOSE_TIMEOUT as _CLOSE_TIMEOUT
from liftbridge._core._nats_connection import check_tls_required, open_nats, pub_prefix
from liftbridge._core._validate import BytesLike
from liftbridge._errors import ArgumentTypeError, InvalidArgumentError
from liftbridge._publish._bytes import PLAIN_MESSAGE_HEADER, PlainFrames, ack_inbox_field
from liftbridge._publish._bytes import WIRE_POLICIES as _WIRE_POLICIES
from liftbridge._publish._nats_acks import AcksThread
from liftbridge._publish._nats_batch import NatsBatchMethods
from liftbridge._publish._nats_events import NatsEvents, State
from liftbridge._publish._nats_pending import AckHandler, Pending, new_pending
from liftbridge._publish._nats_subjects import Subjects
from liftbridge._publish._nats_window import AckWindow
from liftbridge._publish._options import (
    STREAM_OPTIONS,
    StreamPublishOptions,
    ack_handler_checks,
    check_ack_handler,
    check_correlation_id,
    check_names,
)
from liftbridge._publish._publishing import check_future

logger = logging.getLogger(__name__)


# AckPolicy.NONE, looked up once (an enum member's lookup on its class is slow).
_NONE = AckPolicy.NONE


class NatsStreamPublisher(NatsBatchMethods, NatsEvents):
    """Publishes to Liftbridge streams over NATS, many envelopes per socket write.

    The same contract as :meth:`Client.publish_async`: a Future and a
    Go-style ``ack_handler(ack, error)`` (or, with ``future=False``, the
    handler alone: a pipelining producer's cheapest way), a bounded
    in-flight window, ack timeouts, typed errors, key and partition routing
    (a key alone picks :class:`PartitionByKey`'s partition, as the Go client
    does), headers, expected offsets. Partition N of a stream whose subject is S listens on
    NATS subject S (N = 0) or ``S.N``; the subjects and partition counts come
    from ``client``'s metadata (fetched once more when a stream is unknown).
    Ack timeouts run on the client's ``liftbridge-ack-timer``, so the client's
    :meth:`~liftbridge.Client.close` closes this publisher first.
    Nothing is ever re-sent: a message whose ack does not come in time may or
    may not have been stored.

    The NATS connection reconnects on its own: publishes made while it is
    away are buffered (8 MiB at most) and sent on reconnection; acks the server sent
    meanwhile are lost and those publishes end with :class:`AckTimeoutError`. When
    NATS gives up, publishes already written fail with :class:`ConnectionLostError` (they
    may or may not have been stored); a publish that never left the buffer, or did not
    fit in it, fails with :class:`UnavailableError` (not stored: ``retriable``).
    When the partition leader a publish awaits goes down (its gRPC connection
    closes and a reconnect is refused), the publish fails at once with
    :class:`LeaderLostError`: it may or may not have been stored.
    A publish NATS refuses (an ``-ERR`` permissions violation for its subject)
    fails at once with :class:`PermissionDeniedError`. A server that breaks the
    NATS protocol (a malformed ``INFO``, a frame with a bad size) fails the
    constructor with :class:`ProtocolError`; later it costs the connection,
    which is made again. ``max_payload`` follows the server's latest ``INFO``.

    Thread-safe; use it as a context manager or call :meth:`close`.

    Args:
        client: a :class:`liftbridge.Client` of the same cluster: its router
            (metadata) and its ack timer; closing it closes this publisher.
        url: the NATS server: ``nats://host:port``, ``tls://host:port`` for
            TLS, with ``user:password@`` for credentials.
        max_inflight: publishes awaiting acks at most (an AckPolicy.NONE
            publish holds its slot until NATS is written to); ``publish_async``
            blocks (up to its ``timeout``) while the window is full.
        ack_wait: default seconds to wait for an ack (``ack_timeout``: its deprecated name).
        connect_timeout: seconds to wait for the NATS server when connecting.
        crc: add a CRC-32C to every envelope (the server checks it).
        tls: an SSL context for a TLS connection (implies TLS). With TLS, a
            server that does not require it is refused (UnavailableError).
        token: a NATS authentication token.
        credentials: path to a NATS ``.creds`` file (JWT and NKey seed; needs
            the nkeys package).
        max_reconnect_attempts: reconnection attempts before giving up.
        reconnect_wait: seconds between reconnection attempts.

    Raises:
        MissingDependencyError: ``credentials`` without the nkeys package.
        InvalidArgumentError: a bad argument (ArgumentTypeError for a wrong type).
        ProtocolError: the NATS server broke the protocol (a malformed INFO).
        UnavailableError: the NATS server cannot be reached or refused us.
        ClientClosedError: ``client`` is closed.
    """

    def __init__(
        self,
        client: Client,
        url: str,
        *,
        max_inflight: int = 1024,
        ack_wait: float = 5.0,
        connect_timeout: float = 5.0,
        crc: bool = False,
        tls: ssl.SSLContext | None = None,
        token: str | None = None,
        credentials: str | None = None,
        max_reconnect_attempts: int = 60,
        reconnect_wait: float = 0.5,
        ack_timeout: float | None = None,
    ) -> None:
        if not isinstance(url, str) or not url.startswith(("nats://", "tls://")):
            raise InvalidArgumentError(
                f"url must look like nats://host:port or tls://host:port, got {url!r}"
                if isinstance(url, str)
                else f"url must be a str, got {type(url).__name__}"
            )
        self._max_inflight = _validate.positive_int(max_inflight, arg="max_inflight")
        wait = _validate.renamed(ack_wait, ack_timeout, arg="ack_wait", old="ack_timeout")
        self._ack_timeout = _validate.seconds(wait, arg="ack_wait")
        connect_timeout = _validate.seconds(connect_timeout, arg="connect_timeout")
        reconnect_wait = _validate.seconds(reconnect_wait, arg="reconnect_wait")
        max_reconnect_attempts = _validate.positive_int(
            max_reconnect_attempts, arg="max_reconnect_attempts", minimum=0
        )
        _validate.flag(crc, arg="crc")
        if tls is not None and not isinstance(tls, ssl.SSLContext):
            raise ArgumentTypeError(f"tls must be an ssl.SSLContext, got {type(tls).__name__}")
        for name, value in (("token", token), ("credentials", credentials)):
            if value is not None and not isinstance(value, str):
                raise ArgumentTypeError(f"{name} must be a str or None, got {type(value).__name__}")
        if tls is not None or url.startswith("tls://"):
            check_tls_required(url, connect_timeout)
        self._callbacks = CallbackRunner()  # the liftbridge-callbacks thread, started on first use
        core = core_of(client)  # taking nothing (attach, below, does)
        self._router = core.router
        self._timer = core.ack_timer
        self._crc = crc
        self._subjects = Subjects(self._router)  # where each publish goes
        self._first_subjects = self._subjects.first  # partition 0's, by stream name
        self._where = url.split("@")[-1]  # never the credentials
        self._inbox = f"_INBOX.{uuid.uuid4().hex}"
        self._inbox_field = ack_inbox_field(self._inbox)  # in every envelope wanting an ack
        # The next correlation id, "<12 hex digits>-0x<n>" for n = 0, 1, ..., made in C
        # as the gRPC publisher's (no Python frame; hex, a C function, not str, a type).
        self._next_id: Callable[[], str] = map(
            f"{uuid.uuid4().hex[:12]}-".__add__, map(hex, itertools.count())
        ).__next__

        self._lock = threading.Lock()  # guards _state and _closer
        self._state = State.OPEN
        self._closer: threading.Thread | None = None  # the thread running close()'s steps
        self._lost: BaseException | None = None  # NATS gave up reconnecting
        # Pending acks, their deadlines on the client's liftbridge-ack-timer,
        # and the in-flight window.
        self._window = AckWindow(
            max_inflight=self._max_inflight,
            ack_timeout=self._ack_timeout,
            timer=self._timer,
            runner=self._callbacks,
            inbox=self._inbox,
        )
        self._acks = AcksThread(self._window, self._where, lambda: self._nats.drop_unsent())
        # Values up to _plain_limit bytes fit in max_payload with any correlation id
        # (set before connecting: the I/O thread may hear of a new max_payload at once).
        self._plain = PlainFrames(PLAIN_MESSAGE_HEADER, self._inbox_field)
        self._max_payload = self._plain_limit = 0
        self._nats = open_nats(self._where, self._inbox, self._deliver, self._on_closed)
        # What is taken from here on, close() gives back, also what was not
        # taken yet: whatever fails or is interrupted (Ctrl-C), nothing is left.
        # The client's close (another thread, once attached) waits for the
        # making to end: closing it halfway, the rest started after the close.
        self._maker = threading.current_thread()
        self._made = threading.Event()
        self._making_bound = connect_timeout + _CLOSE_TIMEOUT  # how long close waits for it
        try:
            # The client closes this publisher first when it closes (before its ack timer).
            attach(client, self)
            self._window.watch()  # the ack timer expires late publishes
            # Publishes awaiting a partition leader found down fail at once, on
            # the ack timer (the listener runs on liftbridge-broker-watch).
            self._router.on_broker_down(self._broker_down)
            self._nats.connect(
                url,
                connect_timeout=connect_timeout,
                tls=tls,
                token=token,
                credentials=credentials,
                max_reconnect_attempts=max_reconnect_attempts,
                reconnect_wait=reconnect_wait,
            )
            self._set_max_payload(self._nats.max_payload)
            self._acks.start()
            logger.debug(
                "NATS stream publisher connected to %s, ack inbox %s", self._where, self._inbox
            )
        except BaseException:
            self.close()
            raise
        finally:
            self._made.set()

    # -------------------------------------------------------------- public --

    @property
    def ack_inbox(self) -> str:
        """The NATS subject this publisher receives acks on."""
        return self._inbox

    @property
    def max_payload(self) -> int:
        """The largest envelope the NATS server accepts, in bytes (its latest INFO's)."""
        return self._max_payload

    @overload
    def publish_async(
        self,
        stream: str,
        value: BytesLike,
        ack_handler: AckHandler | None = None,
        *,
        ack_policy: AckPolicy = AckPolicy.LEADER,
        future: Literal[True] = True,
        **options: Unpack[StreamPublishOptions],
    ) -> Future[Ack | None]: ...

    @overload
    def publish_async(
        self,
        stream: str,
        value: BytesLike,
        ack_handler: AckHandler | None = None,
        *,
        ack_policy: AckPolicy = AckPolicy.LEADER,
        future: Literal[False],
        **options: Unpack[StreamPublishOptions],
    ) -> None: ...

    def publish_async(
        self,
        stream: str,
        value: BytesLike,
        ack_handler: AckHandler | None = None,
        *,
        ack_policy: AckPolicy = AckPolicy.LEADER,
        future: bool = True,
        **options: Unpack[StreamPublishOptions],
    ) -> Future[Ack | None] | None:
        """Publishes a message over NATS without waiting for its ack.

        Blocks while ``max_inflight`` publishes await acks (or, with
        AckPolicy.NONE, their writes), until an eighth of the window has
        freed up (or ``timeout``), and 256 frames ahead of a busy I/O
        thread, until it takes them (0.1 s at most, to hand it the GIL).

        Args:
            stream: the stream.
            value: the payload.
            ack_handler: ``handler(ack, error)``, called once with the outcome
                (not for AckPolicy.NONE). Runs on the ``liftbridge-callbacks``
                thread, as do the future's done-callbacks (even one added
                after it completed): a handler that blocks holds up later
                handlers, never acks or timeouts. Exceptions it raises are
                logged. From there,
                ``publish_async`` raises :class:`PublishWindowFullError` at
                once rather than wait on a full window.
            ack_policy: LEADER (default), ALL, or NONE (sent, never acked).
            future: False to get no Future: the outcome then goes to
                ``ack_handler`` alone (required unless AckPolicy.NONE).
            **options: the message's :class:`StreamPublishOptions`: ``key``,
                ``headers``, ``partition``, ``partitioner``,
                ``expected_offset``, ``correlation_id``, ``timeout`` (seconds
                to wait for the ack and for a window slot; None for the
                publisher's ``ack_wait``).

        Returns:
            A Future of the :class:`Ack` (None for AckPolicy.NONE, once handed
            to NATS); it cannot be cancelled. None with ``future=False``. Until
            something waits on it, it is three attributes, not a Future's lock
            and lists (:class:`~liftbridge._core._futures.CallbackFuture`).

        Raises:
            InvalidArgumentError, ArgumentTypeError: bad input or an unknown
                option (nothing sent).
            NoSuchStreamError, NoSuchPartitionError: not in the metadata.
            MessageTooLargeError: the envelope is over NATS's ``max_payload``.
            PublishWindowFullError: the window stayed full for ``timeout``.
            ClientClosedError: the publisher is closed.
            ConnectionLostError: NATS gave up reconnecting.
        """
        return self._publish(stream, value, ack_handler, ack_policy, future, options, None)

    def _publish(
        self,
        stream: str,
        value: BytesLike,
        ack_handler: AckHandler | None,
        ack_policy: AckPolicy,
        future: bool,
        options: StreamPublishOptions,
        waiter: Waiter | None,
    ) -> Future[Ack | None] | None:
        """:meth:`publish_async`; with ``waiter``, the outcome goes to it
        instead of a new Future (``publish`` waits on it), and None is returned."""
        # A call each only when needed (a loop hands the same handler, checked once).
        if ack_handler is not None and ack_handler is not ack_handler_checks.passed:
            check_ack_handler(ack_handler)
        if options:
            check_names(options, STREAM_OPTIONS, "publish_async")
            key = options.get("key")
            headers = options.get("headers")
            partition = options.get("partition")
            partitioner = options.get("partitioner")
            expected_offset = options.get("expected_offset")
            correlation_id = options.get("correlation_id")
            timeout = options.get("timeout")
        else:
            key = headers = partition = partitioner = expected_offset = correlation_id = None
            timeout = None
        if timeout is None:
            timeout = self._ack_timeout
        else:
            timeout = _validate.seconds(timeout, arg="timeout")
        if type(value) is not bytes:
            value = _validate.data(value)
        if key is not None:
            key = _validate.data(key, arg="key")
        if partition is None and partitioner is None and not key:
            # Partition 0: its subject and leader are cached per stream name
            # (checked when cached) for as long as the router's metadata is the same.
            cached = self._first_subjects.get(stream) if type(stream) is str else None
            if cached is None or cached[0] is not self._router.metadata:
                cached = self._subjects.first_subject(stream, value)
            _, subject, leader, prefix = cached
            partition = 0
        else:
            _validate.stream_name(stream)
            subject, partition = self._subjects.subject(stream, key, value, partition, partitioner)
            leader = None
            prefix = pub_prefix(subject)
        wants_ack = ack_policy is not _NONE
        if expected_offset is not None and not wants_ack:
            raise InvalidArgumentError(
                "expected_offset needs an ack (ack_policy LEADER or ALL): the server refuses "
                "optimistic-concurrency publishes with AckPolicy.NONE"
            )
        if not isinstance(ack_policy, AckPolicy):
            raise ArgumentTypeError(
                f"ack_policy must be an AckPolicy ({', '.join(p.name for p in AckPolicy)}), "
                f"got {type(ack_policy).__name__}"
            )
        if future is not True and (future is not False or ack_handler is None):
            check_future(future, ack_handler, ack_policy)
        if expected_offset is not None:
            _validate.positive_int(expected_offset, arg="expected_offset", minimum=0)
        if correlation_id is None:
            correlation_id = self._next_id()
        else:
            correlation_id = check_correlation_id(correlation_id)
            if self._window.in_flight(correlation_id):
                raise InvalidArgumentError(
                    f"correlation_id {correlation_id!r} is already waiting for its ack"
                )
        if (
            wants_ack
            and not key
            and headers is None
            and expected_offset is None
            and not self._crc
            and 0 < len(value) <= self._plain_limit
        ):
            # The commonest publish, its whole PUB frame in one operation.
            frame = self._plain.frame(
                prefix, value, correlation_id.encode(), _WIRE_POLICIES[ack_policy]
            )
        else:
            frame = self._envelope_frame(
                prefix, value, key, headers, correlation_id, ack_policy, expected_offset
            )
        # Running, so it cannot be cancelled; its done-callbacks run on liftbridge-callbacks.
        made = self._window.future() if future and waiter is None else None
        outcome: Future[Ack | None] | Waiter | None = made if waiter is None else waiter
        entry: Pending | None = None
        if wants_ack:
            entry = new_pending(
                correlation_id,
                outcome,
                ack_handler,
                timeout,
                subject,
                leader or self._router.leader_address(stream, partition),
            )
            try:  # an interrupt (Ctrl-C) leaves the publish out or in, never half
                self._window.admit(entry)
                self._nats.send_frame(subject, frame, entry, waiter is not None)
            except BaseException:  # admitted, maybe without its deadline or not queued
                self._window.withdraw([entry])
                raise
        else:  # slot and frame together; the slot is given back once it is written
            try:
                self._window.admit_unacked(timeout, self._nats.queue, (subject, frame, None))
            finally:
                self._nats.send_frames([])  # wakes the I/O thread: queued, even if interrupted
            if outcome is not None:
                outcome.set_result(None)
        return made

    @overload
    def publish(
        self,
        stream: str,
        value: BytesLike,
        *,
        ack_policy: Literal[AckPolicy.LEADER, AckPolicy.ALL] = AckPolicy.LEADER,
        **options: Unpack[StreamPublishOptions],
    ) -> Ack: ...

    @overload
    def publish(
        self,
        stream: str,
        value: BytesLike,
        *,
        ack_policy: Literal[AckPolicy.NONE],
        **options: Unpack[StreamPublishOptions],
    ) -> None: ...

    @overload
    def publish(
        self,
        stream: str,
        value: BytesLike,
        *,
        ack_policy: AckPolicy,
        **options: Unpack[StreamPublishOptions],
    ) -> Ack | None: ...

    def publish(
        self,
        stream: str,
        value: BytesLike,
        *,
        ack_policy: AckPolicy = AckPolicy.LEADER,
        **options: Unpack[StreamPublishOptions],
    ) -> Ack | None:
        """Publishes a message and waits for its ack (arguments as for
        :meth:`publish_async`; raises what its future would end with)."""
        waiter = Waiter()  # one lock, not a Future: nothing else sees it
        self._publish(stream, value, None, ack_policy, True, options, waiter)
        # The ack timer ends every publish by its deadline; the margin
        # only covers that thread being late.
        timeout = options.get("timeout")
        wait = (self._ack_timeout if timeout is None else timeout) + _CLOSE_TIMEOUT
        result: Ack | None = waiter.result(wait)
        return result

    def flush(self, timeout: float | None = None) -> bool:
        """Waits until every publish accepted before the call has its outcome
        and its ack handler and its future's done-callbacks have been called
        and returned, as confluent-kafka's ``flush`` serves every delivery
        callback (publishes other threads make meanwhile are not waited
        for). Called from an ack handler or done-callback, it cannot wait for
        the callbacks queued behind that one: it waits for the outcomes only.

        Args:
            timeout: seconds to wait at most; None to wait until the last ack
                or ack timeout and the last of their callbacks returned.

        Returns:
            True when all of that is done, False on timeout.
        """
        if timeout is not None:
            timeout = _validate.seconds(timeout, arg="timeout", allow_zero=True)
        deadline = None if timeout is None else monotonic() + timeout
        if not self._window.flush(deadline):
            return False
        # AckPolicy.NONE publishes have no ack to wait for: see them written.
        if self._state is State.OPEN:
            self._nats.flush(None if deadline is None else max(0.001, deadline - monotonic()))
        return self._callbacks.served(deadline)  # their handlers and done-callbacks too

    def close(self) -> None:
        """Closes the NATS connection; fails publishes awaiting acks with
        :class:`ClientClosedError`.

        Idempotent and thread-safe (a call while another thread closes it
        returns at once); blocks for about 15 seconds at most (the NATS
        client's close, then each thread). A close interrupted (Ctrl-C) is
        finished by the next call, which runs every step again (each finishes
        what is left or finds it done). Call :meth:`flush` first to wait for
        outstanding acks. May be called from an ack handler.
        """
        me = threading.current_thread()
        if me is not self._maker:  # another thread's close (the client's) as it is made
            self._made.wait(self._making_bound)
        run = False
        try:
            with self._lock:
                if self._state is State.CLOSED or self._closer is not None:
                    return
                self._state = State.CLOSING
                self._closer = me
                run = True
            # Publishers waiting on the window raise.
            self._window.refuse(self._closed_error, replace=True)
            self._nats.close()
            # The acks thread fails what is pending (and what never left the outbox).
            self._acks.stop(_CLOSE_TIMEOUT)
            # Runs the handlers of those failures, unless called from one of them.
            self._callbacks.close(monotonic() + _CLOSE_TIMEOUT)
            self._close_state()
        finally:  # no call before the store: an interrupted run lets the next one in
            if run and self._closer is me:
                self._closer = None
        logger.debug("NATS stream publisher for %s closed", self._where)

    def __enter__(self) -> NatsStreamPublisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"NatsStreamPublisher({self._where}, {self._state.value})"

    # ---------------------------------------------------- caller's thread --

    def _close_state(self) -> None:
        self._router.off_broker_down(self._broker_down)
        self._window.release_timer()
        with self._lock:
            self._state = State.CLOSED
