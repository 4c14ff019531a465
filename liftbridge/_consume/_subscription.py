"""Subscriptions: one thread per subscription reads a partition's gRPC stream
and calls the handler; the thread re-subscribes after transient failures.

A subscription ends in exactly one of these ways:

* ``close()`` was called (``error`` is None);
* the stop position was reached (``error`` is None, ``stop_position_reached``);
* a terminal error: no such partition, stream deleted, partition paused, end
  of a readonly partition, fencing, or no broker within ``resubscribe_wait``
  (``error`` is set, and the handler was called once with it);
* the handler raised (``error`` is a :class:`HandlerError`; see below).

Re-subscribing: after a broker failure, a leadership move, or a log segment
closed under a slow reader by retention, the thread opens a new stream from
the last offset delivered + 1, within ``resubscribe_wait``. A partition the
new leader does not know yet ("No such partition": a restarted server
serves its API before it has replayed its streams) is retried too, as long
as fresh metadata still lists it. Metadata refreshes made while
re-subscribing have short deadlines of their own, so one stalled broker
cannot spend the whole wait.

Without a handler, messages wait in a bounded buffer for the iterating
thread; when it is full the subscription thread stops reading, and gRPC's
flow control slows the server down.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator

from liftbridge._consume._handoff import Empty, Handoff
from liftbridge._consume._subscription_open import SubscriptionOpening, _Request
from liftbridge._core import _validate as check
from liftbridge._core._messages import Message, message_parts
from liftbridge._core._router import Router, Stream
from liftbridge._errors import (
    ClientClosedError,
    ConnectionLostError,
    HandlerError,
    LiftbridgeError,
    ReadonlyPartitionError,
    StopPositionReached,
    resubscribable,
)
from liftbridge._locks import start_thread
from liftbridge_api import api_pb2

_log = logging.getLogger(__name__)

Handler = Callable[[Message | None, BaseException | None], None]
"""``handler(message, error)``: a message, or (None, error) once when the subscription fails."""

_JOIN_TIMEOUT = 5.0
_POLL = 0.1
"""How often a thread blocked on the iteration buffer looks for close()."""
DEFAULT_BUFFER = 1024
"""Messages an iterated subscription holds for its reader at most."""
_LINGER = 0.0005
"""Seconds an iterating thread that emptied its batch while messages stream in
waits for more before asking to be woken (see :mod:`liftbridge._consume._handoff`)."""


class Subscription(SubscriptionOpening):
    """A running subscription to one stream partition. Thread-safe.

    Iterate over it (when created without a handler) or let the handler run;
    ``close()`` ends it from any thread, including inside the handler.
    Context manager: leaving the block closes it.

    Handler exceptions: the message's handler call counts as failed, the
    subscription stops (it never skips past an unprocessed message), ``error``
    becomes a :class:`HandlerError` wrapping the exception, and
    ``last_offset`` stays at the last message handled successfully, so a new
    subscription from ``last_offset + 1`` retries it.
    """

    def __init__(
        self,
        router: Router,
        request: _Request,
        handler: Handler | None,
        *,
        resubscribe_wait: float,
        open_timeout: float,
        buffer: int = DEFAULT_BUFFER,
        owner_restarts: Callable[[BaseException], bool] | None = None,
    ) -> None:
        self._router = router
        self._request = request
        self._resubscribe_wait = resubscribe_wait
        self._open_timeout = open_timeout
        self._owner_restarts = owner_restarts
        # Without a handler: messages (then None, or the terminal error) for
        # the iterating thread, at most ``buffer`` of them.
        self._queue: Handoff[Message | BaseException | None] | None = None
        if handler is None:
            self._queue = Handoff(buffer, linger=_LINGER)
            handler = self._enqueue
        self._handler: Handler = handler
        self._closed = threading.Event()
        self._done = threading.Event()
        # The same two facts as plain fields, set just before their events:
        # the per-message paths read these (a field, not a method call).
        self._closing = False
        self._ending = False
        self._lock = threading.Lock()  # guards _call, _broker and _last_broker
        self._call: Stream[api_pb2.Message] | None = None
        self._broker: str | None = None
        self._last_broker: str | None = None
        # Offset of the last message the iterating thread took from the
        # buffer; _read_to: the last one read from the stream (with a
        # handler: the last one it returned from, which is last_offset), where
        # a re-subscription resumes after.
        self._last_offset: int | None = None
        self._read_to: int | None = None
        self._error: BaseException | None = None
        self._stop_reached = False
        self._thread = threading.Thread(
            target=self._run,
            name=f"liftbridge-sub-{request.stream}-{request.partition}",
            daemon=True,
        )

    # ----------------------------------------------------------- public --

    @property
    def stream(self) -> str:
        """The stream read."""
        return self._request.stream

    @property
    def partition(self) -> int:
        """The partition read."""
        return self._request.partition

    @property
    def last_offset(self) -> int | None:
        """Offset of the last message whose handler returned (iterated: the
        last one the iteration yielded); None before the first."""
        return self._read_to if self._queue is None else self._last_offset

    @property
    def broker(self) -> str | None:
        """Address of the broker serving the subscription now (the leader, or
        an in-sync replica with ``read_isr_replica``); None when not connected."""
        return self._broker

    @property
    def last_broker(self) -> str | None:
        """Address of the broker the subscription was read from last, also
        after it ended (:attr:`broker` is None then); None before it opened."""
        return self._last_broker

    @property
    def error(self) -> BaseException | None:
        """Why the subscription failed; None while running or after a normal end."""
        return self._error

    @property
    def stop_position_reached(self) -> bool:
        """True when the subscription ended at its stop position."""
        return self._stop_reached

    @property
    def closed(self) -> bool:
        """True once ``close()`` was called (also by the client closing); the
        thread may still be finishing."""
        return self._closed.is_set()

    @property
    def done(self) -> bool:
        """True once the subscription has ended."""
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Blocks until the subscription ends.

        Returns:
            True when it ended, False when the timeout passed first.
        """
        return self._done.wait(check.optional_seconds(timeout))

    def close(self, timeout: float | None = None) -> None:
        """Ends the subscription. Idempotent; safe from any thread, including
        the handler (then it returns without waiting for the thread).

        Args:
            timeout: seconds to wait for the thread (a handler still running
                finishes its message first); None for 5 seconds.
        """
        timeout = check.optional_seconds(timeout)
        close_all([self], time.monotonic() + (_JOIN_TIMEOUT if timeout is None else timeout))

    def _signal_close(self) -> None:
        self._closing = True
        self._closed.set()
        with self._lock:
            call = self._call
        if call is not None:
            call.cancel()

    def _join(self, deadline: float) -> None:
        if self._thread is threading.current_thread() or not self._thread.is_alive():
            return
        self._thread.join(max(0.0, deadline - time.monotonic()))
        if self._thread.is_alive():
            _log.warning("subscription thread %s did not stop in time", self._thread.name)

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[Message]:
        """Yields messages as they arrive (only without a handler).

        Ends at the stop position or on ``close()`` (at once, also when
        iterated again after it ended); raises the terminal error. Taking a
        message advances :attr:`last_offset`.
        """
        buffered = self._queue
        if buffered is None:
            raise TypeError(
                "this subscription delivers to its handler; iterate one made without a handler"
            )
        while not self._closing:
            # Once done, everything the thread will ever hand over is buffered.
            done = self._ending
            try:
                item = buffered.get(0 if done else _POLL)
            except Empty:
                if done:
                    return
                continue
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            self._last_offset = item.offset
            yield item

    def __repr__(self) -> str:
        state = "done" if self.done else "running"
        return (
            f"<Subscription {self.stream}/{self.partition} {state} last_offset={self.last_offset}>"
        )

    # ---------------------------------------------------------- internal --

    def _enqueue(self, message: Message | None, error: BaseException | None) -> None:
        # _put's loop, written out: this runs once per message.
        assert self._queue is not None
        item = message if message is not None else error
        while not self._closing:
            if self._queue.put(item, _POLL):
                return

    def _put(self, item: Message | BaseException | None) -> None:
        """Hands an item to the iterating thread, waiting while the buffer is
        full (and dropping it once the subscription is closed)."""
        assert self._queue is not None
        while not self._closing:
            if self._queue.put(item, _POLL):
                return

    def _start(self, first_wait: float | None = None) -> None:
        """Opens the stream on the caller's thread (so errors like
        NoSuchPartitionError raise from ``subscribe``), retrying leadership
        moves and unavailable brokers within ``resubscribe_wait``; then
        starts the thread."""
        try:
            self._first_stream = self._open_with_retry(None, first_wait)
        except StopPositionReached as e:
            error = self._stop_reached_or_error(e)
            if error is not None:
                raise error from e
            self._finish()  # e.g. stop=LATEST on an empty partition: done at once
            return
        start_thread(self._thread)

    def _stop_reached_or_error(self, error: StopPositionReached) -> LiftbridgeError | None:
        """None when the stop position asked for was reached; otherwise the
        readonly error the server means by it."""
        if self._request.base.stopPosition != api_pb2.STOP_ON_CANCEL:
            self._stop_reached = True
            return None
        # No stop position was asked for: server v1.9.0 ends a subscription to
        # an already-readonly partition this way once it is fully read.
        return ReadonlyPartitionError(f"end of readonly partition reached ({error})")

    def _finish(self) -> None:
        with self._lock:
            self._call = None
            self._broker = None
        if self._queue is not None:
            self._put(None)
        self._ending = True
        self._done.set()

    def _run(self) -> None:
        """Thread ``liftbridge-sub-<stream>-<partition>``."""
        stream: Iterator[api_pb2.Message] | None = self._first_stream
        try:
            while stream is not None:
                stream = self._consume(stream)
        except BaseException as e:  # never die silently
            _log.exception(
                "subscription %s/%s failed unexpectedly",
                self._request.stream,
                self._request.partition,
            )
            self._fail(
                e
                if isinstance(e, LiftbridgeError)
                else LiftbridgeError(f"subscription thread failed: {e!r}")
            )
        finally:
            self._finish()

    def _consume(self, stream: Iterator[api_pb2.Message]) -> Iterator[api_pb2.Message] | None:
        """Delivers messages until the stream ends; returns the next stream
        after a successful resubscribe, or None when the subscription is over."""
        handler = self._handler
        # Server v1.9.0 serves a start offset past the partition's high
        # watermark from "the next committed message", which can be older than
        # asked for (a new leader's watermark lags). So nothing below the
        # requested start offset, and no offset twice, is ever delivered.
        if self._read_to is not None:
            floor = self._read_to
        elif self._request.base.startPosition == api_pb2.OFFSET:
            floor = self._request.base.startOffset - 1
        else:
            floor = -1
        name, partition = self._request.stream, self._request.partition
        new, set_pb, set_offset = message_parts  # message_from_proto inline: no call a message
        try:
            for pb in stream:
                offset = pb.offset
                if offset <= floor:  # repeated or out of order: the floor moves with each message
                    _log.debug("subscription %s/%s: dropped offset %d", name, partition, offset)
                    continue
                if pb.stream != name or pb.partition != partition:
                    _log.warning(
                        "subscription %s/%s: dropped a message of %s/%s at offset %d",
                        name,
                        partition,
                        pb.stream,
                        pb.partition,
                        offset,
                    )
                    continue
                message = new(Message)
                set_pb(message, pb)
                set_offset(message, offset)
                try:
                    handler(message, None)
                except Exception as e:
                    _log.exception(
                        "handler raised on %s/%s offset %d; the subscription stops",
                        self._request.stream,
                        self._request.partition,
                        offset,
                    )
                    self._fail(HandlerError(offset, e), notify=False)
                    return None
                self._read_to = floor = offset
                if self._closing:
                    return None
            error: LiftbridgeError = ConnectionLostError("the server ended the subscription stream")
        except LiftbridgeError as e:
            if self._closed.is_set():
                return None
            error = e
        if isinstance(error, StopPositionReached):
            readonly = self._stop_reached_or_error(error)
            if readonly is None:
                return None
            error = readonly
        if not resubscribable(error) and not isinstance(error, ConnectionLostError):
            self._fail(error)
            return None
        resume_from = None if self._read_to is None else self._read_to + 1
        _log.info(
            "subscription %s/%s interrupted (%s); resubscribing from %s",
            self._request.stream,
            self._request.partition,
            error,
            "the start position" if resume_from is None else f"offset {resume_from}",
        )
        try:
            return self._open_with_retry(resume_from)
        except ClientClosedError:
            return None
        except StopPositionReached as e:
            readonly = self._stop_reached_or_error(e)
            if readonly is not None:
                self._fail(readonly)
            return None
        except LiftbridgeError as e:
            self._fail(e)
            return None

    def _fail(self, error: BaseException, *, notify: bool = True) -> None:
        self._error = error
        if self._closed.is_set():
            return
        if notify:  # a handler's own exception was logged where it was caught
            # A give-up its owner cures (opening a new one) is no news to the user.
            restarted = self._owner_restarts is not None and self._owner_restarts(error)
            _log.log(
                logging.DEBUG if restarted else logging.WARNING,
                "subscription %s/%s gave up: %s: %s",
                self._request.stream,
                self._request.partition,
                type(error).__name__,
                error,
            )
            try:
                self._handler(None, error)
            except Exception:
                _log.exception("handler raised while being told the subscription failed")
        elif self._queue is not None:
            self._put(error)


