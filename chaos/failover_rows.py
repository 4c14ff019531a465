"""Fault rows of issue 25: a crashed node must never strand a client.

Each row keeps one client for its whole run (never recreated) under a load of
``publish_async`` (the :class:`~chaos.rows.Load`) and blocking ``publish``
calls on a thread of their own, with a live handler subscription and a pull
consumer; the oracle then checks that no acked message is lost, that every
call resolved within its deadline + 2 s, and that the subscriber saw every
offset once.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable

import liftbridge
from chaos.oracle import Ledger, SubscriptionCheck
from chaos.rows import (
    PUBLISH_TIMEOUT,
    SETTLE,
    STOP_ACK_WAIT,
    Load,
    RowResult,
    _client,
    _finish,
    _stream,
    leader_of,
    metadata_leader,
    move_metadata_leader,
    stopped,
)
from liftbridge.testing import LocalCluster

_ALL = liftbridge.AckPolicy.ALL


class _SyncLoad:
    """Blocking ``publish`` calls (AckPolicy.ALL) one after another on a thread,
    each recorded with its deadline; and a pull consumer fetched on another."""

    def __init__(self, ledger: Ledger, client: liftbridge.Client, stream: str) -> None:
        self._ledger = ledger
        self._client = client
        self._stream = stream
        self._stop = threading.Event()
        self.pulled = 0
        self.pulled_values: set[bytes] = set()  # written by the pull thread only
        self._threads = [
            threading.Thread(target=self._publish, name="chaos-sync", daemon=True),
            threading.Thread(target=self._pull, name="chaos-pull", daemon=True),
        ]

    def __enter__(self) -> _SyncLoad:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(30)

    def _publish(self) -> None:
        while not self._stop.wait(0.02):
            self._ledger.publish_sync(
                self._client, self._stream, timeout=PUBLISH_TIMEOUT, ack_policy=_ALL
            )

    def _pull(self) -> None:
        with self._client.pull(self._stream, start=liftbridge.StartPosition.EARLIEST) as consumer:
            while not self._stop.is_set():
                got = self._ledger.timed("pull.fetch", 1.0, lambda: consumer.fetch(100, timeout=1))
                if isinstance(got, list):
                    self.pulled += len(got)
                    self.pulled_values.update(m.value for m in got)


def _stream_led_by_first(client: liftbridge.Client, cluster: LocalCluster) -> str:
    """A stream (replication 3, min ISR 2) whose leader is node "a": the first
    address the client was given and the first broker of its rotation."""
    first = cluster.nodes[0].server_id
    for _ in range(12):
        name = f"chaos-{uuid.uuid4().hex[:8]}"
        client.create_stream(name, replication_factor=3, min_isr=2)
        if leader_of(client, name) == first:
            return name
    raise RuntimeError("no stream led by the first node in 12 tries")


def _acked_after(ledger: Ledger, when: float) -> int:
    return sum(1 for o in ledger.outcomes() if o.acked and o.started > when)


def seed_leader_kill() -> RowResult:
    """SIGKILL the partition leader that is also the client's first address."""
    result = RowResult("leader is the first seed, SIGKILLed; sync + async + sub + pull")
    with LocalCluster(3) as cluster, _client(cluster) as client:
        stream = _stream_led_by_first(client, cluster)
        ledger = Ledger("seed-leader-kill")
        check = SubscriptionCheck()
        with client.subscribe(stream, check.handler, start=0):
            with Load(ledger, client, stream, ack_policy=_ALL), _SyncLoad(ledger, client, stream):
                time.sleep(3)
                fault = time.monotonic()
                cluster.kill(cluster.nodes[0])
                time.sleep(12)
            time.sleep(2)
        _finish(result, ledger, cluster.addresses, stream, check=check)
        after = _acked_after(ledger, fault + 6)
        result.notes.append(f"{after} publish(es) made 6+ s after the kill acked")
        if not after:
            result.problems.append("nothing published 6 s after the kill was acked: stranded")
    return result


def kill_twice() -> RowResult:
    """SIGKILL the leader, restart it, then SIGKILL the same node again."""
    result = RowResult("same node SIGKILLed twice, restarted between; sync + async + sub + pull")
    with LocalCluster(3) as cluster, _client(cluster) as client:
        stream = _stream_led_by_first(client, cluster)
        ledger = Ledger("kill-twice")
        check = SubscriptionCheck()
        node = cluster.nodes[0]
        with client.subscribe(stream, check.handler, start=0):
            with Load(ledger, client, stream, ack_policy=_ALL), _SyncLoad(ledger, client, stream):
                time.sleep(3)
                cluster.kill(node)
                time.sleep(8)
                cluster.restart(node)
                time.sleep(5)
                fault = time.monotonic()
                cluster.kill(node)
                time.sleep(10)
            time.sleep(2)
        _finish(result, ledger, cluster.addresses, stream, check=check)
        after = _acked_after(ledger, fault + 6)
        result.notes.append(f"{after} publish(es) made 6+ s after the second kill acked")
        if not after:
            result.problems.append("nothing published 6 s after the second kill was acked")
    return result


