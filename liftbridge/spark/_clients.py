"""One SDK client, and one router for reads, per worker process and configuration.

Spark reuses its Python worker processes across tasks (and the driver's
planning processes across queries), so a client opened by one task serves the
next ones: a task pays for connecting only the first time its process meets a
configuration. Readers and writers hold a :class:`ClientConfig`, never a
client (a client holds locks and gRPC channels, which do not pickle), and ask
this cache inside ``read()`` / ``write()`` / ``partitions()``.

Reads stand on a :class:`~liftbridge._core._router.Router` of their own (the
channels, metadata and routing under every client), whose Subscribe streams
they read directly (see :mod:`liftbridge.spark._fetch`).
"""

from __future__ import annotations

import atexit
import logging
import threading

from liftbridge import DEFAULT_RETRY_POLICY, Client, ClientState
from liftbridge._core._router import Router
from liftbridge.spark._client_options import ClientConfig

_log = logging.getLogger(__name__)

_lock = threading.Lock()  # guards _clients and _routers
_clients: dict[ClientConfig, Client] = {}
_routers: dict[ClientConfig, Router] = {}


def client_for(config: ClientConfig) -> Client:
    """The process's open client for ``config``, connecting on first use.

    Thread-safe. A cached client found closed is replaced.

    Raises:
        UnavailableError: no server of ``config`` answers.
    """
    with _lock:
        client = _clients.get(config)
        if client is None or client.state is not ClientState.OPEN:
            client = Client(
                list(config.servers),
                tls=config.tls,
                connect_timeout=config.connect_timeout,
                rpc_timeout=config.rpc_timeout,
                ack_wait=config.ack_wait,
                max_inflight=config.max_inflight,
                resubscribe_wait=config.resubscribe_wait,
                max_message_size=config.max_message_size,
            )
            _clients[config] = client
        return client


def router_for(config: ClientConfig) -> Router:
    """The process's connected router for ``config``, connecting on first use.

    Thread-safe. A cached router found closed is replaced.

    Raises:
        UnavailableError: no server of ``config`` answers.
    """
    with _lock:
        router = _routers.get(config)
        if router is None or router.closed:
            router = Router(
                config.servers,
                tls=config.tls,
                rpc_timeout=config.rpc_timeout,
                retry_policy=DEFAULT_RETRY_POLICY,
            )
            try:
                router.connect(config.connect_timeout)
            except BaseException:
                router.close()
                raise
            _routers[config] = router
        return router


def close_clients() -> None:
    """Closes every cached client and router (at interpreter exit, and in
    tests that use readers or writers outside Spark). Thread-safe."""
    with _lock:
        clients = list(_clients.values())
        routers = list(_routers.values())
        _clients.clear()
        _routers.clear()
    for client in clients:
        try:
            client.close()
        except Exception:
            _log.exception("closing a cached Liftbridge client failed")
    for router in routers:
        router.close()


atexit.register(close_clients)
