"""The sending side of the PublishAsync stream, for the
:class:`~liftbridge._publish._publisher.Publisher` (whose state it uses).

Producers queue their publishes in order (a ``publish_many_async``
batch's part as one item: one queue round for many requests); the
stream's sender (gRPC's, or ``liftbridge-h2-send``) pulls them a run at a
time through the stream generation's
:class:`~liftbridge._publish._outbox.Outbox`, and each request pulled is
"sent". What a run had no room for of a batch's part, and requests an
outdated sender pulled after its stream broke, are carried over, first in
line for the next run (on the next stream for the latter).

A producer may write its own request instead (``_write``), saving the
sender's wake-up, which at moderate rates is a thread hop per publish:
only while the sender waits for a request with everything it took written
and nothing queued (:attr:`Unsent.idle`: queueing anything ends it, so
nothing queued before goes after), when no run would form anyway
(:meth:`Sending._direct`: nothing else in flight, or the publishing threads
paused since the last publish, or only the first few of a burst; in a burst,
a window refilled after its acks came in one read included, the sender's
runs carry many requests per write: fewer writes for both sides), and when
the stream takes
the request at once (``Stream.write_now``: the SDK's own HTTP/2 call when
its flow-control windows have room; grpcio's never).
"""

from __future__ import annotations

import collections
import queue
import threading
import time
from collections.abc import Callable

from liftbridge._core._acks import Ack
from liftbridge._core._router import Router, Stream
from liftbridge._errors import LiftbridgeError
from liftbridge._handover import HAND_OVER, Handover
from liftbridge._publish._leaders import LeaderCheck
from liftbridge._publish._pending import Pending
from liftbridge._publish._request_bytes import Request
from liftbridge._publish._window import Window
from liftbridge_api import api_pb2

_DRAIN = 16
"""Requests per run handed to the sender (then "sent"): 16 of up to 4 KiB fit its 64 KiB write."""
DIRECT_BELOW = 2
"""A producer may write its own request while fewer publishes than this are
in flight (itself included), however soon after the last: with none before
it, a sender's run would carry it alone."""
BACKLOG_FRACTION = 8
"""More than 1/BACKLOG_FRACTION of the ``max_inflight`` window awaiting acks
is a backlog (a producer faster than its acks: at the window's limit it is
woken per eighth of it): the sender writes such publishes in runs, however
far apart they come (a producer losing the GIL to the acks thread mid-burst
looks paused). A paced producer keeps far fewer in flight."""
BURST_GAP = 50e-6
"""Seconds: a publish submitted this soon after the one before is part of a
burst (a loop publishing back to back, or a window's worth after its acks
came in one read), which the sender writes a run at a time, one write for
many requests (written one by one, a window of 32 cost 0.4 writes per
message: more client and server CPU). One further apart is written by its
own thread when the sender is idle: the sender, taking tens of
microseconds to wake under the GIL, would carry it alone, and its wake-up
costs more CPU than the write. (10,000 msgs/s evenly paced: 100 us apart.)"""
BURST_OWN = 4
"""Publishes in a row a producer writes itself with the sender idle: one
apart from the last and the next ``BURST_OWN - 1`` each within
:data:`BURST_GAP` of the one before; the sender writes the rest of the
burst. A paced loop runs late (``time.sleep`` wakes ~50-100 us after its
time at 10,000 msgs/s) and catches up with two or three publishes back to
back: written by the sender, each such pair woke it (~20 us of its CPU a
wake-up), and it was then still busy when the next publish came, so only
0.40-0.44 of the publishes were written by their own thread. With this,
0.90-0.91, and liftbridge-h2-send 12.3 -> 1.7 us a message for the
publishing thread's 28.7 -> 32.0; the client in all 82.0 -> 77.3
(``bench.e2e_probe``'s loop, LocalServer, 100 B, two alternating pairs)."""

STEPPED_FROM = 256
"""The smallest ``max_inflight`` window at which a producer hands the sender
the GIL every quarter of the window (:func:`sender_step`). Below it a quarter
of the window is under 64 requests a write: at a window of 32, steps of 16
and 8 read 23.8-33.1k and 19.3-26.6k msgs/s against 26.3-28.5k without, at
20-29 and 28-40 us of client CPU a message against 19-20 (three alternations
of a 50,000-message probe, before the producer's own writes and without the
resume at half of :data:`HALVED_FROM`: a step of 16 was bimodal then)."""

