"""The rows of the fault matrix: each starts what it needs (usually a fresh
``LocalCluster(3)`` with an external nats-server), runs a load, injects one
real fault, and hands the oracle's verdict back as a :class:`RowResult`.

A row's status is ``pass``, ``FAIL``, or ``known failure``: the row broke on
an SDK defect already filed (issue 15) whose fix the routing/deadline work
owns; the reason says which. A known failure is never reported as a pass.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import liftbridge
from chaos.oracle import Ledger, SubscriptionCheck, Verdict, judge, read_back
from chaos.proxy import FaultProxy, Mode
from liftbridge.testing import LocalCluster

PUBLISH_TIMEOUT = 5.0
"""Each publish's own deadline (its ack timeout)."""
RATE_INTERVAL = 0.004
"""Seconds between publishes of the load (about 250/s: the machine is small)."""
OVERSHOOT_SLACK = 2.0
"""Seconds a call may resolve past its deadline before the oracle objects."""
SETTLE = 20.0
"""Seconds publishes get to resolve after the load stops."""


@dataclass
class RowResult:
    """One row of the table."""

    name: str
    status: str = "pass"
    seconds: float = 0.0
    verdict: Verdict | None = None
    subscription: dict[str, object] | None = None
    problems: list[str] = field(default_factory=list)
    known: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    skipped: str | None = None  # why the row could not run here

    def settle(self) -> None:
        """Sets the status from the problems and known failures found."""
        if self.skipped is not None and not self.problems:
            self.status = "skipped"
        elif self.problems:
            self.status = "FAIL"
        elif self.known:
            self.status = "known failure"
        else:
            self.status = "pass"

    def as_json(self) -> dict[str, object]:
        return asdict(self)


class Load:
    """Publishes unique values at a steady rate on a thread until stopped."""

    def __init__(
        self,
        ledger: Ledger,
        client: liftbridge.Client,
        stream: str,
        *,
        ack_policy: liftbridge.AckPolicy = liftbridge.AckPolicy.ALL,
        partitions: int = 1,
        timeout: float = PUBLISH_TIMEOUT,
        headers: dict[str, bytes] | None = None,
    ) -> None:
        self._timeout = timeout
        self._headers = headers
        self._ledger = ledger
        self._client = client
        self._stream = stream
        self._policy = ack_policy
        self._partitions = partitions
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-load", daemon=True)

    def __enter__(self) -> Load:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        i = 0
        while not self._stop.wait(RATE_INTERVAL):
            self._ledger.publish(
                self._client,
                self._stream,
                timeout=self._timeout,
                ack_policy=self._policy,
                partition=i % self._partitions,
                headers=self._headers,
            )
            i += 1


def wait_resolved(ledger: Ledger, bound: float = SETTLE) -> None:
    """Waits (bounded) until every recorded publish has an outcome."""
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        if all(o.ended is not None for o in ledger.outcomes()):
            return
        time.sleep(0.1)


