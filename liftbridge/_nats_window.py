"""The in-flight window and the pending acks of a NATS stream publisher.

:class:`AckWindow` is the table of publishes awaiting their acks, by
correlation id, and the window that bounds how many there are. Each pending
publish is resolved exactly once, by whoever takes it out of the table under
the window's lock: the ack (on ``liftbridge-nats-io``), its deadline (on
the client's ``liftbridge-ack-timer``, where it was registered when admitted),
a write NATS refused, the connection given up, or close. Futures and ack
handlers are resolved here and their user code handed to the publisher's
``liftbridge-callbacks`` runner.

Thread-safe: callers' threads admit, the I/O thread (acks), the acks
thread (failures) and the ack timer settle, any thread flushes.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from time import monotonic

from liftbridge._callbacks import CallbackRunner
from liftbridge._deadlines import AckTimer
from liftbridge._envelope import unmarshal_ack
from liftbridge._errors import (
    AckTimeoutError,
    EnvelopeError,
    LeaderLostError,
    PublishWindowFullError,
)
from liftbridge._messages import Ack

logger = logging.getLogger(__name__)

AckHandler = Callable[[Ack | None, BaseException | None], None]


@dataclass(slots=True, eq=False)
class Pending:
    """A publish waiting for its ack. Whoever takes it out of the window's
    table (under the window's lock) resolves it, and marks it ``done`` there."""

    correlation_id: str
    future: Future[Ack | None]
    handler: AckHandler | None
    timeout: float
    subject: str
    deadline: float = 0.0  # time.monotonic(), set when admitted
    seq: int = 0  # the order publishes were admitted in, for flush()
    leader: str | None = None  # the partition leader's address when published, if known
    done: bool = field(default=False)  # resolved: the ack timer drops it


class AckWindow:
    """Pending acks, their deadlines and the in-flight window. Thread-safe.

    Args:
        max_inflight: publishes awaiting acks at most.
        ack_timeout: the default timeout: such publishes go on the timer's
            in-order queue, others on its heap.
        timer: the client's ack timer.
        runner: where ack handlers and done-callbacks run.
        inbox: the ack inbox, for log messages.
    """

    def __init__(
        self,
        *,
        max_inflight: int,
        ack_timeout: float,
        timer: AckTimer,
        runner: CallbackRunner,
        inbox: str,
    ) -> None:
        self._max_inflight = max_inflight
        self._resume_at = max_inflight - max(1, max_inflight // 8)
        self._ack_timeout = ack_timeout
        self._timer = timer
        self._runner = runner
        self._inbox = inbox
        self._lock = threading.Lock()
        # _lock guards _refusal, _inflight, _admitted, _flushing and _pending.
        self._settled = threading.Condition(self._lock)  # notified as the window frees up
        self._refusal: Callable[[], BaseException] | None = None  # makes admit() raise
        self._inflight = 0
        self._admitted = 0  # publishes admitted so far: the last one's seq
        self._flushing = 0  # threads waiting in flush()
        self._pending: dict[str, Pending] = {}  # in admission order
        # Publishes with the default ack_timeout are appended under _lock, so
        # in deadline order.
        self._in_order = timer.ordered(self._expire, wait=ack_timeout)

    # ------------------------------------------------------ any thread --

    def refuse(self, error: Callable[[], BaseException], *, replace: bool) -> bool:
        """From now on :meth:`check_open` and :meth:`admit` raise ``error()``
        (waiting admissions too). Unless ``replace``, an earlier refusal stays.

        Returns:
            Whether this refusal took effect.
        """
        with self._lock:
            if self._refusal is not None and not replace:
                return False
            self._refusal = error
            self._settled.notify_all()
            return True

    def check_open(self) -> None:
        """Raises the refusal, if any."""
        refusal = self._refusal
        if refusal is not None:
            raise refusal()

    def release_timer(self) -> None:
        """Stops the timer looking at this window's in-order queue (closing)."""
        self._timer.release(self._in_order)

    def admit(self, entry: Pending, timeout: float) -> None:
        """Takes a window slot and registers the publish and its deadline.
        Waits (up to ``timeout``) while the window is full, except on the
        callbacks thread, where waiting would hold up every other handler.

        Raises:
            PublishWindowFullError: no slot in time (or none at once there).
            LiftbridgeError: the refusal (closed, connection lost).
        """
        with self._lock:  # the lock of _settled
            if self._refusal is not None:
                raise self._refusal()
            if self._inflight >= self._max_inflight:
                self._wait_for_slot(timeout)
            self._inflight += 1
            self._admitted += 1
            entry.seq = self._admitted
            entry.deadline = monotonic() + timeout
            self._pending[entry.correlation_id] = entry
            in_order = timeout == self._ack_timeout
            if in_order:
                self._in_order.append(entry)
        if not in_order:
            self._timer.schedule(entry.deadline, functools.partial(self._expire, entry))

    def _wait_for_slot(self, timeout: float) -> None:
        """Waits, holding ``_lock``, until the window has a slot (see :meth:`admit`)."""
        if self._runner.on_callback_thread:
            raise PublishWindowFullError(
                f"all {self._max_inflight} window slots await acks, and "
                "liftbridge-callbacks does not wait for them"
            )
        give_up = monotonic() + timeout
        while self._inflight >= self._max_inflight:
            left = give_up - monotonic()
            if left <= 0:
                raise PublishWindowFullError(
                    f"all {self._max_inflight} window slots still awaited acks after {timeout:g}s"
                )
            self._settled.wait(left)
            self.check_open()

    def flush(self, deadline: float | None) -> bool:
        """Waits until every publish admitted before the call has its outcome,
        until ``deadline`` (``time.monotonic()``; None: no limit).

        Returns:
            False when the deadline passed first.
        """
        with self._settled:
            last = self._admitted
            self._flushing += 1
            try:
                # _pending keeps admission order: its first entry is the oldest.
                while (oldest := next(iter(self._pending.values()), None)) is not None:
                    if oldest.seq > last:
                        break
                    left = None if deadline is None else deadline - monotonic()
                    if left is not None and left <= 0:
                        return False
                    self._settled.wait(left)
            finally:
                self._flushing -= 1
        return True

    # --------------------------- liftbridge-nats-io, liftbridge-nats-acks --

    def settle_acks(self, payloads: list[bytes]) -> None:
        """Resolves the publishes a batch of raw ack payloads is for (the
        window's lock taken once for the batch)."""
        acks: list[Ack] = []
        for payload in payloads:
            try:
                acks.append(unmarshal_ack(payload))
            except EnvelopeError as e:
                logger.warning("Dropping a message on ack inbox %s: %s", self._inbox, e)
        matched: list[tuple[Pending, Ack]] = []
        late: list[str] = []
        with self._lock:
            pop = self._pending.pop
            for ack in acks:
                entry = pop(ack.correlation_id, None)
                if entry is None:
                    late.append(ack.correlation_id)
                else:
                    entry.done = True
                    matched.append((entry, ack))
        for correlation_id in late:
            logger.debug("Dropping an ack for %r: timed out already", correlation_id)
        submit = self._runner.submit
        for entry, ack in matched:  # _resolve, inlined: once per publish
            error = ack.error
            if error is None:
                entry.future.set_result(ack)
                if entry.handler is not None:
                    submit(entry.handler, ack, None)
            else:
                self._resolve(entry, None, error)
        self._release(len(matched))

    def settle(self, entry: Pending, error: BaseException) -> None:
        """Fails one publish with ``error``, if it is still pending."""
        with self._lock:
            mine = self._pending.pop(entry.correlation_id, None) is entry
            entry.done = entry.done or mine
        if mine:
            self._resolve(entry, None, error)
            self._release(1)

    def fail_all(self, error: Callable[[Pending], BaseException]) -> None:
        """Fails every pending publish with ``error(entry)``."""
        with self._lock:
            entries = list(self._pending.values())
            self._pending.clear()
            for entry in entries:
                entry.done = True
        for entry in entries:
            self._resolve(entry, None, error(entry))
        self._release(len(entries))

    # ------------------------------------------- liftbridge-ack-timer --

    def fail_led_by(self, address: str) -> None:
        """Fails the publishes awaiting acks from the partition leader at
        ``address``, now found down: their acks can no longer come."""
        with self._lock:
            entries = [e for e in self._pending.values() if e.leader == address]
            for entry in entries:
                del self._pending[entry.correlation_id]
                entry.done = True
        if entries:
            logger.warning(
                "partition leader %s is down; failing %d NATS publish(es) awaiting its acks",
                address,
                len(entries),
            )
        for entry in entries:
            self._resolve(
                entry,
                None,
                LeaderLostError(
                    f"the leader of {entry.subject!r} ({address}) went down before the ack "
                    f"(correlation id {entry.correlation_id!r}) came; the message may or may "
                    "not have been stored",
                    address,
                ),
            )
        self._release(len(entries))

    def _expire(self, entry: Pending) -> None:
        """Fails a publish whose deadline passed, if it is still pending.
        Runs on the client's ``liftbridge-ack-timer``: quick, no user code."""
        with self._lock:
            if entry.done or self._pending.get(entry.correlation_id) is not entry:
                return
            del self._pending[entry.correlation_id]
            entry.done = True
        self._resolve(
            entry,
            None,
            AckTimeoutError(
                f"no ack within {entry.timeout:g}s for the message published on "
                f"{entry.subject!r} (correlation id {entry.correlation_id!r}); "
                "it may or may not have been stored"
            ),
        )
        self._release(1)

    # ------------------------------------------------------- internals --

    def _resolve(self, entry: Pending, ack: Ack | None, error: BaseException | None) -> None:
        if error is None:
            entry.future.set_result(ack)
        else:
            entry.future.set_exception(error)
        if entry.handler is not None:
            self._runner.submit(entry.handler, ack, error)

    def _release(self, count: int) -> None:
        if not count:
            return
        with self._settled:
            self._inflight -= count
            if self._inflight <= self._resume_at or self._flushing:
                self._settled.notify_all()
