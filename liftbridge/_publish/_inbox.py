"""Publishes that name an ack inbox go by the unary Publish RPC.

The v1.9.0 server replaces the ack inbox of every request on a PublishAsync
stream with the stream's own (it reads the acks from there), so an
``ack_inbox`` sent on the SDK's streams would be silently ignored. The unary
Publish RPC keeps it: the server publishes the ack envelope to that NATS
subject, listens there itself, and returns the ack in the response.

``publish_async`` with an ack inbox makes the call on a bounded pool of
threads (:class:`InboxPool`, ``liftbridge-inbox-publish_N``, started on first
use), which resolves the Future and hands the ack handler to the client's
``liftbridge-callbacks`` thread, like every other publish. Each holds a slot
of the client's one ``max_inflight`` window (:meth:`Publisher.borrow`) from
the call until its outcome, shared with the publishes on the PublishAsync
stream: when the window is full the caller waits for a slot, and raises
:class:`PublishWindowFullError` without one, whichever path it takes.

An interrupt (Ctrl-C) anywhere in :meth:`InboxPool.publish_async` leaves the
publish out or in, never half: a job no worker took yet is withdrawn (its
slot given back, its outcome an error); one a worker took runs, and gives
the slot back as it ends. A slot kept for good would shrink the window for
every later publish.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass

from liftbridge._core._acks import Ack, ack_from_proto
from liftbridge._core._callbacks import CallbackRunner
from liftbridge._errors import (
    AckMismatchError,
    AckTimeoutError,
    ClientClosedError,
    DeadlineExceededError,
    LiftbridgeError,
    UnavailableError,
)
from liftbridge._locks import start_thread
from liftbridge._publish._publisher import AckHandler, Publisher
from liftbridge_api import api_pb2

_log = logging.getLogger(__name__)

Invoke = Callable[[api_pb2.PublishRequest, float], api_pb2.PublishResponse]
"""Makes one unary Publish call with the given deadline in seconds."""


def publish(invoke: Invoke, request: api_pb2.PublishRequest, wait: float) -> Ack | None:
    """One unary publish, waiting up to ``wait`` seconds for its ack.

    Returns:
        The ack, or None for AckPolicy.NONE.

    Raises:
        AckTimeoutError: no ack in time (the message may have been stored).
        AckMismatchError: the server answered with another publish's ack
            (read on an ack inbox they share), never handed on as this one's.
        LiftbridgeError: the server refused the message, or the call failed.
    """
    try:
        response = invoke(request, wait)
    except DeadlineExceededError as e:
        raise AckTimeoutError(
            f"no ack for the publish to {request.stream!r} partition {request.partition} "
            f"within {wait:g}s; the message may or may not have been stored"
        ) from e
    if request.ackPolicy == api_pb2.NONE or not response.HasField("ack"):
        return None
    if response.ack.correlationId != request.correlationId:  # another publish's
        raise mismatch(request.correlationId, request.stream, request.ackInbox, response.ack)
    ack = ack_from_proto(response.ack)
    if ack.error is not None:
        raise ack.error
    return ack


def mismatch(correlation_id: str, to: str, inbox: str, other: api_pb2.Ack) -> AckMismatchError:
    """The error of publish ``correlation_id`` (to stream or subject ``to``)
    answered with ``other``, another publish's ack read on the ``inbox`` they
    share (server v1.9.0 answers with the first ack it reads there)."""
    return AckMismatchError(
        f"the server answered publish {correlation_id!r} to {to!r} with the ack of publish "
        f"{other.correlationId!r} (offset {other.offset}), read on the ack inbox {inbox!r} it "
        "shares with other publishes in flight; the message may or may not have been stored",
        other.correlationId,
        other.offset,
    )


WORKERS = 8
"""Threads of an :class:`InboxPool` at most: each waits on one unary call."""


@dataclass(slots=True, eq=False)
class _Job:
    """A publish queued on the pool. Whoever marks it taken first, under the
    pool's lock, owns its window slot: a worker (which sends it) or the
    caller that withdraws it after an interrupt."""

    request: api_pb2.PublishRequest
    handler: AckHandler | None
    future: Future[Ack | None]
    wait: float = 0.0  # seconds left for its call, set as it is queued
    taken: bool = False


class InboxPool:
    """The ``publish_async`` calls that name an ack inbox, on a bounded pool
    inside the client's publish window. Thread-safe.

    Args:
        invoke: makes one unary Publish call.
        callbacks: the client's callbacks runner (Futures, ack handlers).
        window: the client's publisher, whose ``max_inflight`` window each
            call takes a slot of while it is under way (queued or running).
    """

    def __init__(self, invoke: Invoke, callbacks: CallbackRunner, window: Publisher) -> None:
        self._invoke = invoke
        self._callbacks = callbacks
        self._window = window
        # _lock guards _threads, _idle, _closed and each job's taken. Jobs wait
        # in _jobs; a worker takes one at a time and ends at a None (one per
        # worker on close), which it passes on (to a worker not listed yet).
        self._lock = threading.Lock()
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []  # in order; the last may not be started yet
        self._next = self._worker(0)  # the worker started next, once one is needed
        self._idle = 0  # workers waiting for a job
        self._closed = False

    def publish_async(
        self, request: api_pb2.PublishRequest, wait: float, handler: AckHandler | None
    ) -> Future[Ack | None]:
        """Queues :func:`publish` on the pool; its Future resolves within
        ``wait`` seconds (plus the pool's queueing while it is busy).

        Raises:
            ClientClosedError: the pool is closed (the publish was not sent).
            PublishWindowFullError: the client's window stayed full for
                ``wait`` seconds (the publish was not sent).
        """
        started = time.monotonic()
        with self._lock:
            if self._closed:
                raise ClientClosedError("the client is closed; the publish was not sent")
        job = _Job(request, handler, self._callbacks.future())
        self._window.borrow(wait)
        # The slot is this publish's from here (borrow takes it all or not at
        # all); an interrupt anywhere in the try hands it to _withdraw.
        try:
            with self._lock:
                if self._closed:
                    raise ClientClosedError("the client is closed; the publish was not sent")
                job.wait = max(0.0, wait - (time.monotonic() - started))
                if self._idle:
                    self._idle -= 1  # that worker takes this job
                elif len(self._threads) < WORKERS or self._threads[-1] is self._next:
                    # A worker made ahead, listed, then started whole or not at
                    # all (start_thread): a call interrupted (Ctrl-C) before
                    # the next one is made left it listed with no job, and the
                    # next call gives it its job (starting it, if need be).
                    worker = self._next
                    if not self._threads or self._threads[-1] is not worker:
                        self._threads.append(worker)
                    start_thread(worker)
                    self._next = self._worker(len(self._threads))
                self._jobs.put(job)
        except ClientClosedError:  # closed meanwhile: the job never queued
            self._window.give_back()
            raise
        except BaseException:
            self._withdraw(job)
            raise
        return job.future

    def _worker(self, n: int) -> threading.Thread:
        return threading.Thread(
            target=self._work, name=f"liftbridge-inbox-publish_{n}", daemon=True
        )

    def _withdraw(self, job: _Job) -> None:
        """After ``publish_async`` raised with the slot taken (an interrupt,
        Ctrl-C): gives the slot back and fails the publish, unless a
        worker took the job (it runs, and frees the slot as it ends)."""
        with self._lock:
            if job.taken:
                return
            job.taken = True  # a worker that meets it skips it
        self._window.give_back()
        error = LiftbridgeError(
            f"publish {job.request.correlationId} was interrupted and withdrawn; not sent"
        )
        notify = job.handler if job.request.ackPolicy != api_pb2.NONE else None
        self._callbacks.settle(job.future, notify, None, error)

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            with self._lock:
                mine = not job.taken
                job.taken = True
            if mine:
                try:
                    self._run(job.request, job.wait, job.handler, job.future)
                except Exception:  # _run settles every outcome; this is a bug, not an outcome
                    _log.exception("an inbox publish failed unexpectedly")
            with self._lock:
                self._idle += 1
        self._jobs.put(None)  # for the next worker: close() puts one per worker listed

    def _run(
        self,
        request: api_pb2.PublishRequest,
        wait: float,
        handler: AckHandler | None,
        future: Future[Ack | None],
    ) -> None:
        ack: Ack | None = None
        error: LiftbridgeError | None = None
        try:
            ack = publish(self._invoke, request, wait)
        except LiftbridgeError as e:
            error = e
        except Exception as e:  # e.g. grpc's ValueError for a channel closed meanwhile
            _log.debug("publish %s failed", request.correlationId, exc_info=True)
            error = UnavailableError(f"the publish failed: {e!r}")
            error.__cause__ = e
        finally:
            self._window.give_back()
        notify = handler if request.ackPolicy != api_pb2.NONE else None
        self._callbacks.settle(future, notify, ack, error)

    def close(self) -> None:
        """Takes no more publishes; those queued still run (the client's
        connections are closed by then, so they fail at once) and the pool's
        threads end after them (see :meth:`join`). Idempotent; does not wait.
        Each call tells every thread to end: one more ending marker left
        queued is harmless, and a close interrupted (Ctrl-C) before it told
        them all is finished by the next."""
        with self._lock:
            self._closed = True
            workers = len(self._threads)
        for _ in range(workers):
            self._jobs.put(None)

    def join(self, deadline: float) -> None:
        """Waits for the pool's threads (after :meth:`close`) until ``deadline``
        (``time.monotonic()``) at most; never joins the calling thread."""
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            # ident: started (a start interrupted, Ctrl-C, may never have been).
            if thread is not threading.current_thread() and thread.ident is not None:
                thread.join(max(0.0, deadline - time.monotonic()))
                if thread.is_alive():
                    _log.warning("thread %s did not stop in time", thread.name)
