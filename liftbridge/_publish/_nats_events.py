"""What a :class:`~liftbridge._publish._nats_stream.NatsStreamPublisher`
hears from its NATS connection and from the client's router: the
:class:`NatsEvents` half of the publisher (whose state it reads: its
window, acks thread, timer, lock and state).

``liftbridge-nats-io`` hands over each batch of acks it read (settled right
there: no user code), the count of AckPolicy.NONE frames it wrote, a new
``max_payload`` and, when NATS gives up reconnecting, the connection's end;
what it could not do goes to ``liftbridge-nats-acks``. A partition leader
the router finds down (on ``liftbridge-broker-watch``) fails the publishes
awaiting it, on the client's ``liftbridge-ack-timer``.
"""

from __future__ import annotations

import enum
import functools
import logging
import threading
from time import monotonic

from liftbridge._core._deadlines import AckTimer
from liftbridge._core._nats_connection import MaxPayload
from liftbridge._errors import ClientClosedError, ConnectionLostError, UnavailableError
from liftbridge._publish._bytes import PlainFrames
from liftbridge._publish._nats_acks import AcksThread
from liftbridge._publish._nats_window import AckWindow

logger = logging.getLogger(__name__)


class State(enum.Enum):
    """A NATS stream publisher's life."""

    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"


class NatsEvents:
    """The NATS stream publisher's handlers of its connection's and its
    router's news (see the module docstring)."""

    _lock: threading.Lock
    _state: State
    _lost: BaseException | None
    _where: str
    _inbox: str
    _timer: AckTimer
    _window: AckWindow
    _acks: AcksThread
    _plain: PlainFrames
    _max_payload: int
    _plain_limit: int

    def _broker_down(self, address: str) -> None:
        self._timer.schedule(monotonic(), functools.partial(self._window.fail_led_by, address))

    def _closed_error(self) -> BaseException:
        return ClientClosedError(f"NATS stream publisher for {self._where} is closed")

    def _lost_error(self) -> BaseException:
        return ConnectionLostError(
            f"NATS connection to {self._where} is lost: {self._lost!r}; close the publisher"
        )

    # --------------------------------------------------- liftbridge-nats-io --

    def _on_closed(self) -> None:
        """The NATS connection closed: by :meth:`close`, or because NATS gave
        up reconnecting (then pending publishes fail)."""
        lost = UnavailableError("NATS stopped reconnecting")
        with self._lock:
            if self._state is not State.OPEN or self._lost is not None:
                return
            self._lost = lost
        self._window.refuse(self._lost_error, replace=False)
        self._acks.put(lost)

    def _deliver(self, item: object) -> None:
        """What the I/O thread read or failed to write. Acks are settled right
        here, on the I/O thread (no user code: handlers and done-callbacks
        go to liftbridge-callbacks), sparing a thread hop per batch; the
        rest goes to the acks thread."""
        try:
            if type(item) is list:
                self._window.settle_acks(item)
            elif type(item) is int:  # AckPolicy.NONE frames written (or dropped)
                self._window.release(item)
            elif type(item) is MaxPayload:
                self._set_max_payload(item.size)
            else:
                self._acks.put(item)
        except Exception:  # never let the I/O thread die: futures would hang
            logger.exception("handling %r on %s failed; continuing", type(item), self._inbox)

    def _set_max_payload(self, size: int) -> None:
        """Takes the NATS server's ``max_payload`` (a later INFO changed it);
        publishes from now on are checked against it. Single attribute
        writes: a publish racing with this one is checked against either,
        and the I/O thread refuses a frame over the new one anyway."""
        self._max_payload = size
        self._plain_limit = size - self._plain.overhead
