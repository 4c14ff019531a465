"""The SDK side of each workload, through the public ``liftbridge`` API only.

Each driver mirrors one in :mod:`bench.floor`: same stream, same values,
same ack policy, same in-flight window.
"""

from __future__ import annotations

import time

import liftbridge
from bench.countdown import CountDown
from bench.e2e import Arrivals, stamped_value, wait_for
from bench.stats import Run, Stopwatch

_WAIT = 60.0
"""Seconds any single step may block before the run is declared stuck."""


class SdkError(RuntimeError):
    """A publish or subscription failed during an SDK run."""


class _SdkPublisher:
    """Shared state of the SDK publish drivers: client, stream, value, policy."""

    def __init__(
        self,
        client: liftbridge.Client,
        stream: str,
        value: bytes,
        ack_policy: liftbridge.AckPolicy,
    ) -> None:
        self._client = client
        self._stream = stream
        self._value = value
        self._ack_policy = ack_policy

    def close(self) -> None:
        pass


class SdkPublish(_SdkPublisher):
    """Workload 1: ``Client.publish``, one at a time."""

    def run(self, count: int) -> Run:
        publish, stream, value, policy = (
            self._client.publish,
            self._stream,
            self._value,
            self._ack_policy,
        )
        latencies = []
        clock = time.perf_counter
        watch = Stopwatch()
        for _ in range(count):
            sent = clock()
            publish(stream, value, ack_policy=policy)
            latencies.append(clock() - sent)
        seconds, cpu = watch.stop()
        return Run(count, seconds, count * len(value), cpu, tuple(latencies))


class SdkPipelined(_SdkPublisher):
    """Workload 2: ``Client.publish_async`` back to back; the client's
    ``max_inflight`` window paces it; done when the last ack is in."""

    def run(self, count: int) -> Run:
        """Publishes ``count`` messages and checks the partition grew by as many.

        The futures are dropped as they come, as a producer that relies on
        ``flush`` would: holding them all would time the garbage collector
        walking them rather than the SDK.
        """
        publish_async, stream, value, policy = (
            self._client.publish_async,
            self._stream,
            self._value,
            self._ack_policy,
        )
        before = self._stored()
        watch = Stopwatch()
        for _ in range(count):
            publish_async(stream, value, ack_policy=policy)
        if not self._client.flush(_WAIT):
            raise SdkError(f"acks still missing after {_WAIT:g}s")
        seconds, cpu = watch.stop()
        stored = self._stored() - before
        if stored != count:
            raise SdkError(f"{count} publishes stored {stored} messages")
        return Run(count, seconds, count * len(value), cpu)

    def _stored(self) -> int:
        return self._client.fetch_partition_metadata(self._stream).newest_offset + 1


class SdkHandled(SdkPipelined):
    """Workload 2 with an ack handler and no Future per publish
    (``publish_async(..., handler, future=False)``), the Go client's way."""

    def run(self, count: int) -> Run:
        """Publishes ``count`` messages; done when the handler has heard every
        outcome; checks none failed and the partition grew by as many.

        The handler counts outcomes down and wakes this thread once, at the
        last, as the Go driver's handler counts down a ``sync.WaitGroup``. A
        ``threading.Semaphore`` released per ack and acquired per message
        here (until 2026-11-27) cost about 2 µs a message of the row's
        client CPU (its Condition's lock on two threads), which the Future
        row, waiting once in ``flush``, did not pay: the row measured the
        Semaphore as much as the SDK (bench/README_PERFORMANCE.md, "The
        handler row's own waiting")."""
        publish_async, stream, value, policy = (
            self._client.publish_async,
            self._stream,
            self._value,
            self._ack_policy,
        )
        outcomes = CountDown(count)
        on_ack = outcomes.on_ack
        before = self._stored()
        watch = Stopwatch()
        for _ in range(count):
            publish_async(stream, value, on_ack, ack_policy=policy, future=False)
        if not outcomes.wait(_WAIT):
            raise SdkError(f"{outcomes.left} ack handler calls still missing after {_WAIT:g}s")
        seconds, cpu = watch.stop()
        if outcomes.failures:
            failures = outcomes.failures
            raise SdkError(f"{len(failures)} publishes failed, the first: {failures[0]!r}")
        stored = self._stored() - before
        if stored != count:
            raise SdkError(f"{count} publishes stored {stored} messages")
        return Run(count, seconds, count * len(value), cpu)


