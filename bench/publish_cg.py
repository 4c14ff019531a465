"""A measurement, not a feature: the calling thread's instructions for one
paced ``publish_async(stream, value)``, without a Liftbridge server.

Issue 29 asks for Go's end-to-end tail at 10,000 msgs/s, which the 2-core
machine's CPU sets; at that pace the publishing thread writes nearly every
publish itself (``Publisher._write``). This drives one publish at a time,
a pause after each (the sender idle, the previous ack in), against a fake
broker in a child process (``--peer``: grpcio, answering metadata and acking
every PublishAsync request), so that under callgrind only the client runs
instrumented. Count the main thread's instructions for two ``--count`` s and
take the difference per publish::

    PYTHONHASHSEED=0 valgrind --tool=callgrind --separate-threads=yes \\
        python -m bench.publish_cg --count 1000 [--handler]

``--handler``: ``future=False`` with an ack handler, not a Future a publish.
It also checks (``--own``, natively) that the publishes were written by
their own thread. ``--toggle`` makes each counted publish through
``operator.call``, so that ``--toggle-collect=_operator_call`` counts the
publishes alone (the pauses, the warm-up and the client's making and closing
left out): the main thread's instructions divided by ``--count``, one run,
with less of the noise a difference of two runs carries::

    PYTHONHASHSEED=0 valgrind --tool=callgrind --separate-threads=yes \
        --toggle-collect=_operator_call python -m bench.publish_cg --count 1000 --toggle
"""

from __future__ import annotations

import argparse
import functools
import operator
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from contextlib import contextmanager
from typing import Any, cast

import grpc

import liftbridge
from liftbridge_api import api_pb2, api_pb2_grpc

_PAUSE = 0.002
"""Seconds between publishes: the ack of one is in before the next (at 10,000
msgs/s, 100 us apart; under callgrind every thread runs ~50 times slower)."""
STREAM = "cg"
"""The one stream :class:`AckingBroker` lists (partition 0)."""


class AckingBroker(api_pb2_grpc.APIServicer):
    """One broker, itself, leading :data:`STREAM`'s partition; acks every
    publish. Also bench/nats_cg.py's metadata broker and the fake broker of
    tests/unit/test_interrupted_publish.py."""

    port = 0

    def FetchMetadata(
        self, request: api_pb2.FetchMetadataRequest, context: grpc.ServicerContext
    ) -> api_pb2.FetchMetadataResponse:
        partition = api_pb2.PartitionMetadata(id=0, leader="b", replicas=["b"], isr=["b"])
        return api_pb2.FetchMetadataResponse(
            brokers=[api_pb2.Broker(id="b", host="127.0.0.1", port=self.port)],
            streamMetadata=[
                api_pb2.StreamMetadata(name=STREAM, subject=STREAM, partitions={0: partition})
            ],
        )

    def PublishAsync(
        self, request_iterator: Iterator[api_pb2.PublishRequest], context: grpc.ServicerContext
    ) -> Iterator[api_pb2.PublishResponse]:
        for offset, request in enumerate(request_iterator):
            yield api_pb2.PublishResponse(
                correlationId=request.correlationId,
                ack=api_pb2.Ack(
                    stream=request.stream, offset=offset, correlationId=request.correlationId
                ),
            )


@contextmanager
def peer_ports(module: str, *args: str) -> Iterator[list[int]]:
    """Runs ``python -m module --peer *args``, a driver's fake peers in a
    process of their own (out of callgrind's count); yields the ports it
    prints on its first line and ends it (its stdin closed) after."""
    peer = subprocess.Popen(
        [sys.executable, "-m", module, "--peer", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert peer.stdout is not None
        yield [int(port) for port in peer.stdout.readline().split()]
    finally:
        if peer.stdin is not None:
            peer.stdin.close()
        peer.wait(10)


def serve_peer(broker: AckingBroker, *more: int) -> None:
    """A driver's peer process (:func:`peer_ports`): serves ``broker``,
    prints its port (then ``more`` ports, of peers served meanwhile) on one
    line, and ends when stdin closes."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    api_pb2_grpc.add_APIServicer_to_server(broker, server)
    broker.port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(broker.port, *more, flush=True)
    sys.stdin.read()
    server.stop(grace=None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--handler", action="store_true", help="future=False and a handler")
    parser.add_argument("--own", action="store_true", help="print the share written directly")
    parser.add_argument("--toggle", action="store_true", help="each publish via operator.call")
    parser.add_argument("--peer", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peer:
        serve_peer(AckingBroker())  # type: ignore[abstract]  # only two RPCs needed
        return
    with peer_ports("bench.publish_cg") as (port,):
        drive(port, args.count, handler=args.handler, own=args.own, toggle=args.toggle)


def drive(port: int, count: int, *, handler: bool, own: bool, toggle: bool = False) -> None:
    """``count`` paced publishes, after a warm-up, then waits for their acks;
    with ``toggle`` each through ``operator.call`` (see the module docstring)."""
    acked = threading.Semaphore(0)

    def on_ack(ack: liftbridge.Ack | None, error: BaseException | None) -> None:
        acked.release()

    written = [0]
    if own:
        from bench.e2e_probe import _own_writes

        written = _own_writes()
    value = b"v" * 100
    sleep = time.sleep
    with liftbridge.Client(f"127.0.0.1:{port}", ack_wait=600.0, connect_timeout=300.0) as client:
        publish: Callable[..., Any] = client.publish_async
        for _ in range(20):  # the stream opened and known, every path's first time
            publish(STREAM, value).result(60)
        written[0] = 0
        if toggle:
            publish = functools.partial(cast(Any, operator.call), client.publish_async)
        if handler:
            for _ in range(count):
                publish(STREAM, value, on_ack, future=False)
                sleep(_PAUSE)
            for _ in range(count):
                acked.acquire(timeout=60)
        else:
            last = None
            for _ in range(count):
                last = publish(STREAM, value)
                sleep(_PAUSE)
            assert last is not None
            last.result(60)
    if own:
        print(f"written by their own thread: {written[0] / count:.3f}")


if __name__ == "__main__":
    main()
