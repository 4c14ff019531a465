"""A measurement, not a feature: the PublishAsync stream on ``grpc.aio``.

Issue 16 asks whether running the gRPC PublishAsync stream on ``grpc.aio`` in
one event-loop thread would pipeline faster than the SDK's threaded
``publish_async``. This drives, against one ``LocalServer``, in turns:

- ``sdk``: ``Client.publish_async`` (window 1024), as in ``make bench``;
- ``bare``: the floor's PublishAsync stream (bench.floor.BarePipelined);
- ``aio-loop``: grpc.aio, requests written and acks read inside the loop
  (no thread crossing: the upper bound of the approach);
- ``aio-sync``: grpc.aio behind a synchronous call, as an SDK would offer
  it: the caller's thread builds the request and a Future, hands it to the
  loop thread through a deque, and the loop resolves the futures;
- ``go``: go-liftbridge's PublishAsync (bench/go).

Run: ``python -m bench.aio_probe [--count 20000] [--reps 3]``; prints msgs/s
medians and ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import statistics
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import grpc

import liftbridge
from bench import floor, gocli
from liftbridge.testing import LocalServer
from liftbridge_api import api_pb2, api_pb2_grpc

_WAIT = 60.0
_VALUE = b"a" * 100


def _open_stream(channel: Any) -> Any:
    """A PublishAsync call on an aio channel (the generated stubs type the sync API)."""
    stub: Any = api_pb2_grpc.APIStub(channel)
    return stub.PublishAsync()


def _request(stream: str, n: int) -> api_pb2.PublishRequest:
    return api_pb2.PublishRequest(
        stream=stream,
        value=_VALUE,
        correlationId=f"aio-{n}",
        ackPolicy=api_pb2.LEADER,
        expectedOffset=-1,
    )


class AioPublisher:
    """One grpc.aio PublishAsync stream on its own event-loop thread."""

    def __init__(self, address: str, window: int) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="aio-probe-loop")
        self._thread.start()
        self._window = threading.BoundedSemaphore(window)
        self._outbox: collections.deque[tuple[api_pb2.PublishRequest, Future[None]]] = (
            collections.deque()
        )
        self._waiting: dict[str, Future[None]] = {}
        self._ids = 0
        asyncio.run_coroutine_threadsafe(self._open(address), self._loop).result(_WAIT)

    async def _open(self, address: str) -> None:
        self._channel: Any = grpc.aio.insecure_channel(address)
        self._call = _open_stream(self._channel)
        self._wake = asyncio.Event()
        self._tasks = [
            asyncio.get_running_loop().create_task(self._write()),
            asyncio.get_running_loop().create_task(self._read()),
        ]

    async def _write(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._outbox:
                request, future = self._outbox.popleft()
                self._waiting[request.correlationId] = future
                await self._call.write(request)

    async def _read(self) -> None:
        async for response in self._call:
            future = self._waiting.pop(response.correlationId or response.ack.correlationId)
            self._window.release()
            future.set_result(None)

    def publish_async(self, stream: str) -> Future[None]:
        """The synchronous front: a Future resolved on the loop thread."""
        if not self._window.acquire(timeout=_WAIT):
            raise TimeoutError("window stayed full")
        self._ids += 1
        future: Future[None] = Future()
        self._outbox.append((_request(stream, self._ids), future))
        self._loop.call_soon_threadsafe(self._wake.set)
        return future

    def in_loop(self, stream: str, count: int, window: int) -> float:
        """Publishes ``count`` from inside the loop; returns seconds."""

        async def run() -> float:
            slots = asyncio.Semaphore(window)
            done = asyncio.Event()
            left = count
            waiting: dict[str, None] = {}

            async def reader() -> None:
                nonlocal left
                async for _ in self._call:
                    slots.release()
                    left -= 1
                    if left == 0:
                        done.set()
                        return

            for task in self._tasks:
                task.cancel()
            self._call = _open_stream(self._channel)
            read = asyncio.get_running_loop().create_task(reader())
            start = time.perf_counter()
            for n in range(count):
                await slots.acquire()
                waiting[str(n)] = None
                await self._call.write(_request(stream, n))
            await asyncio.wait_for(done.wait(), _WAIT)
            seconds = time.perf_counter() - start
            read.cancel()
            return seconds

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(_WAIT * 2)

    def close(self) -> None:
        async def shut() -> None:
            for task in self._tasks:
                task.cancel()
            await self._channel.close()

        asyncio.run_coroutine_threadsafe(shut(), self._loop).result(_WAIT)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(_WAIT)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.aio_probe")
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    count, window = args.count, 1024
    rates: dict[str, list[float]] = collections.defaultdict(list)
    gocli.build()
    with (
        LocalServer(log_level="warn") as server,
        liftbridge.Client(server.addresses, max_inflight=window, ack_wait=_WAIT) as client,
    ):
        names = {v: f"aio-probe-{v}" for v in ("sdk", "bare", "loop", "sync", "go")}
        for name in names.values():
            client.create_stream(name)
        channel, stub = floor.open_stub(server.address)
        bare = floor.BarePipelined(stub, names["bare"], _VALUE, api_pb2.LEADER, window)
        go = gocli.GoDriver(server.address, "publish_async", names["go"], 100, window=window)
        sync = AioPublisher(server.address, window)
        loop_only = AioPublisher(server.address, window)

        def sdk_run() -> float:
            start = time.perf_counter()
            for _ in range(count):
                client.publish_async(names["sdk"], _VALUE)
            assert client.flush(_WAIT)
            return time.perf_counter() - start

        def sync_run() -> float:
            start = time.perf_counter()
            futures = [sync.publish_async(names["sync"]) for _ in range(count)]
            for future in futures:
                future.result(_WAIT)
            return time.perf_counter() - start

        drivers: dict[str, Callable[[], float]] = {
            "sdk": sdk_run,
            "bare": lambda: bare.run(count).seconds,
            "aio-loop": lambda: loop_only.in_loop(names["loop"], count, window),
            "aio-sync": sync_run,
            "go": lambda: go.run(count).seconds,
        }
        for rep in range(args.reps + 1):  # the first is a warm-up
            order = list(drivers) if rep % 2 == 0 else list(reversed(drivers))
            for name in order:
                seconds = drivers[name]()
                if rep:
                    rates[name].append(count / seconds)
        go.close()
        sync.close()
        loop_only.close()
        channel.close()
    median = {name: statistics.median(values) for name, values in rates.items()}
    for name, rate in median.items():
        print(
            f"{name:9s} {rate:10,.0f} msgs/s   /go {rate / median['go']:.2f}"
            f"   /bare {rate / median['bare']:.2f}   reps {[round(r) for r in rates[name]]}"
        )


if __name__ == "__main__":
    main()