BATCH = 100
"""Messages per ``publish_many_async`` call in the batch rows."""


class SdkBatched(SdkPipelined):
    """Workload 2 in batches: ``publish_many_async`` of :data:`BATCH` values
    at a time, one Future per batch, on ``Client`` or (``publisher``) on a
    ``NatsStreamPublisher``; done when every batch's Future is resolved."""

    def __init__(
        self,
        client: liftbridge.Client,
        stream: str,
        value: bytes,
        ack_policy: liftbridge.AckPolicy,
        publisher: liftbridge.NatsStreamPublisher | None = None,
    ) -> None:
        super().__init__(client, stream, value, ack_policy)
        self._publisher = publisher

    def run(self, count: int) -> Run:
        """Publishes ``count`` messages (whole batches, the last one shorter);
        checks none failed and the partition grew by as many."""
        target = self._client if self._publisher is None else self._publisher
        publish_many_async, stream, policy = (
            target.publish_many_async,
            self._stream,
            self._ack_policy,
        )
        values = [self._value] * BATCH
        before = self._stored()
        watch = Stopwatch()
        futures = [
            publish_many_async(stream, values[: min(BATCH, count - start)], ack_policy=policy)
            for start in range(0, count, BATCH)
        ]
        for future in futures:
            future.result(timeout=_WAIT)
        seconds, cpu = watch.stop()
        stored = self._stored() - before
        if stored != count:
            raise SdkError(f"{count} publishes stored {stored} messages")
        return Run(count, seconds, count * len(self._value), cpu)


class SdkSubscribe:
    """Workload 3: ``Client.subscribe`` from the earliest offset to
    ``last_offset``, with a handler that reads each message's offset."""

    def __init__(
        self, client: liftbridge.Client, stream: str, last_offset: int, value_size: int
    ) -> None:
        self._client = client
        self._stream = stream
        self._last_offset = last_offset
        self._value_size = value_size

    def run(self, count: int) -> Run:
        """Reads the whole partition; ``count`` is how many messages it holds."""
        received = 0
        last = -1

        def handler(message: liftbridge.Message | None, error: BaseException | None) -> None:
            nonlocal received, last
            if message is not None:
                received += 1
                last = message.offset

        watch = Stopwatch()
        subscription = self._client.subscribe(
            self._stream,
            handler,
            start=liftbridge.StartPosition.EARLIEST,
            stop=self._last_offset,
        )
        finished = subscription.wait(_WAIT * 10)
        seconds, cpu = watch.stop()
        subscription.close()
        if not finished or subscription.error is not None:
            raise SdkError(f"subscription did not end cleanly: {subscription.error!r}")
        if received != count or last != self._last_offset:
            raise SdkError(f"read {received} messages up to offset {last}, expected {count}")
        return Run(received, seconds, received * self._value_size, cpu)

    def close(self) -> None:
        pass


class SdkIterate:
    """Workload 3, iterated: ``Client.subscribe`` without a handler from the
    earliest offset to ``last_offset``, reading each message's offset in a
    ``for`` loop on the calling thread."""

    def __init__(
        self, client: liftbridge.Client, stream: str, last_offset: int, value_size: int
    ) -> None:
        self._client = client
        self._stream = stream
        self._last_offset = last_offset
        self._value_size = value_size

    def run(self, count: int) -> Run:
        """Reads the whole partition; ``count`` is how many messages it holds."""
        received = 0
        last = -1
        watch = Stopwatch()
        with self._client.subscribe(
            self._stream, start=liftbridge.StartPosition.EARLIEST, stop=self._last_offset
        ) as subscription:
            for message in subscription:
                received += 1
                last = message.offset
        seconds, cpu = watch.stop()
        if received != count or last != self._last_offset:
            raise SdkError(f"read {received} messages up to offset {last}, expected {count}")
        return Run(received, seconds, received * self._value_size, cpu)

    def close(self) -> None:
        pass


