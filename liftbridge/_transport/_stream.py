"""The one interface every streaming call has, whichever transport carries it.

:meth:`liftbridge._transport._channels.Channels.open_stream` picks the
transport (the SDK's own HTTP/2 connection, :class:`~liftbridge._transport._http2.Http2Call`,
or a grpcio channel, wrapped in :class:`GrpcStream`) and returns a
:class:`Stream`. Features read, write and cancel through it and see only
:class:`~liftbridge._errors.LiftbridgeError` subclasses: no module above this
folder knows grpc or HTTP/2.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from itertools import repeat, starmap
from typing import Any, Generic, Protocol, TypeVar

import grpc

from liftbridge._errors import ClientClosedError
from liftbridge._transport._status import from_rpc_error

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class Serializable(Protocol):
    """A request a stream writes: a protobuf message, or anything that
    serializes itself the same way (a publish request written byte by byte)."""

    def SerializeToString(self) -> bytes: ...


class Stream(Protocol[T_co]):
    """A streaming RPC as the SDK uses it.

    Iterating it (``next``, on the one thread that reads it) yields the
    responses; it ends with StopIteration when the server ends the call with
    OK, or raises the :class:`~liftbridge._errors.LiftbridgeError` its end
    maps to (the transport's error as ``__cause__``). Requests come from the
    iterator the stream was opened with (one with a ``next_ready()`` method
    has every ready request written at once: the batched write), or from
    :meth:`write_now`.
    """

    def __iter__(self) -> Iterator[T_co]: ...

    def __next__(self) -> T_co: ...

    def cancel(self) -> bool:
        """Ends the call from any thread; the reader gets ConnectionLostError. Idempotent."""
        ...

    def done(self) -> bool:
        """True once the call ended."""
        ...

    def write_now(self, request: Serializable) -> bool:
        """Writes ``request`` on the calling thread if the transport can at
        once, never waiting; False when it did not (then put it in the
        request iterator). One writer at a time."""
        ...

    def take_ready(self, run: list[Any], limit: int) -> None:
        """Appends to ``run`` the responses already read, in order, until it
        holds ``limit`` (never reads or waits): lets the reading thread take
        a run of responses and handle them together. Only on the reading
        thread."""
        ...


class GrpcStream(Generic[T]):
    """A grpcio streaming call behind the :class:`Stream` interface."""

    __slots__ = ("_call",)

    def __init__(self, call: Any) -> None:
        self._call = call

    def __iter__(self) -> Iterator[T]:
        return self

    def __next__(self) -> T:
        try:
            response: T = next(self._call)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from e
        except ValueError as e:  # grpc raises it for a call on a channel closed meanwhile
            raise ClientClosedError("the client is closed") from e
        return response

    def cancel(self) -> bool:
        return bool(self._call.cancel())

    def done(self) -> bool:
        return bool(self._call.done())

    def write_now(self, request: Serializable) -> bool:
        return False

    def take_ready(self, run: list[T], limit: int) -> None:
        pass  # grpcio reads one response per next()


class ReadyResponses(Generic[T]):
    """:meth:`Stream.take_ready` for a call that keeps the responses it has
    read but not yet returned in a deque, ``_ready`` (the SDK's own HTTP/2
    call)."""

    _ready: collections.deque[T]

    def take_ready(self, run: list[T], limit: int) -> None:
        # Popped one by one in C (no Python call per response): another
        # thread's done() may append to _ready meanwhile, never take from it.
        ready = self._ready
        if ready:  # else (one response a read, a paced rate) nothing more to call
            count = min(len(ready), limit - len(run))
            if count > 0:
                run += starmap(ready.popleft, repeat((), count))
