"""Peak memory of a process that publishes many messages with ``publish_async``
(``Client.publish_async`` over gRPC, or with ``--nats URL``
``NatsStreamPublisher.publish_async`` over NATS).

Run by the suite in a fresh interpreter (``python -m bench.rss ...``) so the
peak belongs to this workload alone; prints one JSON object on stdout. The
futures are dropped as they are made, as a long-running producer would: what
remains in memory is what the SDK itself holds, which the in-flight window
bounds.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import liftbridge

_ROOT = Path(__file__).resolve().parent.parent


def _ru_maxrss_mb() -> float:
    # Linux reports ru_maxrss in KiB (macOS in bytes; this suite targets Linux).
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _status_mb(field: str) -> float | None:
    """A memory figure of /proc/self/status (Linux), e.g. VmHWM, in MB."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    return None


def _peak_rss_mb() -> float:
    """This process's peak RSS since it started.

    Linux carries ru_maxrss across exec: a process spawned by a big parent
    starts with the parent's peak. VmHWM belongs to the new program alone,
    so it is preferred where it exists.
    """
    peak = _status_mb("VmHWM")
    return _ru_maxrss_mb() if peak is None else peak


def publish_many(
    address: str, stream: str, messages: int, size: int, window: int, nats: str | None = None
) -> dict[str, float]:
    """Publishes ``messages`` values of ``size`` bytes to a fresh stream and
    returns the peak RSS before and after, in MB; over NATS when ``nats`` is
    a NATS URL."""
    value = b"r" * size
    with liftbridge.Client(address, max_inflight=window, ack_wait=60.0) as client:
        client.create_stream(stream)
        with contextlib.ExitStack() as stack:
            publisher: Any = client
            if nats is not None:
                publisher = stack.enter_context(
                    liftbridge.NatsStreamPublisher(client, nats, max_inflight=window, ack_wait=60.0)
                )
            before = _peak_rss_mb()
            publish_async = publisher.publish_async
            start = time.perf_counter()
            for _ in range(messages):
                publish_async(stream, value)
            if not publisher.flush(120.0):
                raise RuntimeError("acks still missing 120s after the last publish")
            seconds = time.perf_counter() - start
        stored = client.fetch_partition_metadata(stream).newest_offset + 1
        client.delete_stream(stream)
    if stored != messages:
        raise RuntimeError(f"the stream holds {stored} messages, expected {messages}")
    return {
        "messages": messages,
        "value_size": size,
        "window": window,
        "seconds": seconds,
        "msgs_per_s": messages / seconds,
        "peak_rss_mb_before": before,
        "peak_rss_mb": _peak_rss_mb(),
        "ru_maxrss_mb": _ru_maxrss_mb(),
    }


def measure(
    address: str,
    stream: str,
    messages: int,
    size: int,
    window: int,
    timeout: float,
    nats: str | None = None,
) -> dict[str, float]:
    """Runs :func:`publish_many` in a fresh interpreter and returns its figures.

    Raises:
        RuntimeError: the subprocess failed or printed no figures.
    """
    command = [
        sys.executable,
        "-m",
        "bench.rss",
        address,
        stream,
        f"--messages={messages}",
        f"--size={size}",
        f"--window={window}",
        *([f"--nats={nats}"] if nats else []),
    ]
    done = subprocess.run(
        command, cwd=_ROOT, capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"bench.rss failed ({done.returncode}):\n{done.stderr[-4000:]}")
    figures: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.rss", description=__doc__)
    parser.add_argument("address", help="a broker's host:port")
    parser.add_argument("stream", help="a stream name that does not exist yet")
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--window", type=int, default=1024, help="the client's max_inflight")
    parser.add_argument("--nats", help="publish with NatsStreamPublisher through this NATS URL")
    args = parser.parse_args(argv)
    figures = publish_many(
        args.address, args.stream, args.messages, args.size, args.window, args.nats
    )
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