class SdkEndToEnd:
    """Workload 4: ``publish_async`` at a fixed rate, ``subscribe`` handler
    at the other end; latency from a timestamp in the value."""

    def __init__(
        self, client: liftbridge.Client, stream: str, value_size: int, rate: float
    ) -> None:
        self._client = client
        self._stream = stream
        self._value_size = value_size
        self._rate = rate

    def run(self, count: int) -> Run:
        arrivals = Arrivals(count)
        subscription = self._client.subscribe(self._stream, arrivals)  # new messages only
        try:
            watch = Stopwatch()
            start = time.perf_counter()
            for i in range(count):
                wait_for(start + i / self._rate)
                self._client.publish_async(self._stream, stamped_value(self._value_size))
            arrivals.all_in.wait(_WAIT)
            seconds, cpu = watch.stop()
        finally:
            subscription.close()
        latencies = arrivals.latencies
        if len(latencies) != count:
            raise SdkError(
                f"received {len(latencies)} of {count} messages ({subscription.error!r})"
            )
        return Run(count, seconds, count * self._value_size, cpu, tuple(latencies))

    def close(self) -> None:
        pass


class SdkPullFetch:
    """Workload 7: ``Client.pull`` from the earliest offset to ``last_offset``,
    taking messages with ``fetch(batch)`` and reading each message's offset."""

    def __init__(
        self,
        client: liftbridge.Client,
        stream: str,
        last_offset: int,
        value_size: int,
        batch: int = 500,
    ) -> None:
        self._client = client
        self._stream = stream
        self._last_offset = last_offset
        self._value_size = value_size
        self._batch = batch

    def run(self, count: int) -> Run:
        """Reads the whole partition; ``count`` is how many messages it holds."""
        received = 0
        last = -1
        watch = Stopwatch()
        with self._client.pull(
            self._stream,
            start=liftbridge.StartPosition.EARLIEST,
            stop=self._last_offset,
            max_buffered_messages=2 * self._batch,
        ) as consumer:
            fetch, batch = consumer.fetch, self._batch
            while received < count:
                messages = fetch(batch, timeout=_WAIT)
                if not messages:
                    break
                for message in messages:
                    last = message.offset
                received += len(messages)
        seconds, cpu = watch.stop()
        if received != count or last != self._last_offset:
            raise SdkError(f"pulled {received} messages up to offset {last}, expected {count}")
        return Run(received, seconds, received * self._value_size, cpu)

    def close(self) -> None:
        pass


class SdkGet:
    """Workload 8: ``Client.get`` of one offset after another (cycling through
    ``offsets``), from the leader or from a random in-sync replica."""

    def __init__(
        self, client: liftbridge.Client, stream: str, offsets: int, *, read_replica: bool
    ) -> None:
        self._client = client
        self._stream = stream
        self._offsets = offsets
        self._read_replica = read_replica
        self._next = 0

    def run(self, count: int) -> Run:
        get, stream, replica = self._client.get, self._stream, self._read_replica
        latencies = []
        clock = time.perf_counter
        size = 0
        watch = Stopwatch()
        for _ in range(count):
            offset = self._next
            self._next = (offset + 1) % self._offsets
            sent = clock()
            message = get(stream, offset, read_replica=replica)
            latencies.append(clock() - sent)
            if message.offset != offset:
                raise SdkError(f"get({offset}) returned offset {message.offset}")
            size += len(message.value)
        seconds, cpu = watch.stop()
        return Run(count, seconds, size, cpu, tuple(latencies))

    def close(self) -> None:
        pass