def leader_of(client: liftbridge.Client, stream: str, partition: int = 0) -> str:
    """The partition's leader id, asked until there is one (bounded)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            leader = client.fetch_partition_metadata(stream, partition).leader
            if leader:
                return leader
        except liftbridge.LiftbridgeError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"no leader for {stream}/{partition} in 30s")
        time.sleep(0.2)


@contextmanager
def stopped(pid: int | None, seconds: float) -> Iterator[None]:
    """SIGSTOPs a process we started for ``seconds`` (then SIGCONT), around the block."""
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
        time.sleep(seconds)
    finally:
        os.kill(pid, signal.SIGCONT)


def _client(cluster: LocalCluster, **options: float | None) -> liftbridge.Client:
    defaults: dict[str, float | None] = {
        "ack_wait": PUBLISH_TIMEOUT,
        "rpc_timeout": 5.0,
        "resubscribe_wait": 60.0,
        "connect_timeout": 10.0,
    }
    defaults.update(options)
    return liftbridge.Client(cluster.addresses, **defaults)  # type: ignore[arg-type]


def _stream(client: liftbridge.Client, partitions: int = 1) -> str:
    name = f"chaos-{uuid.uuid4().hex[:8]}"
    client.create_stream(name, replication_factor=3, min_isr=2, partitions=partitions)
    for partition in range(partitions):
        leader_of(client, name, partition)
    return name


def _finish(
    result: RowResult,
    ledger: Ledger,
    addresses: list[str],
    stream: str,
    partitions: int = 1,
    *,
    check: SubscriptionCheck | None = None,
    lost_allowed: bool = False,
) -> set[bytes]:
    """Judges the run into ``result``; returns the values read back."""
    wait_resolved(ledger)
    present = read_back(addresses, stream, partitions)
    verdict = judge(ledger, present)
    result.verdict = verdict
    result.problems.extend(
        verdict.problems(lost_allowed=lost_allowed, overshoot_slack=OVERSHOOT_SLACK)
    )
    if check is not None:
        result.subscription = {
            "delivered": len(check.offsets),
            "gaps": check.gaps,
            "repeats": check.repeats,
            "error": check.error,
        }
        if check.gaps or check.repeats:
            result.problems.append(f"subscription: {check.gaps} gap(s), {check.repeats} repeat(s)")
    return set(present)


@dataclass
class InFlight:
    """How the publishes in flight at a fault ended."""

    count: int = 0  # made before the fault, unresolved at it
    acked: int = 0
    timed_out: int = 0  # ended by their ack timeout
    failed_fast: dict[str, int] = field(default_factory=dict)  # typed error -> count
    resolved_after: float = 0.0  # seconds from the fault until the last of them resolved
    later_timeouts: int = 0  # publishes made after the fault that timed out
    later_failed_fast: int = 0  # ... that failed with a typed error before their timeout

    def describe(self) -> str:
        fast = ", ".join(f"{n} {e}" for e, n in sorted(self.failed_fast.items())) or "none"
        return (
            f"{self.count} publish(es) in flight at the kill: {self.acked} acked, "
            f"{self.timed_out} AckTimeoutError, failed fast: {fast}; all resolved "
            f"{self.resolved_after:.2f}s after the kill. Made after it (the partition "
            f"leaderless): {self.later_failed_fast} failed fast, {self.later_timeouts} "
            "AckTimeoutError"
        )


def in_flight_at(ledger: Ledger, fault: float) -> InFlight:
    """Sorts the publishes unresolved at ``fault`` by how they ended."""
    found = InFlight()
    for o in ledger.outcomes():
        if o.started > fault:
            found.later_timeouts += o.error == "AckTimeoutError"
            found.later_failed_fast += o.error in _FAIL_FAST_ERRORS
            continue
        if o.ended is not None and o.ended <= fault:
            continue
        found.count += 1
        if o.ended is not None:
            found.resolved_after = max(found.resolved_after, o.ended - fault)
        if o.acked:
            found.acked += 1
        elif o.error == "AckTimeoutError":
            found.timed_out += 1
        elif o.error is not None:
            found.failed_fast[o.error] = found.failed_fast.get(o.error, 0) + 1
    return found


# ------------------------------------------------------------------ rows --


def leader_kill() -> RowResult:
    """SIGKILL the partition leader under publish_async (AckPolicy.ALL, min ISR 2)."""
    result = RowResult("leader SIGKILL, publish_async, AckPolicy.ALL, min_isr 2")
    with LocalCluster(3) as cluster, _client(cluster) as client:
        stream = _stream(client)
        ledger = Ledger("leader-kill")
        check = SubscriptionCheck()
        with client.subscribe(stream, check.handler, start=0), Load(ledger, client, stream):
            time.sleep(3)
            leader = leader_of(client, stream)
            fault = time.monotonic()
            cluster.kill(leader)
            _new_client_check(cluster, result)
            time.sleep(8)
        present = _finish(result, ledger, cluster.addresses, stream, check=check)
        flight = in_flight_at(ledger, fault)
        result.notes.append(flight.describe())
        stored_lost = [
            o.started > fault
            for o in ledger.outcomes()
            if o.error == "LeaderLostError" and o.value in present
        ]
        if stored_lost:
            result.notes.append(
                f"LeaderLostError yet stored: {stored_lost.count(False)} in flight at the kill "
                f"(the leader replicated them before it died), {stored_lost.count(True)} made "
                "after it"
            )
        if flight.timed_out:
            result.problems.append(
                f"{flight.timed_out} publish(es) in flight at the kill waited out their "
                f"{PUBLISH_TIMEOUT:g} s ack timeout instead of failing fast"
            )
        untyped = set(flight.failed_fast) - set(_FAIL_FAST_ERRORS)
        if untyped:
            result.problems.append(f"publishes in flight at the kill failed with {untyped}")
        if flight.later_timeouts > flight.later_failed_fast:
            result.problems.append(
                f"{flight.later_timeouts} publish(es) made while the partition had no live "
                f"leader waited out their ack timeout; {flight.later_failed_fast} failed fast"
            )
    return result


_FAIL_FAST_ERRORS = ("LeaderLostError", "ConnectionLostError")
"""The "may have been stored" errors a publish in flight at a leader kill may end with."""


def _new_client_check(cluster: LocalCluster, result: RowResult) -> None:
    """A new Client right after a node died, with every address as seeds."""
    try:
        with liftbridge.Client(cluster.addresses, connect_timeout=10.0, rpc_timeout=5.0):
            pass
    except liftbridge.LiftbridgeError as e:
        result.known.append(
            f"a new Client failed with 2 of 3 brokers healthy ({type(e).__name__}); "
            "seeds are tried once (issue 15; routing/deadline work)"
        )


def follower_kill() -> RowResult:
    """SIGKILL a follower of the partition under load; restart it."""
    result = RowResult("follower SIGKILL")
    with LocalCluster(3) as cluster, _client(cluster) as client:
        stream = _stream(client)
        ledger = Ledger("follower-kill")
        check = SubscriptionCheck()
        with client.subscribe(stream, check.handler, start=0), Load(ledger, client, stream):
            time.sleep(3)
            leader = leader_of(client, stream)
            follower = next(n for n in cluster.nodes if n.server_id != leader)
            cluster.kill(follower)
            time.sleep(6)
            cluster.restart(follower)
            time.sleep(2)
        _finish(result, ledger, cluster.addresses, stream, check=check)
    return result


STOP_ACK_WAIT = 2.0
"""The ack timeout of the SIGSTOP row."""
STOP_RESUME = 9.0
"""Seconds after the stop by which some publish made during it must be acked."""

_BECAME_CONTROLLER = "Server became metadata leader"
_LOST_CONTROLLER = "Server lost metadata leadership"
"""What a Liftbridge node logs when it wins and loses the Raft (metadata) leadership."""
_STARTING = "=== liftbridge.testing: starting"
"""The line the harness writes into a node's log at each (re)start."""


