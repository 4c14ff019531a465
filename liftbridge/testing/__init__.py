"""Test helpers: real Liftbridge servers for the SDK's tests and for yours.

- :class:`LocalServer`: one server with embedded NATS, on loopback.
- :class:`LocalCluster`: several servers sharing one nats-server, for failover.
- :class:`LiftbridgeContainer`: a server in Docker (needs ``liftbridge[testing]``).

The executables come from ``$LIFTBRIDGE_SERVER_BIN`` and ``$NATS_SERVER_BIN``, else
from PATH; ``make server`` in a checkout of this SDK builds both.
"""

from liftbridge.testing._cluster import ClusterNode, LocalCluster
from liftbridge.testing._container import LiftbridgeContainer, docker_available
from liftbridge.testing._errors import (
    DockerUnavailableError,
    ServerBinaryNotFoundError,
    ServerStartError,
)
from liftbridge.testing._server import LocalServer

__all__ = [
    "ClusterNode",
    "DockerUnavailableError",
    "LiftbridgeContainer",
    "LocalCluster",
    "LocalServer",
    "ServerBinaryNotFoundError",
    "ServerStartError",
    "docker_available",
]
