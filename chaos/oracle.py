"""The Jepsen-style oracle of the fault matrix.

Every publish carries a unique value and ends in one of three states: acked,
failed with a typed error, or no answer (its future still unresolved when the
run's bound passed). After the fault, every partition is read back with a
fresh client, and the outcome is compared with what the server holds:

* lost: acked but absent (must be 0 wherever the server promises durability);
* unexpected: present but never published;
* recovered: failed (the SDK said so) but present: allowed for "may or may
  not have been stored" errors, never for "never sent";
* duplicates: present more than once.

Each call's overshoot is how long past its own deadline it resolved.
Subscriptions running through the fault are checked for gaps and repeats.
"""

from __future__ import annotations

import collections
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field

import liftbridge

NEVER_SENT = "never sent"
"""The SDK's words for a publish it dropped before sending it."""


@dataclass
class Outcome:
    """One publish: its value, when it was made and due, and how it ended."""

    value: bytes
    started: float
    deadline: float
    ended: float | None = None
    acked: bool = False
    error: str | None = None  # the exception's class name
    error_text: str = ""
    typed: bool = True  # False when the error was not a LiftbridgeError


class Ledger:
    """Records publishes and their outcomes. Thread-safe."""

    def __init__(self, run: str) -> None:
        self.run = run
        self._lock = threading.Lock()  # guards _outcomes, _seq, calls
        self._outcomes: list[Outcome] = []
        self._seq = 0
        self.calls: list[tuple[str, float]] = []  # (call name, overshoot s) of other calls

    def next_value(self) -> bytes:
        """A value never used before in this run."""
        with self._lock:
            self._seq += 1
            return f"{self.run}-{self._seq}".encode()

    def publish(
        self, client: liftbridge.Client, stream: str, *, timeout: float, **options: object
    ) -> Future[liftbridge.Ack | None]:
        """``publish_async`` of a fresh value, recorded; the caller's thread blocks
        only as long as the SDK's window makes it."""
        value = self.next_value()
        started = time.monotonic()
        outcome = Outcome(value, started, started + timeout)
        with self._lock:
            self._outcomes.append(outcome)
        try:
            future: Future[liftbridge.Ack | None] = client.publish_async(  # type: ignore[call-overload]
                stream, value, timeout=timeout, **options
            )
        except Exception as e:  # recorded, classified in _settle
            self._settle(outcome, e)
            failed: Future[liftbridge.Ack | None] = Future()
            failed.set_exception(e)
            return failed
        future.add_done_callback(lambda f: self._settle(outcome, f.exception()))
        return future

    def publish_sync(
        self, client: liftbridge.Client, stream: str, *, timeout: float, **options: object
    ) -> bool:
        """``publish`` of a fresh value, recorded. Returns True when acked."""
        value = self.next_value()
        started = time.monotonic()
        outcome = Outcome(value, started, started + timeout)
        with self._lock:
            self._outcomes.append(outcome)
        try:
            client.publish(stream, value, timeout=timeout, **options)  # type: ignore[call-overload]
        except Exception as e:
            self._settle(outcome, e)
            return False
        self._settle(outcome, None)
        return True

    def timed(self, name: str, timeout: float, call: object) -> object:
        """Runs ``call()`` (a zero-argument callable) and records its overshoot
        past ``timeout``; returns its result or the exception it raised."""
        assert callable(call)
        start = time.monotonic()
        try:
            result = call()
        except Exception as e:
            result = e
        with self._lock:
            self.calls.append((name, time.monotonic() - start - timeout))
        return result

    @staticmethod
    def _settle(outcome: Outcome, error: BaseException | None) -> None:
        outcome.ended = time.monotonic()
        if error is None:
            outcome.acked = True
            return
        outcome.error = type(error).__name__
        outcome.error_text = str(error)
        outcome.typed = isinstance(error, liftbridge.LiftbridgeError)

    def outcomes(self) -> list[Outcome]:
        with self._lock:
            return list(self._outcomes)

    def first_ack_after(self, when: float) -> float | None:
        """When the first publish made after ``when`` was acked (None: none was)."""
        ends = [o.ended for o in self.outcomes() if o.acked and o.started >= when and o.ended]
        return min(ends) if ends else None


@dataclass
class SubscriptionCheck:
    """Offsets a subscription delivered, checked for gaps and repeats."""

    offsets: list[int] = field(default_factory=list)
    values: list[bytes] = field(default_factory=list)
    error: str | None = None

    def handler(self, message: liftbridge.Message | None, error: BaseException | None) -> None:
        """A subscription handler (runs on the subscription's thread)."""
        if message is not None:
            self.offsets.append(message.offset)
            self.values.append(message.value)
        else:
            self.error = repr(error)

    @property
    def gaps(self) -> int:
        """Offsets between the first and the last delivered that never were."""
        if not self.offsets:
            return 0
        span = range(self.offsets[0], max(self.offsets) + 1)
        return len(set(span) - set(self.offsets))

    @property
    def repeats(self) -> int:
        """Deliveries not above every offset delivered before them."""
        count, highest = 0, -1
        for offset in self.offsets:
            if offset <= highest:
                count += 1
            highest = max(highest, offset)
        return count