def metadata_leader(cluster: LocalCluster) -> str | None:
    """The id of the running node whose log says it became the metadata
    (Raft) leader since it last started, and has not lost it since; None
    unless exactly one node's log says so. The API does not name the
    metadata leader: the nodes' logs are the only witness."""
    leaders = [n.server_id for n in cluster.nodes if n.running and leads_metadata(n.log_path)]
    return leaders[0] if len(leaders) == 1 else None


def leads_metadata(log_path: Path) -> bool:
    """Whether a node's log says it became the metadata leader since it last
    started, and has not lost that leadership since."""
    leads = False
    with open(log_path, encoding="utf-8", errors="replace") as log:
        for line in log:
            if _BECAME_CONTROLLER in line:
                leads = True
            elif _LOST_CONTROLLER in line or line.startswith(_STARTING):
                leads = False
    return leads


def move_metadata_leader(cluster: LocalCluster, node: str) -> bool:
    """If ``node`` leads the metadata, stops it until another node has won
    the Raft election (30 s at most), then starts it again as a follower
    (restarting it at once is not enough: it often wins the election
    again). Returns True if it did."""
    if metadata_leader(cluster) != node:
        return False
    cluster.stop(node)
    deadline = time.monotonic() + 30
    while metadata_leader(cluster) is None and time.monotonic() < deadline:
        time.sleep(0.2)
    cluster.restart(node)
    return True


