"""The floor: the SDK's RPC patterns driven by the bare generated stub.

No SDK code runs here, only ``liftbridge_api.api_pb2_grpc.APIStub`` and the
protobuf messages, doing the least an application would: build the same
requests, push them through the same kind of stream, read the responses.
What the SDK adds on top (validation, correlation, futures, value objects,
threads) is the difference between its figure and this one.
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
from collections.abc import Iterator
from typing import Protocol, TypeVar

import grpc

from bench.e2e import latency_of, stamped_value, wait_for
from bench.stats import Run, Stopwatch
from liftbridge._transport._channels import _CHANNEL_OPTIONS
from liftbridge_api import api_pb2, api_pb2_grpc

T_co = TypeVar("T_co", covariant=True)


class StreamCall(Protocol[T_co]):
    """What the floor uses of a grpcio response-streaming call (grpc's stubs
    type them too loosely to be useful)."""

    def __iter__(self) -> Iterator[T_co]: ...

    def __next__(self) -> T_co: ...

    def cancel(self) -> bool: ...


_WAIT = 60.0
"""Seconds any single step may block before the run is declared stuck."""


class FloorError(RuntimeError):
    """The server refused a request or a stream broke during a floor run."""


def open_stub(address: str) -> tuple[grpc.Channel, api_pb2_grpc.APIStub]:
    """A channel to ``address`` with the SDK's channel options, and its stub."""
    # The SDK's options (message sizes, keepalive): the same transport settings.
    channel = grpc.insecure_channel(address, options=list(_CHANNEL_OPTIONS))
    return channel, api_pb2_grpc.APIStub(channel)


class _PublishStream:
    """A PublishAsync stream fed by a queue-backed request generator."""

    def __init__(self, stub: api_pb2_grpc.APIStub) -> None:
        self._outbox: queue.SimpleQueue[api_pb2.PublishRequest | None] = queue.SimpleQueue()
        self._call: StreamCall[api_pb2.PublishResponse] = stub.PublishAsync(  # type: ignore[assignment]
            self._requests()
        )

    def _requests(self) -> Iterator[api_pb2.PublishRequest]:
        while True:
            request = self._outbox.get()
            if request is None:
                return
            yield request

    def send(self, request: api_pb2.PublishRequest) -> None:
        self._outbox.put(request)

    @property
    def responses(self) -> Iterator[api_pb2.PublishResponse]:
        return self._call

    def close(self) -> None:
        self._outbox.put(None)
        self._call.cancel()


class _Publisher:
    """Shared state of the publish floors: stream, value, policy, ids."""

    def __init__(
        self, stub: api_pb2_grpc.APIStub, stream: str, value: bytes, ack_policy: int
    ) -> None:
        self._stub = stub
        self._stream = stream
        self._value = value
        self._ack_policy = ack_policy
        self._ids = itertools.count()

    def _request(self, value: bytes | None = None) -> api_pb2.PublishRequest:
        return api_pb2.PublishRequest(
            stream=self._stream,
            partition=0,
            value=self._value if value is None else value,
            correlationId=f"bare-{next(self._ids)}",
            ackPolicy=self._ack_policy,  # type: ignore[arg-type]
            expectedOffset=-1,
        )


def _check(response: api_pb2.PublishResponse) -> None:
    if response.HasField("asyncError"):
        raise FloorError(f"publish refused: {response.asyncError.message}")


class BarePublish(_Publisher):
    """Workload 1's floor: one request at a time on a PublishAsync stream,
    each waiting for its ack."""

    def __init__(
        self, stub: api_pb2_grpc.APIStub, stream: str, value: bytes, ack_policy: int
    ) -> None:
        super().__init__(stub, stream, value, ack_policy)
        self._publish_stream = _PublishStream(stub)
        self._responses = self._publish_stream.responses

    def run(self, count: int) -> Run:
        send, responses, request = self._publish_stream.send, self._responses, self._request
        latencies = []
        clock = time.perf_counter
        watch = Stopwatch()
        for _ in range(count):
            sent = clock()
            send(request())
            _check(next(responses))
            latencies.append(clock() - sent)
        seconds, cpu = watch.stop()
        return Run(count, seconds, count * len(self._value), cpu, tuple(latencies))

    def close(self) -> None:
        self._publish_stream.close()


class BarePipelined(_Publisher):
    """Workload 2's floor: a PublishAsync stream kept ``window`` requests
    ahead of its acks by a semaphore, acks read on a second thread."""

    def __init__(
        self,
        stub: api_pb2_grpc.APIStub,
        stream: str,
        value: bytes,
        ack_policy: int,
        window: int,
    ) -> None:
        super().__init__(stub, stream, value, ack_policy)
        self._window = window

    def run(self, count: int) -> Run:
        window = threading.BoundedSemaphore(self._window)
        publish_stream = _PublishStream(self._stub)
        finished = threading.Event()
        failures: list[BaseException] = []

        def read_acks() -> None:
            left = count
            try:
                for response in publish_stream.responses:
                    window.release()
                    if response.HasField("asyncError"):
                        failures.append(FloorError(response.asyncError.message))
                    left -= 1
                    if left == 0:
                        return
            except grpc.RpcError as e:
                failures.append(e)
            finally:
                finished.set()

        reader = threading.Thread(target=read_acks, name="bench-floor-acks", daemon=True)
        reader.start()
        send, request, acquire = publish_stream.send, self._request, window.acquire
        try:
            watch = Stopwatch()
            for _ in range(count):
                if not acquire(timeout=_WAIT):
                    raise FloorError(f"no ack within {_WAIT:g}s")
                send(request())
            if not finished.wait(_WAIT):
                raise FloorError(f"acks still missing after {_WAIT:g}s")
            seconds, cpu = watch.stop()
        finally:
            publish_stream.close()
            reader.join(_WAIT)
        if failures:
            raise FloorError(f"{len(failures)} publish(es) failed, first: {failures[0]!r}")
        return Run(count, seconds, count * len(self._value), cpu)

    def close(self) -> None:
        pass


