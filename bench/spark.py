"""Spark figures next to the plain SDK: ``python -m bench.spark`` (``make bench`` runs it
after the main suite when the spark extra and Java are there; ``BENCH_NO_SPARK=1`` skips it).

Measured on one ``LocalServer`` and a ``local[2]`` SparkSession, after a warm-up
query on three partitions (Spark's first Python data-source query on each of its
two task slots pays for starting that slot's Python worker):

- the plain SDK: one partition read with ``subscribe`` (iterating, start and
  stop offsets), the rate a Spark read is compared with;
- Spark batch reads of one and of three partitions (``value`` summed, so every
  row crosses into the JVM), ``--rows`` per partition (200,000 by default, so
  a query's fixed cost of 0.1-0.3 s weighs little), rows/s from the action's
  wall time, and again without that fixed cost (the rate of the rows beyond a
  short read's);
- a Spark batch write of 60,000 rows (``publish_async`` per row, every row
  acked), rows/s, at least once (the default) and with ``exactlyOnce`` (each
  task reads back its partitions' new messages, then publishes with
  ``expected_offset`` into a stream with optimistic concurrency control);
- the machine's own ceiling for reading partitions in parallel: the official Go
  client reading one partition, then three at once (one process each);
- per-micro-batch latency of a streaming read of 60,000 rows (``availableNow``,
  ``maxOffsetsPerTrigger`` 1,000, ``noop`` sink): median ``triggerExecution`` time.

Each figure is the median of a few repetitions; the JSON file keeps them all.
The SDK read and the Spark reads are timed in turn within each repetition (each
DataFrame planned once, before the timing), so the ratios compare reads that
shared the machine's load alike.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import liftbridge
from bench import gocli, machine, report
from bench.cli import RESULTS, _find_servers
from liftbridge.testing import LocalServer

ROOT = Path(__file__).resolve().parent.parent
SMALL = 1_000
"""Rows per partition of the short reads that measure a query's fixed cost."""
WRITTEN = 60_000
"""Rows per timed batch write (at most ``--rows``)."""


def _median_rate(rows: int, reps: int, action: Callable[[], object]) -> tuple[float, list[float]]:
    rates = []
    for _ in range(reps):
        started = time.perf_counter()
        action()
        rates.append(rows / (time.perf_counter() - started))
    return statistics.median(rates), rates


def _timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def _fill(client: liftbridge.Client, stream: str, partitions: int, per_partition: int) -> None:
    """Stores ``per_partition`` 100-byte messages in each partition: published
    unacked (``AckPolicy.NONE``, resolved once sent) a window at a time, then
    waited for until the partition's newest offset shows them all."""
    value = b"v" * 100
    window = 20_000
    for partition in range(partitions):
        sent = 0
        while sent < per_partition:
            burst = min(window, per_partition - sent)
            futures = [
                client.publish_async(
                    stream, value, partition=partition, ack_policy=liftbridge.AckPolicy.NONE
                )
                for _ in range(burst)
            ]
            for future in futures:
                future.result(timeout=120)
            sent += burst
            _await_stored(client, stream, partition, sent)


def _await_stored(client: liftbridge.Client, stream: str, partition: int, count: int) -> None:
    deadline = time.monotonic() + 120
    while client.fetch_partition_metadata(stream, partition).newest_offset + 1 < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{stream}/{partition} did not store {count:,} messages in 120s")
        time.sleep(0.05)  # polling the server while it writes what was sent


def _go_readers(address: str, stream: str, count: int) -> list[gocli.GoDriver] | None:
    """One Go reader (go-liftbridge's Subscribe) per partition of the 3-partition
    stream, or None without Go (the reason printed)."""
    try:
        gocli.build()
    except (gocli.GoDriverError, OSError, subprocess.SubprocessError) as e:
        print(f"bench.spark: no Go readers ({e})", file=sys.stderr)
        return None
    return [
        gocli.GoDriver(address, "subscribe", stream, 100, last_offset=count - 1, partition=p)
        for p in range(3)
    ]


def _concurrently(drivers: list[gocli.GoDriver], count: int) -> None:
    """Every driver reads its whole partition, all at once."""
    failures: list[BaseException] = []

    def read(driver: gocli.GoDriver) -> None:
        try:
            driver.run(count)
        except BaseException as e:  # handed to the timing thread below
            failures.append(e)

    threads = [threading.Thread(target=read, args=(d,), name="bench-go-reader") for d in drivers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]