def leader_sigstop() -> RowResult:
    """SIGSTOP the partition leader for 10 s under load, then SIGCONT."""
    result = RowResult("leader SIGSTOP 10 s (also the publish stream's broker)")
    # A 2 s ack timeout: the SDK gives up a stream that stays silent for two
    # ack timeouts while publishes time out, so the move can happen (and
    # publishing resume on another broker) well within the 10 s stop.
    with LocalCluster(3) as cluster, _client(cluster, ack_wait=STOP_ACK_WAIT) as client:
        # The client opens its PublishAsync stream on the first broker of its
        # metadata (sorted by id: "a") until that fails; a stream led by "a"
        # makes the stopped broker both the leader and the stream's broker,
        # the case where a hang stalls every publish.
        first = client.metadata.brokers[0].id
        # It must not also be the metadata (Raft) leader. Followers report a
        # silent partition leader to the metadata leader, which fails the
        # partition over once a majority of the ISR has reported; with the
        # metadata leader stopped too, that waits for a Raft election and for
        # the reports to be made again, and AckPolicy.ALL commits then wait
        # for the new leader to drop the stopped replica from the ISR
        # (replica.max.lag.time, 3 s): nothing can be acked until about 10 s
        # into the stop, whichever broker the SDK moves to. That case would
        # measure the server's failover, not the SDK leaving a hung broker.
        if move_metadata_leader(cluster, first):
            result.notes.append(f"stopped {first} until another node led the metadata")
        controller = metadata_leader(cluster)
        result.notes.append(f"metadata leader before the stop: {controller or 'unknown'}")
        if controller == first:
            result.problems.append(f"{first} still leads the metadata: the fault is not staged")
        stream = _stream(client)
        for _ in range(8):
            if leader_of(client, stream) == first:
                break
            stream = _stream(client)
        else:
            result.notes.append(f"no stream led by {first} in 8 tries; stopped another leader")
        ledger = Ledger("leader-stop")
        with Load(ledger, client, stream, timeout=STOP_ACK_WAIT):
            time.sleep(3)
            leader = cluster.node(leader_of(client, stream))
            fault = time.monotonic()
            with stopped(leader.pid, 10.0):
                pass
            resumed = ledger.first_ack_after(fault)
            time.sleep(4)
        if resumed is not None:
            result.notes.append(f"publishing resumed {resumed - fault:.1f}s into the stop")
        if resumed is None or resumed - fault > STOP_RESUME:
            took = "none during the stop" if resumed is None else f"after {resumed - fault:.1f}s"
            result.known.append(
                f"publishing stalled while the leader was stopped (first ack {took}; failover "
                f"takes about 4 s, giving up the stream {2 * STOP_ACK_WAIT:g} s): the stream "
                "does not move off a hung broker (issue 15; routing/deadline work)"
            )
        _finish(result, ledger, cluster.addresses, stream)
    return result


def rolling_restart() -> RowResult:
    """Restart every node in turn (SIGINT, start) under load, with a live
    subscription and a live consumer-group member."""
    result = RowResult("rolling restart under load, live subscription and consumer group")
    with (
        LocalCluster(3) as cluster,
        _client(cluster) as client,
        _client(cluster) as group_client,
    ):
        stream = _stream(client)
        ledger = Ledger("rolling")
        check = SubscriptionCheck()
        grouped: set[bytes] = set()  # values the group member handled

        def member(message: liftbridge.Message | None, error: BaseException | None) -> None:
            if message is not None:
                grouped.add(message.value)

        consumer = group_client.create_consumer(f"g-{stream}", auto_checkpoint=1.0)
        consumer.subscribe(stream, member)
        with client.subscribe(stream, check.handler, start=0) as subscription:
            with Load(ledger, client, stream):
                for node in cluster.nodes:
                    time.sleep(2)
                    cluster.restart(node)
                time.sleep(3)
            time.sleep(3)
            ended = subscription.error
        acked = {o.value for o in ledger.outcomes() if o.acked}
        deadline = time.monotonic() + SETTLE
        while not acked <= grouped and time.monotonic() < deadline:
            time.sleep(0.5)
        consumer.close()
        _finish(result, ledger, cluster.addresses, stream, check=check)
        if acked - grouped:
            result.problems.append(
                f"the consumer group never handled {len(acked - grouped)} acked message(s)"
            )
        if isinstance(ended, liftbridge.NoSuchPartitionError):
            result.known.append(
                "the subscription ended with NoSuchPartitionError: a restarted leader answers "
                "NOT_FOUND before it has replayed its streams (issue 15; resubscribe fix)"
            )
        elif ended is not None:
            result.problems.append(f"the subscription ended: {ended!r}")
        assert result.verdict is not None
        if ended is not None and len(check.offsets) < result.verdict.acked:
            result.notes.append(
                f"the subscriber received {len(check.offsets)} of {result.verdict.acked} acked"
            )
    return result


