"""The ``liftbridge-nats-acks`` thread of a NATS stream publisher.

What the NATS connection could not do becomes failed publishes here, off the
``liftbridge-nats-io`` thread (which settles acks itself and must never wait):
a write NATS never made (held while it was away, or too large for the
server), a publish the server refused (a permissions ``-ERR``), the
connection given up, and at the publisher's close every publish still
pending. Failing a publish resolves its future and hands its handler to
``liftbridge-callbacks``; no user code runs here.
"""

from __future__ import annotations

import functools
import logging
import queue
import threading
from collections.abc import Callable

from liftbridge._core._nats_connection import Refused
from liftbridge._errors import (
    ClientClosedError,
    ConnectionLostError,
    PermissionDeniedError,
    UnavailableError,
)
from liftbridge._locks import start_thread
from liftbridge._publish._nats_pending import Pending
from liftbridge._publish._nats_window import AckWindow

logger = logging.getLogger(__name__)


class _Stop:
    """Tells the acks thread to fail what is pending and end."""


_STOP = _Stop()


class AcksThread:
    """Fails the publishes of one NATS stream publisher that will get no ack.

    Args:
        window: the publisher's pending acks.
        where: the NATS server's address, for the errors (never credentials).
        drop_unsent: drops the frames the connection still holds (at close).
    """

    def __init__(self, window: AckWindow, where: str, drop_unsent: Callable[[], object]) -> None:
        self._window = window
        self._where = where
        self._drop_unsent = drop_unsent
        self._inbox: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="liftbridge-nats-acks", daemon=True)

    def start(self) -> None:
        """Starts the thread, whole or again by the next call (:func:`start_thread`)."""
        start_thread(self._thread)

    def put(self, item: object) -> None:
        """Hands over what the I/O thread could not do: a ``Refused``, an
        ``(entry, error)`` of a write never made, or the error NATS gave up with."""
        self._inbox.put(item)

    def stop(self, timeout: float) -> None:
        """Fails what is pending (and what never left the outbox), then ends;
        waits ``timeout`` seconds at most for that."""
        self._inbox.put(_STOP)
        if self._thread.ident is None:
            return  # never started (one whose start is under way meets the _STOP)
        self._thread.join(timeout)
        if self._thread.is_alive():
            logger.warning("liftbridge-nats-acks did not stop within %.0fs", timeout)

    def _run(self) -> None:
        """Resolves publishes; hands user callbacks over. Runs on ``liftbridge-nats-acks``."""
        inbox, window = self._inbox, self._window
        while True:
            item = inbox.get()  # stop() ends the loop with _STOP
            try:
                if item is _STOP:
                    self._drop_unsent()
                    window.fail_all(self._closed_before_ack)
                    return
                if isinstance(item, Refused):
                    window.fail_subject(item.subject, functools.partial(self._refused, item))
                elif isinstance(item, tuple):
                    entry, error = item
                    if not isinstance(error, UnavailableError):
                        window.settle(entry, error)  # too large for the server: never sent
                        continue
                    # Never written (held while NATS was away): not stored, so
                    # retriable, unlike the ConnectionLostError of one written.
                    window.settle(
                        entry,
                        UnavailableError(
                            f"NATS did not take the message for {entry.subject!r} ({error}): "
                            "it was never sent, so it was not stored and may be published again"
                        ),
                    )
                elif isinstance(item, BaseException):
                    window.fail_all(functools.partial(self._lost_before_ack, item))
            except Exception:  # never let this thread die: futures would hang
                logger.exception("liftbridge-nats-acks failed; continuing")

    def _refused(self, refusal: Refused, entry: Pending) -> BaseException:
        return PermissionDeniedError(
            f"the NATS server at {self._where} refused the publish to {entry.subject!r}: "
            f"{refusal.reason} (nothing was stored)"
        )

    def _lost_before_ack(self, error: BaseException, entry: Pending) -> BaseException:
        return ConnectionLostError(
            f"NATS connection to {self._where} lost before the ack for "
            f"{entry.subject!r} came ({error}); it may or may not have been stored"
        )

    def _closed_before_ack(self, entry: Pending) -> BaseException:
        return ClientClosedError(
            f"NATS stream publisher closed before the ack for the message on "
            f"{entry.subject!r} came; it may or may not have been stored"
        )