def _sdk_read(client: liftbridge.Client, stream: str, count: int) -> None:
    seen = 0
    with client.subscribe(stream, partition=0, start=0, stop=count - 1) as subscription:
        for _ in subscription:
            seen += 1
    assert seen == count, f"read {seen} of {count}"


def run(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.spark", description=__doc__)
    parser.add_argument("--rows", type=int, default=200_000, help="messages per partition")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if os.environ.get("BENCH_NO_SPARK", "").strip().lower() in {"1", "true", "yes", "on"}:
        print("bench.spark: skipped (BENCH_NO_SPARK)", file=sys.stderr)
        return 0
    try:
        from pyspark.sql import SparkSession
        from pyspark.sql import functions as F
    except ImportError:
        print("bench.spark: skipped (no pyspark; install the spark extra)", file=sys.stderr)
        return 0
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        print("bench.spark: skipped (Spark needs Java 17+)", file=sys.stderr)
        return 0
    _find_servers()
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p
    )
    os.environ["PYSPARK_PYTHON"] = sys.executable
    n, reps = args.rows, args.reps
    figures: dict[str, dict[str, object]] = {}

    def record(name: str, unit: str, median: float, values: list[float]) -> None:
        figures[name] = {"unit": unit, "median": median, "values": values}
        print(f"   {name}: {median:,.0f} {unit}", file=sys.stderr, flush=True)

    started = datetime.datetime.now(datetime.UTC)
    # The session first: PySpark starts its JVM with fork(), which can crash
    # inside gRPC's fork handling while the client's calls are running.
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    with LocalServer(log_level="warn") as server, liftbridge.Client(server.address) as client:
        stream = f"bench-spark-{uuid.uuid4().hex[:6]}"
        client.create_stream(stream, partitions=3)
        print(f"bench.spark: publishing {3 * n:,} messages", file=sys.stderr, flush=True)
        _fill(client, stream, 3, n)
        _sdk_read(client, stream, min(n, 10_000))  # warm-up

        try:

            def read(partitions: int, end: int, **options: str) -> Callable[[], object]:
                ending = {stream: {str(p): end for p in range(partitions)}}
                reader = (
                    spark.read.format("liftbridge")
                    .option("servers", server.address)
                    .option("assign", json.dumps({stream: list(range(partitions))}))
                    .option("endingOffsets", json.dumps(ending))
                )
                for name, value in options.items():
                    reader = reader.option(name, value)
                df = reader.load()
                return lambda: df.select(F.sum(F.length("value"))).collect()

            # Three tasks, so both of local[2]'s slots start their Python worker
            # (a worker first met by a timed query added ~0.6 s to it).
            read(3, SMALL)()
            configs = [(1, {}), (3, {}), (3, {"minPartitions": "6"})]
            # Each DataFrame is planned by its first action, before the timing.
            actions = [(read(p, SMALL, **o), read(p, n, **o)) for p, o in configs]
            for small, full in actions:
                small()
                full()
            # Every repetition times the SDK and each Spark read in turn, so load
            # from other processes on the machine weighs on all of them alike.
            sdk_times: list[float] = []
            times: list[tuple[list[float], list[float]]] = [([], []) for _ in configs]
            go = _go_readers(server.address, stream, n)
            go_times: tuple[list[float], list[float]] = ([], [])
            try:
                for _ in range(reps):
                    sdk_times.append(_timed(lambda: _sdk_read(client, stream, n)))
                    for (small, full), (small_times, full_times) in zip(
                        actions, times, strict=True
                    ):
                        small_times.append(_timed(small))
                        full_times.append(_timed(full))
                    if go is not None:
                        go_times[0].append(_timed(functools.partial(go[0].run, n)))
                        go_times[1].append(_timed(functools.partial(_concurrently, go, n)))
            finally:
                for driver in go or ():
                    driver.close()
            if go is not None:
                for label, rows, seconds in (
                    ("Go subscribe, 1 partition", n, go_times[0]),
                    ("Go subscribe, 3 partitions at once", 3 * n, go_times[1]),
                ):
                    rates = [rows / t for t in seconds]
                    record(label, "msgs/s", rows / statistics.median(seconds), rates)
            record(
                "plain SDK subscribe, 1 partition",
                "msgs/s",
                n / statistics.median(sdk_times),
                [n / t for t in sdk_times],
            )
            for (partitions, options), (small_s, full_s) in zip(configs, times, strict=True):
                label = f"Spark batch read, {partitions} partition{'s' if partitions > 1 else ''}"
                if options:
                    label += ", " + ", ".join(f"{k}={v}" for k, v in options.items())
                rows = partitions * n
                record(
                    label, "rows/s", rows / statistics.median(full_s), [rows / t for t in full_s]
                )
                # Without the fixed cost of a query (scheduling, the Python
                # worker's round trip): the rate of the rows beyond the first SMALL.
                extra = partitions * (n - SMALL)
                marginal = extra / (statistics.median(full_s) - statistics.median(small_s))
                record(label + " (beyond a query's fixed cost)", "rows/s", marginal, [])
                fixed = statistics.median(small_s) * 1000
                record(label + ": fixed cost of a query", "ms", fixed, [])

            sink = f"{stream}-out"
            client.create_stream(sink, partitions=3)
            written = min(n, WRITTEN)
            rows = spark.range(written).select(
                F.col("id").cast("string").alias("key"), F.lit("v" * 100).alias("value")
            )
            rows = rows.repartition(2).cache()
            rows.count()

            def write() -> None:
                rows.write.format("liftbridge").option("servers", server.address).option(
                    "stream", sink
                ).mode("append").save()

            median, values = _median_rate(written, reps, write)
            record("Spark batch write (2 tasks)", "rows/s", median, values)

            exact_sink = f"{stream}-exactly-once"
            client.create_stream(exact_sink, partitions=3, optimistic_concurrency_control=True)

            def write_exactly_once() -> None:
                rows.write.format("liftbridge").option("servers", server.address).option(
                    "stream", exact_sink
                ).option("exactlyOnce", "true").mode("append").save()

            median, values = _median_rate(written, reps, write_exactly_once)
            record("Spark batch write (2 tasks), exactlyOnce", "rows/s", median, values)

            checkpoint = tempfile.mkdtemp(prefix="bench-spark-")
            try:
                per_batch = 1_000
                latency_stream = f"{stream}-latency"
                client.create_stream(latency_stream)
                _fill(client, latency_stream, 1, 60 * per_batch)
                query = (
                    spark.readStream.format("liftbridge")
                    .option("servers", server.address)
                    .option("assign", f'{{"{latency_stream}": [0]}}')
                    .option("startingOffsets", "earliest")
                    .option("maxOffsetsPerTrigger", str(per_batch))
                    .load()
                    .writeStream.format("noop")
                    .option("checkpointLocation", checkpoint)
                    .trigger(availableNow=True)
                    .start()
                )
                query.awaitTermination(600)
                batches = [
                    p["durationMs"]["triggerExecution"]
                    for p in query.recentProgress
                    if p["numInputRows"] > 0
                ][1:]  # the first batch starts the query's workers
                latency = [float(ms) for ms in batches]
                record(
                    f"Spark micro-batch of {per_batch:,} rows (availableNow)",
                    "ms",
                    statistics.median(latency),
                    latency,
                )
            finally:
                shutil.rmtree(checkpoint, ignore_errors=True)
        finally:
            spark.stop()

    def rate(name: str) -> float:
        return float(figures[name]["median"])  # type: ignore[arg-type]

    sdk = "plain SDK subscribe, 1 partition"
    one, three = "Spark batch read, 1 partition", "Spark batch read, 3 partitions"
    beyond = " (beyond a query's fixed cost)"
    ratios = [
        ("Spark 1-partition read / plain SDK subscribe", one, sdk),
        ("  beyond a query's fixed cost", one + beyond, sdk),
        ("Spark 3-partition read / 1-partition read", three, one),
        ("  with minPartitions=6", three + ", minPartitions=6", one),
        ("  beyond a query's fixed cost", three + beyond, one + beyond),
        (
            "Spark write exactlyOnce / at least once",
            "Spark batch write (2 tasks), exactlyOnce",
            "Spark batch write (2 tasks)",
        ),
    ]
    go_one, go_three = "Go subscribe, 1 partition", "Go subscribe, 3 partitions at once"
    if go_one in figures:
        # What the machine allows: the official client's readers, one per partition.
        ratios.append(("Go readers, 3 partitions at once / 1 partition", go_three, go_one))
    print()
    for name, figure in figures.items():
        print(f"{name:<64} {figure['median']:>10,.0f} {figure['unit']}")
    for name, top, bottom in ratios:
        print(f"{name:<64} {rate(top) / rate(bottom):>10.2f}")
    stamp = started.strftime("%Y%m%d-%H%M%S")
    path = report.write_json(
        args.output / f"{stamp}-spark.json",
        {
            "started_at": started.isoformat(),
            "rows_per_partition": n,
            "reps": reps,
            "machine": machine.describe(),
            "figures": figures,
        },
    )
    print(f"\nwritten to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(run())