def two_killed() -> RowResult:
    """Kill two of three nodes: publishes fail typed within their deadline;
    after restarting them, nothing acked is lost."""
    result = RowResult("two of three nodes SIGKILLed, then restarted")
    with LocalCluster(3) as cluster, _client(cluster) as client:
        stream = _stream(client)
        ledger = Ledger("two-killed")
        with Load(ledger, client, stream):
            time.sleep(3)
            leader = leader_of(client, stream)
            victims = [n for n in cluster.nodes if n.server_id != leader][:1]
            victims.append(cluster.node(leader))
            for node in victims:
                cluster.kill(node)
            fault = time.monotonic()
            time.sleep(8)
            for node in victims:
                cluster.restart(node)
            time.sleep(3)
        _finish(result, ledger, cluster.addresses, stream, lost_allowed=True)
        _describe_lost(result, ledger, fault)
        _judge_majority_loss(result, ledger, fault)
    return result


def _judge_majority_loss(result: RowResult, ledger: Ledger, fault: float) -> None:
    """Loss after a majority crash, told apart: when what was lost is exactly
    everything acked before the fault, the server elected a replica whose log
    came back empty (see the README, Reliability); anything else is a FAIL."""
    verdict = result.verdict
    if verdict is None or not verdict.lost:
        return
    before = sum(1 for o in ledger.outcomes() if o.acked and o.started < fault)
    if verdict.lost == before:
        result.known.append(
            f"server: all {before} messages acked before the fault were lost. Liftbridge "
            "v1.9.0 cannot shrink the ISR while 2 of 3 metadata nodes are down; on restart "
            "it can elect a restarted replica whose log came back empty, and the surviving "
            "replica truncates to it (offsets are reused)"
        )
    else:
        result.problems.append(f"{verdict.lost} acked message(s) lost")


def _describe_lost(result: RowResult, ledger: Ledger, fault: float) -> None:
    """Notes when the lost acked messages were published, relative to the fault."""
    verdict = result.verdict
    if verdict is None or not verdict.lost:
        return
    outcomes = {o.value.decode(): o for o in ledger.outcomes()}
    ages = [fault - outcomes[v].started for v in verdict.lost_sample if v in outcomes]
    result.notes.append(
        "lost values include "
        + ", ".join(
            f"{v} (published {a:.1f}s before the fault)"
            for v, a in zip(verdict.lost_sample, ages, strict=False)
        )
    )


def all_killed() -> RowResult:
    """Kill every node, restart them all, publish again."""
    result = RowResult("all nodes SIGKILLed and restarted")
    with LocalCluster(3) as cluster, _client(cluster) as client:
        stream = _stream(client)
        ledger = Ledger("all-killed")
        with Load(ledger, client, stream):
            time.sleep(3)
            for node in cluster.nodes:
                cluster.kill(node)
            time.sleep(3)
            restarters = [
                threading.Thread(target=cluster.restart, args=(node,), name="chaos-restart")
                for node in cluster.nodes
            ]
            for thread in restarters:
                thread.start()
            for thread in restarters:
                thread.join(120)
            time.sleep(5)
        after = [o for o in ledger.outcomes() if o.acked and o.started > time.monotonic() - 5]
        if not after:
            result.problems.append("nothing was acked after the cluster came back")
        _finish(result, ledger, cluster.addresses, stream)
    return result


def close_in_flight() -> RowResult:
    """``close()`` with 10,000 publishes in flight: every future resolves."""
    result = RowResult("client close() with 10,000 publishes in flight")
    with LocalCluster(3) as cluster:
        client = _client(cluster, ack_wait=60.0)
        stream = _stream(client)
        ledger = Ledger("close")
        futures = [
            ledger.publish(client, stream, timeout=60.0, ack_policy=liftbridge.AckPolicy.ALL)
            for _ in range(10_000)
        ]
        start = time.monotonic()
        client.close()
        ledger.calls.append(("close", time.monotonic() - start - 10.0))
        unresolved = sum(1 for f in futures if not f.done())
        if unresolved:
            result.problems.append(f"{unresolved} future(s) unresolved after close()")
        _finish(result, ledger, cluster.addresses, stream)
    return result


