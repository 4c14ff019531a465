"""A measurement, not a feature: what the NATS path's transport costs.

Issue 16 wants pipelined publishing through NATS at Go's PublishAsync pace.
This drives, against one ``LocalServer``, in turns (100-byte values, 1,024
publishes in flight, done when the last ack is in):

- ``sdk``: ``NatsStreamPublisher.publish_async`` (the SDK's NATS socket on its I/O
  thread), as in ``make bench``, with the CPU of each of its threads;
- ``hnd``: the same with an ack handler and ``future=False`` (no Future per publish);
- ``raw``: one thread on a plain socket, no NATS client: ``PUB`` frames written
  256 at a time, acks read and decoded with the SDK's ``unmarshal_ack``, and
  nothing else (no futures, window object, timeouts, TLS or reconnects): the
  bound a transport of the SDK's own could approach;
- ``go``: go-liftbridge's PublishAsync (bench/go), over gRPC.

Run: ``python -m bench.nats_probe [--count 20000] [--reps 3]``; prints each
repetition's msgs/s and client CPU per message.
"""

from __future__ import annotations

import argparse
import os
import select
import socket
import threading
import time
from collections.abc import Callable

import liftbridge
from bench import gocli, over_nats
from liftbridge._core._envelope import EnvelopeType, encode_envelope, unmarshal_ack
from liftbridge._publish._bytes import ack_inbox_field, message_bytes
from liftbridge.testing import LocalServer

_VALUE = b"n" * 100
_WINDOW = 1024
_BATCH = 256
_WAIT = 60.0
_HEADER = encode_envelope(EnvelopeType.MESSAGE, b"")


class RawPublisher:
    """Pipelined publishes on one plain NATS connection, acks on one inbox."""

    def __init__(self, url: str) -> None:
        host, port = url.split("//", 1)[1].rsplit(":", 1)
        self._sock = socket.create_connection((host, int(port)), timeout=_WAIT)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._inbox = "_INBOX.nats-probe"
        self._buffer = b""
        self._next_id = 0
        self._read_line()  # INFO
        self._sock.sendall(
            b'CONNECT {"verbose":false,"pedantic":false,"name":"nats-probe"}\r\n'
            b"SUB " + self._inbox.encode() + b" 1\r\nPING\r\n"
        )
        while self._read_line() != b"PONG":
            pass

    def run(self, subject: str, count: int) -> tuple[float, float]:
        """Publishes ``count`` messages; returns wall and CPU seconds."""
        inbox, name = ack_inbox_field(self._inbox), subject.encode()
        sent = acked = 0
        wall, cpu = time.perf_counter(), time.process_time()
        while acked < count:
            frames: list[bytes] = []
            while sent < count and sent - acked < _WINDOW and len(frames) < _BATCH:
                self._next_id += 1
                envelope = _HEADER + message_bytes(
                    _VALUE, f"p-{self._next_id}", key=None, ack_inbox=inbox, ack_policy=0, offset=-1
                )
                frames.append(b"PUB %s %d\r\n%s\r\n" % (name, len(envelope), envelope))
                sent += 1
            if frames:
                self._sock.sendall(b"".join(frames))
            can_send = sent < count and sent - acked < _WINDOW
            if select.select([self._sock], [], [], 0 if can_send else _WAIT)[0]:
                acked += self._read_acks()
            elif not can_send:
                raise RuntimeError(f"no ack within {_WAIT:g}s")
        return time.perf_counter() - wall, time.process_time() - cpu

    def close(self) -> None:
        self._sock.close()

    def _read_acks(self) -> int:
        chunk = self._sock.recv(1 << 20)
        if not chunk:
            raise RuntimeError("the NATS server closed the connection")
        data, acks = self._buffer + chunk, 0
        while (end := data.find(b"\r\n")) >= 0:
            line = data[:end]
            if line.startswith(b"MSG "):
                size = int(line.rsplit(b" ", 1)[1])
                if len(data) < end + size + 4:
                    break
                unmarshal_ack(data[end + 2 : end + 2 + size])
                acks += 1
                data = data[end + size + 4 :]
                continue
            if line == b"PING":
                self._sock.sendall(b"PONG\r\n")
            data = data[end + 2 :]
        self._buffer = data
        return acks

    def _read_line(self) -> bytes:
        while b"\r\n" not in self._buffer:
            self._buffer += self._sock.recv(4096)
        line, self._buffer = self._buffer.split(b"\r\n", 1)
        return line


def _thread_cpu() -> dict[str, float]:
    """CPU seconds of each of this process's threads, by thread name."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    tick = os.sysconf("SC_CLK_TCK")
    seconds: dict[str, float] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        name = names.get(int(tid), "other")
        seconds[name] = seconds.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return seconds


def _per_thread(before: dict[str, float], after: dict[str, float], count: int) -> str:
    spent = {name: t - before.get(name, 0.0) for name, t in after.items()}
    busy = sorted((t, name) for name, t in spent.items() if t > 0)
    return ", ".join(f"{name} {t / count * 1e6:.1f}" for t, name in reversed(busy))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    count = args.count
    go_binary = gocli.build()
    print(f"Go driver: {go_binary}")
    with LocalServer(log_level="warn") as server, liftbridge.Client(server.addresses) as client:
        streams = {}
        for kind in ("sdk", "hnd", "raw", "go"):
            streams[kind] = f"nats-probe-{kind}-{os.getpid()}"
            client.create_stream(streams[kind])
        sdk = liftbridge.NatsStreamPublisher(client, server.nats_url, ack_wait=_WAIT)
        raw = RawPublisher(server.nats_url)
        go = gocli.GoDriver(server.address, "publish_async", streams["go"], len(_VALUE))
        pipelined = over_nats.StreamPipelined(sdk, client, streams["sdk"], _VALUE)
        handled = over_nats.StreamHandled(sdk, client, streams["hnd"], _VALUE)

        def run_driver(driver: over_nats.StreamPipelined, n: int) -> str:
            threads = _thread_cpu()
            result = driver.run(n)
            detail = _per_thread(threads, _thread_cpu(), n)
            cpu = result.cpu_seconds / n * 1e6
            return f"{n / result.seconds:9,.0f} msgs/s {cpu:5.1f} µs ({detail})"

        def run_sdk(n: int) -> str:
            return run_driver(pipelined, n)

        def run_handled(n: int) -> str:
            return run_driver(handled, n)

        def run_raw(n: int) -> str:
            wall, cpu = raw.run(streams["raw"], n)
            return f"{n / wall:9,.0f} msgs/s {cpu / n * 1e6:5.1f} µs"

        def run_go(n: int) -> str:
            result = go.run(n)
            return f"{n / result.seconds:9,.0f} msgs/s {result.cpu_seconds / n * 1e6:5.1f} µs"

        drivers: dict[str, Callable[[int], str]] = {
            "sdk": run_sdk,
            "hnd": run_handled,
            "raw": run_raw,
            "go": run_go,
        }
        try:
            for run in drivers.values():
                run(count // 5)  # warm-up
            for rep in range(args.reps):
                order = list(drivers) if rep % 2 == 0 else list(reversed(drivers))
                load = os.getloadavg()[0]
                for name in order:
                    print(f"rep {rep + 1} {name:3} {drivers[name](count)}  load {load:.1f}")
        finally:
            go.close()
            raw.close()
            sdk.close()


if __name__ == "__main__":
    main()