def start_subscription(
    router: Router,
    request: api_pb2.SubscribeRequest,
    handler: Handler | None,
    *,
    resubscribe_wait: float,
    open_timeout: float,
    buffer: int = DEFAULT_BUFFER,
    first_wait: float | None = None,
    owner_restarts: Callable[[BaseException], bool] | None = None,
) -> Subscription:
    """Creates a subscription and opens it on the calling thread (errors such
    as NoSuchPartitionError raise here), then starts its thread. Interrupted
    (Ctrl-C), it ends what it opened: the caller never gets it to close.

    Args:
        router: how to reach the partition's brokers.
        request: what to subscribe to (:func:`subscribe_request`; a
            resubscribe rebuilds it from its stream, partition and the
            last offset delivered).
        handler: ``handler(message, error)``, or None to iterate.
        resubscribe_wait: seconds to keep re-subscribing after a failure
            (also bounds the first opening).
        open_timeout: seconds one opening handshake may take.
        buffer: messages an iterated subscription holds at most.
        first_wait: seconds the first opening may take in all (retries
            included); None for ``resubscribe_wait``.
        owner_restarts: for a subscription its owner opens again after a
            give-up (a consumer group's reading), the errors it does that
            for: such a give-up is logged at DEBUG, not WARNING (the owner
            logs the restart). None: every give-up is a WARNING.
    """
    subscription = Subscription(
        router,
        _Request(request.stream, request.partition, request),
        handler,
        resubscribe_wait=resubscribe_wait,
        open_timeout=open_timeout,
        buffer=buffer,
        owner_restarts=owner_restarts,
    )
    try:
        subscription._start(first_wait)
    except BaseException:
        subscription._signal_close()  # its stream cancelled; a thread under way ends
        raise
    return subscription


def close_all(subscriptions: Iterable[Subscription], deadline: float) -> None:
    """Closes subscriptions together: signals every one, then waits for their
    threads until ``deadline`` (``time.monotonic()``), so N stuck handlers
    cost one wait, not N."""
    subscriptions = list(subscriptions)
    for subscription in subscriptions:
        subscription._signal_close()
    for subscription in subscriptions:
        subscription._join(deadline)
