"""pynats2, the third-party NATS client :class:`~liftbridge._publish._nats.NatsPublisher`
stands on: imported only when a publisher is made (the ``nats`` extra), its
URL checked, its connect run whole on a thread of its own (:class:`Connecting`),
and its close bounded (it blocks for ever once its connection is lost). See
:mod:`liftbridge._publish._nats` for the edges this works around.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import warnings
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from liftbridge._core import _validate
from liftbridge._core._nats_connection import DEFAULT_PORT
from liftbridge._errors import (
    ArgumentTypeError,
    InvalidArgumentError,
    MissingDependencyError,
    UnavailableError,
)
from liftbridge._locks import start_thread

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


class Connecting:
    """A pynats2 client, connected and subscribed to the ack inbox on a
    ``liftbridge-nats-connect`` thread: an interrupt (Ctrl-C), which lands on
    the main thread only, never cuts pynats2's connect short, where what it
    started (its reader and pinger threads, its socket) could not be found
    to stop. pynats2's threads, started there, are daemon threads.

    Args:
        pynats2: the module (:func:`import_pynats2`).
        url: the server's URL (:func:`parse_url`).
        timeout: pynats2's socket timeout, seconds.
        inbox: the ack inbox to subscribe to.
        on_ack: the subscription's callback (on pynats2's worker threads).
        where: ``host:port``, for messages.
    """

    def __init__(
        self,
        pynats2: Any,
        url: str,
        timeout: float,
        inbox: str,
        on_ack: Callable[[Any], None],
        where: str,
    ) -> None:
        self.client = pynats2.NATSClient(url, name="liftbridge-python", socket_timeout=timeout)
        self._pynats2 = pynats2
        self._timeout = timeout
        self._inbox = inbox
        self._on_ack = on_ack
        self._where = where
        self._lock = threading.Lock()  # guards _began and _stopped
        self._began = False  # the thread began to connect (stop() waits for it)
        self._stopped = False  # stop() was called (a thread not begun does nothing)
        self._error: BaseException | None = None  # why connecting failed
        # The thread ended (or ends without connecting); waited on rather than
        # join()ed: a join interrupted as it takes the thread's lock keeps it for good.
        self._ended = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name="liftbridge-nats-connect", daemon=True
        )

    def connect(self) -> None:
        """Connects and subscribes, waiting for the thread that does (its
        TCP connect, the server's INFO and the restart of pynats2's reader as
        it subscribes each wait up to ``timeout``). Call :meth:`stop` after,
        also when this raised (or was interrupted).

        Raises:
            UnavailableError: the server cannot be reached, or did not take
                the connection in time.
        """
        start_thread(self._thread)
        if not self._ended.wait(3 * self._timeout):
            raise UnavailableError(
                f"the NATS server at {self._where} did not take the connection "
                f"within {3 * self._timeout:.0f}s"
            )
        if self._error is not None:
            raise self._error

    def stop(self, *, connection_lost: bool) -> None:
        """Stops pynats2's client (:func:`stop_pynats2`), whatever part of
        connecting was done: once a connect under way has ended. Bounded as
        :func:`stop_pynats2` is."""
        with self._lock:
            self._stopped = True
            began = self._began
        hangs = began and not self._ended.wait(CLOSE_TIMEOUT)
        # A connect that failed, or still hangs, leaves a socket to close first.
        lost = connection_lost or hangs or self._error is not None
        stop_pynats2(self._pynats2, self.client, self._where, connection_lost=lost)
        if hangs and not self._ended.wait(CLOSE_TIMEOUT):
            logger.error("connecting to NATS at %s did not stop", self._where)

    def _run(self) -> None:
        """liftbridge-nats-connect's: the connect, whole, unless stopped first."""
        try:
            with self._lock:
                if self._stopped:
                    return
                self._began = True
            self.client.connect()
            self.client.subscribe(self._inbox, callback=self._on_ack)
        except (OSError, self._pynats2.NATSError) as e:
            error = UnavailableError(f"cannot connect to the NATS server at {self._where}: {e!r}")
            error.__cause__ = e
            self._error = error
        except Exception as e:  # a bug (pynats2's or ours): raised by connect()
            self._error = e
        finally:
            self._ended.set()


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
