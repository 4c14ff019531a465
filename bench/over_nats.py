"""Workload 5: envelopes published straight to NATS, acks coming back on the
publisher's inbox (needs the ``nats`` extra).

:class:`StreamPublish`, :class:`StreamPipelined` and :class:`StreamHandled`
drive the batched path, ``liftbridge.NatsStreamPublisher`` (the SDK's NATS
socket on one I/O thread);
:class:`NatsPublish` and :class:`NatsPipelined` the older per-subject
``liftbridge.NatsPublisher`` (pynats2), kept as a reference.
"""

from __future__ import annotations

import time
from concurrent.futures import Future

import liftbridge
from bench.countdown import CountDown
from bench.stats import Run, Stopwatch

_WAIT = 60.0


class NatsBenchError(RuntimeError):
    """A publish over NATS failed during a run."""


class NatsPublish:
    """``NatsPublisher.publish``, one at a time, each waiting for its ack."""

    def __init__(self, publisher: liftbridge.NatsPublisher, subject: str, value: bytes) -> None:
        self._publisher = publisher
        self._subject = subject
        self._value = value

    def run(self, count: int) -> Run:
        publish, subject, value = self._publisher.publish, self._subject, self._value
        latencies = []
        clock = time.perf_counter
        watch = Stopwatch()
        for _ in range(count):
            sent = clock()
            publish(subject, value)
            latencies.append(clock() - sent)
        seconds, cpu = watch.stop()
        return Run(count, seconds, count * len(value), cpu, tuple(latencies))

    def close(self) -> None:
        pass


class NatsPipelined:
    """``NatsPublisher.publish_async`` kept ``window`` publishes ahead of
    their acks (the publisher has no window of its own, so the bench adds
    one): before its next publish, the loop waits for the Future of the
    publish ``window`` back, as a user with a list of Futures would. Acks of
    one partition come in order, so at most ``window`` are in flight.

    No done-callback per Future: a callback releasing a semaphore, as this
    driver used before, made every Future a full ``Future`` and woke the
    callbacks thread and the publishing thread once a message, which
    doubled the client's CPU a message over what the publisher costs
    (``python -m bench.pynats_probe``); the SDK's own NATS rows pay no such
    cost either (their publisher's window paces them)."""

    def __init__(
        self, publisher: liftbridge.NatsPublisher, subject: str, value: bytes, window: int
    ) -> None:
        self._publisher = publisher
        self._subject = subject
        self._value = value
        self._window = window

    def run(self, count: int) -> Run:
        publish_async, subject, value = self._publisher.publish_async, self._subject, self._value
        window = self._window
        futures: list[Future[liftbridge.Ack | None]] = []
        watch = Stopwatch()
        try:
            for i in range(count):
                if i >= window:
                    futures[i - window].exception(_WAIT)  # waits only if not done yet
                futures.append(publish_async(subject, value))
            for future in futures[-window:]:
                future.exception(_WAIT)
        except TimeoutError:
            raise NatsBenchError(f"no ack over NATS within {_WAIT:g}s") from None
        seconds, cpu = watch.stop()
        failed = [f.exception() for f in futures if f.exception() is not None]
        if failed:
            raise NatsBenchError(f"{len(failed)} publish(es) failed, first: {failed[0]!r}")
        return Run(count, seconds, count * len(value), cpu)

    def close(self) -> None:
        pass


class StreamPublish:
    """``NatsStreamPublisher.publish``, one at a time, each waiting for its ack."""

    def __init__(
        self, publisher: liftbridge.NatsStreamPublisher, stream: str, value: bytes
    ) -> None:
        self._publisher = publisher
        self._stream = stream
        self._value = value

    def run(self, count: int) -> Run:
        publish, stream, value = self._publisher.publish, self._stream, self._value
        latencies = []
        clock = time.perf_counter
        watch = Stopwatch()
        for _ in range(count):
            sent = clock()
            publish(stream, value)
            latencies.append(clock() - sent)
        seconds, cpu = watch.stop()
        return Run(count, seconds, count * len(value), cpu, tuple(latencies))

    def close(self) -> None:
        pass


class StreamPipelined:
    """``NatsStreamPublisher.publish_async`` back to back, paced by the
    publisher's own ``max_inflight`` window; done when the last ack is in.
    The futures are dropped as they come, as :class:`bench.sdk.SdkPipelined` does."""

    def __init__(
        self,
        publisher: liftbridge.NatsStreamPublisher,
        client: liftbridge.Client,
        stream: str,
        value: bytes,
    ) -> None:
        self._publisher = publisher
        self._client = client
        self._stream = stream
        self._value = value

    def run(self, count: int) -> Run:
        publish_async, stream, value = self._publisher.publish_async, self._stream, self._value
        before = self._stored()
        watch = Stopwatch()
        for _ in range(count):
            publish_async(stream, value)
        if not self._publisher.flush(_WAIT):
            raise NatsBenchError(f"acks over NATS still missing after {_WAIT:g}s")
        seconds, cpu = watch.stop()
        stored = self._stored() - before
        if stored != count:
            raise NatsBenchError(f"{count} publishes over NATS stored {stored} messages")
        return Run(count, seconds, count * len(value), cpu)

    def _stored(self) -> int:
        return self._client.fetch_partition_metadata(self._stream).newest_offset + 1

    def close(self) -> None:
        pass


class StreamHandled(StreamPipelined):
    """``NatsStreamPublisher.publish_async(..., handler, future=False)`` back to
    back: no Future, each outcome to an ack handler on ``liftbridge-callbacks``
    that counts outcomes down and keeps the failures, as the Go driver's
    PublishAsync handler does; done when the handler has heard the last
    outcome (not at ``flush``, which returns once outcomes are settled, before
    their handlers have all run)."""

    def run(self, count: int) -> Run:
        outcomes = CountDown(count)
        handler = outcomes.on_ack
        publish_async, stream, value = self._publisher.publish_async, self._stream, self._value
        before = self._stored()
        watch = Stopwatch()
        for _ in range(count):
            publish_async(stream, value, handler, future=False)
        if not outcomes.wait(_WAIT):
            raise NatsBenchError(f"{outcomes.left} ack handler calls over NATS missing")
        seconds, cpu = watch.stop()
        if outcomes.failures:
            failures = outcomes.failures
            raise NatsBenchError(f"{len(failures)} publish(es) failed, first: {failures[0]!r}")
        stored = self._stored() - before
        if stored != count:
            raise NatsBenchError(f"{count} publishes over NATS stored {stored} messages")
        return Run(count, seconds, count * len(value), cpu)