def handlers() -> RowResult:
    """Handlers that raise, block, or close the client: no SDK thread dies, the
    other handlers still run, close() returns."""
    result = RowResult("handlers that raise, block or close the client")
    deaths: list[str] = []
    previous = threading.excepthook
    threading.excepthook = lambda args: deaths.append(repr(args.exc_value))
    # The SDK logs each handler exception with its traceback, as it should;
    # here they are the point of the row, not news.
    sdk_log = logging.getLogger("liftbridge")
    level = sdk_log.level
    sdk_log.setLevel(logging.CRITICAL)
    try:
        with LocalCluster(3) as cluster:
            _handler_cases(cluster, result)
    finally:
        threading.excepthook = previous
        sdk_log.setLevel(level)
    if deaths:
        result.problems.append(f"thread(s) died: {deaths}")
    result.settle()
    return result


def _handler_cases(cluster: LocalCluster, result: RowResult) -> None:
    ledger = Ledger("handlers")
    with _client(cluster) as client:
        stream = _stream(client)

        # An ack handler that raises: the outcome stands, later acks still come.
        def raiser(ack: liftbridge.Ack | None, error: BaseException | None) -> None:
            raise RuntimeError("ack handler bug")

        raised = [client.publish_async(stream, b"r", raiser) for _ in range(50)]
        if not all(f.exception(timeout=30) is None for f in raised):
            result.problems.append("a raising ack handler changed a publish's outcome")

        # A subscription handler that raises ends its subscription with HandlerError.
        def boom(message: liftbridge.Message | None, error: BaseException | None) -> None:
            if message is not None:
                raise RuntimeError("handler bug")

        with client.subscribe(stream, boom, start=0) as sub:
            sub.wait(30)
            if not isinstance(sub.error, liftbridge.HandlerError):
                result.problems.append(f"a raising handler ended with {sub.error!r}")
        # A subscription handler that blocks: close() still returns.
        gate = threading.Event()

        def block(message: liftbridge.Message | None, error: BaseException | None) -> None:
            gate.wait(60)

        blocker = client.subscribe(stream, block, start=0)
        start = time.monotonic()
        timed = ledger.timed(
            "publish while a handler blocks",
            10.0,
            lambda: client.publish(stream, b"during", timeout=10.0),
        )
        if not isinstance(timed, liftbridge.Ack):
            result.problems.append(f"publish while a handler blocked: {timed!r}")
        gate.set()
        blocker.close()
    # A handler that closes the client, from an ack handler and a subscription handler.
    with _client(cluster) as client:
        closed = threading.Event()

        def closer(ack: liftbridge.Ack | None, error: BaseException | None) -> None:
            client.close()
            closed.set()

        client.publish_async(stream, b"c", closer)
        if not closed.wait(30):
            result.problems.append("close() from an ack handler did not return")
    with _client(cluster) as client:
        done = threading.Event()

        def sub_closer(message: liftbridge.Message | None, error: BaseException | None) -> None:
            if message is not None and not done.is_set():
                client.close()
                done.set()

        # The handler may run, and close the client, before subscribe returns.
        with contextlib.suppress(liftbridge.ClientClosedError):
            client.subscribe(stream, sub_closer, start=0)
        if not done.wait(30):
            result.problems.append("close() from a subscription handler did not return")
    overshoot = max([0.0, *(o for _, o in ledger.calls)])
    result.verdict = Verdict(max_overshoot=overshoot)
    if time.monotonic() - start > 60:
        result.problems.append("the blocking-handler case took over a minute")


@contextmanager
def proxied(url: str) -> Iterator[None]:
    """Routes the gRPC channels made in the block through an HTTP CONNECT proxy
    (gRPC reads the lower-case ``grpc_proxy``)."""
    before = os.environ.get(_GRPC_PROXY)
    os.environ[_GRPC_PROXY] = url
    try:
        yield
    finally:
        if before is None:
            del os.environ[_GRPC_PROXY]
        else:
            os.environ[_GRPC_PROXY] = before


_GRPC_PROXY = "grpc_proxy"


RECOVERY = 10.0
"""Seconds after a link comes back within which publishing must have resumed."""


