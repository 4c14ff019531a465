"""LocalServer: one real Liftbridge server with embedded NATS, on loopback."""

from __future__ import annotations

import logging
import os
import shutil
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

from liftbridge._core._router import TLSConfig
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
from liftbridge.testing._node import NodeRunner
from liftbridge.testing._process import (
    LOOPBACK,
    free_port,
    make_temp_dir,
    remove_temp_dir,
    resolve_binary,
)
from liftbridge.testing._readiness import (
    Expectation,
    NotReadyError,
    PortTakenError,
    PromotionTimedOutError,
)

LIFTBRIDGE_BIN_ENV = "LIFTBRIDGE_SERVER_BIN"
"""The environment variable naming the ``liftbridge`` executable."""

START_ATTEMPTS = 3
"""How often a start is tried: again with new ports when another process took
one, and again on fresh data when the server crashed because its promotion to
metadata leader timed out (a busy machine), all within ``startup_timeout``."""

Path_ = str | os.PathLike[str]

_LOG = logging.getLogger(__name__)


class LocalServer:
    """One real Liftbridge server, with embedded NATS, for tests.

    It binds and advertises 127.0.0.1 only, on free ports, keeps its data in a
    temporary directory removed by :meth:`stop`, and uses a namespace of its own.
    Cursors (``__cursors``, 2 partitions, never auto-paused), the activity stream
    (``__activity``) and short consumer-group timeouts are configured. The server
    is ready when :meth:`start` returns: it lists itself in FetchMetadata and the
    internal streams have leaders.

    Example::

        with LocalServer() as server:
            client = liftbridge.Client(server.address)

    Every process it starts is killed at interpreter exit if still running.

    Thread-safety: not thread-safe. Start, restart and stop it from one thread;
    the read-only properties may be read from any thread.
    """

    def __init__(
        self,
        *,
        binary: Path_ | None = None,
        server_id: str = "a",
        tls_cert: Path_ | None = None,
        tls_key: Path_ | None = None,
        tls_ca: Path_ | None = None,
        tls_client_ca: Path_ | None = None,
        tls_client_cert: Path_ | None = None,
        tls_client_key: Path_ | None = None,
        consumer_timeout: float = 3.0,
        coordinator_timeout: float = 3.0,
        config_overrides: Mapping[str, ConfigValue | None] | None = None,
        startup_timeout: float = 30.0,
        stop_timeout: float = 10.0,
        log_level: str = "info",
        port: int | None = None,
        nats_port: int | None = None,
    ) -> None:
        """Checks the arguments and finds the executable; nothing starts yet.

        Args:
            binary: the ``liftbridge`` executable; default ``$LIFTBRIDGE_SERVER_BIN``,
                then ``liftbridge`` on PATH.
            server_id: ``clustering.server.id``.
            tls_cert: PEM certificate for the API port, valid for ``127.0.0.1``;
                with ``tls_key`` it turns TLS on (``tls.cert``, ``tls.key``).
            tls_key: PEM private key of ``tls_cert``.
            tls_ca: PEM CA that signed ``tls_cert``; required with TLS, the harness
                verifies the server with it while waiting for it.
            tls_client_ca: PEM CA for client certificates; turns mutual TLS on
                (``tls.client.auth.enabled``, ``tls.client.auth.ca``). Needs TLS.
            tls_client_cert: PEM client certificate the harness presents while
                waiting; required with ``tls_client_ca``.
            tls_client_key: PEM private key of ``tls_client_cert``.
            consumer_timeout: ``groups.consumer.timeout`` in seconds.
            coordinator_timeout: ``groups.coordinator.timeout`` in seconds.
            config_overrides: extra or replaced settings by dotted server key
                (``{"streams.retention.max.messages": 100}``); ``None`` as a value
                removes a setting. Unknown keys make the server refuse to start.
            startup_timeout: seconds :meth:`start` and :meth:`restart` wait for
                readiness.
            stop_timeout: seconds :meth:`stop` waits after SIGINT before SIGKILL.
            log_level: the server's ``logging.level``: debug, info, warn or error.
            port: the API port; default a free one. A fixed port that is taken
                fails the start instead of moving to another.
            nats_port: the embedded NATS server's port; default a free one.

        Raises:
            InvalidArgumentError: a bad combination of arguments, naming them.
            ServerBinaryNotFoundError: no executable; says how to provide one.
        """
        self._binary = resolve_binary(binary, env_var=LIFTBRIDGE_BIN_ENV, name="liftbridge")
        self._server_id = server_id
        self._log_level = check_log_level(log_level)
        self._port = _port_or_none("port", port)
        self._fixed_nats_port = _port_or_none("nats_port", nats_port)
        if self._port is not None and self._port == self._fixed_nats_port:
            raise InvalidArgumentError(f"port and nats_port must differ, both are {port}")
        self._consumer_timeout = consumer_timeout
        self._coordinator_timeout = coordinator_timeout
        self._overrides = dict(config_overrides or {})
        self._startup_timeout = _positive("startup_timeout", startup_timeout)
        self._stop_timeout = _positive("stop_timeout", stop_timeout)
        self._tls = _tls_settings(
            tls_cert=tls_cert,
            tls_key=tls_key,
            tls_ca=tls_ca,
            tls_client_ca=tls_client_ca,
            tls_client_cert=tls_client_cert,
            tls_client_key=tls_client_key,
        )
        self._probe_tls = _probe_tls(
            tls_ca=tls_ca, tls_client_cert=tls_client_cert, tls_client_key=tls_client_key
        )
        self._namespace = f"lbtest-{uuid.uuid4().hex[:12]}"
        self._node: NodeRunner | None = None
        self._nats_port = 0
        # Rendered once now, so that bad overrides fail here rather than in start().
        render_yaml(self._settings(port=1, nats_port=2, directory=Path("/")))

    # ---------------------------------------------------------- lifecycle --

    def start(self) -> LocalServer:
        """Starts the server and waits until it is ready.

        A server that crashes because its promotion to metadata leader timed
        out (as Liftbridge does on a busy machine) is started again on fresh
        data, up to three times in all within ``startup_timeout``.

        Returns:
            ``self``.

        Raises:
            ServerStartError: it is already started, exited, or was not ready in
                ``startup_timeout``; the message quotes its log.
        """
        if self._node is not None:
            raise ServerStartError(f"{self!r} is already started")
        deadline = time.monotonic() + self._startup_timeout
        directory = make_temp_dir("liftbridge-server-")
        node = NodeRunner(
            binary=self._binary,
            server_id=self._server_id,
            directory=directory,
            tls=self._probe_tls,
        )
        self._node = node
        try:
            self._launch(node, deadline)
        except NotReadyError as err:
            failure = node.start_failure(err)
            self._discard()
            raise failure from None
        except BaseException:
            self._discard()
            raise
        return self

    def restart(self) -> None:
        """Stops the server (SIGINT, or nothing if it was killed) and starts it again
        with the same ports, id and data, then waits until it is ready.

        Raises:
            ServerStartError: it was never started, or is not ready in time.
        """
        node = self._require_node()
        node.process.stop(self._stop_timeout)
        node.process.start()
        try:
            self._wait_ready(node, time.monotonic() + self._startup_timeout)
        except NotReadyError as err:
            node.process.kill()
            raise node.start_failure(err) from None

    def stop(self) -> None:
        """Stops the server (SIGINT, then SIGKILL after ``stop_timeout``) and
        removes its directory, log included. Does nothing when not started."""
        if self._node is not None:
            self._node.process.stop(self._stop_timeout)
            self._discard()

    def kill(self) -> None:
        """Kills the server with SIGKILL, as a crash would; keeps its data so that
        :meth:`restart` can bring it back. :meth:`stop` still cleans up.

        Raises:
            ServerStartError: it was never started.
        """
        self._require_node().process.kill()

    def __enter__(self) -> LocalServer:
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
    def address(self) -> str:
        """The API address, ``"127.0.0.1:<port>"``."""
        return self._require_node().address

    @property
    def addresses(self) -> list[str]:
        """``[address]``, the shape a client's bootstrap list takes."""
        return [self.address]

    @property
    def port(self) -> int:
        """The API port."""
        return self._require_node().port

    @property
    def nats_url(self) -> str:
        """The embedded NATS server's URL, ``"nats://127.0.0.1:<port>"``."""
        self._require_node()
        return f"nats://{LOOPBACK}:{self._nats_port}"

    @property
    def server_id(self) -> str:
        """The server's id (``clustering.server.id``)."""
        return self._server_id

    @property
    def namespace(self) -> str:
        """The server's ``clustering.namespace``."""
        return self._namespace

    @property
    def pid(self) -> int | None:
        """The process id of the current (or last) run; ``None`` when not started."""
        return None if self._node is None else self._node.process.pid

    @property
    def running(self) -> bool:
        """True while the server process is alive."""
        return self._node is not None and self._node.process.running

    @property
    def log_path(self) -> Path:
        """The server's log file (removed by :meth:`stop`)."""
        return self._require_node().log_path

    @property
    def data_dir(self) -> Path:
        """The server's ``data.dir`` (removed by :meth:`stop`)."""
        return self._require_node().data_dir

    @property
    def config_path(self) -> Path:
        """The YAML configuration file the server was started with."""
        return self._require_node().config_path

    def log_tail(self, lines: int = 50) -> str:
        """The last ``lines`` lines of the server's log, ``""`` when there is none."""
        return "" if self._node is None else self._node.log_tail(lines)

    def __repr__(self) -> str:
        if self._node is None:
            return f"<LocalServer {self._server_id!r} not started>"
        state = "running" if self._node.process.running else "not running"
        return (
            f"<LocalServer {self._server_id!r} at {self._node.address}, "
            f"pid {self._node.process.pid}, {state}>"
        )

    # ------------------------------------------------------------ private --

    def _settings(self, *, port: int, nats_port: int, directory: Path) -> dict[str, ConfigValue]:
        base = node_settings(
            server_id=self._server_id,
            namespace=self._namespace,
            host=LOOPBACK,
            port=port,
            data_dir=str(directory / "data"),
            nats_servers=[f"nats://{LOOPBACK}:{nats_port}"],
            log_level=self._log_level,
            consumer_timeout=self._consumer_timeout,
            coordinator_timeout=self._coordinator_timeout,
        )
        # The presence of "nats.embedded" alone turns embedding on, even as
        # false; the config path is the one key needed.
        base["nats.embedded.config"] = str(directory / "nats.conf")
        base["clustering.raft.bootstrap.seed"] = True
        base.update(self._tls)
        return merge_settings(base, self._overrides)

    def _configure(self, node: NodeRunner, port: int) -> None:
        (node.directory / "nats.conf").write_text(
            render_nats_conf(host=LOOPBACK, port=self._nats_port), encoding="utf-8"
        )
        node.configure(
            port, self._settings(port=port, nats_port=self._nats_port, directory=node.directory)
        )

    def _launch(self, node: NodeRunner, deadline: float) -> None:
        fixed = self._port is not None or self._fixed_nats_port is not None
        for attempt in range(1, START_ATTEMPTS + 1):
            port = self._port if self._port is not None else free_port()
            self._nats_port = (
                self._fixed_nats_port
                if self._fixed_nats_port is not None
                else _other_free_port(port)
            )
            self._configure(node, port)
            node.process.start()
            try:
                self._wait_ready(node, deadline)
                return
            except PortTakenError:
                if fixed or attempt == START_ATTEMPTS:
                    raise
            except PromotionTimedOutError as err:
                if attempt == START_ATTEMPTS:
                    raise
                _LOG.warning("%s; starting it again on fresh data", err)
                shutil.rmtree(node.data_dir, ignore_errors=True)

    def _wait_ready(self, node: NodeRunner, deadline: float) -> None:
        node.wait_serving(deadline)
        expect = Expectation(
            brokers={node.server_id: node.address},
            internal_streams=node.expected_streams,
            leaders=frozenset({node.server_id}),
        )
        node.wait_metadata(expect, deadline)

    def _require_node(self) -> NodeRunner:
        if self._node is None:
            raise ServerStartError(
                "the LocalServer is not started: "
                "call start() or use `with LocalServer() as server:`"
            )
        return self._node

    def _discard(self) -> None:
        node, self._node = self._node, None
        if node is not None:
            node.process.kill()
            remove_temp_dir(node.directory)


