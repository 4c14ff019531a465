"""A tour of the SDK against a local, embedded Liftbridge server.

Run with `make demo`. With an address argument (or LIFTBRIDGE_ADDRESS) it uses
that server instead of starting one.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

import liftbridge
from liftbridge.testing import LocalServer


@contextlib.contextmanager
def _server_address() -> Iterator[str]:
    given = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("LIFTBRIDGE_ADDRESS")
    if given:
        yield given
        return
    print("starting a local Liftbridge server (embedded NATS, 127.0.0.1) ...")
    with LocalServer() as server:
        print(f"  server {server.server_id} listening on {server.address}")
        yield server.address


def main() -> None:
    with _server_address() as address, liftbridge.Client(address) as client:
        stream = "demo-orders"
        with contextlib.suppress(liftbridge.NoSuchStreamError):
            client.delete_stream(stream)
        client.create_stream(stream, subject="demo.orders", partitions=3)
        print(f"\ncreated stream {stream!r}; cluster metadata:")
        metadata = client.fetch_metadata()
        for broker in metadata.brokers:
            print(f"  broker {broker.id} at {broker.address}")
        info = metadata.get_stream(stream)
        assert info is not None
        for partition in info.partitions.values():
            print(
                f"  {stream}/{partition.id}: subject {info.subject}"
                f"{'' if partition.id == 0 else f'.{partition.id}'}, leader {partition.leader}, "
                f"isr {list(partition.isr)}"
            )

        print("\npublishing 6 orders, partitioned by customer key ...")
        by_key = liftbridge.PartitionByKey()
        for i in range(6):
            customer = f"customer-{i % 3}".encode()
            ack = client.publish(stream, b"order %d" % i, key=customer, partitioner=by_key)
            assert ack is not None
            chosen = by_key.partition(stream, customer, b"", metadata)
            print(f"  order {i} ({customer.decode()}) -> partition {chosen} offset {ack.offset}")

        futures = [client.publish_async(stream, b"bulk %d" % i, partition=0) for i in range(100)]
        print(f"  + {len(futures)} async publishes, last offset {futures[-1].result().offset}")  # type: ignore[union-attr]

        print("\nreading every partition from the start:")
        for partition_id in sorted(info.partitions):
            with client.subscribe(
                stream,
                partition=partition_id,
                start=liftbridge.StartPosition.EARLIEST,
                stop=liftbridge.StopPosition.LATEST,
            ) as sub:
                values = [m.value.decode() for m in sub]
            print(f"  partition {partition_id}: {len(values)} messages, first {values[:3]}")

        client.set_cursor("demo-reader", stream, 0, 5)
        cursor = client.fetch_cursor("demo-reader", stream, 0)
        print(f"\ncursor demo-reader on partition 0 is at {cursor}")
        meta = client.fetch_partition_metadata(stream, 0)
        print(
            f"partition 0: high watermark {meta.high_watermark}, newest offset {meta.newest_offset}"
        )
        client.delete_stream(stream)
        print("\ndone.")


if __name__ == "__main__":
    main()