HALVED_FROM = 32
"""The smallest ``max_inflight`` window (below :data:`STEPPED_FROM`) at which
a producer hands the sender the GIL at half the window, and a producer
blocked on a full window goes on once half of it is free
(:func:`resume_free`), so the window travels as two halves: the server works
on one while the client reads the other's acks and makes the next. Without,
the window was one serial cycle: all its acks in one read, the producer
refilling it, one write, the server's turn (the client idle). At a window
of 32 (LocalServer, 100 B, three alternations of a 50,000-message probe):
32.1-33.8k -> 34.8-35.3k msgs/s, client CPU 15.0-15.6 -> 18.7 us a message (a
hand-over, one more ack read and one more sender wake a window), server
20.8-22.0 -> 23.2-23.8; at 48, 64 and 128 (30,000, two alternations)
37.2-37.5k -> 40.2-42.4k, 40.8-42.1k -> 43.7-45.9k, 47.0-48.8k -> 48.8-52.1k.
At 16, halves read 24.9-25.1k msgs/s at 27.5 us of client CPU against
21.9-28.1k at 19-20 without. The CPU they cost shows where there is none to
spare: beside a loop burning a core, a window of 32 read 20.9-23.3k with
halves against 27.0-27.1k without."""


def sender_step(max_inflight: int) -> int:
    """Publishes a producer queues for a busy sender before it waits for the
    sender to pull them (:class:`~liftbridge._handover.Handover`;
    not when its publish filled the window: its next one waits for room,
    and the sender gets the GIL then, without a second wait a half window):
    a quarter of the window, :data:`HAND_OVER` at most, from a window of
    :data:`STEPPED_FROM` up; half of it from :data:`HALVED_FROM` up; more
    than the window (never) below that.

    Without a step the producer keeps the GIL until the window is full, and
    the sender writes the freed part of the window at once: at a window of
    256 the server got bursts of ~140 requests and nothing between them
    (window waits 1.5 ms at the median, 70 % of the run). With a quarter of
    it the server works on one write while the producer makes the next.
    """
    if max_inflight >= STEPPED_FROM:
        return min(HAND_OVER, max_inflight // 4)
    if max_inflight >= HALVED_FROM:
        return max_inflight // 2
    return max_inflight + 1


def resume_free(max_inflight: int) -> int | None:
    """Slots a full window must have free before a producer blocked on it goes
    on: half of it where the sender takes halves (:data:`HALVED_FROM` up to
    :data:`STEPPED_FROM`), so each half is made and written whole; None (the
    window's own eighth) elsewhere."""
    if HALVED_FROM <= max_inflight < STEPPED_FROM:
        return max_inflight // 2
    return None


class Unsent:
    """The publishes queued for the sender, in order (a list: a batch's
    part; None: a wake-up call that makes it look at the stream's state),
    and whether it waits with nothing in hand. Producers put under the
    publisher's ``_lock``."""

    __slots__ = ("_queue", "empty", "get", "get_nowait", "idle", "put_behind", "qsize")

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[Pending | list[Pending] | None] = queue.SimpleQueue()
        self.get = self._queue.get
        self.get_nowait = self._queue.get_nowait
        self.empty = self._queue.empty
        self.qsize = self._queue.qsize
        # The generation whose sender waits for a request with everything it
        # took written and nothing queued (set under the publisher's _lock);
        # -1: none. While it is the stream's, producers may write their own.
        # It is never above the stream's generation (a sender sets its own),
        # which only grows: once below it, it never matches again.
        self.idle = -1
        self.put_behind = self._queue.put
        """:meth:`put` for a producer that found ``idle`` not the stream's
        generation (under the publisher's ``_lock``): nothing to end, so the
        queue's own ``put``, no Python frame (a burst queues every publish)."""

    def put(self, item: Pending | list[Pending] | None) -> None:
        """Queues a publish, a batch's part (or a wake-up): producers write
        no more of their own until the sender has caught up with it."""
        self.idle = -1
        self._queue.put(item)


class Sending:
    """Queueing, the sender's runs and producers' own writes. Lock order:
    ``_send_lock``, ``_handover_lock``, ``_lock``."""

    _router: Router
    _leader_check: LeaderCheck[Pending]
    _lock: threading.Lock  # the publisher's: guards _generation, _closed, _pending
    _handover_lock: threading.Lock
    _send_lock: threading.Lock  # held by the one sender pulling; guards _carry
    _outbox: Unsent
    # A producer that queued Handover.frames for a busy sender waits here
    # until the sender pulls (it gets the GIL then: _handover.py).
    _sender_takes: Handover
    # time.monotonic() the last publish was submitted (under _lock), or its
    # own thread wrote it (after the write, without a lock: a race between
    # producers only moves when one publish counts as apart from the last).
    _last_submit: float
    # Publishes since the last one apart from the one before it (_direct, under _lock).
    _burst: int
    _carry: collections.deque[Pending]
    _generation: int
    _closed: bool
    _pending: dict[str, Pending]
    _window: Window
    _call: Stream[api_pb2.PublishResponse] | None
    _claim: Callable[[Pending], bool]
    _complete: Callable[[Pending, Ack | None, LiftbridgeError | None], None]

    def _next_requests(self, generation: int, *, block: bool) -> list[Request]:
        """Called by the stream's sender thread: this stream generation's
        queued requests (up to ``_DRAIN``, in order) under one round of the
        locks, waiting for one if ``block`` (else [] when none is queued);
        StopIteration ends an outdated or closed stream."""
        outbox, carry = self._outbox, self._carry
        if not block and not carry and outbox.empty():
            # The usual answer to the sender's "anything else?" after a run:
            # no lock taken (the blocking call looks at carry under the lock).
            return []
        taken: list[Pending] = []
        requests: list[Request] = []
        unacked: list[Pending] = []  # AckPolicy.NONE: no answer comes
        with self._send_lock:
            while True:
                while carry and len(taken) < _DRAIN:
                    taken.append(carry.popleft())
                woken = False  # a wake-up call (None) was taken: look before waiting
                # Not empty: get_nowait has one (this is its one consumer, under _send_lock).
                while len(taken) < _DRAIN and not outbox.empty():
                    item = outbox.get_nowait()
                    if item is None:
                        woken = True
                    elif isinstance(item, list):  # a batch's part: the rest waits first in line
                        room = _DRAIN - len(taken)  # (carry is empty: it went first)
                        taken += item[:room]
                        carry.extend(item[room:])
                    else:
                        taken.append(item)
                if not taken and block and not woken:
                    with self._lock:  # all taken is written: producers may write their own
                        if outbox.empty():
                            outbox.idle = generation
                    item = outbox.get()
                    if item is not None:
                        if isinstance(item, list):
                            carry.extend(item)
                        else:
                            taken.append(item)
                        continue  # and whatever else is queued by now
                with self._handover_lock:
                    if self._generation != generation or self._closed:
                        # Pulled too late for this stream: first in line for the next.
                        carry.extendleft(reversed(taken))
                        raise StopIteration
                    # Leaders are looked at one by one only while some broker is down.
                    anything_down = self._router.any_broker_down()
                    # One pass, the requests and the unacked taken as it goes (a
                    # second pass and a comprehension cost more a publish).
                    for pending in taken:
                        if pending.done:  # timed out while queued
                            continue
                        pending.generation = generation
                        if anything_down:
                            self._suspect(pending)
                        requests.append(pending.request)
                        if not pending.expects_ack:
                            unacked.append(pending)
                if requests or not block:
                    break
                taken.clear()
        if self._sender_takes.waiting:  # the producer queues more while this thread writes
            self._sender_takes.release()
        for pending in unacked:
            if self._claim(pending):  # done once handed to the sender
                self._complete(pending, None, None)
        return requests

    def _suspect(self, pending: Pending) -> None:  # _handover_lock held
        """Marks a publish being sent to a leader known down: liftbridge-leader-check decides."""
        if pending.leader is not None and self._router.broker_down(pending.leader):
            pending.suspect = True
            self._leader_check.wake()

    def _direct(self, generation: int, now: float, waited: bool) -> bool:  # _lock held
        """Whether the producer submitting a publish at ``now`` (with it in
        ``_pending``) writes it on its own thread: the sender of
        ``generation`` is idle, and no run would form: nothing else in
        flight, or no backlog (at most 1/:data:`BACKLOG_FRACTION` of the
        window in flight, and the publish did not wait for room: ``waited``;
        acks read in one run free a burst of publishes) and the publishing
        threads were away :data:`BURST_GAP` or more since the last publish
        (since its write, if they wrote it: a loop publishing back to back
        is a burst however long a write takes), or this is one of the first
        :data:`BURST_OWN` of a burst.

        A publish that waited for room goes to the sender even with nothing
        else in flight, unless it fills the window: the whole window's acks
        came in one read, and the producer is about to fill it again. Written
        on its own, it cost each window one more write, a server batch of one
        and an ack read of its own (at a window of 32: about 2.5 us of client
        and 4 us of server CPU a message).

        Positional: a keyword costs every publish ~190 instructions (callgrind)."""
        last, self._last_submit = self._last_submit, now
        in_flight = len(self._pending)
        if self._outbox.idle != generation:
            return False
        window = self._window
        if waited and window.used < window.size:
            return False
        if in_flight < DIRECT_BELOW:
            return True
        if waited or in_flight > window.size // BACKLOG_FRACTION:
            return False
        if now - last >= BURST_GAP:
            self._burst = 0
            return True
        self._burst += 1
        return self._burst < BURST_OWN

    def _write(self, pending: Pending, generation: int) -> None:
        """Writes a publish on the producer's thread, the sender of
        ``generation`` waiting with everything it took written and nothing
        queued (so nothing queued before it goes after it), when the stream's
        flow-control windows take it at once; else queues it for the sender."""
        # The stream cannot break nor the publish time out meanwhile. A with, not
        # acquire() then try: an interrupt (Ctrl-C) between them would wedge it.
        with self._handover_lock:
            call = self._call
            written = (
                call is not None
                and self._generation == generation
                and not self._closed
                and not pending.done
                and call.write_now(pending.request)
            )
            if written:
                pending.generation = generation
                if self._router.any_broker_down():
                    self._suspect(pending)
                self._last_submit = time.monotonic()
        if not written:
            with self._lock:
                self._outbox.put(pending)
        elif not pending.expects_ack and self._claim(pending):  # AckPolicy.NONE: done
            self._complete(pending, None, None)
