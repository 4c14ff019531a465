"""Waiting until a Liftbridge server is really ready, not merely listening.

Three stages, each polled until a deadline:

1. the TCP port accepts connections (the server binds it before it serves);
2. the gRPC health service reports ``proto.API`` as SERVING (the server flips
   it just before it serves the API, after it answers its peers' broker
   surveys, so no broker list is cached too early);
3. FetchMetadata lists the expected brokers at their addresses and the
   internal streams (``__cursors``, ``__activity``) have partition leaders.

Every RPC carries a short deadline and failures are retried: with a peer down,
a server's broker survey runs into the caller's deadline and fails the call,
but caches its partial answer for the next one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from liftbridge._core._liveness import HEALTH_CHECK, open_probe
from liftbridge._core._router import TLSConfig
from liftbridge.testing._errors import ServerStartError
from liftbridge.testing._process import LOOPBACK, SHUTDOWN, port_open
from liftbridge_api import api_pb2

_LOG = logging.getLogger(__name__)

RPC_TIMEOUT = 2.0
"""Deadline of each readiness RPC, in seconds."""

_POLL_INTERVAL = 0.1

# The standard gRPC health service, which the server registers for "proto.API".
# Its two messages are tiny, so they are written by hand instead of depending on
# grpcio-health-checking: HealthCheckRequest{service: "proto.API"} is field 1
# (tag 0x0a) of length 9, and HealthCheckResponse{status: SERVING} is field 1
# (tag 0x08) holding the varint 1.
_HEALTH_REQUEST = b"\x0a\x09proto.API"
_FETCH_METADATA = "/proto.API/FetchMetadata"
_HEALTH_SERVING = b"\x08\x01"


class NotReadyError(ServerStartError):
    """A readiness wait failed; the owner adds the server's log and re-raises."""


class PortTakenError(NotReadyError):
    """The server exited because another process took its port first."""


class FreshStartError(NotReadyError):
    """The server crashed in its start-up for want of time (a busy machine);
    a new start on fresh data may succeed."""


class PromotionTimedOutError(FreshStartError):
    """The server crashed in its start-up: its promotion to metadata leader
    timed out."""


class BootstrapRaceError(FreshStartError):
    """A cluster node crashed in its start-up: a peer's Raft vote request
    reached it between the start of its Raft node and its bootstrap, which
    then refused ("bootstrap only works on new clusters"; server v1.9.0's
    setupMetadataRaft panics), as when it starts slower than its peers."""


@dataclass(frozen=True)
class Expectation:
    """What FetchMetadata must show before a server counts as ready.

    Attributes:
        brokers: server id -> ``"host:port"``; each must be listed at that address.
        internal_streams: streams that must exist with a leader on every partition.
        leaders: when not ``None``, the server ids allowed to lead those partitions
            (the nodes that are running).
    """

    brokers: Mapping[str, str]
    internal_streams: tuple[str, ...] = ()
    leaders: frozenset[str] | None = field(default=None)


class Probe:
    """A channel to one server, used only for readiness checks.

    Thread-safety: not thread-safe; one waiting thread uses it, then closes it.
    """

    def __init__(self, target: str, tls: TLSConfig | None) -> None:
        """Opens a lazily-connecting channel.

        Args:
            target: ``"host:port"``.
            tls: the TLS settings to connect with, or ``None`` for plaintext.
        """
        self.target = target
        self._probe = open_probe(target, tls)

    def close(self) -> None:
        """Closes the channel."""
        self._probe.close()

    def __enter__(self) -> Probe:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def serving(self, timeout: float) -> str | None:
        """Asks the health service whether the API is served.

        Returns:
            ``None`` when it is, else why not.
        """
        reply = self._probe.call(HEALTH_CHECK, _HEALTH_REQUEST, timeout)
        if reply.status == "UNIMPLEMENTED":
            return None  # a server without the health service: go on to metadata
        if not reply.ok:
            return f"health check of {self.target}: {reply.describe()}"
        if reply.body != _HEALTH_SERVING:
            return f"health check of {self.target}: not serving yet ({reply.body!r})"
        return None

    def metadata(self, expect: Expectation, timeout: float) -> str | None:
        """Fetches metadata and compares it with ``expect``.

        Returns:
            ``None`` when everything expected is there, else what is missing.
        """
        request = api_pb2.FetchMetadataRequest().SerializeToString()
        reply = self._probe.call(_FETCH_METADATA, request, timeout)
        if not reply.ok:
            return f"FetchMetadata from {self.target}: {reply.describe()}"
        response = api_pb2.FetchMetadataResponse.FromString(reply.body)
        listed = {broker.id: f"{broker.host}:{broker.port}" for broker in response.brokers}
        for server_id, address in expect.brokers.items():
            if listed.get(server_id) != address:
                return (
                    f"{self.target} does not list broker {server_id!r} at {address} yet "
                    f"(it lists {listed})"
                )
        streams = {stream.name: stream for stream in response.streamMetadata}
        for name in expect.internal_streams:
            stream = streams.get(name)
            if stream is None or not stream.partitions:
                return f"{self.target} has no {name} stream yet"
            for number, partition in sorted(stream.partitions.items()):
                if not partition.leader:
                    return f"{self.target}: {name} partition {number} has no leader yet"
                if expect.leaders is not None and partition.leader not in expect.leaders:
                    return (
                        f"{self.target}: {name} partition {number} is led by "
                        f"{partition.leader!r}, which is not running"
                    )
        return None


def wait_for(
    what: str,
    check: Callable[[float], str | None],
    *,
    deadline: float,
    alive: Callable[[], None],
) -> None:
    """Polls ``check`` until it returns ``None``.

    Args:
        what: what is awaited, for the error message.
        check: called with a timeout in seconds; returns ``None`` when satisfied,
            else the reason it is not.
        deadline: a :func:`time.monotonic` time to give up at.
        alive: raises :class:`NotReadyError` when the awaited process has died.

    Raises:
        NotReadyError: at the deadline, with the last reason.
    """
    reason = "not checked yet"
    while True:
        alive()
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise NotReadyError(f"timed out waiting for {what}: {reason}")
        result = check(min(remaining, RPC_TIMEOUT))
        if result is None:
            return
        if result != reason:
            _LOG.debug("waiting for %s: %s", what, result)
        reason = result
        if SHUTDOWN.wait(_POLL_INTERVAL):
            raise NotReadyError(f"gave up waiting for {what}: the interpreter is exiting")


def wait_serving(
    probe: Probe,
    port: int,
    *,
    deadline: float,
    alive: Callable[[], None],
    host: str = LOOPBACK,
) -> None:
    """Stages 1 and 2: the port accepts connections and the API is served."""
    wait_for(
        f"{probe.target} to accept connections",
        lambda timeout: None if port_open(port, min(timeout, 1.0), host=host) else "port closed",
        deadline=deadline,
        alive=alive,
    )
    wait_for(f"{probe.target} to serve the API", probe.serving, deadline=deadline, alive=alive)


def wait_metadata(
    probe: Probe, expect: Expectation, *, deadline: float, alive: Callable[[], None]
) -> None:
    """Stage 3: metadata shows the expected brokers and internal stream leaders."""
    wait_for(
        f"metadata from {probe.target}",
        lambda timeout: probe.metadata(expect, timeout),
        deadline=deadline,
        alive=alive,
    )
