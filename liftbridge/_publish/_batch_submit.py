"""A ``publish_many_async`` batch on the client's PublishAsync stream.

:class:`BatchSubmit` is the :class:`~liftbridge._publish._publisher.Publisher`'s
batch entry point: a batch's requests, built and checked by
:meth:`~liftbridge._publish._publishing.Publishing.publish_batch`, become
pending publishes in one loop and enter the in-flight window a part at a
time: as many as the window has room for (at least one, waiting as a
single publish waits while it is full), registered, queued for the sender
(the part as one item) and given their ack deadline under one round of
the publisher's lock per part. From a window of
:data:`~liftbridge._publish._sending.STEPPED_FROM` up, a producer publishing
batches back to back hands the sender the GIL every
:func:`~liftbridge._publish._sending.sender_step` requests, as
:meth:`~liftbridge._publish._publisher.Publisher.submit` does: a part is at
most what is left of the step, and once a step's requests are queued for a
busy sender the producer waits until it pulls (without, it kept the GIL
until the window was full, and the sender wrote the freed window at once). From there
each is a publish like any other (sent, resent never, failed by a broken
stream, a leader lost, its deadline or close), except that its outcome
goes to its :class:`~liftbridge._publish._batch.Batch` (settled on the
thread that resolves it: no handler call per message on
``liftbridge-callbacks``).
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from typing import Any

from liftbridge._core._deadlines import AckTimer, OrderedDeadlines
from liftbridge._core._router import Router
from liftbridge._errors import ClientClosedError, LiftbridgeError
from liftbridge._handover import Handover
from liftbridge._locks import start_thread
from liftbridge._publish._batch import Batch
from liftbridge._publish._interrupts import expire_each
from liftbridge._publish._pending import Pending, Spent
from liftbridge._publish._request_bytes import Request
from liftbridge._publish._sending import STEPPED_FROM, Unsent
from liftbridge._publish._window import Window

_INTERRUPTED = "publish_many_async was interrupted; this publish was withdrawn, not sent"


class BatchSubmit:
    """``submit_many``, for the Publisher (whose state it uses, under its lock)."""

    _router: Router
    _timer: AckTimer
    _ack_wait: float
    _lock: threading.Lock
    _window: Window
    _pending: dict[str, Pending]
    _closed: bool
    _threads_started: bool
    _dispatcher: threading.Thread
    _outbox: Unsent  # its put ends producers' own writes (see _sending.py)
    _generation: int
    # A producer that queued Handover.frames requests for a busy sender waits
    # here until the sender pulls (it gets the GIL then: _handover.py).
    _sender_takes: Handover
    # Requests of batches queued for a busy sender since a producer last
    # waited for it or found it idle (under _lock).
    _batch_unpulled: int
    _in_order: OrderedDeadlines[Any]
    _spent: Spent
    _expire: Callable[[Pending], None]
    _withdraw_rest: Callable[[list[Pending], LiftbridgeError], None]  # see _interrupts.py

    def submit_many(
        self,
        requests: list[Request],
        batch: Batch,
        timeout: float | None,
        *,
        one_partition: bool,
    ) -> None:
        """Queues a batch's publishes (requests with their correlation ids,
        each expecting an ack), in order, each settling ``batch`` with its
        index.

        Args:
            requests: the checked requests (at least one) of one stream, in
                the order of the values.
            batch: gathers their outcomes.
            timeout: ack timeout of each (from when it enters the window) and
                the longest wait for room in a full window; None for ``ack_wait``.
            one_partition: all go to the first one's partition (its leader
                is looked up once).

        Raises:
            ClientClosedError: the publisher is closed.
            PublishWindowFullError: no window slot freed up within the
                timeout. Either way the parts already admitted stay (sent).
        """
        wait = self._ack_wait if timeout is None else timeout
        first = requests[0]
        leader_address, stream = self._router.leader_address, first.stream
        # partition -> its leader's address, when they may differ
        leaders: dict[int, str | None] | None = None if one_partition else {}
        leader = leader_address(stream, first.partition)
        pendings = []
        for index, request in enumerate(requests):
            if leaders is not None:
                partition = request.partition
                if partition not in leaders:
                    leaders[partition] = leader_address(stream, partition)
                leader = leaders[partition]
            pendings.append(
                Pending(
                    request.correlationId,
                    request,
                    None,
                    None,
                    True,
                    0.0,
                    -1,
                    leader,
                    False,
                    False,
                    batch,
                    index,
                )
            )
        start, count = 0, len(pendings)
        in_order = wait == self._ack_wait
        while start < count:
            # Whatever this part's admission raises (closed, the window stayed
            # full, an interrupt: Ctrl-C), its publishes and the rest's are each
            # left out or in, never half, and the batch settled (_interrupts.py).
            try:
                end, behind = self._admit_part(pendings, start, wait)
                if behind:  # a step queued for a busy sender: let it have the GIL (_handover.py)
                    self._sender_takes.wait(self._outbox.qsize)
                if not in_order:
                    part = pendings[start:end]
                    self._timer.schedule(
                        part[0].deadline, functools.partial(expire_each, self._expire, part)
                    )
                self._spent.free(end - start)
            except LiftbridgeError as error:
                self._withdraw_rest(pendings[start:], error)
                raise
            except BaseException:
                try:
                    self._withdraw_rest(pendings[start:], LiftbridgeError(_INTERRUPTED))
                except BaseException:  # a second interrupt, maybe as it started: once more
                    self._withdraw_rest(pendings[start:], LiftbridgeError(_INTERRUPTED))
                    raise
                raise
            start = end

    def _admit_part(self, pendings: list[Pending], start: int, wait: float) -> tuple[int, bool]:
        """Admits ``pendings[start:]`` as far as the window has room (at
        least one, waiting while it is full) and the sender step allows, in
        one round of the lock.

        Returns:
            The index after the last one admitted, and whether the producer
            now waits for the sender to pull: a step's requests
            (:attr:`Handover.frames`) queued while it was busy. Below a
            window of :data:`~liftbridge._publish._sending.STEPPED_FROM`
            parts are never cut, nor waited on (from 32 the window's halves,
            ``resume_free``, already give the sender a part at a time).
        """
        with self._lock:
            if self._closed:
                raise ClientClosedError("the client is closed; the publish was not sent")
            window, step = self._window, self._sender_takes.frames
            stepped = window.size >= STEPPED_FROM
            want = len(pendings) - start
            if stepped:
                want = min(want, step - self._batch_unpulled)  # at least 1: reset at step
            room = window.room(wait)
            if not self._threads_started:  # as Publisher.submit: liftbridge._locks.start_thread
                start_thread(self._dispatcher)
                self._threads_started = True
            deadline = time.monotonic() + wait
            end = start + (want if want < room else room)
            registered, part = self._pending, pendings[start:end]
            # A slot with each publish registered, no call between: a loop's
            # jump, where an interrupt (Ctrl-C) may land, finds them even.
            for pending in part:
                pending.deadline = deadline
                registered[pending.correlation_id] = pending
                window.used += 1
            outbox, behind = self._outbox, False
            if outbox.idle == self._generation:  # it took and wrote all: this part wakes it
                self._batch_unpulled = 0
            elif stepped:  # busy: it writes this part after what it has
                unpulled = self._batch_unpulled + end - start
                behind = unpulled >= step
                self._batch_unpulled = 0 if behind else unpulled
            outbox.put(part)  # one item: the sender takes it a run at a time
            if wait == self._ack_wait:
                self._in_order.extend_held(part)  # in deadline order: under _lock
        return end, behind
