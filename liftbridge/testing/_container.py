"""LiftbridgeContainer: a Liftbridge server in Docker, through testcontainers.

``testcontainers`` (the ``liftbridge[testing]`` extra) is imported only when a
container starts, so ``liftbridge.testing`` imports without it.
"""

from __future__ import annotations

import gc
import time
import uuid
import warnings
from collections.abc import Mapping
from types import TracebackType
from typing import TYPE_CHECKING

from liftbridge._errors import InvalidArgumentError
from liftbridge.testing._config import (
    ConfigValue,
    check_log_level,
    internal_streams,
    merge_settings,
    node_settings,
    render_nats_conf,
    render_yaml,
)
from liftbridge.testing._errors import DockerUnavailableError, ServerStartError
from liftbridge.testing._process import free_port
from liftbridge.testing._readiness import (
    Expectation,
    NotReadyError,
    Probe,
    wait_metadata,
    wait_serving,
)

if TYPE_CHECKING:
    from testcontainers.core.container import DockerContainer

DEFAULT_IMAGE = "liftbridge/standalone-dev:latest"
"""The Liftbridge project's image with Liftbridge and an embedded NATS server."""

_CONFIG_FILE = "/liftbridge-testing.yaml"
_NATS_CONFIG_FILE = "/liftbridge-testing-nats.conf"
_NATS_PORT = 4222  # inside the container
_SERVER_ID = "a"
_LOG_TAIL_LINES = 40


def docker_available() -> bool:
    """Tells whether testcontainers is installed and a Docker engine answers a ping.

    Useful as ``pytest.mark.skipif(not docker_available(), reason=...)``.
    """
    return _docker_problem() is None


def _docker_problem() -> str | None:
    """Why a container cannot be started here, or ``None`` when it can."""
    try:
        from testcontainers.core.docker_client import DockerClient
    except ImportError:
        return "testcontainers is not installed: pip install 'liftbridge[testing]'"
    problem: str | None = None
    # docker-py leaves the socket of a failed connection unclosed. The failure is
    # expected here, so its ResourceWarning is dropped, collected before the
    # filter is restored (the socket lives in a traceback's reference cycle).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        try:
            client = DockerClient()
            try:
                client.client.ping()
            finally:
                client.client.close()
        except Exception as err:  # docker and requests raise many kinds; all mean "no engine"
            problem = f"no Docker engine answers ({type(err).__name__}: {err})"
        gc.collect()
    return problem


