"""Publishing Liftbridge envelopes straight to NATS, next to the gRPC API.

Liftbridge streams are fed by NATS subjects, so a NATS client can publish to a
stream without going through a broker's gRPC API: it publishes a publish
envelope (see :mod:`liftbridge._core._envelope`) on the stream partition's subject,
and the partition leader publishes an ack envelope to the message's ack inbox.
:class:`NatsPublisher` does both ends: one NATS connection, one ack inbox
subscription, acks matched to publishes by correlation id.

It names NATS subjects itself, so it has nothing to route and takes no
client (nor router). Ack deadlines run on the SDK's one scheduler
(:class:`~liftbridge._core._deadlines.AckTimer`, a ``liftbridge-ack-timer`` thread
of the publisher's own, started on first use); the futures' done-callbacks
run on a ``liftbridge-callbacks`` thread of its own, never on pynats2's
threads or the timer.

Only :mod:`liftbridge._publish._pynats` imports pynats2 (the ``nats`` extra),
and only when a publisher is created, so ``import liftbridge`` works without it.
pynats2 is thread-based and has sharp edges this module works around:

- It reads the socket on its own thread and runs subscription callbacks on
  a small thread pool (threads named ``Thread-N`` and ``worker_N``); they
  all stop in :meth:`NatsPublisher.close`.
- Its connect leaks a socket when nothing listens, and spins for ever when
  the peer hangs up without a greeting, so the publisher first checks the
  server's ``INFO`` greeting on a socket of its own (which also gives
  ``max_payload``).
- It does not wait for the server to accept the connection: with wrong
  credentials the server hangs up, and publishes fail or time out.
- A payload over the server's ``max_payload`` makes the server close the
  connection, which kills pynats2's reader: the publisher refuses such
  messages before sending them.
- Once the connection is lost its reader spins until the socket is closed,
  and its own close never returns: :meth:`NatsPublisher.close` gives it a
  bounded time, then closes the socket under it.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import itertools
import logging
import threading
import uuid
from collections.abc import Iterable, Mapping
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass
from time import monotonic
from types import TracebackType
from typing import Any, Literal, Unpack, overload

from liftbridge._core import _validate
from liftbridge._core._acks import Ack, AckPolicy
from liftbridge._core._callbacks import CallbackRunner
from liftbridge._core._deadlines import AckTimer
from liftbridge._core._envelope import unmarshal_ack
from liftbridge._core._nats_connection import server_info
from liftbridge._core._validate import BytesLike
from liftbridge._errors import (
    AckTimeoutError,
    ArgumentTypeError,
    ClientClosedError,
    EnvelopeError,
    InvalidArgumentError,
    LiftbridgeError,
    MessageTooLargeError,
    UnavailableError,
)
from liftbridge._publish import _pynats
from liftbridge._publish._bytes import envelope_of
from liftbridge._publish._options import (
    MESSAGE_OPTIONS,
    PublishOptions,
    check_correlation_id,
    check_names,
)

logger = logging.getLogger(__name__)

# NATS's own default, used when the server's INFO does not say.
_DEFAULT_MAX_PAYLOAD = 1024 * 1024
# Subjects (str) checked once: a check walks one character by character (~11,000 instructions).
_checked_subject = functools.lru_cache(maxsize=1024)(_validate.subject)


class _State(enum.Enum):
    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"


@dataclass(slots=True)
class _Pending:
    """A publish waiting for its ack."""

    future: Future[Ack | None] | None  # None once handed over by take_future
    deadline: float  # time.monotonic()
    timeout: float
    subject: str
    correlation_id: str
    done: bool = False  # out of _pending (under _lock): the timer just drops it

    def take_future(self) -> Future[Ack | None]:
        """Marks the publish done and hands its future over to be resolved.
        Until the timer drops a done entry (at the first deadline it reaches),
        the entry then holds neither the future nor its outcome. Called under
        the publisher's lock, once."""
        future = self.future
        assert future is not None, "a publish's future is taken once"
        self.future = None
        self.done = True
        return future


