"""A hostile in-process broker: it implements the API but breaks the
protocol on cue, which the real server never does. The SDK must survive it:
no thread dies, no call outlives its deadline, and nothing malformed reaches
user code without a typed error or a logged drop.

Publishes script the PublishAsync stream by their value:

==================  ==========================================================
``unknown-id``      acked under a correlation id nobody sent, and never for real
``stray-then-ok``   an ack for an unknown id, then the real ack
``dup``             acked twice
``policy-7``        acked with ``ackPolicy=7`` (not in the protocol)
``code-99``         acked with ``ackError=99`` (not in the protocol)
``async-99``        answered with a PublishAsyncError of code 99
``silent``          never answered
anything else       acked normally
==================  ==========================================================

Modes change whole RPCs: ``ghost_leader`` (metadata names a leader that is
not in the broker list), ``close_publish`` (every PublishAsync stream ends at
once), ``subscribe_offsets`` (the Subscribe stream sends these offsets, then
stays open), ``foreign_label`` (one message of the Subscribe stream is
labelled with another stream and partition).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import grpc

from liftbridge_api import api_pb2
from tests.unit.fake_broker import FakeBroker

STREAM = "hostile"
"""The one stream the broker's metadata lists (partition 0)."""


class HostileBroker(FakeBroker):
    """See the module docstring. Thread-safe: gRPC runs handlers on a pool."""

    def __init__(self) -> None:
        self.ghost_leader = False
        self.close_publish = False
        self.subscribe_offsets: list[int] = []
        self.foreign_label = False
        self.lock = threading.Lock()  # guards streams
        self.streams = 0  # PublishAsync streams opened
        self.stop = threading.Event()  # set at teardown: ends streams that stay open

    def FetchMetadata(
        self, request: api_pb2.FetchMetadataRequest, context: grpc.ServicerContext
    ) -> api_pb2.FetchMetadataResponse:
        leader = "ghost" if self.ghost_leader else "fake"
        partition = api_pb2.PartitionMetadata(id=0, leader=leader, replicas=[leader], isr=[leader])
        return api_pb2.FetchMetadataResponse(
            brokers=[api_pb2.Broker(id="fake", host="127.0.0.1", port=self.port)],
            streamMetadata=[
                api_pb2.StreamMetadata(name=STREAM, subject=STREAM, partitions={0: partition})
            ],
        )

    def PublishAsync(
        self, request_iterator: Iterator[api_pb2.PublishRequest], context: grpc.ServicerContext
    ) -> Iterator[api_pb2.PublishResponse]:
        with self.lock:
            self.streams += 1
        if self.close_publish:
            return
        for offset, request in enumerate(request_iterator):
            yield from _answers(request, offset)

    def Subscribe(
        self, request: api_pb2.SubscribeRequest, context: grpc.ServicerContext
    ) -> Iterator[api_pb2.Message]:
        yield api_pb2.Message()  # the handshake
        for index, offset in enumerate(self.subscribe_offsets):
            stream, partition = request.stream, request.partition
            if self.foreign_label and index == 1:
                stream, partition = "elsewhere", 3
            yield api_pb2.Message(
                offset=offset, value=b"%d" % offset, stream=stream, partition=partition
            )
        while not self.stop.wait(0.05) and context.is_active():
            pass


def _ack(request: api_pb2.PublishRequest, offset: int, **fields: object) -> api_pb2.Ack:
    values: dict[str, object] = {
        "stream": request.stream,
        "offset": offset,
        "correlationId": request.correlationId,
        "ackPolicy": request.ackPolicy,
    }
    values.update(fields)
    return api_pb2.Ack(**values)  # type: ignore[arg-type]


def _answers(request: api_pb2.PublishRequest, offset: int) -> Iterator[api_pb2.PublishResponse]:
    value = request.value
    cid = request.correlationId
    if value == b"silent":
        return
    if value in (b"unknown-id", b"stray-then-ok"):
        yield api_pb2.PublishResponse(
            correlationId="nobody-sent-this",
            ack=_ack(request, offset, correlationId="nobody-sent-this"),
        )
        if value == b"unknown-id":
            return
    if value == b"async-99":
        yield api_pb2.PublishResponse(
            correlationId=cid,
            asyncError=api_pb2.PublishAsyncError(code=99, message="from the future"),  # type: ignore[arg-type]
        )
        return
    ack = _ack(request, offset)
    if value == b"policy-7":
        ack.ackPolicy = 7  # type: ignore[assignment]
    elif value == b"code-99":
        ack.ackError = 99  # type: ignore[assignment]
    yield api_pb2.PublishResponse(correlationId=cid, ack=ack)
    if value == b"dup":
        yield api_pb2.PublishResponse(correlationId=cid, ack=_ack(request, offset))


@contextmanager
def mute_listener() -> Iterator[int]:
    """A loopback port that accepts TCP connections and never says a byte:
    a hung broker as a client sees it. Yields the port."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            accepted.append(connection)

    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.settimeout(0.1)
    thread = threading.Thread(target=accept, name="hostile-mute-accept", daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        listener.close()
        for connection in accepted:
            connection.close()


def elapsed_since(start: float) -> float:
    """Seconds since ``start`` (a ``time.monotonic()`` reading)."""
    return time.monotonic() - start
