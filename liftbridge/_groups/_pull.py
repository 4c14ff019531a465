"""Pull-style consumption for a consumer-group member: a bounded buffer the
partitions' threads fill and ``fetch``/``next``/iteration empty.

A message counts as handled (and so may be committed) once the caller comes
back for more: the next ``fetch`` or ``next`` marks everything the previous
one returned as done, as Kafka's ``poll`` does; :meth:`PullBuffer.done` does
it at once (``Consumer.checkpoint`` calls it). So a crash between taking a
message and finishing it hands it to the next owner again: at least once,
never skipped.

A full buffer blocks the partitions' threads, so gRPC flow control slows the
server down instead of memory growing. Messages of a partition the member
lost in a rebalance are dropped from the buffer (the new owner reads them).

The buffer is a :class:`~liftbridge._consume._handoff.Handoff`, as for an iterated
subscription: the taker moves everything queued at once instead of one
``queue.Queue`` item per message, which traded the GIL between the partition's
thread and the taking one for every message.
"""

from __future__ import annotations

import threading
import time

from liftbridge._consume._handoff import Empty, Handoff
from liftbridge._consume._subscription import Handler
from liftbridge._core._messages import Message
from liftbridge._errors import ClientClosedError, DeadlineExceededError, LiftbridgeError
from liftbridge._groups._partitions import Assigned

DEFAULT_BUFFER = 1000
"""Messages a pulling member holds at most, over all its partitions."""

_PUT_SLICE = 0.1
"""Seconds a partition's thread waits for room before looking whether its
partition was revoked meanwhile."""
_LINGER = 0.0005
"""Seconds a taker that emptied its batch while messages stream in waits for
more before asking to be woken (as an iterated subscription does)."""


class PullBuffer:
    """The buffer of one pulling member.

    Thread-safety: ``offer`` runs on partitions' threads; ``fetch``,
    ``done`` and ``fail`` may be called from any thread (takers are
    serialized).
    """

    def __init__(self, size: int = DEFAULT_BUFFER) -> None:
        self._buffer: Handoff[tuple[Assigned, Message]] = Handoff(size, linger=_LINGER)
        self._take_lock = threading.Lock()  # one taker at a time; guards _taken, _error
        self._taken: dict[Assigned, int] = {}  # entry -> last offset handed out, not done
        self._error: LiftbridgeError | None = None
        self._closed = threading.Event()
        # When the last fetch ended (None while one runs): a pinned member
        # that does not pull for ``pin_timeout`` gives the pin up (record 003).
        self._pulled_at: float | None = time.monotonic()

    def offer(self, entry: Assigned, message: Message) -> None:
        """Queues a message (on the partition's thread), waiting for room
        unless the partition is revoked or the buffer closed meanwhile."""
        while not entry.revoked and not self._closed.is_set():
            if self._buffer.put((entry, message), _PUT_SLICE):
                return

    def fail(self, error: LiftbridgeError) -> None:
        """Keeps an error for the next ``fetch`` or ``next`` to raise (the
        first one, until raised)."""
        with self._take_lock:
            if self._error is None:
                self._error = error

    def close(self) -> None:
        """Wakes every taker and offerer; takers then raise ClientClosedError."""
        self._closed.set()
        self._buffer.close()

    def idle_at(self, seconds: float, pinned_since: float | None) -> float | None:
        """``time.monotonic()`` at which the member will have held the pin
        ``seconds`` without a ``fetch``/``next`` (record 003: a pinned member
        that stops pulling gives the pin up). Only pulls missed while pinned
        count: a standby has nothing to pull. None while not pinned
        (``pinned_since`` None, a ``time.monotonic()`` otherwise) or while a
        pull runs."""
        last = self._pulled_at
        if last is None or pinned_since is None:
            return None
        return max(last, pinned_since) + seconds

    def idle_for(self, seconds: float, pinned_since: float | None) -> bool:
        """True once :meth:`idle_at` has passed."""
        at = self.idle_at(seconds, pinned_since)
        return at is not None and time.monotonic() >= at

    def done(self) -> None:
        """Marks every message handed out so far as handled."""
        with self._take_lock:
            self._settle()

    def fetch(self, max_messages: int, timeout: float) -> list[Message]:
        """Takes up to ``max_messages``, waiting up to ``timeout`` seconds for
        the first; the ones returned before count as handled now.

        Raises:
            ClientClosedError: the consumer closed.
            LiftbridgeError: a failure reported since the last call.
        """
        deadline = time.monotonic() + timeout
        with self._take_lock:
            self._pulled_at = None
            try:
                return self._fetch(max_messages, deadline)
            finally:
                self._pulled_at = time.monotonic()

    def _fetch(self, max_messages: int, deadline: float) -> list[Message]:
        """Under the take lock."""
        self._settle()
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        batch: list[Message] = []
        while len(batch) < max_messages:
            if self._closed.is_set():
                raise ClientClosedError("the consumer is closed")
            wait = max(0.0, deadline - time.monotonic()) if not batch else 0.0
            try:
                entry, message = self._buffer.get(wait)
            except Empty:
                if self._closed.is_set():
                    continue  # woken by close(): the loop raises
                break
            if entry.revoked:
                continue  # its new owner reads it
            batch.append(message)
            self._taken[entry] = message.offset
        return batch

    def _settle(self) -> None:
        for entry, offset in self._taken.items():
            if entry.handled is None or offset > entry.handled:
                entry.handled = offset
        self._taken.clear()


def next_message(buffer: PullBuffer, timeout: float) -> Message:
    """One message from ``buffer``.

    Raises:
        DeadlineExceededError: none within ``timeout`` seconds.
    """
    batch = buffer.fetch(1, timeout)
    if not batch:
        raise DeadlineExceededError(f"no message within {timeout:g}s")
    return batch[0]


def pull_errors(pull: PullBuffer | None) -> Handler:
    """The handler of a pulling member: errors wait for the next fetch."""

    def keep(message: Message | None, error: BaseException | None) -> None:
        if pull is not None and isinstance(error, LiftbridgeError):
            pull.fail(error)

    return keep
