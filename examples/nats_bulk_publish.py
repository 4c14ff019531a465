"""Bulk publishing through NATS with NatsStreamPublisher (the ``nats`` extra).

Creates a three-partition stream, publishes ``--count`` orders keyed by
customer (each customer's orders land on one partition, in order), waits for
every ack with ``flush`` and prints how many each partition stored.

    python examples/nats_bulk_publish.py HOST:PORT NATS_URL STREAM [--count N]
"""

from __future__ import annotations

import argparse
import threading
import time

import liftbridge


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("address", help="a Liftbridge broker, host:port")
    parser.add_argument("nats_url", help="the cluster's NATS server, nats://host:port")
    parser.add_argument("stream")
    parser.add_argument("--count", type=int, default=10_000)
    args = parser.parse_args()

    failures: list[BaseException] = []
    lock = threading.Lock()  # guards failures (handlers run on liftbridge-callbacks)

    def on_ack(ack: liftbridge.Ack | None, error: BaseException | None) -> None:
        if error is not None:
            with lock:
                failures.append(error)

    with liftbridge.Client(args.address) as client:
        client.create_stream(args.stream, partitions=3)
        started = time.perf_counter()
        with liftbridge.NatsStreamPublisher(client, args.nats_url) as publisher:
            for i in range(args.count):
                customer = b"customer-%d" % (i % 7)
                publisher.publish_async(args.stream, b"order %d" % i, on_ack, key=customer)
            if not publisher.flush(60.0):
                raise SystemExit("acks still missing after 60 s")
        seconds = time.perf_counter() - started
        print(f"published {args.count} orders in {seconds:.2f}s, {len(failures)} failed")
        for partition in range(3):
            stored = client.fetch_partition_metadata(args.stream, partition).newest_offset + 1
            print(f"partition {partition}: {stored} orders")


if __name__ == "__main__":
    main()
