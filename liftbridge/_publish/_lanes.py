"""Synchronous publishes on the calling thread's own PublishAsync stream.

``Client.publish`` waits for its ack. On the client's shared stream (see
:mod:`liftbridge._publish._publisher`) the ack is read by the ``liftbridge-acks``
thread and handed to the waiting caller: one thread hop per publish, which
cost about a quarter of the one-at-a-time throughput. So each thread that
publishes synchronously gets a *lane* instead: a PublishAsync stream of its
own, on which it sends one request and reads the response itself.

Life of a lane publish:

1. The thread's lane is opened on first use (or again after it broke) on the
   broker the client publishes through. A lane whose stream has already
   ended is replaced *before* sending: the request was never sent.
2. The request is queued for gRPC's sender and the caller blocks reading
   the stream. The response is the ack, or the server's refusal as a typed
   error; either way the lane stays open.
3. If the stream breaks after the request was queued, the publish fails with
   :class:`ConnectionLostError` (it may or may not be stored; the SDK never
   re-sends it), and the lane is dropped. If no ack comes within the
   timeout, the client's ``liftbridge-ack-timer`` thread cancels the stream and the
   publish fails with :class:`AckTimeoutError`. If the partition's leader (another
   broker, reached over NATS) is found down meanwhile (:mod:`liftbridge._core._liveness`),
   the timer thread cancels it at once and the publish fails with
   :class:`LeaderLostError`.

A publish a broker refuses because it does not know the partition (just
after ``create_stream``, a broker other than the one that created it can
lag for a few milliseconds) is sent again, until its timeout, while fresh
metadata lists the partition: refused, it was not stored.

A publish whose partition leader is already known down when it is made is
held back, not sent: it could only wait out its ack timeout. The calling
thread refreshes metadata until a live broker leads the partition, then
sends to it; with none by the publish's timeout it fails with
:class:`DeadlineExceededError`, not sent.

Lanes are limited to ``max_lanes`` threads per client; past that, and for
AckPolicy.NONE (no response to wait for), ``publish`` uses the shared stream.
A lane is closed when its thread ends or the client closes.
"""

from __future__ import annotations

import functools
import logging
import queue
import threading
import time
import weakref

from liftbridge._core._acks import Ack, response_outcome
from liftbridge._core._deadlines import AckTimer
from liftbridge._core._router import ANY, Deadline, Router, Stream
from liftbridge._errors import (
    AckTimeoutError,
    ClientClosedError,
    ConnectionLostError,
    LeaderLostError,
    LiftbridgeError,
    NoSuchPartitionError,
    StreamRefusedError,
)
from liftbridge._publish._leaders import leader_lost, live_leader
from liftbridge._publish._request_bytes import Request
from liftbridge_api import api_pb2

_log = logging.getLogger(__name__)

_REFRESH = 1.0
"""The deadline of one metadata refresh made on a publishing thread (after its
stream broke, or while it waits for a live leader)."""
_RECHECK = 0.1
"""Seconds between those refreshes."""


def _end_stream(
    outbox: queue.SimpleQueue[Request | None],
    call: Stream[api_pb2.PublishResponse],
) -> None:
    outbox.put(None)  # ends the request iterator: gRPC's sender thread exits
    call.cancel()