class BareSubscribe:
    """Workload 3's floor: iterate a Subscribe stream from the earliest
    offset to ``last_offset``, reading each message's offset."""

    def __init__(
        self, stub: api_pb2_grpc.APIStub, stream: str, last_offset: int, value_size: int
    ) -> None:
        self._stub = stub
        self._request = api_pb2.SubscribeRequest(
            stream=stream,
            partition=0,
            startPosition=api_pb2.EARLIEST,
            stopPosition=api_pb2.STOP_OFFSET,
            stopOffset=last_offset,
        )
        self._last_offset = last_offset
        self._value_size = value_size

    def run(self, count: int) -> Run:
        """Reads the whole partition; ``count`` is how many messages it holds."""
        received = -1  # the first message is the subscription's empty handshake
        last = -1
        watch = Stopwatch()
        call = self._stub.Subscribe(self._request)
        try:
            for message in call:
                received += 1
                last = message.offset
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:  # "stop offset reached"
                raise
        seconds, cpu = watch.stop()
        if received != count or last != self._last_offset:
            raise FloorError(f"read {received} messages up to offset {last}, expected {count}")
        return Run(received, seconds, received * self._value_size, cpu)

    def close(self) -> None:
        pass


class BareEndToEnd(_Publisher):
    """Workload 4's floor: publish at a fixed rate on a PublishAsync stream,
    read on a Subscribe stream, latency from a timestamp in the value."""

    def __init__(
        self, stub: api_pb2_grpc.APIStub, stream: str, value_size: int, rate: float
    ) -> None:
        super().__init__(stub, stream, b"", api_pb2.LEADER)
        self._value_size = value_size
        self._rate = rate

    def run(self, count: int) -> Run:
        publish_stream = _PublishStream(self._stub)
        call: StreamCall[api_pb2.Message] = self._stub.Subscribe(  # type: ignore[assignment]
            api_pb2.SubscribeRequest(
                stream=self._stream, partition=0, startPosition=api_pb2.NEW_ONLY
            )
        )
        next(call)  # the handshake: subscribed from here on
        latencies: list[float] = []
        all_in = threading.Event()

        def read_messages() -> None:
            try:
                for message in call:
                    latencies.append(latency_of(message.value))
                    if len(latencies) == count:
                        all_in.set()
                        return
            except grpc.RpcError:
                all_in.set()

        def drain_acks() -> None:
            try:
                for _ in publish_stream.responses:
                    pass
            except grpc.RpcError:
                pass

        threads = [
            threading.Thread(target=read_messages, name="bench-floor-sub", daemon=True),
            threading.Thread(target=drain_acks, name="bench-floor-acks", daemon=True),
        ]
        for thread in threads:
            thread.start()
        try:
            watch = Stopwatch()
            start = time.perf_counter()
            for i in range(count):
                wait_for(start + i / self._rate)
                publish_stream.send(self._request(stamped_value(self._value_size)))
            all_in.wait(_WAIT)
            seconds, cpu = watch.stop()
        finally:
            publish_stream.close()
            call.cancel()
            for thread in threads:
                thread.join(_WAIT)
        if len(latencies) != count:
            raise FloorError(f"received {len(latencies)} of {count} messages")
        return Run(count, seconds, count * self._value_size, cpu, tuple(latencies))

    def close(self) -> None:
        pass


class BareUnaryPublish(_Publisher):
    """A reference next to workload 1: the unary ``Publish`` RPC, one at a time."""

    def run(self, count: int) -> Run:
        publish, request = self._stub.Publish, self._request
        latencies = []
        clock = time.perf_counter
        watch = Stopwatch()
        for _ in range(count):
            sent = clock()
            _check(publish(request(), timeout=_WAIT))
            latencies.append(clock() - sent)
        seconds, cpu = watch.stop()
        return Run(count, seconds, count * len(self._value), cpu, tuple(latencies))

    def close(self) -> None:
        pass


def fill_partition(
    stub: api_pb2_grpc.APIStub, stream: str, value: bytes, count: int, *, ahead: int = 20_000
) -> None:
    """Appends ``count`` copies of ``value`` to partition 0 of ``stream``,
    fast: AckPolicy.NONE on one PublishAsync stream, never more than
    ``ahead`` messages beyond what the partition already stored.

    Raises:
        FloorError: the partition stopped growing for ``_WAIT`` seconds.
    """

    def stored() -> int:
        response = stub.FetchPartitionMetadata(
            api_pb2.FetchPartitionMetadataRequest(stream=stream, partition=0), timeout=_WAIT
        )
        return int(response.metadata.newestOffset) + 1

    base = stored()
    target = base + count
    publish_stream = _PublishStream(stub)
    try:
        sent, have, progress_at = base, base, time.monotonic()
        while have < target:
            while sent < target and sent - have < ahead:
                publish_stream.send(
                    api_pb2.PublishRequest(
                        stream=stream, value=value, ackPolicy=api_pb2.NONE, expectedOffset=-1
                    )
                )
                sent += 1
            time.sleep(0.05)  # a fill helper polling the server, not a stoppable loop
            now_have = stored()
            if now_have > have:
                have, progress_at = now_have, time.monotonic()
            elif time.monotonic() - progress_at > _WAIT:
                raise FloorError(f"{stream!r} stopped growing at {have} of {target} messages")
    finally:
        publish_stream.close()
    if have != target:
        raise FloorError(f"{stream!r} holds {have} messages, expected {target}")
