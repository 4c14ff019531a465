"""The in-flight window and the pending acks of a NATS stream publisher.

:class:`AckWindow` is the table of publishes awaiting their acks, by
correlation id, and the window that bounds how many there are. Each pending
publish is resolved exactly once, by whoever takes it out of the table under
the window's lock: the ack (on ``liftbridge-nats-io``), its deadline (on
the client's ``liftbridge-ack-timer``), a write NATS refused, the connection
given up, or close. Futures and ack handlers are resolved here and their
user code handed to the publisher's ``liftbridge-callbacks`` runner, the
handlers of one batch of outcomes as one job. The ways other than an ack
are in :mod:`~liftbridge._publish._nats_failing`.

The table keeps admission order, which for publishes with the default ack
timeout is deadline order: the timer looks at its oldest entries
(:meth:`AckTimer.watch`) instead of each publish being queued for it a
second time. Publishes with a timeout of their own go on the timer's heap.

A publish's own Future (:attr:`AckWindow.future`) is resolved with its ack's
checked bytes and makes its :class:`Ack` (:func:`ack_of_wire`) when first
read: most pipelined publishes' Acks never are, and making one cost the I/O
thread ~1,500 instructions an ack (callgrind, ``bench/nats_cg.py``).
The Futures of publishes settled by their acks are let go of on the
publishing thread, one per later admission (:meth:`AckWindow.admit`), not on
the I/O thread that settled them: :class:`~liftbridge._publish._pending.Spent`,
whose module says why (CPython's young-collection tally). Each thread frees
what it makes: a publish whose Future alone awaits it goes there with its
entry (the I/O thread makes nothing for it); one with a handler or in a batch
gets its :class:`Ack` made on the I/O thread, which lets go of its entry as
it settles it (one made, one freed). An Ack keeps the ack's bytes, not its
protobuf (bytes are not tracked by the collector): each protobuf is freed as
soon as it is read.
A read of hundreds of acks then leaves the tally where it was: kept with
its Ack, each protobuf was one object more per ack and every read of more
than ~700 acks set off a young collection, which walks every Future made
since the last one (kept as (entry, protobuf) pairs, three more, at ~230).
Young collections per 40,000 Future publishes (``gc.callbacks``, window
1,024): ~660 with the Futures freed on the I/O thread, 83-91 kept as pairs,
26-37 with the protobuf kept, 18 now, none of them on the I/O thread.

Thread-safe: callers' threads admit, the I/O thread (acks), the acks
thread (failures) and the ack timer settle, any thread flushes.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from time import monotonic

from google.protobuf.message import DecodeError

from liftbridge._core._acks import Ack, AckPolicy, ack_of_wire, ack_outcome
from liftbridge._core._callbacks import CallbackRunner
from liftbridge._core._deadlines import AckTimer, Watched
from liftbridge._core._envelope import (
    HEADER_LENGTH,
    PLAIN_ACK_HEADER,
    ack_from_string,
    ack_wire,
)
from liftbridge._errors import EnvelopeError, LiftbridgeError, PublishWindowFullError
from liftbridge._publish._batch import settle_members
from liftbridge._publish._nats_failing import Failing, Outcome, call_handlers
from liftbridge._publish._nats_pending import AckHandler, Pending
from liftbridge._publish._pending import Spent
from liftbridge_api import api_pb2

logger = logging.getLogger(__name__)


class AckWindow(Failing):
    """Pending acks, their deadlines and the in-flight window. Thread-safe.
    Publishes no ack settles are failed as :class:`Failing` says.

    Args:
        max_inflight: publishes awaiting acks at most.
        ack_timeout: the default timeout: such publishes expire in admission
            order, others on the timer's heap.
        timer: the client's ack timer, looking at the deadlines from :meth:`watch` on.
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
        # _lock guards _refusal, _inflight, _admitted, _flushing, _short, _pending,
        # _claims and _rounds.
        self._settled = threading.Condition(self._lock)  # notified as the window frees up
        self._refusal: Callable[[], BaseException] | None = None  # makes admit() raise
        self._inflight = 0
        self._admitted = 0  # publishes admitted so far: the last one's seq
        self._flushing = 0  # threads waiting in flush()
        self._short = 0  # threads waiting for a slot (_wait_for_slot)
        # In admission order: for publishes with the default ack_timeout
        # (admitted under _lock) that is deadline order.
        self._pending: dict[str, Pending] = {}
        # Claim rounds open: publishes taken out of _pending in one round of
        # _lock, not all resolved yet (by the round's number, from _rounds).
        # flush() waits on those open once no publish it covers is pending.
        self._claims: dict[int, None] = {}
        self._rounds = 0
        # Publishes settled by acks, let go of one per admit() (see the module
        # docstring); appended by the I/O thread, popped by publishing threads.
        # Never more than max_inflight of them; flush() and close empty it.
        self._spent = Spent()
        self._watched = Watched(self._expire_due, ack_timeout)  # by the timer once watch()ed
        # The class of the publishes' Futures (self.future).
        self._raw = runner.future_made_on_read(bytes, ack_of_wire)
        self.future: Callable[[], Future[Ack | None]] = self._raw
        """``future()``: a publish's Future, resolved with its ack's checked
        wire bytes; its :class:`Ack` is made when first read (most pipelined
        publishes' Acks never are). Its done-callbacks run on ``runner``."""

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

    def watch(self) -> None:
        """Has the timer look at this window's deadlines (until :meth:`release_timer`)."""
        self._timer.watch(self._watched)

    def release_timer(self) -> None:
        """Stops the timer looking at this window's deadlines (also when
        :meth:`watch` was not called, or interrupted) and lets go of the
        settled futures it kept (closing)."""
        self._timer.unwatch(self._watched)
        self._spent.clear()

    def in_flight(self, correlation_id: str) -> bool:
        """Whether a publish with this correlation id awaits its ack (an
        unlocked look, for a caller's own id)."""
        return correlation_id in self._pending

    def admit(self, entry: Pending) -> None:
        """Takes a window slot and registers the publish and its deadline,
        ``entry.timeout`` from now. Waits (up to that timeout) while the window
        is full, except on the callbacks thread, where waiting would hold up
        every other handler.

        Raises:
            PublishWindowFullError: no slot in time (or none at once there).
            LiftbridgeError: the refusal (closed, connection lost).
        """
        timeout = entry.timeout
        kept = self._spent.kept  # Spent.free_one, written out (a call the less a publish)
        if kept:
            try:  # noqa: SIM105 (contextlib.suppress: three calls more)
                kept.popleft()
            except IndexError:  # another publishing thread took the last
                pass
        # The lock of _settled. A with, not acquire() then try: an interrupt
        # (Ctrl-C) landing between those two would leave the window wedged.
        # The slot is counted and the publish registered with no call between
        # (an interrupt, Ctrl-C, lands only at a call): both, or neither.
        with self._lock:
            if self._refusal is not None:
                raise self._refusal()
            if self._inflight >= self._max_inflight:
                self._wait_for_slot(timeout)
            deadline = monotonic() + timeout
            self._inflight += 1
            self._admitted += 1
            entry.seq = self._admitted
            entry.deadline = deadline
            self._pending[entry.correlation_id] = entry
        if timeout != self._ack_timeout:
            self._timer.schedule(entry.deadline, functools.partial(self._expire, [entry]))

    def admit_unacked(
        self,
        timeout: float,
        queue: Callable[[tuple[str, bytes, object]], None],
        item: tuple[str, bytes, object],
    ) -> None:
        """Takes a window slot for a publish that wants no ack
        (AckPolicy.NONE), waiting as :meth:`admit` does, and queues its frame
        (``queue(item)``: the connection's, a C call, made under the lock
        right after the slot is counted, so an interrupt (Ctrl-C) leaves
        both or neither). :meth:`release` gives the slot back once the frame
        is written (or dropped), so such publishes queue no more than the
        window either.

        Raises:
            PublishWindowFullError: no slot in time (or none at once there).
            LiftbridgeError: the refusal (closed, connection lost).
        """
        with self._lock:
            self._make_room(timeout)
            self._inflight += 1
            queue(item)

    def admit_some(self, entries: list[Pending], start: int, timeout: float) -> int:
        """Admits a batch's next part: ``entries[start:]`` as far as the
        window has room, at least one (waiting as :meth:`admit` does while it
        is full), registered in one round of the lock, each due ``timeout``
        from now. Never takes the window past ``max_inflight``.

        Returns:
            The index after the last entry admitted.

        Raises:
            PublishWindowFullError: no slot in time (or none at once there).
            LiftbridgeError: the refusal (closed, connection lost).
        """
        with self._lock:
            self._make_room(timeout)
            end = min(len(entries), start + self._max_inflight - self._inflight)
            deadline = monotonic() + timeout
            pending, seq = self._pending, self._admitted
            try:
                for index in range(start, end):
                    entry = entries[index]
                    seq += 1
                    entry.seq = seq
                    entry.deadline = deadline
                    pending[entry.correlation_id] = entry
            finally:  # a slot counted for each entry registered, even interrupted mid-loop
                self._inflight += seq - self._admitted
                self._admitted = seq
        self._spent.free(end - start)
        if timeout != self._ack_timeout:  # one timer entry for the part
            self._timer.schedule(deadline, functools.partial(self._expire, entries[start:end]))
        return end

    def _make_room(self, timeout: float) -> None:
        """With ``_lock`` held: raises the refusal, or waits while the window is full."""
        if self._refusal is not None:
            raise self._refusal()
        if self._inflight >= self._max_inflight:
            self._wait_for_slot(timeout)

    def _wait_for_slot(self, timeout: float) -> None:
        """Waits, holding ``_lock``, until the window has a slot (see :meth:`admit`)."""
        if self._runner.on_callback_thread:
            raise PublishWindowFullError(
                f"all {self._max_inflight} window slots await acks, and "
                "liftbridge-callbacks does not wait for them"
            )
        give_up = monotonic() + timeout
        self._short += 1
        try:
            while self._inflight >= self._max_inflight:
                left = give_up - monotonic()
                if left <= 0:
                    raise PublishWindowFullError(
                        f"all {self._max_inflight} window slots still awaited acks after "
                        f"{timeout:g}s"
                    )
                self._settled.wait(left)
                self.check_open()
        finally:
            self._short -= 1

    def flush(self, deadline: float | None) -> bool:
        """Waits until every publish admitted before the call has its outcome,
        until ``deadline`` (``time.monotonic()``; None: no limit): none of
        them pending, and every claim round open when that was first so
        (each may hold some of them, taken out but not resolved yet; a
        round opened later holds none) closed. Any number of threads may
        flush at once.

        Returns:
            False when the deadline passed first.
        """
        with self._settled:
            last = self._admitted
            self._flushing += 1
            try:
                rounds: list[int] | None = None  # the claim rounds to wait for, once known
                while True:
                    if rounds is None:
                        # _pending keeps admission order: its first entry is the oldest.
                        oldest = next(iter(self._pending.values()), None)
                        if oldest is None or oldest.seq > last:
                            rounds = list(self._claims)
                    if rounds is not None:
                        claims = self._claims
                        rounds = [r for r in rounds if r in claims]
                        if not rounds:
                            break
                    left = None if deadline is None else deadline - monotonic()
                    if left is not None and left <= 0:
                        return False
                    self._settled.wait(left)
            finally:
                self._flushing -= 1
        self._spent.clear()
        return True

    # --------------------------- liftbridge-nats-io, liftbridge-nats-acks --

    def settle_acks(self, payloads: list[bytes]) -> None:
        """Resolves the publishes a batch of raw ack payloads is for (the
        window's lock taken once for the batch). Each ack is parsed, strictly,
        and read as far as its correlation id, policy and error; for a
        publish still pending its :class:`Ack` keeps the serialized bytes
        (:func:`ack_of_wire`), not the protobuf. As on the gRPC path
        (:func:`ack_outcome`), an ack error or an ack policy this SDK does
        not know fails the publish at once."""
        # Read first, kept as objects the collector does not track (str,
        # bytes, the policy); each protobuf is freed as the next one is made.
        ids: list[str] = []
        wires: list[bytes] = []
        refused: dict[int, LiftbridgeError] = {}  # by index: rare, so an ack tests no type
        policies, ok = _POLICIES, _ACK_OK
        plain, size, from_string = PLAIN_ACK_HEADER, HEADER_LENGTH, ack_from_string
        for payload in payloads:
            try:
                if payload[:size] == plain:  # every ack the server sends: ack_wire's short way
                    wire = payload[size:]
                    pb = from_string(wire)
                else:
                    wire, pb = ack_wire(payload)
            except (EnvelopeError, DecodeError) as e:
                logger.warning("Dropping a message on ack inbox %s: %s", self._inbox, _bad(e))
                continue
            if pb.ackError != ok or pb.ackPolicy not in policies:
                refused[len(ids)] = _refusal(pb)
            ids.append(pb.correlationId)
            wires.append(wire)
        with self._lock:
            pop = self._pending.pop
            entries: list[Pending | None] = [pop(correlation_id, None) for correlation_id in ids]
            claimed = len(entries) - entries.count(None)
            self._rounds = token = self._rounds + 1  # _open_round, inline: a call less a read
            self._claims[token] = None
        try:
            calls: list[tuple[AckHandler, Ack | None, BaseException | None]] = []
            members: list[Outcome] = []
            kept: list[object] = []  # for the publishing threads to free (see the module docstring)
            raw = self._raw
            for index in range(len(entries)):  # _deliver, inlined: once per publish
                entry = entries[index]
                if entry is None:
                    logger.debug("Dropping an ack for %r: timed out already", ids[index])
                    continue
                entries[index] = None  # let go of as it settles (see the module docstring)
                ack: Ack | None = None
                error = refused.get(index) if refused else None
                future = entry.future
                if future.__class__ is raw and entry.handler is None and entry.batch is None:
                    # A Future alone, the commonest: given the wire, it makes the Ack when read.
                    kept.append(entry)  # with its Future: this thread made neither
                    if error is None:
                        future.set_result(wires[index])
                    else:
                        future.set_exception(error)
                    continue
                if error is None:
                    ack = ack_of_wire(wires[index])
                if entry.batch is not None:  # gathered below, as one run per batch
                    members.append((entry, ack, error))
                    continue
                if future is not None:
                    kept.append(future)
                    if error is None:
                        future.set_result(ack)
                    else:
                        future.set_exception(error)
                if entry.handler is not None:
                    calls.append((entry.handler, ack, error))
            self._spent.keep(kept)
            if members:
                settle_members(members)
            if calls:
                self._runner.submit(call_handlers, calls)
        finally:  # the round closed, its slots freed, even if interrupted
            self._close_round(token, claimed)

    # ------------------------------------------------------- internals --

    def release(self, count: int) -> None:
        """Gives back ``count`` slots of :meth:`admit_unacked`."""
        self._release(count)

    def _open_round(self) -> int:
        """With ``_lock`` held, as publishes are taken out of ``_pending``:
        opens a claim round for them (see :meth:`flush`) and returns its number."""
        self._rounds = token = self._rounds + 1
        self._claims[token] = None
        return token

    def _close_round(self, token: int, count: int) -> None:
        """Once the publishes of claim round ``token`` are resolved: closes
        it and frees their ``count`` slots, waking who waits on either."""
        with self._lock:
            del self._claims[token]
            self._inflight -= count
            if (self._short and self._inflight <= self._resume_at) or self._flushing:
                self._settled.notify_all()

    def _release(self, count: int) -> None:
        if not count:
            return
        # Notified only when someone waits: a paced publisher frees its one slot
        # an ack, and the Condition's with and notify_all are Python calls each.
        with self._lock:
            self._inflight -= count
            if (self._short and self._inflight <= self._resume_at) or self._flushing:
                self._settled.notify_all()


_ACK_OK = api_pb2.Ack.OK
_POLICIES = {policy.value: policy for policy in AckPolicy}


def _refusal(pb: api_pb2.Ack) -> LiftbridgeError:
    """The error of a wire Ack with an ack error or an ack policy this SDK
    does not know (:func:`ack_outcome`'s)."""
    ack, error = ack_outcome(pb)
    if error is None:  # an Ack after all: never, by the caller's test
        raise AssertionError(f"no refusal in {ack!r}")
    return error


def _bad(error: Exception) -> Exception:
    """What a dropped ack's log line says: :func:`ack_wire`'s error for
    one its short way in :meth:`AckWindow.settle_acks` failed to parse."""
    if isinstance(error, DecodeError):
        return EnvelopeError(f"envelope payload is not a valid Ack protobuf: {error}")
    return error