class _Lane:
    """One thread's PublishAsync stream. Only its thread sends on it and
    reads it; the timer and ``close`` only cancel it."""

    def __init__(self, router: Router, deadline: Deadline) -> None:
        self._outbox: queue.SimpleQueue[Request | None] = queue.SimpleQueue()
        # _lock orders the timer's "overdue: cancel" against the owner's "done".
        self._lock = threading.Lock()
        self.deadline = 0.0  # time.monotonic() the current publish is due by; 0.0 when idle
        self.leader: str | None = None  # the current publish's partition leader, if known
        self.leader_lost: str | None = None  # set when that leader was found down
        self.timed_out = False
        self.closed = False
        self.broken = False
        try:
            self.address, self._call = router.open_stream(
                "PublishAsync", iter(self._outbox.get, None), target=ANY, deadline=deadline
            )
        except BaseException:  # a stream's sender that ran waits for a request: none comes
            self._outbox.put(None)
            raise
        # Connected: nothing but this may raise now. Interrupted (Ctrl-C) before
        # the finalizer is in place, the lane would be dropped with its stream,
        # socket and sender thread running for good: ended here instead (a
        # finalizer in place by then ends it again, harmlessly).
        try:
            self._finalizer = weakref.finalize(self, _end_stream, self._outbox, self._call)
        except BaseException:
            _end_stream(self._outbox, self._call)
            raise

    def usable(self) -> bool:
        """False once the lane failed, or its stream ended (nothing was sent on it then)."""
        return not self.broken and not self._call.done()

    def watch(self, leader: str | None, due: float) -> None:
        """Registers the publish about to be sent: due by ``due``, acked by
        ``leader``; from here the timer's cancels apply to it."""
        with self._lock:
            self.leader = leader
            self.deadline = due

    def unwatch(self) -> bool:
        """Withdraws :meth:`watch` (nothing was sent). Returns whether the
        leader was found down meanwhile, which cancelled the stream."""
        with self._lock:
            self.deadline = 0.0
            return self.leader_lost is not None

    def publish(self, request: Request) -> Ack:
        """Sends ``request`` and reads its outcome, due by ``self.deadline``
        (set first, so the timer sees it). Raises its typed error.

        Raises:
            AckTimeoutError: the timer cancelled the stream at the deadline.
            ClientClosedError: the client closed meanwhile.
            ConnectionLostError: the stream broke after the request was queued.
            LiftbridgeError: the server refused the message.
        """
        # This thread writes the request itself when the transport can at
        # once; otherwise the stream's sender takes it from _outbox.
        if not self._call.write_now(request):
            self._outbox.put(request)
        try:
            while True:
                response = next(self._call)
                correlation_id, ack, error = response_outcome(response)
                if correlation_id == request.correlationId:
                    break
                # Only this thread publishes on the lane, one at a time, so
                # this cannot happen; skip rather than misattribute.
                _log.warning("lane on %s: response for another publish %r", self.address, ack)
        except LiftbridgeError as e:
            self.broken = True
            raise self._failure(request, e) from e
        except StopIteration:
            self.broken = True
            raise self._failure(
                request, ConnectionLostError("the server closed the PublishAsync stream")
            ) from None
        finally:
            with self._lock:
                self.deadline = 0.0
        if error is not None:
            raise error
        assert ack is not None
        return ack

    def _failure(self, request: Request, cause: LiftbridgeError) -> LiftbridgeError:
        where = f"{request.stream!r} partition {request.partition}"
        with self._lock:
            closed, timed_out, lost = self.closed, self.timed_out, self.leader_lost
        if closed:
            return ClientClosedError("the client was closed before the ack arrived")
        if lost is not None:
            return leader_lost(request, lost, request.correlationId)
        if isinstance(cause, StreamRefusedError):
            return StreamRefusedError(
                f"the broker refused the stream of publish {request.correlationId} to {where} "
                f"before processing it ({cause}); the message was not stored"
            )
        if timed_out:
            return AckTimeoutError(
                f"no ack for publish {request.correlationId} to {where} within its "
                "timeout; the message may or may not have been stored"
            )
        return ConnectionLostError(
            f"the PublishAsync stream broke before the ack arrived ({cause}); "
            "the message may or may not have been stored"
        )

    def expire_if_overdue(self, due: float) -> None:
        """Called by the timer for the publish due at ``due``: cancels the
        stream if that publish is still waiting (not if the lane is idle or
        a later publish, due later, is waiting)."""
        with self._lock:
            deadline = self.deadline
            if not deadline or deadline > due:
                return
            self.timed_out = True
            self.broken = True
        self._call.cancel()

    def lose_leader(self, address: str) -> None:
        """Cancels the stream if the publish waiting on it awaits an ack from
        the leader at ``address``, now found down."""
        with self._lock:
            if not self.deadline or self.leader != address:
                return
            self.leader_lost = address
            self.broken = True
        self._call.cancel()

    def abandon(self) -> None:
        """Ends the stream; a publish waiting on it fails with ConnectionLostError."""
        with self._lock:
            self.broken = True
        # The stream ends here, each time, not through the finalizer, which
        # runs once: a call interrupted (Ctrl-C) in it is finished by the next.
        self._finalizer.detach()
        _end_stream(self._outbox, self._call)

    def close(self) -> None:
        """Ends the stream; a publish waiting on it fails with ClientClosedError."""
        with self._lock:
            self.closed = True
        self.abandon()


