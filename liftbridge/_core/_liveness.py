"""Which brokers are known to be down, learnt by probing their connections.

A publish sent through one broker to a partition another broker leads is
forwarded over NATS; when that leader dies, the stream the publish went out
on stays healthy and nothing tells the publisher: the publish would wait out
its whole ack timeout. The publisher therefore asks the :class:`BrokerWatch`
to watch each partition leader it sends to, and hears from it soon after a
leader's connection fails.

How a broker is watched: one ``liftbridge-broker-watch`` thread sends each
watched broker a small probe every ``interval`` seconds, over a channel of
the watch's own (a connection apart from the client's). The probe is a
health check Liftbridge does not implement, so a broker that is there
answers at once, with UNIMPLEMENTED. A killed broker's connection closes and
the next connection is refused: the probe fails with UNAVAILABLE, and that,
and only that, marks the broker down; any answer marks it up again. A broker
that is merely slow or hung (SIGSTOP) keeps its connection, or accepts a
new one and never finishes the handshake: its probe runs out of time, which
proves nothing, so it is never marked down.

The probes (:mod:`liftbridge._transport._probe`) are blocking calls on the
watch's own thread: gRPC starts no
thread for them and keeps none running between them (a connectivity
subscription would keep one inside gRPC all the time, which makes
``fork()`` in the user's process, e.g. a SparkSession starting its JVM,
unsafe while it runs).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from liftbridge._locks import start_thread
from liftbridge._transport._probe import CLOSED, Probe

# Re-exported for the testing package's readiness probe (integrations stand on the core):
from liftbridge._transport._probe import HEALTH_CHECK as HEALTH_CHECK
from liftbridge._transport._probe import open_probe as open_probe

_log = logging.getLogger(__name__)

DownListener = Callable[[str], None]
"""``listener(address)``: called when a watched broker is found down. Runs
on the ``liftbridge-broker-watch`` thread: it must hand any real work to
another thread of the SDK's and return at once."""


class _Watched:
    """One watched broker: its probe and what its probes said.
    Used only on the watch's thread, except ``down`` (read anywhere)."""

    def __init__(self, address: str, probe: Probe) -> None:
        self.address = address
        self.probe = probe
        self.down = False


class BrokerWatch:
    """Watches brokers' connections and tells listeners when one goes down.
    Thread-safe.

    Args:
        open_probe: opens a probe of the watch's own to a broker address
            (the watch closes it).
        interval: seconds between two probes of a broker.
        probe_timeout: seconds a probe may wait for its answer; one that
            runs out says nothing about the broker.
    """

    def __init__(
        self,
        open_probe: Callable[[str], Probe],
        *,
        interval: float = 0.1,
        probe_timeout: float = 0.5,
    ) -> None:
        self._open_probe = open_probe
        self._interval = interval
        self._probe_timeout = probe_timeout
        # _lock guards _watched, _listeners and _closed.
        self._lock = threading.Lock()
        self._watched: dict[str, _Watched] = {}
        # How many watched brokers are down: written on the watch's thread, read anywhere.
        self._down = 0
        self._listeners: list[DownListener] = []
        self._closed = False
        self._stop = threading.Event()
        self._wake = threading.Event()  # set by watch() and close()
        # Started by start() (as its client is made), not on the first watch(),
        # so that it belongs to whoever made the client; idle until then.
        self._thread = threading.Thread(
            target=self._run, name="liftbridge-broker-watch", daemon=True
        )

    def start(self) -> None:
        """Starts the watch's thread, whole or again by the next call
        (:func:`start_thread`); one started after :meth:`close` ends at once."""
        start_thread(self._thread)

    def add_listener(self, listener: DownListener) -> None:
        """Calls ``listener(address)`` whenever a watched broker goes down."""
        with self._lock:
            self._listeners.append(listener)

    def remove_listener(self, listener: DownListener) -> None:
        """Stops calling ``listener`` (if it was added)."""
        with self._lock:
            if listener in self._listeners:
                self._listeners.remove(listener)

    def watch(self, address: str) -> None:
        """Starts watching a broker (idempotent; cheap once watched)."""
        if address in self._watched:
            return
        with self._lock:
            if self._closed or address in self._watched:
                return
            self._watched[address] = _Watched(address, self._open_probe(address))
        self._wake.set()

    def is_down(self, address: str) -> bool:
        """True while a watched broker's connection is failing."""
        watched = self._watched.get(address)
        return watched is not None and watched.down

    def any_down(self) -> bool:
        """True while any watched broker's connection is failing: a look
        that spares a caller :meth:`is_down` per address while none is."""
        return self._down > 0

    def close(self) -> None:
        """Stops watching every broker; waits (bounded) for the watch's
        thread. Idempotent; not to be called from a listener. The probes are
        forgotten only once closed: a close interrupted (Ctrl-C) before is
        finished by the next."""
        with self._lock:
            self._closed = True
            watched = list(self._watched.values())
            self._listeners.clear()
        thread = self._thread
        self._stop.set()
        self._wake.set()
        # Never started, it is not joined (one whose start is under way ends at once: stopped).
        if thread.ident is not None and thread is not threading.current_thread():
            thread.join(self._probe_timeout + 2.0)
            if thread.is_alive():
                _log.warning("liftbridge-broker-watch did not stop in time")
        for w in watched:
            w.probe.close()
        with self._lock:
            self._watched.clear()

    # ------------------------------------------- liftbridge-broker-watch --

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                with self._lock:
                    watched = list(self._watched.values())
                if not watched:
                    self._wake.wait()  # until the first watch() or close()
                    self._wake.clear()
                    continue
                for w in watched:
                    if self._stop.is_set():
                        return
                    self._probe(w)
                self._stop.wait(self._interval)
        except Exception:  # a bug here must not end the watch silently
            _log.exception("liftbridge-broker-watch failed; brokers are no longer watched")

    def _probe(self, w: _Watched) -> None:
        # Liftbridge has no health service for this request: a broker that
        # is there answers at once, with UNIMPLEMENTED.
        status = w.probe.call(HEALTH_CHECK, b"", self._probe_timeout).status
        if status == "DEADLINE_EXCEEDED":
            return  # slow or hung: proves nothing
        if status == CLOSED or (status == "CANCELLED" and self._stop.is_set()):
            return  # the watch closing its probes
        answered = status != "UNAVAILABLE"
        if answered:
            if w.down:
                w.down = False
                self._down -= 1
                _log.info("broker %s is reachable again", w.address)
            return
        if w.down:
            return
        w.down = True
        self._down += 1
        _log.warning("broker %s is down (its connection failed)", w.address)
        with self._lock:
            listeners = [] if self._closed else list(self._listeners)
        for listener in listeners:
            try:
                listener(w.address)
            except Exception:
                _log.exception("a broker-down listener failed for %s", w.address)
