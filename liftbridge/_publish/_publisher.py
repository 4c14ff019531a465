"""The PublishAsync stream: one long-lived bidirectional gRPC stream per
client, the ``liftbridge-acks`` thread that reads its acks, the
``liftbridge-ack-timer`` thread that enforces ack timeouts, and the in-flight
window that keeps a fast producer from growing memory without bound.

Life of a publish:

1. :meth:`Publisher.submit` takes a window slot, registers the publish under
   its correlation id and queues the request. When the window is full it
   blocks until an eighth of the window (half of it from 32 to 255:
   ``_sending.resume_free``) has freed up (or, at its timeout, until any
   slot has).
2. gRPC's sender pulls requests from an :class:`~liftbridge._publish._outbox.Outbox`
   for the current stream generation (or, at low rates, the publishing thread
   writes its request itself: see "Speed"). A request pulled or written is
   "sent": if the stream then breaks before its ack arrives, the publish
   fails promptly with :class:`ConnectionLostError` (it may or may not be
   stored; the SDK never re-sends it). Requests still queued when a stream breaks were never sent,
   and go out on the next stream, in their order: nothing accepted is lost.
3. The ack (or async error) resolves the publish's Future on the
   ``liftbridge-acks`` thread; a missing ack resolves it with
   :class:`AckTimeoutError` on the ``liftbridge-ack-timer`` thread. The ack
   handler and the Future's done-callbacks (user code) run on the
   ``liftbridge-callbacks`` thread (:mod:`liftbridge._core._callbacks`), never on
   those two.
4. A stream on which nothing at all arrived for two ack timeouts when a
   publish sent on it times out (its broker hangs) is given up: cancelled,
   so the publishes sent on it fail with :class:`ConnectionLostError`, and
   the next stream opens on another broker (after a metadata refresh bounded
   to a second: no publish goes out until the stream is back).
5. A publish whose partition leader is found down while it awaits its ack
   fails with :class:`LeaderLostError`; one sent to a leader already known
   down is decided by ``liftbridge-leader-check``
   (:mod:`liftbridge._publish._leaders`, the policy the lanes share).

Speed: every publish crosses three threads (the producer, the stream's
sender, the acks thread), and under the GIL their per-message work adds up:
at low rates the producer writes its own request, saving the sender's
wake-up (:mod:`liftbridge._publish._sending` says when); at higher ones the
producer-sender queue is a ``SimpleQueue``; the sender takes the queued
requests a run at a time (one round of its locks per run), and the acks
thread the responses one read brought (one round of ``_lock`` and one
hand-over to the callbacks thread per run); settled Futures are freed by the
publishing thread, settled entries by the acks thread
(:mod:`liftbridge._publish._pending` says why); the window is a
count under the lock the producer takes anyway; a producer blocked on a full
window is woken once per eighth (or half) of the window, not per ack (else the producer
and the acks thread trade the GIL per message); publishes with the default
timeout wait for the timer in a deque in deadline order, not a heap.
``bench/`` measures the result against the bare gRPC stub.
"""

from __future__ import annotations

import collections
import functools
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Literal, overload

from liftbridge._core._acks import Ack, ack_of_checked
from liftbridge._core._callbacks import CallbackRunner
from liftbridge._core._deadlines import AckTimer
from liftbridge._core._router import ANY, Deadline, Router, Stream
from liftbridge._errors import (
    AckTimeoutError,
    ClientClosedError,
    ConnectionLostError,
    DeadlineExceededError,
    InvalidArgumentError,
    LiftbridgeError,
    StreamRefusedError,
)
from liftbridge._handover import Handover
from liftbridge._locks import Waiters, start_thread
from liftbridge._publish._batch_submit import BatchSubmit
from liftbridge._publish._flushing import Flushing
from liftbridge._publish._interrupts import Interrupts
from liftbridge._publish._leaders import LeaderCheck
from liftbridge._publish._leaders_lost import LeadersLost
from liftbridge._publish._outbox import Outbox
from liftbridge._publish._pending import (
    Pending,
    Spent,
    claim_responses,
    fail_all,
    new_pending,
    settle_gathered,
)
from liftbridge._publish._request_bytes import Request
from liftbridge._publish._sending import Sending, Unsent, resume_free, sender_step
from liftbridge._publish._window import Window
from liftbridge_api import api_pb2

_log = logging.getLogger(__name__)

AckHandler = Callable[[Ack | None, BaseException | None], None]
"""``handler(ack, error)``: exactly one of the two is None. See ``Client.publish_async``."""