class NatsPublisher:
    """Publishes messages to Liftbridge streams over a NATS connection.

    Each message goes out as a publish envelope on a NATS subject (a stream
    partition's subject: ``S`` for partition 0 of a stream with subject
    ``S``, ``S.N`` for partition N), carrying this publisher's ack inbox and a
    correlation id; the server's ack comes back on the inbox and is matched
    to the publish. Nothing is retried: a message whose ack does not come in
    time may or may not have been stored.

    Use it as a context manager, or call :meth:`close`. Thread-safe: any
    number of threads may publish at once.

    Args:
        url: the NATS server, ``nats://host:port`` (port 4222 if omitted;
            ``nats://user:password@host:port`` for credentials). TLS is not
            supported.
        ack_inbox: the NATS subject acks are sent to; ``None`` for a fresh
            ``_INBOX.<random>`` subject.
        ack_wait: default seconds to wait for an ack (``Client``'s name).
        ack_timeout: the deprecated name of ``ack_wait``.
        connect_timeout: seconds to wait for the server when connecting; also
            pynats2's socket timeout.
        crc: add a CRC-32C to every envelope; the server checks it and drops
            (without an ack) a message that does not match.

    Raises:
        MissingDependencyError: pynats2 is not installed.
        ArgumentTypeError: an argument has the wrong type.
        InvalidArgumentError: ``url`` is not a ``nats://`` URL, or an argument
            is out of range.
        UnavailableError: no NATS server answers at ``url``.
    """

    def __init__(
        self,
        url: str,
        *,
        ack_inbox: str | None = None,
        ack_wait: float = 5.0,
        connect_timeout: float = 5.0,
        crc: bool = False,
        ack_timeout: float | None = None,
    ) -> None:
        host, port, url = _pynats.parse_url(url)
        self._where = f"{host}:{port}"
        wait = _validate.renamed(ack_wait, ack_timeout, arg="ack_wait", old="ack_timeout")
        self._ack_timeout = _validate.seconds(wait, arg="ack_wait")
        connect_timeout = _validate.seconds(connect_timeout, arg="connect_timeout")
        if not isinstance(crc, bool):
            raise ArgumentTypeError(f"crc must be a bool, got {type(crc).__name__}")
        self._crc = crc
        if ack_inbox is None:
            ack_inbox = f"_INBOX.{uuid.uuid4().hex}"
        self._inbox = _validate.subject(ack_inbox, arg="ack_inbox")
        # The next correlation id, "<12 hex digits>-0x<n>", made in C (a uuid4 each
        # was ~13,000 instructions a publish more, callgrind).
        prefix = f"{uuid.uuid4().hex[:12]}-"
        self._next_id = map(prefix.__add__, map(hex, itertools.count())).__next__

        self._lock = threading.Lock()
        # _lock guards _state, _closer, _failing, _connection_lost and _pending.
        self._state = _State.OPEN
        self._closer: threading.Thread | None = None  # the thread running close()'s steps
        # Publishes close() took out of _pending, to fail (an interrupted close: the next).
        self._failing: list[_Pending] = []
        self._connection_lost = False  # a write failed: the connection is gone
        self._pending: dict[str, _Pending] = {}  # by correlation id
        self._timer = AckTimer()  # liftbridge-ack-timer, started by the first deadline
        # Publishes with the default ack timeout, appended under _lock (so in
        # deadline order) and dropped as soon as they are resolved; others go
        # on the timer's heap, where they stay until their deadline.
        self._in_order = self._timer.ordered(self._expire_due, wait=self._ack_timeout)
        self._runner = CallbackRunner()  # liftbridge-callbacks, for futures' done-callbacks

        self._pynats2 = _pynats.import_pynats2()
        info = server_info(host, port, connect_timeout)
        max_payload = info.get("max_payload")
        if not isinstance(max_payload, int) or max_payload <= 0:
            max_payload = _DEFAULT_MAX_PAYLOAD
        self._max_payload = max_payload
        self._connecting = _pynats.Connecting(
            self._pynats2, url, connect_timeout, self._inbox, self._on_ack, self._where
        )
        self._nats = self._connecting.client
        try:  # whatever fails or is interrupted (Ctrl-C), close() stops what started
            self._connecting.connect()
        except BaseException:
            self.close()
            raise
        logger.debug("NATS publisher connected to %s, ack inbox %s", self._where, self._inbox)

    @property
    def ack_inbox(self) -> str:
        """The NATS subject this publisher receives acks on."""
        return self._inbox

    @property
    def max_payload(self) -> int:
        """The largest envelope the NATS server accepts, in bytes (its ``max_payload``)."""
        return self._max_payload

    @overload
    def publish(
        self,
        subject: str,
        value: BytesLike,
        *,
        ack_policy: Literal[AckPolicy.LEADER, AckPolicy.ALL] = AckPolicy.LEADER,
        **options: Unpack[PublishOptions],
    ) -> Ack: ...

    @overload
    def publish(
        self,
        subject: str,
        value: BytesLike,
        *,
        ack_policy: Literal[AckPolicy.NONE],
        **options: Unpack[PublishOptions],
    ) -> None: ...

    @overload
    def publish(
        self,
        subject: str,
        value: BytesLike,
        *,
        ack_policy: AckPolicy,
        **options: Unpack[PublishOptions],
    ) -> Ack | None: ...

    def publish(
        self,
        subject: str,
        value: BytesLike,
        *,
        ack_policy: AckPolicy = AckPolicy.LEADER,
        **options: Unpack[PublishOptions],
    ) -> Ack | None:
        """Publishes one message and waits for its ack.

        Args:
            subject: the NATS subject of the stream partition.
            value: the message payload.
            ack_policy: when the server acks; with NONE nothing is waited for.
            **options: the message's :class:`PublishOptions`: ``key``,
                ``headers``, ``expected_offset``, ``correlation_id``,
                ``timeout`` (seconds to wait for the ack; None for the
                publisher's ``ack_wait``).

        Returns:
            The ack, or ``None`` with ack policy NONE.

        Raises:
            AckTimeoutError: no ack came within ``timeout``.
            IncorrectOffsetError: the partition's next offset is not
                ``expected_offset``.
            MessageTooLargeError: the envelope is larger than the NATS server's
                ``max_payload`` (nothing was sent), or than the partition accepts.
            ClientClosedError: the publisher is closed, or was closed while
                waiting.
            UnavailableError: the NATS connection is lost.
            InvalidArgumentError: an argument is invalid (or ``ArgumentTypeError``
                for a wrong type or an unknown option).
        """
        correlation_id, future, deadline = self._send(
            subject, value, ack_policy, options, "publish"
        )
        return self._wait(correlation_id, future, deadline)

    def publish_async(
        self,
        subject: str,
        value: BytesLike,
        *,
        ack_policy: AckPolicy = AckPolicy.LEADER,
        **options: Unpack[PublishOptions],
    ) -> Future[Ack | None]:
        """Publishes one message and returns at once with a future for its ack.

        Takes the same arguments as :meth:`publish`. The future cannot be
        cancelled; it ends with the ack (``None`` with ack policy NONE) or
        with the exception :meth:`publish` would raise. Its done-callbacks run
        on the publisher's ``liftbridge-callbacks`` thread, one at a time (even
        one added after it completed): a callback that blocks holds up the
        later ones, never acks or timeouts.

        Returns:
            A future for the ack.

        Raises:
            MessageTooLargeError: the envelope is larger than ``max_payload``.
            ClientClosedError: the publisher is closed.
            UnavailableError: the NATS connection is lost.
            InvalidArgumentError: an argument is invalid.
        """
        return self._send(subject, value, ack_policy, options, "publish_async")[1]

    def publish_many(
        self,
        subject: str,
        values: Iterable[BytesLike],
        *,
        key: BytesLike | None = None,
        headers: Mapping[str, BytesLike] | None = None,
        ack_policy: AckPolicy = AckPolicy.LEADER,
        timeout: float | None = None,
    ) -> list[Ack]:
        """Publishes a batch of messages back to back, then waits for all their acks.

        Pipelined: the acks are awaited only once every message is sent, so a
        batch costs about one round trip, not one per message.

        Args:
            subject: the NATS subject of the stream partition.
            values: the message payloads, in order.
            key: the key of every message, ``None`` for none.
            headers: the headers of every message.
            ack_policy: LEADER or ALL (NONE has no acks to wait for: use
                :meth:`publish_async`).
            timeout: seconds to wait for each ack, counted from its publish;
                ``None`` for the publisher's ``ack_wait``.

        Returns:
            The acks, in the order of ``values``.

        Raises:
            LiftbridgeError: the first failure (in the order of ``values``),
                raised once every message has its ack or error, with the
                types :meth:`publish` raises. A failure to send stops the
                batch at once; messages already sent are not waited for.
        """
        if ack_policy is AckPolicy.NONE:
            raise InvalidArgumentError(
                "publish_many waits for acks, and ack_policy NONE has none: use publish_async"
            )
        if isinstance(values, (bytes, bytearray, memoryview, str)):
            raise ArgumentTypeError(
                f"values must be an iterable of bytes payloads, got {type(values).__name__}"
            )
        payloads = [_validate.data(v, arg=f"values[{i}]") for i, v in enumerate(values)]
        sent = [  # every payload checked first: a bad one in the middle sends nothing
            self._send(
                subject, value, ack_policy, {"key": key, "headers": headers, "timeout": timeout}
            )
            for value in payloads
        ]
        acks: list[Ack] = []
        first_error: LiftbridgeError | None = None
        for correlation_id, future, deadline in sent:
            try:
                ack = self._wait(correlation_id, future, deadline)
            except LiftbridgeError as e:
                first_error = first_error or e
                continue
            assert ack is not None  # only ack policy NONE gives None
            acks.append(ack)
        if first_error is not None:
            raise first_error
        return acks

    def close(self) -> None:
        """Closes the connection; fails publishes waiting for acks with ClientClosedError.

        Idempotent and thread-safe (a call while another thread closes it
        returns at once). Blocks until the publisher's threads and pynats2's
        have stopped: at once, or 5 seconds when the connection was lost and
        no publish noticed (10 seconds at most, then it logs and returns). A
        close interrupted (Ctrl-C) is finished by the next call, which runs
        every step again. After an :class:`UnavailableError`, close the
        publisher.
        """
        me = threading.current_thread()
        run = False
        try:
            with self._lock:
                if self._state is _State.CLOSED or self._closer is not None:
                    return
                self._state = _State.CLOSING
                self._closer = me
                run = True
                # Moved whole (a C call each, no interrupt inside) and failed
                # below, by a run after an interrupted one too.
                self._failing.extend(self._pending.values())
                self._pending.clear()
            self._timer.close(monotonic() + _pynats.CLOSE_TIMEOUT)
            for entry in self._failing:
                future = entry.future
                if future is None or future.done():  # failed by an earlier run
                    continue
                with contextlib.suppress(InvalidStateError):  # acked just now
                    future.set_exception(
                        ClientClosedError(
                            f"NATS publisher closed before the ack for correlation id "
                            f"{entry.correlation_id!r} (subject {entry.subject!r}) came; "
                            "the message may or may not have been stored"
                        )
                    )
            with self._lock:
                connection_lost = self._connection_lost
            self._connecting.stop(connection_lost=connection_lost)
            # Runs the done-callbacks of those failures, unless called from one of them.
            self._runner.close(monotonic() + _pynats.CLOSE_TIMEOUT)
            with self._lock:
                self._state = _State.CLOSED
                self._failing = []
        finally:  # no call before the store: an interrupted run lets the next one in
            if run and self._closer is me:
                self._closer = None
        logger.debug("NATS publisher for %s closed", self._where)

    def __enter__(self) -> NatsPublisher:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"NatsPublisher(nats://{self._where}, {self._state.value})"

    # ------------------------------------------------------------ internals --

    def _send(
        self,
        subject: str,
        value: BytesLike,
        ack_policy: AckPolicy,
        options: PublishOptions,
        method: str = "publish_many",
    ) -> tuple[str, Future[Ack | None], float]:
        """Publishes one envelope; returns its correlation id, future and deadline."""
        subject = _checked_subject(subject) if type(subject) is str else _validate.subject(subject)
        check_names(options, MESSAGE_OPTIONS, method)
        timeout = options.get("timeout")
        correlation_id = options.get("correlation_id")
        if timeout is None:
            timeout = self._ack_timeout
        else:
            timeout = _validate.seconds(timeout, arg="timeout")
        if correlation_id is None:
            correlation_id = self._next_id()
        else:
            correlation_id = check_correlation_id(correlation_id)
        wants_ack = ack_policy is not AckPolicy.NONE
        envelope = envelope_of(
            value,
            key=options.get("key"),
            headers=options.get("headers"),
            ack_inbox=self._inbox if wants_ack else "",
            correlation_id=correlation_id,
            ack_policy=ack_policy,
            expected_offset=options.get("expected_offset"),
            crc=self._crc,
        )
        if len(envelope) > self._max_payload:
            raise MessageTooLargeError(
                f"the envelope is {len(envelope)} bytes, over the NATS server's max_payload "
                f"of {self._max_payload} bytes (nothing was sent)"
            )

        # Running, so it cannot be cancelled; its done-callbacks run on liftbridge-callbacks.
        future: Future[Ack | None] = self._runner.future()
        in_order = timeout == self._ack_timeout
        # An interrupt (Ctrl-C) from here on withdraws the publish (_withdraw):
        # registered without its deadline, or never sent, it would never resolve.
        try:
            with self._lock:
                deadline = monotonic() + timeout
                if self._state is not _State.OPEN:
                    raise ClientClosedError(f"NATS publisher for {self._where} is closed")
                if wants_ack:
                    if correlation_id in self._pending:
                        raise InvalidArgumentError(
                            f"correlation_id {correlation_id!r} is already waiting for its ack"
                        )
                    # Registered before sending: the ack may come before publish() returns.
                    entry = _Pending(future, deadline, timeout, subject, correlation_id)
                    self._pending[correlation_id] = entry
                    if in_order:
                        self._in_order.append(entry)
            if wants_ack and not in_order:
                self._timer.schedule(
                    deadline, functools.partial(self._expire, correlation_id, deadline)
                )
            self._nats.publish(subject, payload=envelope)
        except (OSError, self._pynats2.NATSError) as e:
            with self._lock:
                dropped = self._pending.pop(correlation_id, None)
                if dropped is not None:
                    dropped.take_future()  # the caller gets the error raised below
                closed = self._state is not _State.OPEN
                self._connection_lost = self._connection_lost or not closed
            if closed:
                raise ClientClosedError(f"NATS publisher for {self._where} is closed") from e
            raise UnavailableError(f"NATS connection to {self._where} lost: {e!r}") from e
        except BaseException:
            try:
                self._withdraw(correlation_id, future)
            except BaseException:  # a second interrupt, maybe as it started: once more
                self._withdraw(correlation_id, future)
                raise
            raise
        if not wants_ack:
            future.set_result(None)
        return correlation_id, future, deadline

    def _withdraw(self, correlation_id: str, future: Future[Ack | None]) -> None:
        """After ``_send`` raised once the publish was registered (before its
        deadline was scheduled, or as it was sent): it is taken out and
        fails, else its Future might never resolve."""
        with self._lock:
            entry = self._pending.get(correlation_id)
            if entry is None or entry.future is not future:
                return  # resolved already (or not this publish's)
            del self._pending[correlation_id]
            entry.take_future()
        future.set_exception(
            LiftbridgeError(
                f"the publish with correlation id {correlation_id!r} was interrupted and "
                "withdrawn; not sent, or as it was"
            )
        )

    def _wait(self, correlation_id: str, future: Future[Ack | None], deadline: float) -> Ack | None:
        """Waits for a publish's future until its deadline, then expires it."""
        with contextlib.suppress(TimeoutError):  # also AckTimeoutError, raised again below
            return future.result(max(0.0, deadline - monotonic()))
        self._expire(correlation_id, deadline)
        # Whoever removed the entry (the ack, the timer, close) resolves it next.
        return future.result()

    def _expire(self, correlation_id: str, now: float) -> None:
        """Fails a publish with AckTimeoutError if its deadline is at or before
        ``now``. Runs on ``liftbridge-ack-timer`` or a publishing thread."""
        with self._lock:
            entry = self._pending.get(correlation_id)
            if entry is None or entry.deadline > now:
                return
            del self._pending[correlation_id]
            future = entry.take_future()
        future.set_exception(
            AckTimeoutError(
                f"no ack within {entry.timeout:g}s for the message published on "
                f"{entry.subject!r} (correlation id {correlation_id!r}); "
                "it may or may not have been stored"
            )
        )

    def _expire_due(self, entry: _Pending) -> None:
        """Fails an in-order publish whose deadline passed. Runs on ``liftbridge-ack-timer``."""
        self._expire(entry.correlation_id, entry.deadline)

    def _on_ack(self, message: Any) -> None:
        """Resolves the publish an ack is for. Runs on a pynats2 worker thread."""
        try:
            ack = unmarshal_ack(message.payload)
        except EnvelopeError as e:
            logger.warning(
                "Dropping a message on ack inbox %s that is not an ack: %s", self._inbox, e
            )
            return
        except Exception:  # pynats2 would swallow it silently
            logger.exception("Failed to read a message on ack inbox %s", self._inbox)
            return
        with self._lock:
            entry = self._pending.pop(ack.correlation_id, None)
            future = None if entry is None else entry.take_future()
        if future is None:
            logger.debug(
                "Dropping an ack for correlation id %r: timed out, or not ours",
                ack.correlation_id,
            )
        elif ack.error is not None:
            future.set_exception(ack.error)
        else:
            future.set_result(ack)
