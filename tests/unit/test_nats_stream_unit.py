"""NatsStreamPublisher's checks made before any NATS connection (no server here)."""

from __future__ import annotations

import socket
import ssl
import threading
from types import SimpleNamespace
from typing import Any

import pytest

from liftbridge import (
    ArgumentTypeError,
    InvalidArgumentError,
    NatsStreamPublisher,
    UnavailableError,
)

CLIENT: Any = SimpleNamespace(fetch_metadata=lambda: None, metadata=None)


def _greeter(greeting: bytes) -> tuple[int, threading.Thread, socket.socket]:
    """A one-shot server that sends ``greeting`` and waits for the client to hang up."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        connection, _ = listener.accept()
        with connection:
            connection.sendall(greeting)
            connection.recv(1)

    thread = threading.Thread(target=serve, name="test-fake-nats", daemon=True)
    thread.start()
    return listener.getsockname()[1], thread, listener


@pytest.mark.parametrize("scheme", ["tls", "nats"])
def test_tls_is_refused_when_the_server_only_allows_it(scheme: str) -> None:
    # A server with allow_non_tls says tls_available, not tls_required: the
    # connection would stay in plain text, so asking for TLS (by scheme or context) must fail.
    port, thread, listener = _greeter(b'INFO {"tls_available": true, "max_payload": 1024}\r\n')
    with listener, pytest.raises(UnavailableError, match="does not require it"):
        NatsStreamPublisher(
            CLIENT, f"{scheme}://u:p@127.0.0.1:{port}", tls=ssl.create_default_context()
        )
    thread.join(2)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"url": "http://127.0.0.1:1"}, InvalidArgumentError, "url must look like nats://"),
        ({"url": 4222}, InvalidArgumentError, "url must be a str"),
        ({"max_inflight": 0}, InvalidArgumentError, "max_inflight"),
        ({"ack_wait": -1}, InvalidArgumentError, "ack_wait"),
        ({"crc": "yes"}, ArgumentTypeError, "crc must be a bool"),
        ({"tls": True}, ArgumentTypeError, "tls must be an ssl.SSLContext"),
        ({"token": 5}, ArgumentTypeError, "token must be a str or None"),
        ({"client": object()}, ArgumentTypeError, "client must be a liftbridge"),
    ],
)
def test_bad_arguments(kwargs: dict[str, Any], error: type[Exception], message: str) -> None:
    arguments: dict[str, Any] = {"client": CLIENT, "url": "nats://127.0.0.1:1", **kwargs}
    with pytest.raises(error, match=message):
        NatsStreamPublisher(**arguments)
