"""gRPC channels: one per broker address, opened lazily, closed all at once.

Channels are thread-safe and multiplex any number of calls and streams, so
one per broker is all a client needs (the Go client's per-broker connection
pools exist because its connections are not). PublishAsync and Subscribe
streams are the exception: each runs on a connection of its own
(:mod:`liftbridge._transport._http2`, with TLS when the client has it), which
``close`` cancels too.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any

import grpc
import grpc.experimental

from liftbridge._errors import ClientClosedError
from liftbridge._transport._http2 import Http2Call
from liftbridge._transport._http2_reader import DEFAULT_MAX_MESSAGE
from liftbridge._transport._http2_tls import TlsSettings
from liftbridge._transport._http2_wire import Keepalive, StreamError
from liftbridge._transport._probe import PROBE_OPTIONS, Probe
from liftbridge._transport._status import from_rpc_error
from liftbridge._transport._stream import GrpcStream, Stream
from liftbridge._transport._tls import TLSConfig
from liftbridge_api import api_pb2, api_pb2_grpc

DEFAULT_KEEPALIVE = Keepalive(interval=300.0, timeout=20.0)
"""The server sends GOAWAY (too_many_pings) to clients that ping more often
than every 5 minutes (with no data from it in between), so keepalive pings
stay at that bound by default."""

__all__ = ["DEFAULT_KEEPALIVE", "DEFAULT_MAX_MESSAGE", "Channels", "Keepalive", "TLSConfig"]

_CHANNEL_OPTIONS: list[tuple[str, int]] = [
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
    # Reconnect quickly after a broker restart (defaults back off to 120 s).
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 2_000),
    # Subscribe (the only unary-stream RPC; on TLS clients and for direct
    # reads) reads its stream on the iterating thread instead of handing every
    # message over from gRPC's own thread: about 8x the subscribe throughput
    # measured by `make bench`. The SDK uses no Future methods of such calls,
    # which this option makes non-blocking.
    (grpc.experimental.ChannelOptions.SingleThreadedUnaryStream, 1),
]


_OWN_CONNECTION: dict[str, Callable[[bytes], Any]] = {
    "PublishAsync": api_pb2.PublishResponse.FromString,
    "Subscribe": api_pb2.Message.FromString,
}
"""The streaming RPCs that run on connections of their own (plaintext or
TLS), and how their responses are parsed."""


class Channels:
    """The client's channels, keyed by "host:port". Thread-safe."""

    def __init__(
        self,
        tls: TLSConfig | None,
        *,
        max_receive: int = DEFAULT_MAX_MESSAGE,
        keepalive: Keepalive | None = DEFAULT_KEEPALIVE,
    ) -> None:
        self._credentials = tls.credentials() if tls is not None else None
        self._tls = TlsSettings(tls.ssl_context(), tls.server_name) if tls is not None else None
        self._max_receive = max_receive
        self._keepalive = keepalive
        # The same receive limit and keepalive on both transports.
        self._options = [*_CHANNEL_OPTIONS, ("grpc.max_receive_message_length", max_receive)]
        if keepalive is not None:
            self._options += [
                ("grpc.keepalive_time_ms", int(keepalive.interval * 1000)),
                ("grpc.keepalive_timeout_ms", int(keepalive.timeout * 1000)),
            ]
        if tls is not None and tls.server_name:
            self._options.append(("grpc.ssl_target_name_override", tls.server_name))  # type: ignore[arg-type]
        self._lock = threading.Lock()  # guards _stubs, _own and _closed
        self._stubs: dict[str, tuple[grpc.Channel, api_pb2_grpc.APIStub]] = {}
        # Calls on connections of their own, cancelled by close() like the
        # calls on the channels; an ended call is dropped with its last user.
        self._own: weakref.WeakSet[Http2Call[Any]] = weakref.WeakSet()
        self._closed = False

    def _stub(self, address: str) -> api_pb2_grpc.APIStub:
        """The API stub for a broker, opening its channel on first use.

        Raises:
            ClientClosedError: after :meth:`close`.
        """
        return self._entry(address)[1]

    def open_stream(
        self,
        address: str,
        method: str,
        request: Any,
        *,
        connect_timeout: float,
        shared: bool = False,
        timeout: float | None = None,
    ) -> Stream[Any]:
        """Starts a streaming RPC on a broker: the one place that picks its
        transport. PublishAsync and Subscribe get a connection of their own
        (:mod:`liftbridge._transport._http2`, plaintext or TLS, which writes
        and reads many messages per system call), unless ``shared``
        (short reads, which would pay a connection each); everything else
        goes through the broker's gRPC channel, with ``timeout`` as the
        call's deadline there.

        Interrupted (Ctrl-C) before it returns, it ends the call it made
        (socket closed, sender ended). A sender already running waits in the
        request iterator until its next request: the caller, who gets no
        stream to cancel, ends that iterator.

        Raises:
            ClientClosedError: after :meth:`close`.
            UnavailableError: the broker could not be reached (own
                connections only; a channel's call fails on its first read).
        """
        parse = _OWN_CONNECTION.get(method)
        if parse is None or shared:
            call = getattr(self._stub(address), method)(request, timeout=timeout)
            try:
                return GrpcStream(call)
            except BaseException:  # an interrupt (Ctrl-C): the call is nobody's
                call.cancel()
                raise
        with self._lock:
            if self._closed:
                raise ClientClosedError("the client is closed")
        try:
            own: Http2Call[Any] = Http2Call(
                address,
                f"/proto.API/{method}",
                request,
                parse,
                connect_timeout=connect_timeout,
                max_message=self._max_receive,
                keepalive=self._keepalive,
                tls=self._tls,
            )
        except StreamError as e:
            raise from_rpc_error(e) from e
        try:
            with self._lock:
                closed = self._closed
                if not closed:
                    self._own.add(own)
        except BaseException:  # an interrupt (Ctrl-C): the call is nobody's, end it
            own.cancel()
            raise
        if closed:  # close() ran while this one connected
            own.cancel()
            raise ClientClosedError("the client is closed")
        return own

    def invoke(self, address: str, method: str, request: Any, timeout: float) -> Any:
        """One unary RPC on a broker's channel.

        Raises:
            ClientClosedError: after :meth:`close`.
            LiftbridgeError: the call failed (its gRPC status, mapped).
            ValueError: the channel was closed during the call (grpc's way).
        """
        rpc = getattr(self._stub(address), method)
        try:
            return rpc(request, timeout=timeout)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from e

    def open_probe(self, address: str) -> Probe:
        """A probe to a broker (:mod:`liftbridge._transport._probe`): the
        client's channel options and credentials with :data:`PROBE_OPTIONS`
        on top, on a connection of its own (not shared with the client's
        channel to it). The caller closes it.

        Raises:
            ClientClosedError: after :meth:`close`.
        """
        with self._lock:
            if self._closed:
                raise ClientClosedError("the client is closed")
        replaced = {key for key, _ in PROBE_OPTIONS}
        kept = [(key, value) for key, value in self._options if key not in replaced]
        merged = [*kept, ("grpc.use_local_subchannel_pool", 1), *PROBE_OPTIONS]
        if self._credentials is not None:
            return Probe(grpc.secure_channel(address, self._credentials, options=merged), address)
        return Probe(grpc.insecure_channel(address, options=merged), address)

    def _entry(self, address: str) -> tuple[grpc.Channel, api_pb2_grpc.APIStub]:
        entry = self._stubs.get(address)
        if entry is not None:
            return entry
        with self._lock:
            if self._closed:
                raise ClientClosedError("the client is closed")
            entry = self._stubs.get(address)
            if entry is None:
                if self._credentials is not None:
                    channel = grpc.secure_channel(address, self._credentials, options=self._options)
                else:
                    channel = grpc.insecure_channel(address, options=self._options)
                entry = (channel, api_pb2_grpc.APIStub(channel))
                self._stubs[address] = entry
            return entry

    def close(self) -> None:
        """Closes every channel; calls in flight on them end with CANCELLED.
        Idempotent. They are forgotten only once closed: a close interrupted
        (Ctrl-C) before is finished by the next."""
        with self._lock:
            self._closed = True
            entries = list(self._stubs.values())
            own = list(self._own)
        for channel, _ in entries:
            channel.close()
        for call in own:
            call.cancel()
        with self._lock:
            self._stubs.clear()
            self._own.clear()
