"""The benchmark suite: which workloads run, against which servers, how often.

Every workload pairs SDK drivers (:mod:`bench.sdk`) with their floor
(:mod:`bench.floor`) where one exists and, for one-at-a-time and pipelined
publishing and catch-up reads on one server, with the official Go client
(:mod:`bench.gocli`), warms them up, then alternates their repetitions (in
order on even repetitions, in reverse on odd ones) so that a machine getting
busier or quieter during the run affects them alike.
One-at-a-time publishing, whose pace on a shared machine changes within a
second, goes further: the drivers take turns every 100 messages.
"""

from __future__ import annotations

import functools
import gc
import os
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

import trustme

import liftbridge
from bench import floor, gocli, over_nats, report, rss, sdk
from bench.report import BARE, GO, SDK, Result, target_row
from bench.stats import Run, process_cpu_seconds, summarise
from liftbridge.testing import LocalCluster, LocalServer
from liftbridge_api import api_pb2_grpc

WORKLOADS = (
    "publish",
    "publish_async",
    "subscribe",
    "pull",
    "e2e",
    "nats",
    "tls",
    "rss",
    "cluster",
)
"""Names for ``--only``; ``cluster`` is workload 6 (3 nodes, RF=3, AckPolicy.ALL)."""

PULL_TARGET = 0.9
"""Issue 12: ``fetch`` throughput at least this share of the SDK's ``subscribe``."""

TLS_TARGET = 0.8
"""Issue 24: a TLS client at least this share of a plaintext one, per row."""

CEILING_TARGET = 0.8
"""Issue 29: pipelined publishing at least this share of the machine's bound."""

LATENCY_TARGET = 1.2
"""Issue 29: the SDK's end-to-end p99 at most this multiple of Go's at each rate."""