class LiftbridgeContainer:
    """A Liftbridge server in a Docker container, for tests that want an image.

    The container runs with a configuration the harness writes (copied in; the
    image's own file is not used): embedded NATS, cursors, the activity stream
    and short consumer-group timeouts, as :class:`~liftbridge.testing.LocalServer`
    has. The API port is published on the same port number on the Docker host
    and advertised as ``<docker host>:<port>``, so the addresses in metadata are
    the ones a client can dial.

    The default image is built from the server's development branch; if the image
    you use is newer than Liftbridge v1.9.0, add
    ``config_overrides={"telemetry.enabled": False}`` (v1.9.0 rejects that key).

    Thread-safety: not thread-safe; start and stop it from one thread.
    """

    def __init__(
        self,
        image: str = DEFAULT_IMAGE,
        *,
        host_port: int | None = None,
        consumer_timeout: float = 3.0,
        coordinator_timeout: float = 3.0,
        config_overrides: Mapping[str, ConfigValue | None] | None = None,
        startup_timeout: float = 120.0,
        log_level: str = "info",
    ) -> None:
        """Checks the arguments; nothing is pulled or started yet.

        Args:
            image: the Docker image.
            host_port: the API port, inside the container and on the Docker host;
                ``None`` picks a free local port.
            consumer_timeout: ``groups.consumer.timeout`` in seconds.
            coordinator_timeout: ``groups.coordinator.timeout`` in seconds.
            config_overrides: extra or replaced server settings by dotted key;
                ``None`` as a value removes a setting.
            startup_timeout: seconds :meth:`start` waits for readiness, image pull
                excluded.
            log_level: the server's ``logging.level``.

        Raises:
            InvalidArgumentError: a bad argument, named in the message.
        """
        if not image:
            raise InvalidArgumentError("image must be a Docker image name")
        if host_port is not None and not 0 < host_port < 65536:
            raise InvalidArgumentError(f"host_port must be a TCP port, got {host_port!r}")
        if not startup_timeout > 0:
            raise InvalidArgumentError(f"startup_timeout must be positive, got {startup_timeout!r}")
        self._image = image
        self._host_port = host_port
        self._consumer_timeout = consumer_timeout
        self._coordinator_timeout = coordinator_timeout
        self._log_level = check_log_level(log_level)
        self._overrides = dict(config_overrides or {})
        self._startup_timeout = float(startup_timeout)
        self._namespace = f"lbtest-{uuid.uuid4().hex[:12]}"
        self._container: DockerContainer | None = None
        self._host = ""
        self._port = 0
        # Rendered once now, so that bad overrides fail here rather than in start().
        render_yaml(self._settings("localhost", 1))

    def start(self) -> LiftbridgeContainer:
        """Pulls the image if needed, starts the container and waits until the server
        lists itself in metadata with its internal streams led.

        Returns:
            ``self``.

        Raises:
            DockerUnavailableError: testcontainers is missing or no Docker engine
                answers.
            ServerStartError: the server was not ready in time; quotes its log.
        """
        if self._container is not None:
            raise ServerStartError(f"{self!r} is already started")
        problem = _docker_problem()
        if problem is not None:
            raise DockerUnavailableError(f"cannot start {self._image}: {problem}")
        from testcontainers.core.container import DockerContainer

        container = DockerContainer(self._image)
        self._host = container.get_docker_client().host()
        self._port = self._host_port or free_port()
        settings = self._settings(self._host, self._port)
        nats_conf = render_nats_conf(host="0.0.0.0", port=_NATS_PORT)  # inside the container
        container.with_bind_ports(self._port, self._port)
        container.with_exposed_ports(_NATS_PORT)
        container.with_copy_into_container(render_yaml(settings).encode(), _CONFIG_FILE)
        container.with_copy_into_container(nats_conf.encode(), _NATS_CONFIG_FILE)
        container.with_kwargs(entrypoint=["liftbridge", "--config", _CONFIG_FILE])
        self._container = container
        try:
            container.start()
            self._wait_ready(internal_streams(settings))
        except NotReadyError as err:
            failure = ServerStartError(
                f"{self._image} did not become ready: {err}",
                log_tail=self.log_tail(_LOG_TAIL_LINES),
            )
            self.stop()
            raise failure from None
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Removes the container (forcefully). Does nothing when not started."""
        container, self._container = self._container, None
        if container is not None:
            container.stop()

    def __enter__(self) -> LiftbridgeContainer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def address(self) -> str:
        """The API address on the Docker host, ``"<host>:<port>"``."""
        self._require_container()
        return f"{self._host}:{self._port}"

    @property
    def addresses(self) -> list[str]:
        """``[address]``."""
        return [self.address]

    @property
    def nats_url(self) -> str:
        """The embedded NATS server's URL on the Docker host."""
        container = self._require_container()
        return f"nats://{self._host}:{container.get_exposed_port(_NATS_PORT)}"

    @property
    def server_id(self) -> str:
        """The server's id."""
        return _SERVER_ID

    @property
    def container(self) -> DockerContainer:
        """The underlying testcontainers ``DockerContainer``."""
        return self._require_container()

    def log_tail(self, lines: int = 50) -> str:
        """The last ``lines`` lines of the container's output, ``""`` when unavailable."""
        if self._container is None or lines <= 0:
            return ""
        try:
            stdout, stderr = self._container.get_logs()
        except Exception:  # a container that never started has no logs
            return ""
        text = (stdout + stderr).decode("utf-8", errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def __repr__(self) -> str:
        where = f"at {self._host}:{self._port}" if self._container is not None else "not started"
        return f"<LiftbridgeContainer {self._image} {where}>"

    def _settings(self, host: str, port: int) -> dict[str, ConfigValue]:
        base = node_settings(
            server_id=_SERVER_ID,
            namespace=self._namespace,
            host=host,
            port=port,
            data_dir="/tmp/liftbridge-testing",  # inside the container
            nats_servers=[f"nats://127.0.0.1:{_NATS_PORT}"],
            log_level=self._log_level,
            consumer_timeout=self._consumer_timeout,
            coordinator_timeout=self._coordinator_timeout,
        )
        base["listen"] = f"0.0.0.0:{port}"  # bind every interface; advertise "host"
        base["nats.embedded.config"] = _NATS_CONFIG_FILE
        base["clustering.raft.bootstrap.seed"] = True
        return merge_settings(base, self._overrides)

    def _wait_ready(self, streams: tuple[str, ...]) -> None:
        deadline = time.monotonic() + self._startup_timeout
        container = self._require_container()

        def alive() -> None:
            container.reload()
            status = container.status
            if status in ("exited", "dead"):
                raise NotReadyError(f"the container is {status}")

        address = f"{self._host}:{self._port}"
        with Probe(address, None) as probe:
            wait_serving(probe, self._port, deadline=deadline, alive=alive, host=self._host)
            expect = Expectation(
                brokers={_SERVER_ID: address},
                internal_streams=streams,
                leaders=frozenset({_SERVER_ID}),
            )
            wait_metadata(probe, expect, deadline=deadline, alive=alive)

    def _require_container(self) -> DockerContainer:
        if self._container is None:
            raise ServerStartError("the LiftbridgeContainer is not started: call start()")
        return self._container
