"""One SDK client per worker process and configuration.

Spark reuses its Python worker processes across tasks, so a client opened by
one task serves the next ones: a task pays for connecting only the first time
its process meets a configuration. Readers and writers hold a
:class:`ClientConfig`, never a client (a client holds locks and gRPC channels,
which do not pickle), and ask this cache inside ``read()`` / ``write()``.
"""

from __future__ import annotations

import atexit
import logging
import threading

from liftbridge import Client, ClientState
from liftbridge.spark._options import ClientConfig

_log = logging.getLogger(__name__)

_lock = threading.Lock()  # guards _clients
_clients: dict[ClientConfig, Client] = {}


def client_for(config: ClientConfig) -> Client:
    """The process's open client for ``config``, connecting on first use.

    Thread-safe. A cached client found closed is replaced.

    Raises:
        UnavailableError: no server of ``config`` answers.
    """
    with _lock:
        client = _clients.get(config)
        if client is None or client.state is not ClientState.OPEN:
            client = Client(list(config.servers), tls=config.tls)
            _clients[config] = client
        return client


def close_clients() -> None:
    """Closes every cached client (at interpreter exit, and in tests that use
    readers or writers outside Spark). Thread-safe."""
    with _lock:
        clients = list(_clients.values())
        _clients.clear()
    for client in clients:
        try:
            client.close()
        except Exception:
            _log.exception("closing a cached Liftbridge client failed")


atexit.register(close_clients)