def _link_row(title: str, fault: Callable[[FaultProxy], None]) -> RowResult:
    """Load and a live subscription through the proxy; ``fault`` breaks the
    client-broker links and restores them; publishing must then resume."""
    result = RowResult(title)
    with (
        LocalCluster(3) as cluster,
        FaultProxy() as proxy,
        proxied(proxy.url),
        _client(cluster) as client,
    ):
        stream = _stream(client)
        ledger = Ledger(title.split()[0])
        check = SubscriptionCheck()
        with client.subscribe(stream, check.handler, start=0), Load(ledger, client, stream):
            time.sleep(3)
            fault(proxy)
            restored = time.monotonic()
            time.sleep(RECOVERY)
        resumed = ledger.first_ack_after(restored)
        if resumed is None or resumed - restored > RECOVERY:
            result.problems.append("publishing did not resume after the link came back")
        _finish(result, ledger, cluster.addresses, stream, check=check)
    return result


def link_reset() -> RowResult:
    """Reset every client-broker connection, three times a second apart."""

    def fault(proxy: FaultProxy) -> None:
        for _ in range(3):
            proxy.reset()
            time.sleep(1)

    return _link_row("link reset x3 (client-broker)", fault)


def link_blackhole() -> RowResult:
    """Client-broker links forward nothing for 8 s (connections stay open)."""

    def fault(proxy: FaultProxy) -> None:
        proxy.set_mode(Mode.BLACKHOLE)
        time.sleep(8)
        proxy.set_mode(Mode.PASS)

    return _link_row("link blackhole 8 s (client-broker)", fault)


def link_latency() -> RowResult:
    """200 ms added to every chunk on client-broker links for 8 s."""

    def fault(proxy: FaultProxy) -> None:
        proxy.set_mode(Mode.LATENCY)
        time.sleep(8)
        proxy.set_mode(Mode.PASS)

    result = _link_row("link latency 200 ms 8 s (client-broker)", fault)
    if result.verdict is not None and result.verdict.failed:
        result.notes.append(f"{result.verdict.failed} publish(es) failed under latency")
    return result


def nats_cut() -> RowResult:
    """Every broker's NATS connection goes through one proxy; cut it for 8 s
    (reset and refuse), then restore. One proxy for all brokers: the cluster's
    settings are shared by its nodes, so one node's link cannot be cut alone."""
    result = RowResult("broker-NATS link cut 8 s (all brokers)")
    holder: dict[str, LocalCluster] = {}

    def nats_address() -> tuple[str, int]:
        host, _, port = holder["cluster"].nats_url.removeprefix("nats://").rpartition(":")
        return host, int(port)

    with FaultProxy(nats_address) as proxy:
        cluster = LocalCluster(
            3, config_overrides={"nats.servers": [f"nats://127.0.0.1:{proxy.port}"]}
        )
        holder["cluster"] = cluster
        with cluster, _client(cluster) as client:
            stream = _stream(client)
            ledger = Ledger("nats-cut")
            check = SubscriptionCheck()
            with client.subscribe(stream, check.handler, start=0), Load(ledger, client, stream):
                time.sleep(3)
                proxy.set_mode(Mode.REFUSE)
                proxy.reset()
                time.sleep(8)
                proxy.set_mode(Mode.PASS)
                restored = time.monotonic()
                time.sleep(15)
            resumed = ledger.first_ack_after(restored)
            if resumed is None:
                result.problems.append("publishing did not resume after NATS came back")
            _finish(result, ledger, cluster.addresses, stream, check=check)
    return result


DISK_SIZE_MB = 32
"""The size of the follower's data filesystem: room to start, then filled by the load."""
DISK_PAD = 32 * 1024
"""Bytes of header padding on each publish of the disk-full row, to fill the disk fast."""


@contextmanager
def small_filesystem(size_mb: int) -> Iterator[Path | str]:
    """A tmpfs of ``size_mb`` MiB mounted on a new temporary directory, unmounted
    and removed afterwards. Yields the directory, or the reason it could not be
    mounted (not root, no CAP_SYS_ADMIN, no mount command) as a str."""
    directory = Path(tempfile.mkdtemp(prefix="chaos-disk-"))
    try:
        try:
            mounted = subprocess.run(
                ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(directory)],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            yield f"cannot run mount: {e}"
            return
        if mounted.returncode != 0:
            yield f"cannot mount a tmpfs (needs root or CAP_SYS_ADMIN): {mounted.stderr.strip()}"
            return
        try:
            yield directory
        finally:
            subprocess.run(["umount", str(directory)], capture_output=True, timeout=30, check=False)
    finally:
        with contextlib.suppress(OSError):
            directory.rmdir()