_HUNG_AFTER = 2
"""A stream silent for this many ack timeouts while a publish on it times out is given up."""
_NONE = api_pb2.NONE
_RUN = 64  # acks read together resolved in one round of the publisher's lock, at most
_monotonic = time.monotonic
_REOPEN_REFRESH = 1.0
"""The deadline of the metadata refresh between a stream breaking and the next
opening (no publish goes out meanwhile; a broker down or hung can hold up a
healthy one's FetchMetadata until the caller's deadline, seconds past failover)."""


class Publisher(Sending, BatchSubmit, LeadersLost, Interrupts, Flushing):
    """Owns the PublishAsync stream of one client. Thread-safe.

    Threads: ``liftbridge-acks`` (opens the stream, reads responses, reopens
    it when it breaks), started on the first publish; ack timeouts run on
    the client's ``liftbridge-ack-timer`` (:mod:`liftbridge._core._deadlines`).
    """

    def __init__(
        self,
        router: Router,
        callbacks: CallbackRunner,
        timer: AckTimer,
        *,
        ack_wait: float,
        max_inflight: int,
    ) -> None:
        self._router = router
        self._callbacks = callbacks
        # Resolved with a plain ack's protobuf, a Future makes its Ack when first
        # read: the acks thread makes none nobody reads (_pending.claim_responses).
        self._new_future = callbacks.future_made_on_read(api_pb2.Ack, ack_of_checked)
        self._timer = timer
        self._ack_wait = ack_wait
        # The next correlation id: "<pid>-<publisher>-0x<n>" for n = 0, 1, ..., made
        # in C (no Python frame per publish); each call is atomic under the GIL.
        # hex, not str: a C function, not a type's call, and binary digits
        # (~560 instructions an id less, callgrind).
        prefix = f"{os.getpid():x}-{id(self):x}-"
        self.next_correlation_id: Callable[[], str] = map(
            prefix.__add__, map(hex, itertools.count())
        ).__next__
        """A correlation id unique within this process. Thread-safe."""

        # _lock guards _pending (every unresolved publish), _window (each of
        # those holds a slot, as does each ack-inbox publish under way: see
        # borrow), _flushers, _generation, _closed, _threads_started and _call.
        self._lock = threading.Lock()
        self._window = Window(self._lock, max_inflight, resume_free(max_inflight))
        self._pending: dict[str, Pending] = {}
        # Threads in flush(); _claimed (on _lock) is notified when a publish is
        # claimed, or a claim settled, while there are any (_flushing.py).
        self._flushers = 0
        self._claimed = Waiters(self._lock)  # interrupt-safe (threading.Condition is not)
        self._generation = 0
        self._closed = False
        self._threads_started = False
        self._call: Stream[api_pb2.PublishResponse] | None = None
        # monotonic time of the stream's last response (or opening): acks thread writes.
        self._heard_at = 0.0

        # Requests not pulled by a sender yet, in order (a list: a batch's part;
        # None: a wake-up call).
        self._outbox = Unsent()
        self._last_submit = 0.0  # time.monotonic() of the last publish submitted
        self._burst = 0  # publishes in a row each soon after the last (_sending._direct)
        self._batch_unpulled = 0  # see _batch_submit.py
        # _send_lock is held by the one sender pulling from _outbox at a time
        # (a stream's sender and an outdated one may overlap), and guards
        # _carry: requests pulled from _outbox but not handed over (the rest
        # of a batch's part a run had no room for; what an outdated sender
        # pulled after its stream broke): never sent, first in line.
        self._send_lock = threading.Lock()
        self._carry: collections.deque[Pending] = collections.deque()
        self._spent = Spent()  # settled Futures the publishing threads free
        # _handover_lock makes a sender's "not resolved, same stream: mark it
        # sent" one step against the stream breaking, an ack timeout deciding
        # sent-or-not, and close. It is not _lock, which producers and the
        # acks thread take for every message: the sender would wait on them.
        # _generation and _closed are written holding both. Lock order:
        # _handover_lock before _lock.
        self._handover_lock = threading.Lock()

        # Deadlines, on the client's liftbridge-ack-timer (_deadlines.py):
        # publishes with the default timeout (nearly all) in _in_order, whose
        # deadlines never decrease; those with a timeout of their own one by one.
        self._in_order = timer.ordered(
            self._expire, wait=ack_wait, compact_at=max(1024, 2 * max_inflight), lock=self._lock
        )

        router.on_broker_down(self._broker_down)
        # Decides publishes sent to a partition whose leader is known to be
        # down (started on the first broker down).
        self._leader_check = LeaderCheck(router, self._suspects, self._leader_lost)

        self._stop = threading.Event()
        # A producer waits for the sender every quarter of the window queued
        # (HAND_OVER at most) from a window of 256 up, every half of it from
        # 32 up (_sending.sender_step).
        self._sender_takes = Handover(sender_step(max_inflight), None, self._stop)
        self._dispatcher = threading.Thread(
            target=self._dispatch_loop, name="liftbridge-acks", daemon=True
        )

    # ------------------------------------------------------------ producer --

    @overload
    def submit(
        self,
        request: Request,
        handler: AckHandler | None,
        timeout: float | None,
        future: Literal[True] = True,
    ) -> Future[Ack | None]: ...

    @overload
    def submit(
        self,
        request: Request,
        handler: AckHandler | None,
        timeout: float | None,
        future: bool,
    ) -> Future[Ack | None] | None: ...

    def submit(
        self,
        request: Request,
        handler: AckHandler | None,
        timeout: float | None,
        future: bool = True,
    ) -> Future[Ack | None] | None:
        """Queues a publish; see the module docstring for its life. An
        interrupt (Ctrl-C) leaves it out or in, never half
        (:mod:`~liftbridge._publish._interrupts`).

        Args:
            request: the request, with its correlation id set.
            handler: called with the outcome, or None.
            timeout: ack timeout in seconds; None for the client's ``ack_wait``.
            future: False for no Future (the handler alone hears the outcome);
                positional (a keyword costs the call ~0.04 us: every publish_async).

        Returns:
            A Future resolving to the Ack (None for AckPolicy.NONE) or failing
            with the publish's error; None when ``future`` is False.

        Raises:
            ClientClosedError: the publisher is closed.
            PublishWindowFullError: no window slot freed up within the timeout.
            InvalidArgumentError: a publish with the same correlation id is in flight.
        """
        wait = self._ack_wait if timeout is None else timeout
        outcome: Future[Ack | None] | None = self._new_future() if future else None
        correlation_id = request.correlationId
        # Its deadline is set below, once it has its window slot; not sent yet.
        pending = new_pending(
            correlation_id,
            request,
            outcome,
            handler,
            request.ackPolicy != _NONE,
            self._router.leader_address(request.stream, request.partition),
        )
        kept = self._spent.kept  # Spent.free_one inline: after this publish's allocations
        if kept:
            try:  # noqa: SIM105 (contextlib.suppress: three calls)
                kept.popleft()
            except IndexError:  # another publishing thread took the last
                pass
        # A with, not acquire() then try: an interrupt (Ctrl-C) landing between
        # those two would leave the lock held and the publisher wedged. An
        # interrupt anywhere in the try leaves the publish out or in, never half
        # (_withdraw; a signal's handler runs only at a call or a loop's jump,
        # so none lands between taking a slot and registering the publish).
        try:
            with self._lock:
                if self._closed:
                    raise ClientClosedError("the client is closed; the publish was not sent")
                if correlation_id in self._pending:
                    raise InvalidArgumentError(
                        f"correlation_id {correlation_id!r} is already in flight"
                    )
                window = self._window
                if window.used < window.size:  # Window.take with room to spare, without its call
                    window.used += 1
                    waited = False
                else:
                    waited = window.take(wait)  # for room: a run of acks frees a burst
                    if correlation_id in self._pending:  # registered while this one waited
                        window.used -= 1  # no give(): no call, where an interrupt lands
                        raise InvalidArgumentError(
                            f"correlation_id {correlation_id!r} is already in flight"
                        )
                self._pending[correlation_id] = pending
                if not self._threads_started:  # whole, or again next time (Ctrl-C):
                    start_thread(self._dispatcher)  # no call between: set once it is under way
                    self._threads_started = True
                # Every publish gets a deadline: for its ack, or (AckPolicy.NONE) to be sent by.
                now = _monotonic()
                pending.deadline = now + wait
                generation = self._generation
                outbox = self._outbox
                if outbox.idle == generation:
                    direct = self._direct(generation, now, waited)
                    behind = False
                    if not direct:
                        outbox.put(pending)
                else:  # the sender is busy (in a burst, nearly always): _direct's, without it
                    self._last_submit = now
                    direct = False
                    outbox.put_behind(pending)
                    # A step queued; not when this publish filled the window: the next
                    # one waits for room, which lets the sender have the GIL too.
                    behind = (
                        window.used < window.size and outbox.qsize() >= self._sender_takes.frames
                    )
                in_order = wait == self._ack_wait
                if in_order:
                    self._in_order.append_held(pending)  # in deadline order: under _lock (lent)
            if not in_order:
                self._timer.schedule(pending.deadline, functools.partial(self._expire, pending))
            if direct:
                self._write(pending, generation)
            elif behind:  # a step queued for a busy sender: let it have the GIL (_handover.py)
                self._sender_takes.wait(self._outbox.qsize)
        except BaseException:
            try:
                self._withdraw(pending)
            except BaseException:  # a second interrupt, maybe as it started: once more
                self._withdraw(pending)  # (it finds a withdrawal done, or does it)
                raise
            raise
        return outcome

    def borrow(self, wait: float) -> None:
        """Takes a window slot, all or nothing, for a publish carried another
        way (the unary Publish of an ack inbox) until :meth:`give_back`.

        Raises:
            PublishWindowFullError, ClientClosedError: no slot within ``wait`` seconds; closed.
        """
        taken = False
        try:
            with self._lock:
                if self._closed:
                    raise ClientClosedError("the client is closed; the publish was not sent")
                self._window.take(wait)
                taken = True  # no call since take returned: no interrupt between
        except BaseException:  # an interrupt (Ctrl-C) as the lock was let go
            if taken:
                self.give_back()
            raise

    def give_back(self) -> None:
        """Frees a slot taken by :meth:`borrow`."""
        with self._lock:
            self._window.give()

    # ---------------------------------------------------------- completion --

    def _claim(self, pending: Pending) -> bool:
        """Marks a publish resolved, freeing its window slot; False if another thread did."""
        with self._lock:
            if pending.done:
                return False
            pending.done = True
            if self._pending.pop(pending.correlation_id, None) is not None:
                self._window.give()
            if pending.future is None and pending.batch is not None:  # see claimed_outcomes
                pending.future = Future()
            claim = pending.future if pending.future is not None else pending
            self._spent.unsettled[claim] = claim  # for flush() until it is settled (_complete)
            if self._flushers:
                self._claimed.notify_all()
            return True

    def _finish(self, pending: Pending, ack: Ack | None, error: LiftbridgeError | None) -> None:
        """Resolves a publish exactly once, on the calling thread."""
        if self._claim(pending):
            self._complete(pending, ack, error)

    def _complete(self, pending: Pending, ack: Ack | None, error: LiftbridgeError | None) -> None:
        try:
            self._spent.settle_claim((pending, ack, error), self._callbacks.settle)
        finally:
            if self._flushers:
                self._settled()

    def _resolve(self, responses: list[api_pb2.PublishResponse]) -> None:
        """Resolves a run of responses in order: claims them in one round of
        ``_lock`` (one window release), each publish letting go of its Future
        and its entry as it is claimed, so the entries are freed here, on the
        acks thread (``_pending.py`` says why); then settles the run."""
        spent = self._spent
        with self._lock:
            settled, members, unknown = claim_responses(
                responses, self._pending.pop, wire_acks=True
            )
            spent.kept.extend(settled)  # Spent.keep: in the lock, a call the less a read
            spent.unsettled[id(settled)] = settled  # flush() waits till settled
            gathered = spent.gather() if members else None  # and on the members' settling
            claimed = len(settled) + len(members)
            if claimed:
                self._window.give(claimed)
                if self._flushers:
                    self._claimed.notify_all()
                # The timer's queue lets go of the entries: freed here, not on a publishing thread.
                self._in_order.drop_done_held()
        for correlation_id, error in unknown:
            _log.debug("outcome for unknown or timed-out publish %r: %s", correlation_id, error)
        if gathered is not None:
            settle_gathered(members, gathered, spent.unsettled)  # SDK code, no user code
        self._callbacks.settle_run(settled)
        del spent.unsettled[id(settled)]  # no finally: liftbridge-acks takes no Ctrl-C
        if self._flushers:  # Flushing._settled, written out: a call the less a read
            with self._lock:
                self._claimed.notify_all()

    # ------------------------------------------------------ ack dispatcher --

    def _open_stream(self, generation: int) -> Stream[api_pb2.PublishResponse] | None:
        address, call = self._router.open_stream(
            "PublishAsync",
            Outbox(self._next_requests, generation),
            target=ANY,
            deadline=Deadline(self._router.rpc_timeout),
        )
        with self._lock:
            if self._closed:
                call.cancel()
                return None
            self._call = call
        self._heard_at = time.monotonic()
        _log.debug("PublishAsync stream %d opened on %s", generation, address)
        return call

    def _dispatch_loop(self) -> None:
        """Thread ``liftbridge-acks``: read responses; on a broken stream fail
        what was sent on it, then reopen with backoff until closed."""
        failures = 0
        resolve = self._resolve
        while not self._stop.is_set():
            with self._lock:
                generation = self._generation
            try:
                call = self._open_stream(generation)
                if call is None:
                    return
                take_ready = call.take_ready
                for response in call:
                    failures = 0
                    self._heard_at = time.monotonic()
                    run = [response]  # and every response read with it, up to _RUN
                    take_ready(run, _RUN)
                    resolve(run)
                # The server ended the stream cleanly: treat as broken.
                error: LiftbridgeError = ConnectionLostError(
                    "the PublishAsync stream was closed by the server"
                )
            except ClientClosedError:
                return
            except LiftbridgeError as e:  # the stream failed, or no broker to open it on
                error = e
            except Exception:  # never die silently: log, back off, reopen
                _log.exception("unexpected error on the PublishAsync stream")
                error = ConnectionLostError("unexpected error on the PublishAsync stream")
            if self._stop.is_set():
                return
            failures += 1
            self._stream_broke(generation, error)
            self._router.broker_failed(error, Deadline(_REOPEN_REFRESH))
            self._stop.wait(self._router.retry_policy.backoff(failures))

    def _stream_broke(self, generation: int, cause: LiftbridgeError) -> None:
        with self._handover_lock, self._lock:
            self._generation = generation + 1
            self._call = None
            lost = [p for p in self._pending.values() if p.generation == generation]
        self._outbox.put(None)  # wakes the outdated sender if it waits for a request
        self._sender_takes.release()  # no sender pulls until the next stream opens
        if lost:
            _log.warning(
                "PublishAsync stream broke (%s); failing %d publish(es) sent on it",
                cause,
                len(lost),
            )
        for pending in lost:
            self._finish(
                pending,
                None,
                StreamRefusedError(f"{cause}; the message was not stored")
                if isinstance(cause, StreamRefusedError)
                else ConnectionLostError(
                    f"the PublishAsync stream broke before the ack arrived ({cause}); "
                    "the message may or may not have been stored"
                ),
            )

    # --------------------------------------------------------- ack timer ----

    def _expire(self, pending: Pending) -> None:
        """On liftbridge-ack-timer: fails a publish past its deadline, if unresolved."""
        if pending.done:
            return
        with self._handover_lock:  # the sender cannot hand it over meanwhile
            sent = pending.generation >= 0
            if not self._claim(pending):
                return
            hung = (
                sent
                and pending.expects_ack
                and pending.generation == self._generation
                and time.monotonic() - self._heard_at >= _HUNG_AFTER * self._ack_wait
            )
            call = self._call if hung else None
        if call is not None:
            # Nothing at all came back on this stream for two ack timeouts
            # while it owed an ack: its broker hangs. Give it up, so the
            # stream reopens on another broker instead of timing out every
            # publish for as long as the hang lasts.
            _log.warning(
                "no response on the PublishAsync stream for %.1fs; moving to another broker",
                time.monotonic() - self._heard_at,
            )
            call.cancel()
        where = f"{pending.request.stream!r} partition {pending.request.partition}"
        if sent:
            error: LiftbridgeError = AckTimeoutError(
                f"no ack for publish {pending.correlation_id} to {where} within its "
                "timeout; the message may or may not have been stored"
            )
        else:
            error = DeadlineExceededError(
                f"publish {pending.correlation_id} to {where} could not be sent within "
                "its timeout (no PublishAsync stream); it was dropped, never sent"
            )
        self._complete(pending, None, error)

    # ------------------------------------------------------------- closing --

    def close(self, deadline: float) -> None:
        """Stops the acks thread and fails every unresolved publish with
        :class:`ClientClosedError`; joins the thread until ``deadline``
        (``time.monotonic()``) at most. Idempotent; never joins the calling
        thread. A close interrupted (Ctrl-C) is finished by the next."""
        with self._handover_lock, self._lock:
            self._closed = True
            call = self._call
            unresolved = [(pending, pending.future) for pending in self._pending.values()]
            self._window.close()
        self._outbox.put(None)  # wakes a sender waiting for a request: it ends its stream
        self._stop.set()
        self._sender_takes.release()
        self._leader_check.stop()
        if call is not None:
            call.cancel()
        fail_all(self._finish, unresolved)
        for thread in (self._dispatcher, self._leader_check.thread):
            if thread.is_alive() and thread is not threading.current_thread():
                thread.join(max(0.0, deadline - time.monotonic()))
                if thread.is_alive():
                    _log.warning("thread %s did not stop in time", thread.name)
        self._spent.clear()