def rolling_restart_pull() -> RowResult:
    """Restart every node in turn (SIGINT, start) under publish_async, blocking
    publish, a handler subscription, a pull consumer and a group member."""
    result = RowResult("rolling restart; sync + async + sub + pull + group member")
    with LocalCluster(3) as cluster, _client(cluster) as client:
        stream = _stream(client)
        ledger = Ledger("rolling-pull")
        check = SubscriptionCheck()
        grouped: set[bytes] = set()  # values the group member handled (its thread only)

        def member(message: liftbridge.Message | None, error: BaseException | None) -> None:
            if message is not None:
                grouped.add(message.value)

        consumer = client.create_consumer(f"g-{stream}", auto_checkpoint=1.0)
        consumer.subscribe(stream, member)
        try:
            with client.subscribe(stream, check.handler, start=0) as subscription:
                with (
                    Load(ledger, client, stream, ack_policy=_ALL),
                    _SyncLoad(ledger, client, stream) as pulls,
                ):
                    for node in cluster.nodes:
                        time.sleep(3)
                        cluster.restart(node)
                    time.sleep(3)
                    acked = {o.value for o in ledger.outcomes() if o.acked}
                    _wait_for(lambda: acked <= pulls.pulled_values and acked <= grouped)
                ended = subscription.error
        finally:
            consumer.close()
        _finish(result, ledger, cluster.addresses, stream, check=check)
        for who, got in (("pull consumer", pulls.pulled_values), ("group member", grouped)):
            if acked - got:
                result.problems.append(f"the {who} never got {len(acked - got)} acked message(s)")
        result.notes.append(
            f"pulled {pulls.pulled}, group member handled {len(grouped)}, "
            f"subscriber {len(check.offsets)}"
        )
        if ended is not None:
            result.problems.append(f"the subscription ended: {ended!r}")
    return result


def _wait_for(done: Callable[[], bool], bound: float = SETTLE) -> None:
    deadline = time.monotonic() + bound
    while not done() and time.monotonic() < deadline:
        time.sleep(0.2)


STOP_SECONDS = 10.0
"""How long the leader stays stopped in :func:`handler_leader_stop`."""


def handler_leader_stop() -> RowResult:
    """SIGSTOP the leader under a plain handler subscription: the client's
    keepalive (1 s, answer within 1 s) must find the hung broker and the
    subscription move to the new leader while the old one is still stopped."""
    return _handler_stop(keepalive=True)


def handler_leader_stop_no_keepalive() -> RowResult:
    """The control of :func:`handler_leader_stop`: the same fault with the
    keepalive off. The subscription is expected to stay on the stopped broker
    until SIGCONT (reported as a known failure, the figure that shows the
    keepalive is what moves it); a subscriber that moves anyway fails the row."""
    return _handler_stop(keepalive=False)


def _handler_stop(*, keepalive: bool) -> RowResult:
    result = RowResult(
        f"leader SIGSTOP {STOP_SECONDS:g} s under a plain handler subscription"
        + ("" if keepalive else "; keepalive off (control, expected to strand)")
    )
    options: dict[str, float | None] = {"ack_wait": STOP_ACK_WAIT}
    if keepalive:
        options.update(keepalive_interval=1.0, keepalive_timeout=1.0)
    else:
        options.update(keepalive_interval=None)
    with LocalCluster(3) as cluster, _client(cluster, **options) as client:
        first = cluster.nodes[0].server_id
        # A stopped metadata leader would measure the server's Raft election,
        # not the SDK (see chaos.rows.leader_sigstop).
        if move_metadata_leader(cluster, first):
            result.notes.append(f"stopped {first} until another node led the metadata")
        if metadata_leader(cluster) == first:
            result.problems.append(f"{first} still leads the metadata: the fault is not staged")
        stream = _stream_led_by_first(client, cluster)
        ledger = Ledger("handler-stop")
        check = SubscriptionCheck()
        arrivals: dict[bytes, float] = {}  # value -> when the handler got it (its thread)

        def handler(message: liftbridge.Message | None, error: BaseException | None) -> None:
            if message is not None:
                arrivals[message.value] = time.monotonic()
            check.handler(message, error)

        with client.subscribe(stream, handler, start=0) as subscription:
            with Load(ledger, client, stream, ack_policy=_ALL, timeout=STOP_ACK_WAIT):
                time.sleep(3)
                fault = time.monotonic()
                with stopped(cluster.nodes[0].pid, STOP_SECONDS):
                    pass
                time.sleep(4)
            acked = {o.value for o in ledger.outcomes() if o.acked}
            _wait_for(lambda: acked <= set(arrivals))
            ended = subscription.error
        _finish(result, ledger, cluster.addresses, stream, check=check)
        later = [
            arrivals[o.value] - fault
            for o in ledger.outcomes()
            if o.acked and o.started > fault and o.value in arrivals
        ]
        first_new = f"{min(later):.1f}s" if later else "never"
        moved = bool(later) and min(later) < STOP_SECONDS
        if keepalive and moved:
            result.notes.append(f"the subscriber got new messages {first_new} into the stop")
        elif keepalive:
            result.problems.append(
                "the subscription delivered nothing published during the stop before SIGCONT"
            )
        elif moved:
            result.problems.append(
                f"without keepalive the subscriber still got new messages {first_new} into "
                "the stop: the control does not show that the keepalive moves it"
            )
        else:
            result.known.append(
                "expected (control): with the keepalive off the subscription stayed on the "
                f"stopped leader; first message published after the stop arrived {first_new} "
                f"after it (SIGCONT at {STOP_SECONDS:g} s)"
            )
        if acked - set(arrivals):
            result.problems.append(f"the subscriber never got {len(acked - set(arrivals))} acked")
        if ended is not None:
            result.problems.append(f"the subscription ended: {ended!r}")
    return result