def disk_full() -> RowResult:
    """A follower's data directory is on a small tmpfs; the load (AckPolicy.ALL,
    min ISR 2) fills it. The follower fails to write; the leader and the other
    follower keep the ISR at 2: nothing acked is lost, failures are typed and
    within their deadlines."""
    result = RowResult("disk full on a follower (32 MiB tmpfs data dir)")
    with small_filesystem(DISK_SIZE_MB) as disk:
        if isinstance(disk, str):
            result.skipped = disk
            result.notes.append(f"skipped: {disk}")
            return result
        with LocalCluster(3, data_dirs={"c": disk}) as cluster, _client(cluster) as client:
            stream = _stream(client)
            for _ in range(8):
                if leader_of(client, stream) != "c":
                    break
                stream = _stream(client)
            else:
                result.problems.append("every stream made was led by the small-disk node c")
                return result
            ledger = Ledger("disk-full")
            pad = {"pad": b"x" * DISK_PAD}
            full_at = None
            with Load(ledger, client, stream, headers=pad):
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    if shutil.disk_usage(disk).free < DISK_PAD * 4:
                        full_at = time.monotonic()
                        break
                    time.sleep(0.2)
                time.sleep(8)  # publishing goes on with the follower's disk full
            node = cluster.node("c")
            if full_at is None:
                result.problems.append(f"the {DISK_SIZE_MB} MiB disk did not fill in 60 s")
            else:
                state = "running" if node.running else "exited"
                result.notes.append(f"follower c's disk filled; c then {state}")
                full = [line for line in node.log_tail(400).splitlines() if "no space" in line]
                if full:
                    result.notes.append(f"c's log: {full[0][-160:]}")
                after = [o for o in ledger.outcomes() if o.acked and o.started > full_at + 3]
                result.notes.append(f"{len(after)} publish(es) acked after the disk filled")
                if not after:
                    result.problems.append("nothing was acked after the follower's disk filled")
            _finish(result, ledger, cluster.addresses, stream)
    return result


# The issue-25 rows use this module's helpers: imported once they exist.
from chaos.failover_rows import (  # noqa: E402
    handler_leader_stop,
    handler_leader_stop_no_keepalive,
    kill_twice,
    rolling_restart_pull,
    seed_leader_kill,
)
from chaos.group_rows import overflow_churn, pinned_freeze  # noqa: E402

ROWS: dict[str, Callable[[], RowResult]] = {
    "leader-kill": leader_kill,
    "seed-leader-kill": seed_leader_kill,
    "kill-twice": kill_twice,
    "rolling-restart-pull": rolling_restart_pull,
    "handler-leader-stop": handler_leader_stop,
    "handler-leader-stop-no-keepalive": handler_leader_stop_no_keepalive,
    "follower-kill": follower_kill,
    "leader-stop": leader_sigstop,
    "rolling-restart": rolling_restart,
    "two-killed": two_killed,
    "all-killed": all_killed,
    "close-in-flight": close_in_flight,
    "handlers": handlers,
    "link-reset": link_reset,
    "link-blackhole": link_blackhole,
    "link-latency": link_latency,
    "nats-cut": nats_cut,
    "disk-full": disk_full,
    "pinned-freeze": pinned_freeze,
    "overflow-churn": overflow_churn,
}
"""Every row by name, in order of value."""

FAST = ("leader-kill", "seed-leader-kill", "close-in-flight", "handlers")
"""The subset ``make test`` runs (about 2 minutes)."""


def run_row(name: str) -> RowResult:
    """Runs one row, turning an exception into a FAIL."""
    start = time.monotonic()
    try:
        result = ROWS[name]()
    except Exception as e:  # a crashed row is a failed row
        result = RowResult(name, problems=[f"the row crashed: {type(e).__name__}: {e}"])
    result.seconds = round(time.monotonic() - start, 1)
    result.settle()
    return result
