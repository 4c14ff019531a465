"""One Liftbridge server process in its own directory: the part a single
:class:`~liftbridge.testing.LocalServer` and each node of a
:class:`~liftbridge.testing.LocalCluster` share.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from liftbridge._core._router import TLSConfig
from liftbridge.testing._config import ConfigValue, internal_streams, render_yaml
from liftbridge.testing._errors import ServerStartError
from liftbridge.testing._process import (
    LOOPBACK,
    ManagedProcess,
    address_in_use,
    bootstrap_raced,
    promotion_timed_out,
    tail,
)
from liftbridge.testing._readiness import (
    BootstrapRaceError,
    Expectation,
    NotReadyError,
    PortTakenError,
    Probe,
    PromotionTimedOutError,
    wait_metadata,
    wait_serving,
)

LOG_TAIL_LINES = 40
"""Log lines quoted in start errors."""


def server_environment() -> dict[str, str]:
    """Our environment without ``LIFTBRIDGE_*`` variables.

    The server reads ``LIFTBRIDGE_<KEY>`` variables over its configuration file
    (``LIFTBRIDGE_PORT``, ``LIFTBRIDGE_HOST``), so an application's own settings
    must not leak into a test server.
    """
    return {key: value for key, value in os.environ.items() if not key.startswith("LIFTBRIDGE_")}


class NodeRunner:
    """A Liftbridge process with its config file, data directory and log.

    Thread-safety: not thread-safe; its owner drives it from one thread.
    """

    def __init__(
        self,
        *,
        binary: str,
        server_id: str,
        directory: Path,
        tls: TLSConfig | None = None,
    ) -> None:
        """Prepares the directory layout; nothing is written or started yet.

        Args:
            binary: the ``liftbridge`` executable.
            server_id: the node's ``clustering.server.id``.
            directory: an existing directory the node owns.
            tls: TLS settings for readiness probes, ``None`` for plaintext.
        """
        self.server_id = server_id
        self.directory = directory
        self.config_path = directory / "liftbridge.yaml"
        self.data_dir = directory / "data"
        self.log_path = directory / "liftbridge.log"
        self.port = 0
        self.settings: dict[str, ConfigValue] = {}
        self.tls = tls
        self.process = ManagedProcess(
            f"liftbridge {server_id}",
            [binary, "--config", str(self.config_path)],
            self.log_path,
            env=server_environment(),
        )

    @property
    def address(self) -> str:
        """``"127.0.0.1:<port>"``."""
        return f"{LOOPBACK}:{self.port}"

    @property
    def expected_streams(self) -> tuple[str, ...]:
        """The internal streams this node's settings make the server create."""
        return internal_streams(self.settings)

    def configure(self, port: int, settings: Mapping[str, ConfigValue]) -> None:
        """Writes the config file for ``port``."""
        self.port = port
        self.settings = dict(settings)
        self.config_path.write_text(render_yaml(self.settings), encoding="utf-8")

    def alive(self) -> None:
        """Raises when the process has exited.

        Raises:
            PortTakenError: it exited because its port was taken.
            PromotionTimedOutError: it crashed when its promotion to metadata
                leader timed out (a busy machine).
            BootstrapRaceError: it crashed when a peer's vote request came
                before its Raft bootstrap (a cluster node slower than its peers).
            NotReadyError: it exited for another reason.
        """
        code = self.process.returncode
        if code is None:
            return
        output = self.process.output()
        if address_in_use(output):
            raise PortTakenError(f"{self.process.name}: port {self.port} was taken")
        if promotion_timed_out(output):
            raise PromotionTimedOutError(
                f"{self.process.name} crashed while starting (status {code}): its promotion "
                "to metadata leader timed out, as it does on a busy machine"
            )
        if bootstrap_raced(output):
            raise BootstrapRaceError(
                f"{self.process.name} crashed while starting (status {code}): a peer's Raft "
                "vote request came before its bootstrap, as on a busy machine"
            )
        raise NotReadyError(f"{self.process.name} exited with status {code} while starting")

    def probe(self) -> Probe:
        """A readiness probe to this node (close it after use)."""
        return Probe(self.address, self.tls)

    def wait_serving(self, deadline: float) -> None:
        """Waits until the port is open and the API is served."""
        with self.probe() as probe:
            wait_serving(probe, self.port, deadline=deadline, alive=self.alive)

    def wait_metadata(self, expect: Expectation, deadline: float) -> None:
        """Waits until this node's metadata meets ``expect``."""
        with self.probe() as probe:
            wait_metadata(probe, expect, deadline=deadline, alive=self.alive)

    def log_tail(self, lines: int = 50) -> str:
        """The last ``lines`` lines of the node's log."""
        return tail(self.log_path, lines)

    def start_failure(self, err: NotReadyError) -> ServerStartError:
        """A :class:`ServerStartError` for ``err`` that quotes the node's log."""
        return ServerStartError(
            f"Liftbridge server {self.server_id!r} ({self.address}) did not become ready: {err}",
            log_tail=self.log_tail(LOG_TAIL_LINES),
        )
