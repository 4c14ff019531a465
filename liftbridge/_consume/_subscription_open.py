"""How a subscription opens its stream: the :class:`SubscriptionOpening` half
of :class:`~liftbridge._consume._subscription.Subscription` (whose state it
reads: the router, the request, the timeouts, the closed event, and the call
and brokers it records under the subscription's lock).

One opening sends the Subscribe and takes the handshake within a bound (a
timer cancels a handshake that never comes). Opening with retries does that
within ``resubscribe_wait``, backing off between tries and refreshing the
metadata with a short deadline of its own, so one stalled broker cannot spend
the whole wait; "no such partition" is retried while re-subscribing to a
partition the metadata still lists. Every method here runs on the thread
opening (the caller's for the first opening, the subscription's after).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

from liftbridge._core._router import Deadline, Leader, Replica, Router, Stream
from liftbridge._errors import (
    ClientClosedError,
    ConnectionLostError,
    LiftbridgeError,
    NoSuchPartitionError,
    NotLeaderError,
    PartitionPausedError,
    StreamDeletedError,
    resubscribable,
)
from liftbridge._locks import start_thread
from liftbridge_api import api_pb2

_log = logging.getLogger(__name__)

_REFRESH_WAIT = 2.0
"""Deadline of one metadata refresh made while re-subscribing."""


@dataclass(frozen=True)
class _Request:
    """Everything needed to (re)build a SubscribeRequest."""

    stream: str
    partition: int
    base: api_pb2.SubscribeRequest


class SubscriptionOpening:
    """A subscription's opening of its stream (see the module docstring)."""

    _router: Router
    _request: _Request
    _resubscribe_wait: float
    _open_timeout: float
    _closed: threading.Event
    _lock: threading.Lock
    _call: Stream[api_pb2.Message] | None
    _broker: str | None
    _last_broker: str | None

    def _build(self, resume_from: int | None) -> api_pb2.SubscribeRequest:
        request = api_pb2.SubscribeRequest()
        request.CopyFrom(self._request.base)
        if resume_from is not None:
            request.startPosition = api_pb2.OFFSET
            request.startOffset = resume_from
            request.resume = False
        return request

    def _open(
        self, resume_from: int | None, handshake: float | None = None
    ) -> Iterator[api_pb2.Message]:
        """Opens the stream and consumes the handshake (within ``handshake``
        seconds, default ``open_timeout``); raises mapped errors."""
        handshake = self._open_timeout if handshake is None else handshake
        stream, partition = self._request.stream, self._request.partition
        target = (Replica if self._request.base.readISRReplica else Leader)(stream, partition)
        address, call = self._router.open_stream(
            "Subscribe",
            self._build(resume_from),
            target=target,
            deadline=Deadline(handshake),
        )
        with self._lock:
            self._call = call
            self._broker = address
            self._last_broker = address
        if self._closed.is_set():
            call.cancel()
        try:
            # The first message is an empty handshake; errors arrive here.
            # A timer cancels a handshake that never comes (e.g. a hung broker).
            timer = threading.Timer(handshake, call.cancel)
            timer.name = f"liftbridge-sub-open-{self._request.stream}-{self._request.partition}"
            timer.daemon = True
            try:
                start_thread(timer)  # interrupted (Ctrl-C) under way, it is cancelled too
                next(call)
            finally:
                timer.cancel()
        except LiftbridgeError as e:
            if self._closed.is_set():
                raise ClientClosedError("subscription closed") from e
            if isinstance(e, PartitionPausedError) and not e.segment_closed:
                raise PartitionPausedError(
                    f"partition {self._request.partition} of {self._request.stream!r} is paused; "
                    f"subscribe with resume=True to resume it ({e})"
                ) from e
            raise
        except StopIteration:
            raise ConnectionLostError(
                "the subscription stream ended during the handshake"
            ) from None
        return call

    def _open_with_retry(
        self, resume_from: int | None, wait: float | None = None
    ) -> Iterator[api_pb2.Message]:
        """Opens the stream, retrying within ``wait`` seconds (default
        ``resubscribe_wait``); one opening's handshake gets at most what is left."""
        wait = self._resubscribe_wait if wait is None else wait
        deadline = time.monotonic() + wait
        attempt = 0
        while True:
            try:
                # One handshake never outlasts the whole wait.
                handshake = min(self._open_timeout, max(0.05, deadline - time.monotonic()))
                return self._open(resume_from, handshake)
            except LiftbridgeError as e:
                attempt += 1
                if self._closed.is_set() or self._router.closed:
                    raise
                # "No such partition" is final on the first opening, not
                # while re-subscribing to a partition the metadata lists.
                reopening = attempt > 1 or resume_from is not None
                retry = resubscribable(e) or (reopening and self._still_listed(e))
                if not retry or time.monotonic() >= deadline:
                    raise
                wait = random.uniform(0.01, min(0.5, 0.05 * 2**attempt))
                _log.debug(
                    "subscribe to %s/%s failed (%s); retrying in %.3fs",
                    self._request.stream,
                    self._request.partition,
                    e,
                    wait,
                )
                if self._closed.wait(wait):
                    raise ClientClosedError("subscription closed") from e
                self._router.refresh_quietly(
                    Deadline(min(_REFRESH_WAIT, max(0.0, deadline - time.monotonic())))
                )
                if isinstance(e, (NotLeaderError, PartitionPausedError)) and self._router.is_paused(
                    self._request.stream, self._request.partition
                ):
                    raise PartitionPausedError(
                        f"partition {self._request.partition} of {self._request.stream!r} is "
                        "paused; subscribe with resume=True to resume it"
                    ) from e

    def _still_listed(self, error: LiftbridgeError) -> bool:
        """True for "no such partition" from a broker while the cached
        metadata still lists the partition: a restarted leader serves its
        API before it has replayed its streams. A deleted stream is final."""
        if not isinstance(error, NoSuchPartitionError) or isinstance(error, StreamDeletedError):
            return False
        listed = self._router.metadata.partition(self._request.stream, self._request.partition)
        return listed is not None
