"""A measurement, not a feature: where the pynats2 ``NatsPublisher`` row's CPU goes.

Issue 29 wants each pipelined publish row of ``make bench`` at 0.8 of the
machine's bound (cores / client and server CPU per message). This drives,
against one ``LocalServer``, in turns (1,024 publishes in flight, done when
the last ack is in), with the CPU of each client thread and of the server:

- ``sdk``: ``NatsPublisher.publish_async`` as ``make bench`` drives it
  (:class:`bench.over_nats.NatsPipelined`: waits for the Future of the
  publish ``window`` back);
- ``callback``: the same publisher driven as that row was before: a
  semaphore for the window, released by each Future's done-callback;
- ``bare``: pynats2 alone, no SDK: one ``NATSClient`` publishing envelopes
  made beforehand (the same bytes) on the stream's subject, its ack inbox
  subscription's callback counting the acks and opening the window: what
  pynats2 itself costs, the floor for any publisher standing on it.

Run: ``python -m bench.pynats_probe [--count 20000] [--reps 3] [--size 100]
[--only sdk|callback|bare]``.
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from concurrent.futures import wait as wait_all
from typing import Any

import liftbridge
from bench import over_nats
from bench.future_probe import thread_cpu
from bench.stats import process_cpu_seconds
from liftbridge._core._envelope import EnvelopeType, encode_envelope
from liftbridge._publish import _pynats
from liftbridge._publish._bytes import ack_inbox_field, message_bytes
from liftbridge.testing import LocalServer

_WINDOW = 1024
_WAIT = 60.0


class BarePynats2:
    """pynats2 publishing ready-made envelopes, ``_WINDOW`` ahead of their acks."""

    def __init__(self, url: str, subject: str, value: bytes, count: int) -> None:
        pynats2 = _pynats.import_pynats2()
        self._inbox = f"_INBOX.pynats-probe-{os.getpid()}"
        self._client = pynats2.NATSClient(url, name="pynats-probe", socket_timeout=5.0)
        self._client.connect()
        self._client.subscribe(self._inbox, callback=self._on_ack)
        self._window = threading.Semaphore(_WINDOW)
        self._acked = 0
        self._all = threading.Event()
        self._target = 0
        self._lock = threading.Lock()
        inbox = ack_inbox_field(self._inbox)
        header = encode_envelope(EnvelopeType.MESSAGE, b"")
        self._subject = subject
        self._envelopes = [
            header
            + message_bytes(value, f"b-{i}", key=None, ack_inbox=inbox, ack_policy=0, offset=-1)
            for i in range(count)
        ]

    def _on_ack(self, _message: Any) -> None:
        with self._lock:
            self._acked += 1
            if self._acked == self._target:
                self._all.set()
        self._window.release()

    def run(self, count: int) -> tuple[float, float]:
        with self._lock:
            self._acked, self._target = 0, count
            self._all.clear()
        publish, subject, acquire = self._client.publish, self._subject, self._window.acquire
        wall, cpu = time.perf_counter(), time.process_time()
        for envelope in self._envelopes[:count]:
            acquire()
            publish(subject, payload=envelope)
        if not self._all.wait(_WAIT):
            raise RuntimeError("acks missing")
        return time.perf_counter() - wall, time.process_time() - cpu

    def close(self) -> None:
        self._client.close()


def _per_thread(before: dict[str, float], after: dict[str, float], count: int) -> str:
    used = {name: (after[name] - before.get(name, 0.0)) / count * 1e6 for name in after}
    shown = sorted(((us, name) for name, us in used.items() if us >= 0.5), reverse=True)
    return ", ".join(f"{name} {us:.0f}" for us, name in shown)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--only", choices=("sdk", "callback", "bare"))
    args = parser.parse_args()
    count, value = args.count, b"n" * args.size
    cores = os.cpu_count() or 1
    with LocalServer(log_level="warn") as server, liftbridge.Client(server.addresses) as client:
        assert server.pid is not None
        streams = {kind: f"pynats-probe-{kind}-{os.getpid()}" for kind in ("sdk", "bare")}
        for stream in streams.values():
            client.create_stream(stream)
        publisher = liftbridge.NatsPublisher(server.nats_url, ack_wait=_WAIT)
        bare = BarePynats2(server.nats_url, streams["bare"], value, count)
        pipelined = over_nats.NatsPipelined(publisher, streams["sdk"], value, _WINDOW)

        def run_sdk(n: int) -> tuple[float, float]:
            result = pipelined.run(n)
            return result.seconds, result.cpu_seconds

        def run_callback(n: int) -> tuple[float, float]:
            # bench.over_nats.NatsPipelined before: a semaphore for the window,
            # released by each Future's done-callback.
            window = threading.BoundedSemaphore(_WINDOW)

            def release(_: Any) -> None:
                window.release()

            publish_async, stream = publisher.publish_async, streams["sdk"]
            futures: list[Any] = []
            wall, cpu = time.perf_counter(), time.process_time()
            for _ in range(n):
                window.acquire()
                future = publish_async(stream, value)
                future.add_done_callback(release)
                futures.append(future)
            wait_all(futures, timeout=_WAIT)
            return time.perf_counter() - wall, time.process_time() - cpu

        drivers = {"sdk": run_sdk, "callback": run_callback, "bare": bare.run}
        if args.only:
            drivers = {args.only: drivers[args.only]}
        try:
            for run in drivers.values():
                run(count // 5)  # warm-up
            for rep in range(args.reps):
                order = list(drivers) if rep % 2 == 0 else list(reversed(drivers))
                for name in order:
                    threads, server_before = thread_cpu(), process_cpu_seconds(server.pid)
                    wall, cpu = drivers[name](count)
                    server_cpu = (process_cpu_seconds(server.pid) or 0.0) - (server_before or 0.0)
                    detail = _per_thread(threads, thread_cpu(), count)
                    c, s = cpu / count * 1e6, server_cpu / count * 1e6
                    rate = count / wall
                    share = rate / (cores / ((c + s) / 1e6))
                    print(
                        f"rep {rep + 1} {name:8} {rate:7,.0f} msgs/s client {c:4.0f} µs "
                        f"server {s:4.0f} µs share {share:.2f} ({detail})",
                        flush=True,
                    )
        finally:
            bare.close()
            publisher.close()


if __name__ == "__main__":
    main()
