"""LocalCluster: several real Liftbridge servers sharing one nats-server, on loopback."""

from __future__ import annotations

import logging
import os
import string
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

from liftbridge._errors import ArgumentTypeError, InvalidArgumentError
from liftbridge.testing._config import (
    ConfigValue,
    check_log_level,
    merge_settings,
    node_settings,
    render_nats_conf,
    render_yaml,
)
from liftbridge.testing._errors import ServerStartError
from liftbridge.testing._node import LOG_TAIL_LINES, NodeRunner
from liftbridge.testing._process import (
    LOOPBACK,
    ManagedProcess,
    address_in_use,
    free_port,
    make_temp_dir,
    port_open,
    remove_temp_dir,
    resolve_binary,
    tail,
)
from liftbridge.testing._readiness import (
    Expectation,
    FreshStartError,
    NotReadyError,
    PortTakenError,
    wait_for,
)
from liftbridge.testing._server import LIFTBRIDGE_BIN_ENV, START_ATTEMPTS

NATS_BIN_ENV = "NATS_SERVER_BIN"
"""The environment variable naming the ``nats-server`` executable."""

MAX_SIZE = len(string.ascii_lowercase)
"""Nodes are named "a" to "z"."""

# Failover in about a second instead of the server's 10-15 s defaults.
_FAST_FAILOVER: dict[str, ConfigValue] = {
    "clustering.replica.max.leader.timeout": "1s",
    "clustering.replica.max.lag.time": "3s",
    "clustering.replica.max.idle.wait": "500ms",
    "clustering.replica.fetch.timeout": "500ms",
}

# The broker list in FetchMetadata comes from a survey of the peers, which each
# server caches (default 2 min) until the Raft membership changes; a crash and a
# restart do not change it. A node that surveys while a peer is down lists the
# peers that answered, and would not list the missing one again for 2 minutes
# after it is back. The survey itself, with a peer down, waits until the caller's
# deadline and then fails the call (DEADLINE_EXCEEDED) though it caches what it
# got. 10 s keeps lists true soon after a restart while such failed calls stay
# rare (at most one per node per 10 s during an outage).
_BROKER_LIST_CACHE: dict[str, ConfigValue] = {"metadata.cache.max.age": "10s"}

_NATS_READY = "Server is ready"  # what nats-server logs once it accepts clients

Path_ = str | os.PathLike[str]

_LOG = logging.getLogger(__name__)


class ClusterNode:
    """A handle on one node of a :class:`LocalCluster`.

    Read-only: stop, kill and restart nodes through the cluster.

    Thread-safety: the properties may be read from any thread.
    """

    def __init__(self, runner: NodeRunner) -> None:
        self._runner = runner

    @property
    def server_id(self) -> str:
        """The node's id: ``"a"``, ``"b"``, ..."""
        return self._runner.server_id

    @property
    def address(self) -> str:
        """The node's API address, ``"127.0.0.1:<port>"``; kept across restarts."""
        return self._runner.address

    @property
    def port(self) -> int:
        """The node's API port."""
        return self._runner.port

    @property
    def pid(self) -> int | None:
        """The process id of the current (or last) run."""
        return self._runner.process.pid

    @property
    def running(self) -> bool:
        """True while the node's process is alive."""
        return self._runner.process.running

    @property
    def log_path(self) -> Path:
        """The node's log file; restarts append to it."""
        return self._runner.log_path

    @property
    def data_dir(self) -> Path:
        """The node's ``data.dir``; kept across restarts."""
        return self._runner.data_dir

    def log_tail(self, lines: int = 50) -> str:
        """The last ``lines`` lines of the node's log."""
        return self._runner.log_tail(lines)

    def __repr__(self) -> str:
        state = "running" if self.running else "not running"
        return f"<ClusterNode {self.server_id!r} at {self.address}, pid {self.pid}, {state}>"


