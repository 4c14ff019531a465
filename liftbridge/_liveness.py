"""Which brokers are known to be down, learnt from their gRPC connections.

A publish sent through one broker to a partition another broker leads is
forwarded over NATS; when that leader dies, the stream the publish went out
on stays healthy and nothing tells the publisher: the publish would wait out
its whole ack timeout. The publisher therefore asks the :class:`BrokerWatch`
to watch each partition leader it sends to, and hears from it the moment a
leader's connection fails.

How a broker is watched: a channel of the watch's own (a connection apart
from the client's, reconnecting every quarter second at most while it
fails, so that a broker back up is seen as up soon) has its connectivity
subscribed to (gRPC polls it on a thread of its own). A killed broker's connection closes at
once and the channel goes from READY to IDLE; an idle channel is also what a
healthy broker's long-unused connection turns into, so IDLE alone proves
nothing. On IDLE the watch makes the channel connect again, by sending a
health probe (any answer will do; Liftbridge answers UNIMPLEMENTED): a
broker that is gone refuses, and the channel reports TRANSIENT_FAILURE. That, and only that,
marks the broker down; READY marks it up again. A broker that is merely
slow or hung (SIGSTOP) keeps its connection and is never marked down.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import grpc

_log = logging.getLogger(__name__)

DownListener = Callable[[str], None]
"""``listener(address)``: called when a watched broker is found down. Runs
on a gRPC connectivity thread: it must hand any real work to a thread of
the SDK's and return at once."""


_PROBE = "/grpc.health.v1.Health/Check"
"""The RPC whose only purpose is to make an idle channel connect."""
_PROBE_TIMEOUT = 5.0


class _Watched:
    """The connectivity of one broker's channel."""

    def __init__(self, watch: BrokerWatch, address: str, channel: grpc.Channel) -> None:
        self._watch = watch
        self.address = address
        self.channel = channel
        self.connected_once = False  # left the initial IDLE at least once
        self.down = False  # written on gRPC's delivery thread; read anywhere
        # The last probe's call, kept so that it is not cancelled when collected.
        self._probe: grpc.Future[bytes] | None = None

    def changed(self, state: grpc.ChannelConnectivity) -> None:
        """gRPC's connectivity callback (on its delivery thread)."""
        try:
            self._changed(state)
        except Exception:  # never let gRPC's thread swallow a bug silently
            _log.exception("broker watch of %s failed on %s", self.address, state)

    def _changed(self, state: grpc.ChannelConnectivity) -> None:
        if state is grpc.ChannelConnectivity.READY:
            self.connected_once = True
            if self.down:
                self.down = False
                _log.info("broker %s is reachable again", self.address)
        elif state is grpc.ChannelConnectivity.TRANSIENT_FAILURE:
            self.connected_once = True
            if not self.down:
                self.down = True
                _log.warning("broker %s is down (its connection failed)", self.address)
                self._watch.notify_down(self.address)
        elif state is grpc.ChannelConnectivity.IDLE and self.connected_once:
            # The connection closed (a dead broker, or an idle timeout):
            # connect again, and let the answer tell which.
            try:
                probe = self.channel.unary_unary(_PROBE, None, None)
                self._probe = probe.future(b"", timeout=_PROBE_TIMEOUT)
            except ValueError:  # the channel closed meanwhile
                pass


WATCH_OPTIONS: list[tuple[str, int]] = [
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 250),
    # gRPC also takes this as the least time one connection attempt gets
    # (20 s by default). At the client's 100 ms, a broker slow to complete a
    # handshake (busy, or SIGSTOPped) would count as down: only a refused or
    # failed connection must.
    ("grpc.min_reconnect_backoff_ms", 20_000),
]
"""The watch channels' options: a broker back up is seen within about 250 ms."""


class BrokerWatch:
    """Watches brokers' connections and tells listeners when one goes down.
    Thread-safe.

    Args:
        open_channel: opens a new channel of the watch's own to a broker
            address, with the options given (the watch closes it).
    """

    def __init__(self, open_channel: Callable[[str, list[tuple[str, int]]], grpc.Channel]) -> None:
        self._open_channel = open_channel
        # _lock guards _watched, _listeners and _closed.
        self._lock = threading.Lock()
        self._watched: dict[str, _Watched] = {}
        self._listeners: list[DownListener] = []
        self._closed = False

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
            watched = _Watched(self, address, self._open_channel(address, WATCH_OPTIONS))
            self._watched[address] = watched
        watched.channel.subscribe(watched.changed, try_to_connect=True)

    def is_down(self, address: str) -> bool:
        """True while a watched broker's connection is failing."""
        watched = self._watched.get(address)
        return watched is not None and watched.down

    def notify_down(self, address: str) -> None:
        with self._lock:
            listeners = [] if self._closed else list(self._listeners)
        for listener in listeners:
            try:
                listener(address)
            except Exception:
                _log.exception("a broker-down listener failed for %s", address)

    def close(self) -> None:
        """Stops watching every broker. Idempotent."""
        with self._lock:
            self._closed = True
            watched = list(self._watched.values())
            self._watched.clear()
            self._listeners.clear()
        for w in watched:
            w.channel.unsubscribe(w.changed)
            w.channel.close()
