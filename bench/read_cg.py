"""A measurement, not a feature: the instructions of the two threads that
read in ``make bench``'s end-to-end row, without a Liftbridge server.

At 10,000 msgs/s ``liftbridge-acks`` reads a few dozen acks a wake-up and
resolves their Futures, and the subscription thread reads a dozen messages
a wake-up and hands each to its handler. This drives either against a fake
broker in a child process (``--peer``: grpcio, answering metadata, acking
every PublishAsync request with an ack shaped as a server's, and serving a
subscription of ``--count`` messages in runs of ``--run``), so that under
callgrind only the client runs instrumented. Count the reading thread's
instructions for two ``--count`` s and take the difference per message::

    PYTHONHASHSEED=0 valgrind --tool=callgrind --separate-threads=yes \\
        python -m bench.read_cg --count 1000 [--sub]

Default: ``publish_async`` with a Future in runs of ``--run`` back to back
(the Futures dropped, as the end-to-end row does), a pause after each run;
the acks thread is the non-main thread that decodes the most protobufs.
``--sub``: a ``subscribe`` handler counting messages; the subscription
thread is that thread.
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Iterator

import grpc

import liftbridge
from bench.publish_cg import STREAM, AckingBroker, peer_ports, serve_peer
from liftbridge_api import api_pb2

_PAUSE = 0.05
"""Seconds after each run: the run is read before the next comes (under
callgrind every thread runs ~50 times slower)."""
_WARM = 20
"""Publishes acked one by one first: the stream opened, every path's first time."""


class ReadBroker(AckingBroker):
    """:class:`AckingBroker` with acks and messages filled in as a server's."""

    count = 0
    run = 25

    def PublishAsync(
        self, request_iterator: Iterator[api_pb2.PublishRequest], context: grpc.ServicerContext
    ) -> Iterator[api_pb2.PublishResponse]:
        now = time.time_ns()
        held: list[api_pb2.PublishResponse] = []
        for offset, request in enumerate(request_iterator):
            held.append(
                api_pb2.PublishResponse(
                    correlationId=request.correlationId,
                    ack=api_pb2.Ack(
                        stream=request.stream,
                        partitionSubject=STREAM,
                        msgSubject=STREAM,
                        offset=offset,
                        correlationId=request.correlationId,
                        ackPolicy=request.ackPolicy,
                        receptionTimestamp=now,
                        commitTimestamp=now,
                    ),
                )
            )
            if offset < _WARM or len(held) == self.run:  # a run's acks together
                yield from held
                held.clear()

    def Subscribe(
        self, request: api_pb2.SubscribeRequest, context: grpc.ServicerContext
    ) -> Iterator[api_pb2.Message]:
        yield api_pb2.Message()  # the handshake
        now = time.time_ns()
        for offset in range(self.count):
            if offset and offset % self.run == 0:
                time.sleep(_PAUSE)
            yield api_pb2.Message(
                offset=offset,
                value=b"v" * 100,
                timestamp=now,
                stream=request.stream,
                partition=request.partition,
                subject=STREAM,
                headers={"subject": STREAM.encode()},
            )
        while context.is_active():
            time.sleep(0.05)


def _peer(count: int, run: int) -> None:
    """Serves the fake broker; prints its port; ends when stdin closes."""
    broker = ReadBroker()  # type: ignore[abstract]  # only a few RPCs needed
    broker.count, broker.run = count, run
    serve_peer(broker)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--run", type=int, default=25, help="messages a run")
    parser.add_argument("--sub", action="store_true", help="the subscription thread")
    parser.add_argument("--peer", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.count % args.run:
        parser.error("--count must be a multiple of --run")
    if args.peer:
        _peer(args.count, args.run)
        return
    with (
        peer_ports("bench.read_cg", "--count", str(args.count), "--run", str(args.run)) as (port,),
        liftbridge.Client(f"127.0.0.1:{port}", ack_wait=600.0, connect_timeout=300.0) as client,
    ):
        if args.sub:
            subscribe(client, args.count)
        else:
            publish(client, args.count, args.run)


def publish(client: liftbridge.Client, count: int, run: int) -> None:
    """``count`` publishes in runs of ``run`` (the broker acks each run
    together), after a warm-up; waits for the last ack."""
    value = b"v" * 100
    publish_async = client.publish_async
    for _ in range(_WARM):
        publish_async(STREAM, value).result(60)
    last = None
    for i in range(count):
        last = publish_async(STREAM, value)
        if i % run == run - 1:
            time.sleep(_PAUSE)
    assert last is not None
    last.result(600)


def subscribe(client: liftbridge.Client, count: int) -> None:
    """Reads the ``count`` messages the broker serves with a handler counting them."""
    seen = [0]
    all_in = threading.Event()

    def handler(message: liftbridge.Message | None, error: BaseException | None) -> None:
        if message is None:
            all_in.set()
            return
        seen[0] += 1
        if seen[0] == count:
            all_in.set()

    with client.subscribe(STREAM, handler, start=liftbridge.StartPosition.EARLIEST):
        all_in.wait(600)
    assert seen[0] == count, seen[0]


if __name__ == "__main__":
    main()
