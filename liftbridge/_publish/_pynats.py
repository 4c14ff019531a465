"""pynats2, the third-party NATS client :class:`~liftbridge._publish._nats.NatsPublisher`
stands on: imported only when a publisher is made (the ``nats`` extra), its
URL checked, and its close bounded (it blocks for ever once its connection
is lost). See :mod:`liftbridge._publish._nats` for the edges this works around.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import warnings
from typing import Any
from urllib.parse import urlsplit

from liftbridge._core import _validate
from liftbridge._core._nats_connection import DEFAULT_PORT
from liftbridge._errors import ArgumentTypeError, InvalidArgumentError, MissingDependencyError

logger = logging.getLogger(__name__)

# How long close() waits for pynats2's threads, twice over at most (see module doc).
CLOSE_TIMEOUT = 5.0


def import_pynats2() -> Any:
    """Imports pynats2, or explains how to install it."""
    try:
        with warnings.catch_warnings():
            # pynats2 imports pkg_resources, which newer setuptools deprecate.
            warnings.filterwarnings("ignore", message="pkg_resources is deprecated")
            warnings.filterwarnings("ignore", category=DeprecationWarning, module="pkg_resources")
            import pynats2
    except ImportError as e:
        raise MissingDependencyError(
            "publishing over NATS needs the pynats2 package: pip install 'liftbridge[pynats2]'"
        ) from e
    return pynats2


def stop_pynats2(pynats2: Any, client: Any, where: str, *, connection_lost: bool) -> None:
    """Closes a pynats2 client without letting it block for ever.

    Its close() joins its reader thread, which never ends once the connection
    is lost; closing the socket underneath ends it. With ``connection_lost``
    that is done first, else only if close() takes longer than it should.
    """

    def close() -> None:
        try:
            client.close()
        except Exception:  # a half-connected client has no socket to close
            logger.debug("pynats2 close of %s failed", where, exc_info=True)

    def close_socket() -> None:
        # The base class's close only closes the socket, which ends the reader's loop.
        with contextlib.suppress(OSError, AttributeError):
            pynats2.NATSNoSubscribeClient.close(client)

    if connection_lost:
        close_socket()
    closer = threading.Thread(target=close, name="liftbridge-nats-close", daemon=True)
    closer.start()
    closer.join(CLOSE_TIMEOUT)
    if not closer.is_alive():
        return
    logger.warning(
        "NATS client for %s did not stop within %.0fs (connection lost?); closing its socket",
        where,
        CLOSE_TIMEOUT,
    )
    close_socket()
    closer.join(CLOSE_TIMEOUT)
    if closer.is_alive():
        logger.error("NATS client for %s did not stop; leaving its threads behind", where)


def parse_url(url: Any) -> tuple[str, int, str]:
    """Checks a NATS URL; returns host, port and the URL with its port."""
    if not isinstance(url, str):
        raise ArgumentTypeError(f"url must be a str, got {type(url).__name__}")
    _validate.text(url, arg="url")
    _validate.printable(url, arg="url")
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError as e:
        raise InvalidArgumentError(f"url is not a valid URL: {e}") from None
    if parts.scheme != "nats" or not host:
        raise InvalidArgumentError(
            "url must look like nats://host:port (TLS is not supported), "
            f"got one with scheme {parts.scheme!r} and host {host!r}"
        )
    if port is None:
        port = DEFAULT_PORT
        url = parts._replace(netloc=f"{parts.netloc}:{port}").geturl()
    return host, port, url