class Lanes:
    """The lanes of one client, one per publishing thread. Thread-safe.

    Ack timeouts run on the client's ``liftbridge-ack-timer`` thread
    (:mod:`liftbridge._core._deadlines`), which cancels an overdue lane's stream.
    """

    def __init__(self, router: Router, timer: AckTimer, *, ack_wait: float, max_lanes: int) -> None:
        self._router = router
        self._timer = timer
        self._ack_wait = ack_wait
        self._max_lanes = max_lanes
        self._local = threading.local()
        self._lock = threading.Lock()  # guards _lanes, _opening and _closed
        self._lanes: weakref.WeakSet[_Lane] = weakref.WeakSet()
        self._opening = 0  # lanes being connected
        self._closed = False
        router.on_broker_down(self._broker_down)

    def publish(self, request: Request, timeout: float | None) -> Ack | None:
        """Publishes on this thread's lane and returns the Ack; None when no
        lane is available (too many threads), so the caller uses the shared
        stream. Raises like :meth:`_Lane.publish`."""
        wait = self._ack_wait if timeout is None else timeout
        due = time.monotonic() + wait
        # Opening a lane connects: a broker that refuses was sent nothing, and
        # the router tries the next live one within the publish's timeout.
        lane = self._lane(Deadline(min(wait, self._router.rpc_timeout)))
        if lane is None:
            return None
        leader = self._router.leader_address(request.stream, request.partition)
        while True:
            # Registered before the check: a broker-down notice landing after
            # the check finds the lane waiting on that leader and cancels it.
            lane.watch(leader, due)
            if leader is None or not (
                self._router.broker_down(leader) or self._router.suspect(leader)
            ):
                break
            # Known down, or it just refused a connection of ours: held back
            # (nothing was sent) until a live broker leads the partition.
            cancelled = lane.unwatch()
            leader = live_leader(self._router, request, leader, due)
            if cancelled:  # by the notice, between watch and the check
                lane = self._lane(
                    Deadline(min(max(0.0, due - time.monotonic()), self._router.rpc_timeout))
                )
                if lane is None:
                    return None
        # A weak reference: a lane must be free to end with its thread.
        self._timer.schedule(due, functools.partial(_expire, weakref.ref(lane), due))
        while True:
            try:
                return lane.publish(request)
            except LeaderLostError:
                raise  # the lane's own broker is fine
            except AckTimeoutError as e:
                # The lane's broker may be the hung one: the next lane opens
                # on another (harmless if the hung one was the leader).
                self._router.failed(lane.address, e)
                raise
            except ConnectionLostError as e:
                # The caller waits on the refresh.
                self._router.broker_failed(e, Deadline(_REFRESH), address=lane.address)
                raise
            except NoSuchPartitionError:
                # Refused, so not stored: sent again if the cluster's metadata
                # lists the partition (the broker has not caught up yet).
                if not self._listed(request, due):
                    raise
            time.sleep(min(_RECHECK, max(0.0, due - time.monotonic())))
            lane.deadline = due  # the timer's entry for ``due`` still stands

    def _listed(self, request: Request, due: float) -> bool:
        """Whether fresh metadata lists the partition a broker just said it
        does not have, with time left before ``due`` to send it again. Just
        after ``create_stream`` a broker other than the one that created the
        stream can refuse a publish for a few milliseconds."""
        remaining = due - time.monotonic()
        if remaining <= _RECHECK:
            return False
        try:
            metadata = self._router.refresh(Deadline(min(_REFRESH, remaining)), shared=False)
        except LiftbridgeError as e:
            _log.debug("no metadata to check a refused publish against: %s", e)
            return False
        return metadata.partition(request.stream, request.partition) is not None

    def _broker_down(self, address: str) -> None:
        """The router's broker-down listener (on liftbridge-broker-watch): the lanes
        are cancelled on liftbridge-ack-timer."""
        self._timer.schedule(time.monotonic(), functools.partial(self._lose_leader, address))

    def _lose_leader(self, address: str) -> None:
        with self._lock:
            lanes = list(self._lanes)
        for lane in lanes:
            lane.lose_leader(address)

    def _lane(self, deadline: Deadline) -> _Lane | None:
        lane: _Lane | None = getattr(self._local, "lane", None)
        if lane is not None and lane.usable():
            return lane
        if lane is not None:
            lane.abandon()
            self._local.lane = None
        # An interrupt (Ctrl-C) leaves no opening counted for good, nor a lane
        # counted but not this thread's: a signal's handler runs only at a call
        # or a loop's jump, none of which stands between a count and its flag.
        opening = False
        try:
            with self._lock:
                if self._closed:
                    raise ClientClosedError("the client is closed; the publish was not sent")
                if len(self._lanes) + self._opening >= self._max_lanes:
                    return None
                self._opening += 1
                opening = True
            lane = _Lane(self._router, deadline)  # outside the lock: a slow broker holds no one up
            with self._lock:
                self._opening -= 1
                opening = False
                closed = self._closed
                if not closed:
                    self._local.lane = lane
                    self._lanes.add(lane)
        finally:
            if opening:
                with self._lock:
                    self._opening -= 1
        if closed:
            lane.close()
            raise ClientClosedError("the client is closed; the publish was not sent")
        _log.debug(
            "publish lane opened on %s for thread %s", lane.address, threading.current_thread()
        )
        return lane

    def close(self) -> None:
        """Closes every lane: publishes waiting on one fail with
        :class:`ClientClosedError`. Idempotent."""
        with self._lock:
            self._closed = True
            lanes = list(self._lanes)
        for lane in lanes:
            lane.close()


def _expire(lane_ref: weakref.ref[_Lane], deadline: float) -> None:
    """On liftbridge-ack-timer: cancels the lane's stream if the publish due
    at ``deadline`` is still waiting."""
    lane = lane_ref()
    if lane is not None:
        lane.expire_if_overdue(deadline)