def _positive(name: str, value: float) -> float:
    if not value > 0:
        raise InvalidArgumentError(f"{name} must be a positive number of seconds, got {value!r}")
    return float(value)


def _port_or_none(name: str, value: int | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgumentTypeError(f"{name} must be an int or None, got {type(value).__name__}")
    if not 0 < value < 65536:
        raise InvalidArgumentError(f"{name} must be a TCP port (1-65535), got {value}")
    return value


def _other_free_port(taken: int) -> int:
    port = free_port()
    while port == taken:
        port = free_port()
    return port


def _existing_file(name: str, value: Path_) -> str:
    path = Path(value).resolve()
    if not path.is_file():
        raise InvalidArgumentError(f"{name}={os.fspath(value)!r} is not a file")
    return str(path)


def _tls_settings(
    *,
    tls_cert: Path_ | None,
    tls_key: Path_ | None,
    tls_ca: Path_ | None,
    tls_client_ca: Path_ | None,
    tls_client_cert: Path_ | None,
    tls_client_key: Path_ | None,
) -> dict[str, ConfigValue]:
    if (tls_cert is None) != (tls_key is None):
        raise InvalidArgumentError("tls_cert and tls_key must be given together")
    if (tls_client_cert is None) != (tls_client_key is None):
        raise InvalidArgumentError("tls_client_cert and tls_client_key must be given together")
    if tls_cert is None or tls_key is None:
        if tls_client_ca is not None or tls_ca is not None or tls_client_cert is not None:
            raise InvalidArgumentError(
                "tls_ca, tls_client_ca and tls_client_cert need TLS: give tls_cert and tls_key"
            )
        return {}
    if tls_ca is None:
        raise InvalidArgumentError(
            "tls_ca (the CA that signed tls_cert) is required with TLS: the harness "
            "verifies the server with it while waiting for it to be ready"
        )
    _existing_file("tls_ca", tls_ca)
    settings: dict[str, ConfigValue] = {
        "tls.cert": _existing_file("tls_cert", tls_cert),
        "tls.key": _existing_file("tls_key", tls_key),
    }
    if tls_client_ca is not None:
        if tls_client_cert is None:
            raise InvalidArgumentError(
                "tls_client_ca turns mutual TLS on: give tls_client_cert and tls_client_key, "
                "the identity the harness presents while waiting for the server"
            )
        settings["tls.client.auth.enabled"] = True
        settings["tls.client.auth.ca"] = _existing_file("tls_client_ca", tls_client_ca)
    return settings


def _probe_tls(
    *,
    tls_ca: Path_ | None,
    tls_client_cert: Path_ | None,
    tls_client_key: Path_ | None,
) -> TLSConfig | None:
    """The TLS settings the readiness probes connect with (the files were
    checked by :func:`_tls_settings`)."""
    if tls_ca is None:
        return None
    if tls_client_cert is None or tls_client_key is None:
        return TLSConfig(ca=Path(tls_ca))
    return TLSConfig(ca=Path(tls_ca), cert=Path(tls_client_cert), key=Path(tls_client_key))
