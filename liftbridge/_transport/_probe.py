"""Probes: a gRPC channel of its own to one broker, for asking it questions
about itself (is it there, is it serving, what does it list) rather than
for the client's work.

A probe answers with the status a call ended with, by its gRPC name, and
never raises for what the broker did: the watch over brokers' connections
(:mod:`liftbridge._core._liveness`) reads UNAVAILABLE as "the connection
failed" and DEADLINE_EXCEEDED as "slow, proves nothing"; the test harness
(:mod:`liftbridge.testing`) waits for a new server until its health service
and metadata say it is ready. Neither needs to know the channel is grpcio's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import grpc

from liftbridge._transport._tls import TLSConfig

__all__ = ["CLOSED", "HEALTH_CHECK", "PROBE_OPTIONS", "Probe", "Reply", "open_probe"]

HEALTH_CHECK = "/grpc.health.v1.Health/Check"
"""The standard gRPC health service's one method."""

CLOSED = "CLOSED"
"""The status of a call made on (or cut by) a probe closed meanwhile."""

PROBE_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 250),
    # gRPC also takes this as the least time one connection attempt gets
    # (20 s by default). At the client's 100 ms, a broker slow to complete a
    # handshake (busy, or SIGSTOPped) would fail its probes as if gone: only a
    # refused or failed connection must.
    ("grpc.min_reconnect_backoff_ms", 20_000),
)
"""Options for probes that watch a broker: one back up is seen within about
250 ms, and one slow to finish a handshake is not taken for one that is gone."""


@dataclass(frozen=True)
class Reply:
    """How a probe's call ended.

    Attributes:
        status: the gRPC status code's name (``"OK"``, ``"UNAVAILABLE"``,
            ``"DEADLINE_EXCEEDED"``, ...), or :data:`CLOSED`.
        details: the status details the server or the channel gave.
        body: the serialized response (``b""`` unless ``status`` is ``"OK"``).
    """

    status: str
    details: str = ""
    body: bytes = b""

    @property
    def ok(self) -> bool:
        return self.status == "OK"

    def describe(self) -> str:
        """``"STATUS details"``, for messages."""
        return f"{self.status} {self.details}".strip()


class Probe:
    """A channel of its own to one broker; the probe closes it.

    Thread-safety: calls may come from any thread; one owner closes it.

    Args:
        channel: a channel no one else uses (see :func:`open_probe`).
        target: the broker's ``"host:port"``, for messages.
    """

    def __init__(self, channel: grpc.Channel, target: str) -> None:
        self.target = target
        self._channel = channel

    def call(self, method: str, request: bytes, timeout: float) -> Reply:
        """Calls a unary ``method`` (``"/package.Service/Method"``) with a
        serialized ``request``; waits at most ``timeout`` seconds."""
        rpc = self._channel.unary_unary(method, request_serializer=None, response_deserializer=None)
        try:
            body = rpc(request, timeout=timeout)
        except grpc.RpcError as e:
            if not isinstance(e, grpc.Call):
                return Reply("UNKNOWN", str(e))
            return Reply(e.code().name, e.details() or "")
        except ValueError:  # grpc's "Cannot invoke RPC on closed channel!"
            return Reply(CLOSED, "the probe was closed")
        return Reply("OK", "", body)

    def close(self) -> None:
        """Closes the channel; calls on it end with CANCELLED or :data:`CLOSED`."""
        self._channel.close()

    def __enter__(self) -> Probe:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def open_probe(
    target: str, tls: TLSConfig | None = None, *, options: Sequence[tuple[str, int]] = ()
) -> Probe:
    """A probe to ``target`` on a lazily connecting channel of its own.

    Args:
        target: ``"host:port"``.
        tls: TLS settings (files are read now), or ``None`` for plaintext.
        options: gRPC channel options (for example :data:`PROBE_OPTIONS`).

    Raises:
        InvalidArgumentError: a TLS file cannot be read.
    """
    if tls is None:
        channel = grpc.insecure_channel(target, options=list(options))
    else:
        channel = grpc.secure_channel(target, tls.credentials(), options=list(options))
    return Probe(channel, target)