@dataclass
class Verdict:
    """The oracle's counts for one run."""

    sent: int = 0
    acked: int = 0
    failed: int = 0
    no_answer: int = 0
    untyped: int = 0
    lost: int = 0
    unexpected: int = 0
    recovered: int = 0
    duplicates: int = 0
    never_sent_present: int = 0
    max_overshoot: float = 0.0
    errors: dict[str, int] = field(default_factory=dict)
    recovered_errors: dict[str, int] = field(default_factory=dict)  # recovered, by error
    lost_sample: list[str] = field(default_factory=list)  # a few lost values, for the reader

    def problems(self, *, lost_allowed: bool = False, overshoot_slack: float = 2.0) -> list[str]:
        """What the oracle refuses, in words (empty: the run passed)."""
        found = []
        if self.lost and not lost_allowed:
            found.append(f"{self.lost} acked message(s) lost")
        if self.unexpected:
            found.append(f"{self.unexpected} unexpected message(s)")
        if self.duplicates:
            found.append(f"{self.duplicates} duplicate(s)")
        if self.no_answer:
            found.append(f"{self.no_answer} publish(es) never answered")
        if self.untyped:
            found.append(f"{self.untyped} untyped error(s)")
        if self.never_sent_present:
            found.append(f"{self.never_sent_present} 'never sent' publish(es) were stored")
        if self.max_overshoot > overshoot_slack:
            found.append(f"a call overran its deadline by {self.max_overshoot:.1f}s")
        return found


def judge(ledger: Ledger, present: list[bytes]) -> Verdict:
    """Compares the ledger with what was read back (every value, in any order)."""
    outcomes = ledger.outcomes()
    counts = collections.Counter(present)
    sent = {o.value for o in outcomes}
    verdict = Verdict(sent=len(outcomes))
    errors: collections.Counter[str] = collections.Counter()
    overshoots = [0.0]
    for outcome in outcomes:
        if outcome.ended is None:
            verdict.no_answer += 1
            continue
        overshoots.append(outcome.ended - outcome.deadline)
        if outcome.acked:
            verdict.acked += 1
            if outcome.value not in counts:
                verdict.lost += 1
                if len(verdict.lost_sample) < 5:
                    verdict.lost_sample.append(outcome.value.decode())
            continue
        verdict.failed += 1
        errors[outcome.error or "?"] += 1
        if not outcome.typed:
            verdict.untyped += 1
        if outcome.value in counts:
            verdict.recovered += 1
            name = outcome.error or "?"
            verdict.recovered_errors[name] = verdict.recovered_errors.get(name, 0) + 1
            if NEVER_SENT in outcome.error_text:
                verdict.never_sent_present += 1
    overshoots.extend(overshoot for _, overshoot in ledger.calls)
    verdict.unexpected = sum(1 for value in counts if value not in sent)
    verdict.duplicates = sum(count - 1 for count in counts.values() if count > 1)
    verdict.max_overshoot = max(overshoots)
    verdict.errors = dict(errors)
    return verdict


def read_back(
    addresses: list[str], stream: str, partitions: int, *, timeout: float = 60.0
) -> list[bytes]:
    """Every value in every partition, read with a fresh client from the
    earliest offset to the newest at the time of reading.

    Raises:
        liftbridge.LiftbridgeError: the partitions could not be read in ``timeout``.
    """
    deadline = time.monotonic() + timeout
    values: list[bytes] = []
    with _connect(addresses, deadline) as client:
        for partition in range(partitions):
            while True:
                try:
                    last = _settled_end(client, stream, partition, deadline)
                    if last < 0:
                        break
                    with client.subscribe(
                        stream, partition=partition, start=0, stop=last
                    ) as subscription:
                        values.extend([message.value for message in subscription])
                    break
                except liftbridge.LiftbridgeError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
    return values


def _settled_end(client: liftbridge.Client, stream: str, partition: int, deadline: float) -> int:
    """The partition's last committed offset once the leader has committed
    everything it holds and that held still for a second (bounded by
    ``deadline``): right after a failover the new leader's high watermark
    lags its log, and reading only up to it would report the rest as lost."""
    previous = None
    while True:
        info = client.fetch_partition_metadata(stream, partition)
        settled = (info.leader, info.high_watermark, info.newest_offset)
        if info.high_watermark == info.newest_offset and settled == previous:
            return info.high_watermark
        if time.monotonic() > deadline:
            return info.high_watermark
        previous = settled
        time.sleep(1.0)


def _connect(addresses: list[str], deadline: float) -> liftbridge.Client:
    """A new client, retried until ``deadline``: right after a node died a
    constructor can fail with two of three brokers healthy (issue 15), and the
    read-back must not depend on that fix."""
    while True:
        try:
            return liftbridge.Client(addresses, rpc_timeout=5.0, resubscribe_wait=20.0)
        except liftbridge.LiftbridgeError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
