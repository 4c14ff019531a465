"""A measurement, not a feature: ``liftbridge-acks``'s work for one read, in
one thread and without a network, so that callgrind counts it the same run
after run.

Each read is what a grpc-go server sends a paced publish (a connection
WINDOW_UPDATE, a BDP PING, then the acks' DATA frames: ``--per`` acks a
read): fed to the HTTP/2 call's :class:`FrameReader` (its PING answered
through a real connection's queue) and resolved by a real
:class:`Publisher`'s ``_resolve`` (the unit tests' fake router, the
publishes registered beforehand). Only what runs inside
``functools.reduce`` is counted::

    PYTHONHASHSEED=0 valgrind --tool=callgrind --toggle-collect=functools_reduce \\
        python -m bench.ack_read_cg --count 2000 [--per 1]

Instructions per ack = the total / ``--count``. Not counted: the socket's
poll and recv, the call's iteration and the dispatch loop around them
(:mod:`bench.acks_cg` counts the whole thread against a server, less steadily).
"""

from __future__ import annotations

import argparse
import functools
import socket
import time

from chaos import fuzz_http2
from liftbridge._transport._http2_conn import Http2Connection
from liftbridge._transport._http2_reader import FrameReader
from liftbridge._transport._http2_wire import DATA, PING, WINDOW_UPDATE, frame_bytes
from liftbridge_api import api_pb2
from tests.unit.test_publisher_unit import FakeServer, make, request


def reads(count: int, per: int) -> list[bytes]:
    """What the server sends for ``count`` publishes, ``per`` acks a read."""
    now = time.time_ns()
    out = []
    for start in range(0, count, per):
        data = frame_bytes(WINDOW_UPDATE, 0, 0, (150 * per).to_bytes(4, "big"))
        data += frame_bytes(PING, 0, 0, b"bdp-ping")
        for i in range(start, min(start + per, count)):
            asked = request(i)
            body = api_pb2.PublishResponse(
                correlationId=asked.correlationId,
                ack=api_pb2.Ack(
                    stream="s",
                    partitionSubject="s",
                    msgSubject="s",
                    offset=i,
                    correlationId=asked.correlationId,
                    ackPolicy=asked.ackPolicy,
                    receptionTimestamp=now,
                    commitTimestamp=now,
                ),
            ).SerializeToString()
            data += frame_bytes(DATA, 0, 1, len(body).to_bytes(5, "big") + body)
        out.append(data)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--per", type=int, default=1, help="acks a read")
    args = parser.parse_args()
    server = FakeServer()
    server.ack = server.direct = False  # registered and sent, never acked by the fake
    publisher = make(server, ack_wait=600.0, max_inflight=args.count + 1)
    futures = [publisher.submit(request(i), None, None) for i in range(args.count)]
    ours, theirs = socket.socketpair()
    connection = Http2Connection(ours, None, iter(()), sending=False)
    reader = FrameReader(
        api_pb2.PublishResponse.FromString,
        max_message=1 << 22,
        windows=connection._peer,
        flow=connection._flow,
        reply=connection._queue,
        flow_lock=connection._flow_lock,
    )
    reader.feed(fuzz_http2.head())
    ready, answers, resolve = reader.ready, connection._pending, publisher._resolve

    def one_read(_: None, data: bytes) -> None:
        reader.feed(data)
        run = list(ready)
        ready.clear()
        resolve(run)
        answers.clear()  # the PING's answer, as a publish's write takes it

    data = reads(args.count, args.per)
    time.sleep(0.2)  # the fake stream's sender has taken the requests
    functools.reduce(one_read, data, None)
    assert all(future.done() for future in futures)
    ours.close()
    theirs.close()


if __name__ == "__main__":
    main()