def _check_data_dirs(data_dirs: Mapping[str, Path_] | None, ids: list[str]) -> dict[str, Path]:
    if data_dirs is None:
        return {}
    if not isinstance(data_dirs, Mapping):
        raise ArgumentTypeError(f"data_dirs must be a mapping, got {type(data_dirs).__name__}")
    checked: dict[str, Path] = {}
    for server_id, directory in data_dirs.items():
        if server_id not in ids:
            raise InvalidArgumentError(f"data_dirs names {server_id!r}, not a node id of {ids}")
        path = Path(directory)
        if not path.is_dir():
            raise InvalidArgumentError(f"data_dirs[{server_id!r}] is not a directory: {path}")
        checked[server_id] = path
    return checked


class LocalCluster:
    """Several real Liftbridge servers, named ``"a"``, ``"b"``, ..., for failover tests.

    The nodes share one nats-server that the cluster starts, so that killing any
    node leaves NATS up. Every node bootstraps with the full peer list, binds and
    advertises 127.0.0.1 on a free port, keeps its data under one temporary
    directory (removed by :meth:`stop`), fails over fast (leader timeout 1 s, lag
    time 3 s), and has cursors, the activity stream and short consumer-group
    timeouts on. :meth:`start` returns once every node lists every broker and
    the internal streams have leaders.

    The servers' broker-list cache (``metadata.cache.max.age``) is cut from 2
    minutes to 10 seconds, so that every node lists a restarted node again soon
    (:meth:`restart` waits for that). Server behaviour to expect while a node is
    down: when a node's cache expires, its next FetchMetadata waits for the
    missing node until the call's deadline and fails with DEADLINE_EXCEEDED; the
    retry gets the surviving brokers from the cache at once.

    Example::

        with LocalCluster(3) as cluster:
            cluster.kill("b")
            ...
            cluster.restart("b")

    Every process it starts is killed at interpreter exit if still running.

    Thread-safety: not thread-safe. Drive it from one thread; the read-only
    properties may be read from any thread.
    """

    def __init__(
        self,
        size: int = 3,
        *,
        binary: Path_ | None = None,
        nats_binary: Path_ | None = None,
        consumer_timeout: float = 3.0,
        coordinator_timeout: float = 3.0,
        config_overrides: Mapping[str, ConfigValue | None] | None = None,
        startup_timeout: float = 60.0,
        stop_timeout: float = 10.0,
        log_level: str = "info",
        data_dirs: Mapping[str, Path_] | None = None,
    ) -> None:
        """Checks the arguments and finds the executables; nothing starts yet.

        Args:
            size: the number of nodes, 1 to 26.
            binary: the ``liftbridge`` executable; default ``$LIFTBRIDGE_SERVER_BIN``,
                then ``liftbridge`` on PATH.
            nats_binary: the ``nats-server`` executable; default ``$NATS_SERVER_BIN``,
                then ``nats-server`` on PATH.
            consumer_timeout: ``groups.consumer.timeout`` in seconds.
            coordinator_timeout: ``groups.coordinator.timeout`` in seconds.
            config_overrides: extra or replaced settings for every node, by dotted
                server key; ``None`` as a value removes a setting.
            startup_timeout: seconds :meth:`start`, :meth:`restart` and
                :meth:`wait_ready` wait by default.
            stop_timeout: seconds a graceful stop waits after SIGINT before SIGKILL.
            log_level: the nodes' ``logging.level``: debug, info, warn or error.
            data_dirs: a ``data.dir`` of its own for some nodes, by server id
                (e.g. ``{"c": "/mnt/small"}``, a size-limited filesystem for a
                disk-full test): an existing, empty directory the caller owns
                and removes; the other nodes keep theirs under the cluster's
                temporary directory.

        Raises:
            InvalidArgumentError: a bad argument, named in the message.
            ServerBinaryNotFoundError: an executable is missing; says how to get it.
        """
        if isinstance(size, bool) or not isinstance(size, int):
            raise ArgumentTypeError(f"size must be an int, got {size!r}")
        if not 1 <= size <= MAX_SIZE:
            raise InvalidArgumentError(f"size must be between 1 and {MAX_SIZE}, got {size}")
        if not startup_timeout > 0 or not stop_timeout > 0:
            raise InvalidArgumentError("startup_timeout and stop_timeout must be positive seconds")
        self._binary = resolve_binary(binary, env_var=LIFTBRIDGE_BIN_ENV, name="liftbridge")
        self._nats_binary = resolve_binary(nats_binary, env_var=NATS_BIN_ENV, name="nats-server")
        self._ids = list(string.ascii_lowercase[:size])
        self._log_level = check_log_level(log_level)
        self._consumer_timeout = consumer_timeout
        self._coordinator_timeout = coordinator_timeout
        self._overrides = dict(config_overrides or {})
        self._data_dirs = _check_data_dirs(data_dirs, self._ids)
        self._startup_timeout = float(startup_timeout)
        self._stop_timeout = float(stop_timeout)
        self._namespace = f"lbtest-{uuid.uuid4().hex[:12]}"
        self._directory: Path | None = None
        self._nats: ManagedProcess | None = None
        self._nats_port = 0
        self._nodes: list[ClusterNode] = []
        self._ports: set[int] = set()  # every port handed out, so nodes never share one
        # Rendered once now, so that bad overrides fail here rather than in start().
        render_yaml(self._settings("a", 1, Path("/")))

    # ---------------------------------------------------------- lifecycle --

    def start(self) -> LocalCluster:
        """Starts the nats-server and every node, and waits until all are ready.

        A node that crashes for want of time on a busy machine (its promotion
        to metadata leader timed out in a one-node cluster, or a peer's Raft
        vote request came before its bootstrap) has the cluster started again
        on fresh data, up to three times in all within ``startup_timeout``.

        Returns:
            ``self``.

        Raises:
            ServerStartError: already started, or a process exited or was not
                ready in ``startup_timeout``; the message quotes its log.
        """
        if self._directory is not None:
            raise ServerStartError(f"{self!r} is already started")
        deadline = time.monotonic() + self._startup_timeout
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                self._start_all(deadline)
            except FreshStartError as err:
                crashed = next((n._runner for n in self._nodes if not n.running), None)
                failure = (
                    ServerStartError(str(err)) if crashed is None else crashed.start_failure(err)
                )
                self._discard()
                if attempt == START_ATTEMPTS:
                    raise failure from None
                _LOG.warning("%s; starting the cluster again on fresh data", err)
            except BaseException:
                self._discard()
                raise
            else:
                break
        return self

    def stop(self, node: ClusterNode | str | None = None) -> None:
        """Stops one node gracefully, or, without an argument, the whole cluster.

        A node gets SIGINT, then SIGKILL after ``stop_timeout``; it keeps its data
        and port for :meth:`restart`. The whole cluster stops every node the same
        way (all at once), then the nats-server, then removes the directory.

        Args:
            node: a node, its server id, or ``None`` for everything.
        """
        if node is not None:
            self._resolve(node)._runner.process.stop(self._stop_timeout)
            return
        if self._directory is None:
            return
        processes = [n._runner.process for n in self._nodes]
        for process in processes:
            process.interrupt()
        deadline = time.monotonic() + self._stop_timeout
        for process in processes:
            if not process.wait(deadline - time.monotonic()):
                process.kill()
        if self._nats is not None:
            self._nats.stop(self._stop_timeout)
        self._discard()

    def kill(self, node: ClusterNode | str) -> None:
        """Kills one node with SIGKILL, as a crash would. Its data stays for :meth:`restart`.

        Args:
            node: a node or its server id.
        """
        self._resolve(node)._runner.process.kill()

    def restart(self, node: ClusterNode | str) -> None:
        """Stops a node (SIGINT; nothing if it is down), starts it again with the
        same id, port and data, and waits until it is back.

        "Back" means: it serves, its metadata lists every running node and the
        internal streams have leaders among running nodes, and every other
        running node lists it again. That last part can take up to the 10 s
        broker-list cache age when another node surveyed its peers during the
        outage.

        Args:
            node: a node or its server id.

        Raises:
            ServerStartError: it is not ready within ``startup_timeout``; the node
                is killed and the message quotes its log.
        """
        target = self._resolve(node)
        runner = target._runner
        runner.process.stop(self._stop_timeout)
        runner.process.start()
        deadline = time.monotonic() + self._startup_timeout
        try:
            runner.wait_serving(deadline)
            runner.wait_metadata(self._expectation(), deadline)
            back = Expectation(brokers={runner.server_id: runner.address})
            for other in self._nodes:
                if other is not target and other.running:
                    other._runner.wait_metadata(back, deadline)
        except NotReadyError as err:
            runner.process.kill()
            raise runner.start_failure(err) from None

    def wait_ready(self, timeout: float | None = None) -> None:
        """Waits until every running node lists every running node and the internal
        streams are led by running nodes (after a kill: until leadership moved).

        Args:
            timeout: seconds; ``None`` means ``startup_timeout``.

        Raises:
            ServerStartError: not ready in time; the message quotes the log of the
                node that was not.
        """
        self._require_started()
        self._wait_all(time.monotonic() + (self._startup_timeout if timeout is None else timeout))

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    # --------------------------------------------------------- properties --

    @property
    def size(self) -> int:
        """The number of nodes."""
        return len(self._ids)

    @property
    def nodes(self) -> list[ClusterNode]:
        """The nodes in id order, running or not."""
        self._require_started()
        return list(self._nodes)

    @property
    def addresses(self) -> list[str]:
        """Every node's API address, running or not, in id order."""
        return [node.address for node in self.nodes]

    @property
    def nats_url(self) -> str:
        """The shared nats-server's URL, ``"nats://127.0.0.1:<port>"``."""
        self._require_started()
        return f"nats://{LOOPBACK}:{self._nats_port}"

    @property
    def nats_pid(self) -> int | None:
        """The shared nats-server's process id."""
        return None if self._nats is None else self._nats.pid

    @property
    def namespace(self) -> str:
        """The ``clustering.namespace`` the nodes share."""
        return self._namespace

    def node(self, server_id: str) -> ClusterNode:
        """The node with this server id.

        Raises:
            InvalidArgumentError: no such node.
        """
        for candidate in self.nodes:
            if candidate.server_id == server_id:
                return candidate
        raise InvalidArgumentError(
            f"server_id {server_id!r} is not a node of this cluster (nodes: {self._ids})"
        )

    def node_for_address(self, address: str) -> ClusterNode:
        """The node whose API address is ``address`` (``"127.0.0.1:<port>"``).

        Raises:
            InvalidArgumentError: no such node.
        """
        for candidate in self.nodes:
            if candidate.address == address:
                return candidate
        raise InvalidArgumentError(
            f"address {address!r} is not a node of this cluster ({self.addresses})"
        )

    def __repr__(self) -> str:
        if self._directory is None:
            return f"<LocalCluster of {self.size} not started>"
        running = [node.server_id for node in self._nodes if node.running]
        return f"<LocalCluster of {self.size}, running {running}, NATS {self.nats_url}>"

    # ------------------------------------------------------------ private --

    def _start_all(self, deadline: float) -> None:
        self._directory = make_temp_dir("liftbridge-cluster-")
        self._start_nats(self._directory, deadline)
        for server_id in self._ids:
            directory = self._directory / server_id
            directory.mkdir()
            runner = NodeRunner(binary=self._binary, server_id=server_id, directory=directory)
            runner.data_dir = self._data_dirs.get(server_id, runner.data_dir)
            self._nodes.append(ClusterNode(runner))
            self._configure(runner)
            runner.process.start()
        # Every node serves before any is asked for metadata, so that no
        # node's first broker survey (which it caches) misses a peer.
        for node in self._nodes:
            self._wait_serving(node._runner, deadline)
        self._wait_all(deadline)

    def _settings(self, server_id: str, port: int, directory: Path) -> dict[str, ConfigValue]:
        base = node_settings(
            server_id=server_id,
            namespace=self._namespace,
            host=LOOPBACK,
            port=port,
            data_dir=str(self._data_dirs.get(server_id, directory / "data")),
            nats_servers=[f"nats://{LOOPBACK}:{self._nats_port}"],
            log_level=self._log_level,
            consumer_timeout=self._consumer_timeout,
            coordinator_timeout=self._coordinator_timeout,
        )
        # A YAML list: the command-line flag would take "a,b,c" as one peer.
        base["clustering.raft.bootstrap.peers"] = list(self._ids)
        base.update(_FAST_FAILOVER)
        base.update(_BROKER_LIST_CACHE)
        return merge_settings(base, self._overrides)

    def _fresh_port(self) -> int:
        port = free_port()
        while port in self._ports:
            port = free_port()
        self._ports.add(port)
        return port

    def _configure(self, runner: NodeRunner) -> None:
        port = self._fresh_port()
        runner.configure(port, self._settings(runner.server_id, port, runner.directory))

    def _start_nats(self, directory: Path, deadline: float) -> None:
        conf = directory / "nats.conf"
        process = ManagedProcess(
            "nats-server", [self._nats_binary, "-c", str(conf)], directory / "nats-server.log"
        )
        self._nats = process

        def alive() -> None:
            code = process.returncode
            if code is None:
                return
            if address_in_use(process.output()):
                raise PortTakenError(f"nats-server: port {self._nats_port} was taken")
            raise NotReadyError(f"nats-server exited with status {code} while starting")

        def ready(timeout: float) -> str | None:
            if _NATS_READY not in process.output():
                return f"no {_NATS_READY!r} in its log yet"
            if not port_open(self._nats_port, min(timeout, 1.0)):
                return f"port {self._nats_port} closed"
            return None

        for attempt in range(1, START_ATTEMPTS + 1):
            self._nats_port = self._fresh_port()
            conf.write_text(render_nats_conf(host=LOOPBACK, port=self._nats_port), "utf-8")
            process.start()
            try:
                wait_for("nats-server", ready, deadline=deadline, alive=alive)
                return
            except PortTakenError:
                if attempt < START_ATTEMPTS:
                    continue
                raise ServerStartError("nats-server: no free port after retries") from None
            except NotReadyError as err:
                raise ServerStartError(
                    f"nats-server did not start: {err}",
                    log_tail=tail(process.log_path, LOG_TAIL_LINES),
                ) from None

    def _wait_serving(self, runner: NodeRunner, deadline: float) -> None:
        """Waits for one node to serve, moving it to a new port if its port was taken."""
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                runner.wait_serving(deadline)
                return
            except PortTakenError as err:
                if attempt == START_ATTEMPTS:
                    raise runner.start_failure(err) from None
                self._configure(runner)
                runner.process.start()
            except FreshStartError:
                raise  # start() starts the cluster again
            except NotReadyError as err:
                raise runner.start_failure(err) from None

    def _expectation(self) -> Expectation:
        running = [node for node in self._nodes if node.running]
        streams = self._nodes[0]._runner.expected_streams
        return Expectation(
            brokers={node.server_id: node.address for node in running},
            internal_streams=streams,
            leaders=frozenset(node.server_id for node in running),
        )

    def _wait_all(self, deadline: float) -> None:
        expect = self._expectation()
        for node in self._nodes:
            if not node.running:
                continue
            try:
                node._runner.wait_metadata(expect, deadline)
            except FreshStartError:
                raise  # start() starts the cluster again
            except NotReadyError as err:
                raise node._runner.start_failure(err) from None

    def _resolve(self, node: ClusterNode | str) -> ClusterNode:
        if isinstance(node, ClusterNode):
            if node not in self.nodes:
                raise InvalidArgumentError(f"node {node!r} is not a node of this cluster")
            return node
        if isinstance(node, str):
            return self.node(node)
        raise ArgumentTypeError(f"node must be a ClusterNode or a server id, got {node!r}")

    def _require_started(self) -> None:
        if self._directory is None:
            raise ServerStartError(
                "the LocalCluster is not started: call start() or use `with LocalCluster() as c:`"
            )

    def _discard(self) -> None:
        for node in self._nodes:
            node._runner.process.kill()
        if self._nats is not None:
            self._nats.kill()
        if self._directory is not None:
            remove_temp_dir(self._directory)
        self._nodes = []
        self._nats = None
        self._directory = None
        self._ports.clear()