class Driver(Protocol):
    """Moves ``count`` messages one way and says how long it took."""

    def run(self, count: int) -> Run: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Plan:
    """How much each workload does. ``FULL`` is ``make bench``; ``QUICK`` a smoke run."""

    sizes: tuple[int, ...] = (100, 1024)
    reps: int = 5
    publish_count: int = 1_000
    publish_reps: int = 15
    publish_slices: int = 10
    windows: tuple[int, ...] = (32, 256, 1024)
    pipelined_count: int = 20_000
    # A gRPC pipelined repetition lasts at least this many windows: at a
    # window of 1,024, 20,000 messages were 20 windows (0.3 s), the fill and
    # the last acks a twentieth of each run, and the rows swung 5-8 % between
    # runs where 50,000-100,000-message probes agreed within 2 %.
    pipelined_min_windows: int = 60
    pipelined_reps: int = 5
    subscribe_messages: int = 200_000
    subscribe_reps: int = 3
    subscribe_warmup_messages: int = 10_000
    tls_subscribe_messages: int = 50_000
    pull_batch: int = 500
    get_count: int = 500
    get_reps: int = 5
    # End-to-end latency at fixed offered rates, SDK and Go taking turns,
    # plus the highest rate Go sustains (see Suite._end_to_end); each
    # repetition lasts about e2e_seconds (at least e2e_min_count messages).
    e2e_rates: tuple[float, ...] = (1_000.0, 10_000.0)
    e2e_seconds: float = 3.0
    e2e_min_count: int = 2_000
    e2e_probe_count: int = 30_000
    e2e_window: int = 1024
    nats_count: int = 1_000
    nats_pipelined_count: int = 20_000
    # NatsStreamPublisher's pipelined rows and their Go rows: about 2 s per
    # repetition, where 20,000 messages (0.3 s) left the window's fill and
    # last acks a twentieth of each run and a spread of 13-17 % between runs.
    nats_steady_count: int = 100_000
    nats_window: int = 1024
    cluster_publish_count: int = 500
    cluster_pipelined_count: int = 20_000
    cluster_windows: tuple[int, ...] = (1024,)
    rss_messages: int = 1_000_000
    rss_size: int = 100
    rss_window: int = 1024

    def pipelined_count_for(self, window: int) -> int:
        """Messages in a gRPC pipelined repetition at ``window``."""
        return max(self.pipelined_count, window * self.pipelined_min_windows)

    def warmup(self, count: int) -> int:
        """Messages in a warm-up run before the repetitions of ``count``."""
        return max(1, count // 5)


FULL = Plan()
QUICK = Plan(
    reps=2,
    publish_count=50,
    publish_reps=2,
    windows=(64, 1024),
    pipelined_count=500,
    pipelined_min_windows=0,
    pipelined_reps=2,
    subscribe_messages=2_000,
    subscribe_reps=2,
    subscribe_warmup_messages=200,
    tls_subscribe_messages=1_000,
    get_count=50,
    get_reps=2,
    e2e_seconds=0.05,
    e2e_min_count=50,
    e2e_probe_count=500,
    nats_count=50,
    nats_pipelined_count=500,
    nats_steady_count=500,
    cluster_publish_count=50,
    cluster_pipelined_count=500,
    rss_messages=5_000,
)


def plan_with(plan: Plan, *, reps: int | None) -> Plan:
    """The plan with every repetition count replaced, when ``reps`` is given."""
    if reps is None:
        return plan
    return replace(
        plan,
        reps=reps,
        publish_reps=reps,
        pipelined_reps=reps,
        subscribe_reps=reps,
        get_reps=reps,
    )


@dataclass(frozen=True)
class _Entry:
    workload: str
    setting: str
    value_size: int
    variant: str
    driver: Driver
    shown: tuple[str, ...]
    # The processes of the server this driver talks to, charged its CPU;
    # None: the suite's own server (or cluster).
    server_pids: tuple[int, ...] | None = None


_CEILING = ("server_cpu_us_per_msg", "bound_msgs_per_s", "of_bound")
"""Each throughput row against what the machine could do (bench.stats.Run.metrics)."""
_PUBLISH_SHOWN = ("msgs_per_s", "p50_ms", "p99_ms", "cpu_us_per_msg", *_CEILING)
_PIPELINED_SHOWN = ("msgs_per_s", "mb_per_s", "cpu_us_per_msg", *_CEILING)
_LATENCY_SHOWN = ("p50_ms", "p99_ms", "p999_ms", "max_ms", "cpu_us_per_msg")


def write_certificates(folder: Path) -> dict[str, Path]:
    """A CA and a server certificate for 127.0.0.1 (``trustme``), written
    into ``folder``: ``{"ca": ..., "cert": ..., "key": ...}``."""
    ca = trustme.CA()
    server_cert = ca.issue_cert("127.0.0.1", "localhost")
    files = {"ca": folder / "ca.pem", "cert": folder / "cert.pem", "key": folder / "key.pem"}
    ca.cert_pem.write_to_path(str(files["ca"]))
    server_cert.cert_chain_pems[0].write_to_path(str(files["cert"]))
    server_cert.private_key_pem.write_to_path(str(files["key"]))
    return files


@contextmanager
def tls_server() -> Iterator[tuple[LocalServer, liftbridge.TLSConfig]]:
    """A ``LocalServer`` requiring TLS, its certificates made for it
    (:func:`write_certificates`), and the ``TLSConfig`` a client trusts it with."""
    with tempfile.TemporaryDirectory(prefix="bench-tls-") as folder:
        files = write_certificates(Path(folder))
        with LocalServer(
            log_level="warn", tls_cert=files["cert"], tls_key=files["key"], tls_ca=files["ca"]
        ) as server:
            yield server, liftbridge.TLSConfig(ca=files["ca"])


def _cpu_of(pids: tuple[int, ...]) -> float | None:
    """CPU seconds the processes have used so far (None: unknown, or no process)."""
    if not pids:
        return None
    total = 0.0
    for pid in pids:
        seconds = process_cpu_seconds(pid)
        if seconds is None:
            return None
        total += seconds
    return total


def _name(kind: str, variant: str, size: int) -> str:
    return f"bench-{kind}-{variant}-{size}-{uuid.uuid4().hex[:6]}"


class Suite:
    """Runs the chosen workloads and collects their results.

    Not thread-safe; one run per instance. A workload that fails is logged
    and recorded in :attr:`errors`; the others still run.
    """

    def __init__(
        self,
        plan: Plan,
        workloads: Sequence[str],
        log: Callable[[str], None],
        *,
        go: bool = True,
    ) -> None:
        self.plan = plan
        self.go = go
        self.workloads = tuple(w for w in WORKLOADS if w in workloads)
        self.results: list[Result] = []
        self.errors: list[dict[str, str]] = []
        self.rss: dict[str, float] | None = None
        self.rss_nats: dict[str, float] | None = None
        # SDK-to-SDK comparisons with a goal (see bench.report.target_row).
        self.targets: list[dict[str, object]] = []
        # The SDK's end-to-end p99 against Go's (see bench.report.latency_row).
        self.latency: list[dict[str, object]] = []
        # The server's processes, whose CPU each run is charged (bench.stats.Run).
        self._server_pids: tuple[int, ...] = ()
        self._cores = os.cpu_count() or 1
        self._log = log

    def run(self) -> None:
        if self.go:
            try:
                self._log(f"Go driver: {gocli.build()}")
            except gocli.GoDriverError as e:  # the SDK's figures are still worth having
                self._log(f"!! no Go figures: {e}")
                self.errors.append({"workload": "go", "error": str(e)})
                self.go = False
        single = [w for w in self.workloads if w != "cluster"]
        if single:
            self._log("starting a LocalServer")
            with LocalServer(log_level="warn") as server:
                self._server_pids = () if server.pid is None else (server.pid,)
                for workload in single:
                    self._guard(workload, functools.partial(self._single, workload, server))
        if "cluster" in self.workloads:
            self._log("starting a 3-node LocalCluster")
            with LocalCluster(3, log_level="warn") as cluster:
                pids = [node.pid for node in cluster.nodes] + [cluster.nats_pid]
                self._server_pids = tuple(pid for pid in pids if pid is not None)
                self._guard("cluster", lambda: self._cluster(cluster))

    # ------------------------------------------------------------- helpers --

    def _guard(self, workload: str, body: Callable[[], None]) -> None:
        # What earlier workloads left for the garbage collector (closed
        # clients' cycles, drivers' figures) is collected now, so that no
        # workload's collections walk or free another's objects: each starts
        # from the same collector state as when run alone (--only).
        gc.collect()
        started = time.monotonic()
        try:
            body()
        except Exception as e:  # one failed workload must not hide the others' figures
            self._log(f"!! {workload} failed: {e!r}")
            self.errors.append({"workload": workload, "error": repr(e)})
        self._log(f"   {workload}: {time.monotonic() - started:.0f}s")

    def _measure(
        self,
        entries: Sequence[_Entry],
        count: int,
        reps: int,
        warmup: int,
        slices: int = 1,
    ) -> None:
        """Warms each driver up, runs the repetitions alternating the order
        of the drivers, and records one result per driver.

        With ``slices`` > 1 each repetition is run in that many slices of
        ``count // slices`` messages, the drivers taking turns slice by slice,
        so a machine that changes pace within a repetition slows them alike.
        """
        try:
            for entry in entries:
                if warmup:
                    entry.driver.run(warmup)
            runs: list[list[Run]] = [[] for _ in entries]
            order = list(range(len(entries)))
            per_slice = max(1, count // slices)
            for rep in range(reps):
                parts: list[list[Run]] = [[] for _ in entries]
                for part in range(slices):
                    for i in order if (rep + part) % 2 == 0 else reversed(order):
                        parts[i].append(self._run(entries[i], per_slice))
                for i, driver_parts in enumerate(parts):
                    runs[i].append(Run.combined(driver_parts))
        finally:
            for entry in entries:
                entry.driver.close()
        for entry, driver_runs in zip(entries, runs, strict=True):
            result = Result(
                workload=entry.workload,
                setting=entry.setting,
                value_size=entry.value_size,
                variant=entry.variant,
                count=per_slice * slices,
                metrics=summarise(driver_runs),
                shown=entry.shown,
            )
            self.results.append(result)
            figures = ", ".join(
                f"{name} {result.metrics[name].median:,.2f}"
                for name in entry.shown
                if name in result.metrics
            )
            where = f"{entry.workload} {entry.setting} {entry.value_size}B {entry.variant}"
            self._log(f"   {where}: {figures}")

    def _run(self, entry: _Entry, count: int) -> Run:
        """One run of the entry's driver, charged the CPU its server used meanwhile."""
        pids = self._server_pids if entry.server_pids is None else entry.server_pids
        before = _cpu_of(pids)
        run = entry.driver.run(count)
        after = _cpu_of(pids)
        if before is None or after is None:
            return run
        return replace(run, server_cpu_seconds=after - before, cores=self._cores)

    @contextmanager
    def _client(
        self, addresses: list[str], max_inflight: int = 1024
    ) -> Iterator[liftbridge.Client]:
        with liftbridge.Client(addresses, ack_wait=60.0, max_inflight=max_inflight) as client:
            yield client

    # ----------------------------------------------------- single server --

    def _single(self, workload: str, server: LocalServer) -> None:
        self._log(f"-- {workload}")
        channel, stub = floor.open_stub(server.address)
        try:
            with self._client(server.addresses) as client:
                go = server.address if self.go else None
                if workload == "publish":
                    self._publish(client, stub, "publish", liftbridge.AckPolicy.LEADER, go=go)
                elif workload == "publish_async":
                    self._pipelined(
                        server.addresses, stub, "publish_async", liftbridge.AckPolicy.LEADER, go=go
                    )
                elif workload == "subscribe":
                    self._subscribe(client, stub, go=go)
                elif workload == "pull":
                    self._pull(client, stub)
                elif workload == "e2e":
                    self._end_to_end(client, stub, go)
                elif workload == "nats":
                    self._nats(client, server.nats_url, go)
                elif workload == "tls":
                    self._tls(server.addresses)
                elif workload == "rss":
                    self._rss(server.address, server.nats_url)
        finally:
            channel.close()

    def _publish(
        self,
        client: liftbridge.Client,
        stub: api_pb2_grpc.APIStub,
        workload: str,
        policy: liftbridge.AckPolicy,
        replication_factor: int = 1,
        count: int | None = None,
        go: str | None = None,
    ) -> None:
        """One-at-a-time publishes; ``go`` is the broker the Go driver publishes
        to (LEADER only), ``None`` for no Go driver."""
        count = count or self.plan.publish_count
        setting = policy.name
        for size in self.plan.sizes:
            value = b"p" * size
            names = [self._stream(client, workload, v, size, replication_factor) for v in "sbug"]
            entries = [
                _Entry(
                    workload,
                    setting,
                    size,
                    SDK,
                    sdk.SdkPublish(client, names[0], value, policy),
                    _PUBLISH_SHOWN,
                ),
                _Entry(
                    workload,
                    setting,
                    size,
                    BARE,
                    floor.BarePublish(stub, names[1], value, policy.value),
                    _PUBLISH_SHOWN,
                ),
                # A reference, not a floor: what the unary Publish RPC costs.
                _Entry(
                    f"{workload} (unary RPC)",
                    setting,
                    size,
                    BARE,
                    floor.BareUnaryPublish(stub, names[2], value, policy.value),
                    _PUBLISH_SHOWN,
                ),
            ]
            if go is not None:
                entries.append(
                    _Entry(
                        workload,
                        setting,
                        size,
                        GO,
                        gocli.GoDriver(go, "publish", names[3], size),
                        _PUBLISH_SHOWN,
                    )
                )
            self._measure(
                entries,
                count,
                self.plan.publish_reps,
                self.plan.warmup(count),
                slices=self.plan.publish_slices,
            )

    def _pipelined(
        self,
        addresses: list[str],
        stub: api_pb2_grpc.APIStub,
        workload: str,
        policy: liftbridge.AckPolicy,
        replication_factor: int = 1,
        windows: tuple[int, ...] | None = None,
        count: int | None = None,
        go: str | None = None,
    ) -> None:
        """Pipelined publishes per window; ``go`` as for :meth:`_publish`;
        ``count`` messages a repetition, or :meth:`Plan.pipelined_count_for`."""
        for window in windows or self.plan.windows:
            reps_count = count or self.plan.pipelined_count_for(window)
            with self._client(addresses, max_inflight=window) as client:
                for size in self.plan.sizes:
                    value = b"a" * size
                    names = [
                        self._stream(client, workload, v, size, replication_factor) for v in "sbg"
                    ]
                    setting = f"{policy.name} window={window}"
                    entries = [
                        _Entry(
                            workload,
                            setting,
                            size,
                            SDK,
                            sdk.SdkPipelined(client, names[0], value, policy),
                            _PIPELINED_SHOWN,
                        ),
                        _Entry(
                            workload,
                            setting,
                            size,
                            BARE,
                            floor.BarePipelined(stub, names[1], value, policy.value, window),
                            _PIPELINED_SHOWN,
                        ),
                    ]
                    # With an ack handler and no Future, on a stream of its own,
                    # in the same turns: a row next to the same Go figures.
                    handled_setting = f"{setting} handler, future=False"
                    handled_stream = self._stream(client, workload, "h", size, replication_factor)
                    entries.append(
                        _Entry(
                            workload,
                            handled_setting,
                            size,
                            SDK,
                            sdk.SdkHandled(client, handled_stream, value, policy),
                            _PIPELINED_SHOWN,
                        )
                    )
                    # publish_many_async: one Future per batch, next to the same Go figures.
                    batch_setting = f"{setting} publish_many_async, batch={sdk.BATCH}"
                    batch_stream = self._stream(client, workload, "m", size, replication_factor)
                    batched = sdk.SdkBatched(client, batch_stream, value, policy)
                    entries.append(
                        _Entry(workload, batch_setting, size, SDK, batched, _PIPELINED_SHOWN)
                    )
                    if go is not None:
                        driver = gocli.GoDriver(go, "publish_async", names[2], size, window=window)
                        entries.append(
                            _Entry(workload, setting, size, GO, driver, _PIPELINED_SHOWN)
                        )
                    self._measure(
                        entries,
                        reps_count,
                        self.plan.pipelined_reps,
                        self.plan.warmup(reps_count),
                    )
                    if go is not None:
                        go_result = self.results[-1]
                        for extra in (handled_setting, batch_setting):
                            self.results.append(replace(go_result, setting=extra))

    def _subscribe(
        self, client: liftbridge.Client, stub: api_pb2_grpc.APIStub, go: str | None = None
    ) -> None:
        total, warm = self.plan.subscribe_messages, self.plan.subscribe_warmup_messages
        for size in self.plan.sizes:
            value = b"s" * size
            stream = self._stream(client, "subscribe", "all", size)
            warm_stream = self._stream(client, "subscribe-warmup", "all", size)
            started = time.monotonic()
            floor.fill_partition(stub, stream, value, total)
            floor.fill_partition(stub, warm_stream, value, warm)
            self._log(f"   filled {total:,} x {size} B in {time.monotonic() - started:.0f}s")
            warmups: list[Driver] = [
                sdk.SdkSubscribe(client, warm_stream, warm - 1, size),
                floor.BareSubscribe(stub, warm_stream, warm - 1, size),
            ]
            if go is not None:
                warmups.append(
                    gocli.GoDriver(go, "subscribe", warm_stream, size, last_offset=warm - 1)
                )
            for driver in warmups:
                driver.run(warm)
                driver.close()
            setting = "earliest"
            entries = [
                _Entry(
                    "subscribe",
                    setting,
                    size,
                    SDK,
                    sdk.SdkSubscribe(client, stream, total - 1, size),
                    _PIPELINED_SHOWN,
                ),
                _Entry(
                    "subscribe",
                    setting,
                    size,
                    BARE,
                    floor.BareSubscribe(stub, stream, total - 1, size),
                    _PIPELINED_SHOWN,
                ),
            ]
            if go is not None:
                reader = gocli.GoDriver(go, "subscribe", stream, size, last_offset=total - 1)
                entries.append(_Entry("subscribe", setting, size, GO, reader, _PIPELINED_SHOWN))
            # The same read iterated on the calling thread (no handler), next to the floor.
            iterated = "iterated"
            entries += [
                _Entry(
                    "subscribe",
                    iterated,
                    size,
                    SDK,
                    sdk.SdkIterate(client, stream, total - 1, size),
                    _PIPELINED_SHOWN,
                ),
                _Entry(
                    "subscribe",
                    iterated,
                    size,
                    BARE,
                    floor.BareSubscribe(stub, stream, total - 1, size),
                    _PIPELINED_SHOWN,
                ),
            ]
            self._measure(entries, total, self.plan.subscribe_reps, 0)
            client.delete_stream(stream)
            client.delete_stream(warm_stream)

    def _tls(self, plain: list[str]) -> None:
        """The pipelined publish (handler, future=False) and the subscribe
        rows on a TLS server (certificates made here) next to the plaintext
        server, taking turns; the TLS/plaintext ratio of each goes to
        :attr:`targets` (issue 24: at least :data:`TLS_TARGET`). Each row is
        charged the CPU of the server it talks to."""
        window, policy = self.plan.nats_window, liftbridge.AckPolicy.LEADER
        count, total = self.plan.pipelined_count, self.plan.tls_subscribe_messages
        with (
            tls_server() as (secure_server, tls),
            self._client(plain, max_inflight=window) as plain_client,
            liftbridge.Client(
                secure_server.address, ack_wait=60.0, max_inflight=window, tls=tls
            ) as secure_client,
        ):
            secure_pids = () if secure_server.pid is None else (secure_server.pid,)
            sides = (
                ("plaintext", plain_client, self._server_pids),
                ("TLS", secure_client, secure_pids),
            )
            publish = f"publish_async window={window} handler, future=False"
            for size in self.plan.sizes:
                value = b"t" * size
                entries = []
                for name, client, pids in sides:
                    stream = self._stream(client, "tls", name, size)
                    driver = sdk.SdkHandled(client, stream, value, policy)
                    entries.append(self._tls_entry(f"{publish} {name}", size, driver, pids))
                self._measure(entries, count, self.plan.pipelined_reps, self.plan.warmup(count))
                self._tls_target()
                entries = []
                for name, client, pids in sides:
                    stream = self._stream(client, "tls-read", name, size)
                    sdk.SdkHandled(client, stream, value, policy).run(total)  # the fill
                    reader = sdk.SdkSubscribe(client, stream, total - 1, size)
                    entries.append(
                        self._tls_entry(f"subscribe earliest {name}", size, reader, pids)
                    )
                self._measure(entries, total, self.plan.subscribe_reps, 0)
                self._tls_target()

    @staticmethod
    def _tls_entry(setting: str, size: int, driver: Driver, pids: tuple[int, ...]) -> _Entry:
        return _Entry("tls", setting, size, SDK, driver, _PIPELINED_SHOWN, server_pids=pids)

    def _tls_target(self) -> None:
        """The TLS/plaintext ratio of the last two results (plaintext first)."""
        plain, secure = self.results[-2:]
        self.targets.append(target_row(secure, plain, goal=TLS_TARGET, against=plain.setting))

    def _pull(self, client: liftbridge.Client, stub: api_pb2_grpc.APIStub) -> None:
        """``PullConsumer.fetch`` next to the SDK's handler ``subscribe`` (the
        issue's target: fetch at least 0.9 of it) and the bare Subscribe
        stream (the floor under both), the three taking turns in one run.

        Two rows share the floor's figures: ``fetch(N)`` (SDK/bare is
        fetch/floor) and ``subscribe handler`` (subscribe/floor); the
        fetch/subscribe ratio is kept in :attr:`targets`."""
        total, batch = self.plan.subscribe_messages, self.plan.pull_batch
        for size in self.plan.sizes:
            value = b"p" * size
            stream = self._stream(client, "pull", "all", size)
            floor.fill_partition(stub, stream, value, total)
            pull = sdk.SdkPullFetch(client, stream, total - 1, size, batch)
            push = sdk.SdkSubscribe(client, stream, total - 1, size)
            bare = floor.BareSubscribe(stub, stream, total - 1, size)
            for driver in (pull, push, bare):  # warm-up: the page cache, the code paths
                driver.run(total)
            fetch_setting, push_setting = f"fetch({batch})", "subscribe handler"
            entries = [
                _Entry("pull", fetch_setting, size, SDK, pull, _PIPELINED_SHOWN),
                _Entry("pull", push_setting, size, SDK, push, _PIPELINED_SHOWN),
                _Entry("pull", fetch_setting, size, BARE, bare, _PIPELINED_SHOWN),
            ]
            self._measure(entries, total, self.plan.subscribe_reps, 0)
            fetched, pushed, floored = self.results[-3:]
            self.results.append(replace(floored, setting=push_setting))
            self.targets.append(
                target_row(fetched, pushed, goal=PULL_TARGET, against="SDK subscribe handler")
            )
            client.delete_stream(stream)

    def _get_latency(self, client: liftbridge.Client) -> None:
        """``Client.get`` from the leader and from random in-sync replicas (RF=3)."""
        count = self.plan.get_count
        for size in self.plan.sizes[:1]:
            stream = self._stream(client, "get", "rf3", size, replication_factor=3)
            value = b"g" * size
            for _ in range(count):
                client.publish(stream, value, ack_policy=liftbridge.AckPolicy.ALL)
            for read_replica, setting in ((False, "leader"), (True, "read_replica")):
                driver = sdk.SdkGet(client, stream, count, read_replica=read_replica)
                entry = _Entry("get RF=3", setting, size, SDK, driver, _PUBLISH_SHOWN)
                self._measure([entry], count, self.plan.get_reps, self.plan.warmup(count))
            client.delete_stream(stream)

    def _end_to_end(
        self, client: liftbridge.Client, stub: api_pb2_grpc.APIStub, go: str | None
    ) -> None:
        """Publish to handler at fixed offered rates: ``publish_async`` (a
        Future per message) to a ``subscribe`` handler in the same process,
        Go's ``PublishAsync`` to its ``Subscribe`` handler, taking turns on
        streams of their own; the bare floor at the first rate only.

        The last rate is the highest Go sustains: Go publishing as fast as
        its window allows (``e2e_probe_count`` messages, the median of three
        runs), rounded down to a thousand. Each latency runs from the value's
        stamp, taken just before the publish call, to the handler's call."""
        plan = self.plan
        for size in plan.sizes:
            rates = list(plan.e2e_rates)
            if go is not None:
                rates.append(self._go_sustained_rate(client, go, size))
            for n, rate in enumerate(rates):
                count = max(plan.e2e_min_count, int(rate * plan.e2e_seconds))
                setting = f"{rate:,.0f} msgs/s" + (" (Go's highest)" if n >= 2 else "")
                names = [self._stream(client, "e2e", v, size) for v in "sbg"]
                entries = [
                    _Entry(
                        "e2e latency",
                        setting,
                        size,
                        SDK,
                        sdk.SdkEndToEnd(client, names[0], size, rate),
                        _LATENCY_SHOWN,
                    )
                ]
                if n == 0:
                    bare = floor.BareEndToEnd(stub, names[1], size, rate)
                    entries.append(_Entry("e2e latency", setting, size, BARE, bare, _LATENCY_SHOWN))
                if go is not None:
                    driver = gocli.GoDriver(
                        go, "e2e", names[2], size, window=plan.e2e_window, rate=rate
                    )
                    entries.append(_Entry("e2e latency", setting, size, GO, driver, _LATENCY_SHOWN))
                self._measure(entries, count, plan.reps, plan.warmup(count))
                if go is not None:
                    mine, theirs = self.results[-len(entries)], self.results[-1]
                    self.latency.append(report.latency_row(mine, theirs, goal=LATENCY_TARGET))
                for name in names:
                    client.delete_stream(name)

    def _go_sustained_rate(self, client: liftbridge.Client, go: str, size: int) -> float:
        """The highest rate Go sustains publish to handler, rounded down to a thousand."""
        stream = self._stream(client, "e2e", "probe", size)
        driver = gocli.GoDriver(go, "e2e", stream, size, window=self.plan.e2e_window)
        try:
            count = self.plan.e2e_probe_count
            driver.run(self.plan.warmup(count))
            rates = sorted(count / driver.run(count).seconds for _ in range(3))
        finally:
            driver.close()
            client.delete_stream(stream)
        self._log(f"   Go publish to handler, unpaced: {', '.join(f'{r:,.0f}' for r in rates)}")
        return max(1_000.0, rates[1] // 1_000 * 1_000)

    def _nats(self, client: liftbridge.Client, nats_url: str, go: str | None) -> None:
        """The batched NATS path (``NatsStreamPublisher``) against Go's gRPC
        publishes, then the pynats2 ``NatsPublisher`` rows (a reference) with
        Go rows of their own. Each publisher is open only for its own rows and
        takes turns only with Go: what one leaves in the process (threads,
        objects for the garbage collector) is not charged to the other."""
        window = self.plan.nats_window
        for size in self.plan.sizes:
            value = b"n" * size
            names = [self._stream(client, "nats", v, size) for v in ("sdk", "go", "py2", "go2")]
            with liftbridge.NatsStreamPublisher(
                client, nats_url, ack_wait=60.0, max_inflight=window
            ) as fast:
                self._nats_rows(
                    "nats publish",
                    size,
                    over_nats.StreamPublish(fast, names[0], value),
                    over_nats.StreamPipelined(fast, client, names[0], value),
                    go and names[1],
                    go,
                    handled=over_nats.StreamHandled(fast, client, names[0], value),
                    batched=sdk.SdkBatched(
                        client, names[0], value, liftbridge.AckPolicy.LEADER, publisher=fast
                    ),
                    pipelined_count=self.plan.nats_steady_count,
                )
            with liftbridge.NatsPublisher(nats_url, ack_wait=60.0) as pynats2:
                self._nats_rows(
                    "nats publish (pynats2)",
                    size,
                    over_nats.NatsPublish(pynats2, names[2], value),
                    over_nats.NatsPipelined(pynats2, names[2], value, window),
                    go and names[3],
                    go,
                    go_publish=False,
                )

    def _nats_rows(
        self,
        workload: str,
        size: int,
        publish: Driver,
        pipelined: Driver,
        go_stream: str | None,
        go: str | None,
        *,
        go_publish: bool = True,
        handled: Driver | None = None,
        batched: Driver | None = None,
        pipelined_count: int | None = None,
    ) -> None:
        """One publisher's rows: one at a time, then pipelined, each taking
        turns with the Go driver on ``go_stream`` (``go_publish``: for the
        one-at-a-time rows too). ``handled``: pipelined with an ack handler
        and no Future, a row of its own in the same turns, next to the same
        Go figures; ``batched``: ``publish_many_async``, likewise.
        ``pipelined_count``: messages per pipelined repetition (default
        ``nats_pipelined_count``)."""
        window = self.plan.nats_window
        entries = [_Entry(workload, "LEADER", size, SDK, publish, _PUBLISH_SHOWN)]
        if go is not None and go_stream and go_publish:
            driver = gocli.GoDriver(go, "publish", go_stream, size)
            entries.append(_Entry(workload, "LEADER", size, GO, driver, _PUBLISH_SHOWN))
        count = self.plan.nats_count
        self._measure(
            entries,
            count,
            self.plan.publish_reps,
            self.plan.warmup(count),
            slices=self.plan.publish_slices,
        )
        setting = f"LEADER window={window}"
        handled_setting = f"{setting} handler, future=False"
        batch_setting = f"{setting} publish_many_async, batch={sdk.BATCH}"
        workload = workload.replace("nats publish", "nats publish_async")
        entries = [_Entry(workload, setting, size, SDK, pipelined, _PIPELINED_SHOWN)]
        if handled is not None:
            entries.append(_Entry(workload, handled_setting, size, SDK, handled, _PIPELINED_SHOWN))
        if batched is not None:
            entries.append(_Entry(workload, batch_setting, size, SDK, batched, _PIPELINED_SHOWN))
        with_go = go is not None and bool(go_stream)
        if go is not None and go_stream:
            driver = gocli.GoDriver(go, "publish_async", go_stream, size, window=window)
            entries.append(_Entry(workload, setting, size, GO, driver, _PIPELINED_SHOWN))
        count = pipelined_count or self.plan.nats_pipelined_count
        self._measure(entries, count, self.plan.pipelined_reps, self.plan.warmup(count))
        if with_go:  # the same Go figures, next to the handler and batch rows
            go_result = self.results[-1]
            for extra, driven in ((handled_setting, handled), (batch_setting, batched)):
                if driven is not None:
                    self.results.append(replace(go_result, setting=extra))

    def _rss(self, address: str, nats_url: str) -> None:
        plan = self.plan
        for path, nats in (("gRPC", None), ("NATS", nats_url)):
            stream = _name("rss", path.lower(), plan.rss_size)
            self._log(f"   publishing {plan.rss_messages:,} messages over {path} in a subprocess")
            figures = rss.measure(
                address,
                stream,
                plan.rss_messages,
                plan.rss_size,
                plan.rss_window,
                timeout=3600,
                nats=nats,
            )
            if nats is None:
                self.rss = figures
            else:
                self.rss_nats = figures
            self._log(
                f"   peak RSS {figures['peak_rss_mb']:.0f} MB "
                f"({figures['msgs_per_s']:,.0f} msgs/s, {figures['seconds']:.0f}s)"
            )

    def _stream(
        self,
        client: liftbridge.Client,
        kind: str,
        variant: str,
        size: int,
        replication_factor: int = 1,
    ) -> str:
        name = _name(kind.replace(" ", "-"), variant, size)
        client.create_stream(name, replication_factor=replication_factor)
        return name

    # ------------------------------------------------------------ cluster --

    def _cluster(self, cluster: LocalCluster) -> None:
        self._log("-- cluster (3 nodes, RF=3, AckPolicy.ALL)")
        with self._client(cluster.addresses) as client:
            address = client.metadata.addresses[0]  # the broker the SDK publishes through
            channel, stub = floor.open_stub(address)
            try:
                self._publish(
                    client,
                    stub,
                    "publish RF=3",
                    liftbridge.AckPolicy.ALL,
                    replication_factor=3,
                    count=self.plan.cluster_publish_count,
                )
                self._pipelined(
                    cluster.addresses,
                    stub,
                    "publish_async RF=3",
                    liftbridge.AckPolicy.ALL,
                    replication_factor=3,
                    windows=self.plan.cluster_windows,
                    count=self.plan.cluster_pipelined_count,
                )
                self._get_latency(client)
            finally:
                channel.close()
