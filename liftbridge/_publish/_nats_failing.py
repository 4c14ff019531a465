"""How a NATS stream publisher's publishes that no ack settles get their
outcome, for :class:`~liftbridge._publish._nats_window.AckWindow` (whose
state it uses): a write NATS refused, the connection given up or close
(``liftbridge-nats-acks``), a deadline passed or a leader found down
(``liftbridge-ack-timer``), a publish withdrawn after its caller's thread
was interrupted; and how outcomes are delivered (:meth:`Failing._deliver`):
Futures and batches resolved on the calling thread, ack handlers handed to
the publisher's ``liftbridge-callbacks`` runner as one job.

Each is taken out of the window's table under its lock and resolved after
it, exactly once: whoever takes it out resolves it. The publishes taken out
in one round of the lock are a claim round, open (for ``flush()`` to wait
on) until they are resolved.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from liftbridge._core._acks import Ack
from liftbridge._core._callbacks import CallbackRunner
from liftbridge._errors import AckTimeoutError, LeaderLostError, LiftbridgeError
from liftbridge._publish._batch import settle_members
from liftbridge._publish._nats_pending import AckHandler, Pending

logger = logging.getLogger(__name__)

# An outcome to deliver: the publish, its ack or its error.
Outcome = tuple[Pending, Ack | None, BaseException | None]


class Failing:
    """Failing pending publishes, and delivering outcomes."""

    _lock: threading.Lock  # the window's: guards _pending
    _pending: dict[str, Pending]
    _ack_timeout: float
    _runner: CallbackRunner
    _open_round: Callable[[], int]
    _close_round: Callable[[int, int], None]

    # ------------------------------------------------ a publishing thread --

    def withdraw(self, entries: list[Pending], start: int = 0) -> int:
        """After a publish (or a batch from ``entries[start]``) raised on its
        caller's thread, an interrupt (Ctrl-C) say: those admitted and still
        pending are taken out, their slots freed, their outcome a
        :class:`LiftbridgeError` (a flush may wait on them; the frame may or
        may not have gone out, and its ack is then dropped).

        Returns:
            The index of the first entry from ``start`` never admitted.
        """
        with self._lock:
            end = start
            while end < len(entries) and entries[end].seq:  # admitted: seq set
                end += 1
            pending = self._pending
            mine = [e for e in entries[start:end] if pending.get(e.correlation_id) is e]
            for entry in mine:
                del pending[entry.correlation_id]
            token = self._open_round()
        self._fail(token, mine, withdrawn)
        return end

    # --------------------------------------------- liftbridge-nats-acks --

    def settle(self, entry: Pending, error: BaseException) -> None:
        """Fails one publish with ``error``, if it is still pending."""
        with self._lock:
            if self._pending.get(entry.correlation_id) is not entry:
                return
            del self._pending[entry.correlation_id]
            token = self._open_round()
        self._fail(token, [entry], lambda _: error)

    def fail_subject(self, subject: str, error: Callable[[Pending], BaseException]) -> None:
        """Fails the pending publishes to ``subject`` with ``error(entry)``
        (the NATS server refused publishes there)."""
        with self._lock:
            entries = [e for e in self._pending.values() if e.subject == subject]
            for entry in entries:
                del self._pending[entry.correlation_id]
            token = self._open_round()
        self._fail(token, entries, error)

    def fail_all(self, error: Callable[[Pending], BaseException]) -> None:
        """Fails every pending publish with ``error(entry)``."""
        with self._lock:
            entries = list(self._pending.values())
            self._pending.clear()
            token = self._open_round()
        self._fail(token, entries, error)

    # ------------------------------------------- liftbridge-ack-timer --

    def fail_led_by(self, address: str) -> None:
        """Fails the publishes awaiting acks from the partition leader at
        ``address``, now found down: their acks can no longer come."""
        with self._lock:
            entries = [e for e in self._pending.values() if e.leader == address]
            for entry in entries:
                del self._pending[entry.correlation_id]
            token = self._open_round()
        if entries:
            logger.warning(
                "partition leader %s is down; failing %d NATS publish(es) awaiting its acks",
                address,
                len(entries),
            )
        self._fail(
            token,
            entries,
            lambda entry: LeaderLostError(
                f"the leader of {entry.subject!r} ({address}) went down before the "
                f"ack (correlation id {entry.correlation_id!r}) came; the message may "
                "or may not have been stored",
                address,
            ),
        )

    def _expire_due(self, now: float) -> float | None:
        """Fails the publishes with the default timeout whose deadline passed;
        returns the next one's deadline (None: none pending). The timer's
        poll (:meth:`AckTimer.watch`): quick, no user code."""
        default = self._ack_timeout
        due: list[Pending] = []
        upcoming = None
        with self._lock:
            for entry in self._pending.values():
                if entry.timeout != default:
                    continue  # on the timer's heap
                if entry.deadline > now:
                    upcoming = entry.deadline
                    break
                due.append(entry)
            if not due:
                return upcoming
            for entry in due:
                del self._pending[entry.correlation_id]
            token = self._open_round()
        self._fail(token, due, timeout_error)
        return upcoming

    def _expire(self, entries: list[Pending]) -> None:
        """Fails publishes with a timeout of their own whose deadline passed
        (one, or a batch's part), those still pending (on the timer's heap)."""
        with self._lock:
            due = [e for e in entries if self._pending.get(e.correlation_id) is e]
            if not due:
                return
            for entry in due:
                del self._pending[entry.correlation_id]
            token = self._open_round()
        self._fail(token, due, timeout_error)

    # ------------------------------------------------------- internals --

    def _fail(
        self, token: int, entries: list[Pending], error: Callable[[Pending], BaseException]
    ) -> None:
        """Delivers ``error(entry)`` to each of ``entries``, taken out of the
        table in claim round ``token`` (:meth:`AckWindow._open_round`), then
        closes that round, freeing their slots, even if interrupted."""
        try:
            self._deliver([(entry, None, error(entry)) for entry in entries])
        finally:
            self._close_round(token, len(entries))

    def _deliver(self, outcomes: list[Outcome]) -> None:
        """Resolves futures and batches; hands the handlers to the callbacks
        thread as one job."""
        calls: list[tuple[AckHandler, Ack | None, BaseException | None]] = []
        members: list[Outcome] = []
        for entry, ack, error in outcomes:
            if entry.batch is not None:
                members.append((entry, ack, error))
                continue
            future = entry.future
            if future is not None:
                if error is None:
                    future.set_result(ack)
                else:
                    future.set_exception(error)
            if entry.handler is not None:
                calls.append((entry.handler, ack, error))
        if members:
            settle_members(members)
        if calls:
            self._runner.submit(call_handlers, calls)


def timeout_error(entry: Pending) -> AckTimeoutError:
    return AckTimeoutError(
        f"no ack within {entry.timeout:g}s for the message published on "
        f"{entry.subject!r} (correlation id {entry.correlation_id!r}); "
        "it may or may not have been stored"
    )


def withdrawn(entry: Pending) -> LiftbridgeError:
    return LiftbridgeError(
        f"the publish on {entry.subject!r} (correlation id {entry.correlation_id!r}) was "
        "interrupted and withdrawn; not sent, or as it was"
    )


def call_handlers(calls: list[tuple[AckHandler, Ack | None, BaseException | None]]) -> None:
    """Runs a batch of ack handlers, in order, on ``liftbridge-callbacks``;
    one that raises is logged and the next one runs."""
    for handler, ack, error in calls:
        try:
            handler(ack, error)
        except Exception:
            logger.exception("ack handler %r raised; ignored", handler)
