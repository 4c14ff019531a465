"""What the Spark tests compare: rows as the SDK reads them and as Spark does."""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

import liftbridge
from liftbridge import StartPosition, StopPosition

Row = tuple[Any, ...]
"""key, value, stream, subject, partition, offset, timestamp (unix µs)[, headers]"""


def fill(
    client: liftbridge.Client, stream: str, count: int, *, first: int = 0, headers: bool = True
) -> None:
    """Publishes ``count`` keyed messages (keys ``k0``-``k6``) and waits for every ack."""
    futures = [
        client.publish_async(
            stream,
            b"value-%d" % i,
            key=b"k%d" % (i % 7),
            headers={"n": b"%d" % i} if headers else None,
        )
        for i in range(first, first + count)
    ]
    for future in futures:
        future.result(timeout=30)


def sdk_rows(
    client: liftbridge.Client, stream: str, *, headers: bool = False, start: int | None = None
) -> list[Row]:
    """Every message of every partition, read with the plain SDK, sorted."""
    rows: list[Row] = []
    info = client.fetch_metadata().get_stream(stream)
    assert info is not None
    for partition in info.partitions:
        if client.fetch_partition_metadata(stream, partition).high_watermark < 0:
            continue
        begin = StartPosition.EARLIEST if start is None else start
        with client.subscribe(
            stream, partition=partition, start=begin, stop=StopPosition.LATEST
        ) as subscription:
            for m in subscription:
                row: Row = (
                    m.key,
                    m.value,
                    m.stream,
                    m.subject,
                    m.partition,
                    m.offset,
                    m.timestamp_ns // 1000,
                )
                if headers:
                    user = {k: v for k, v in m.headers.items() if k not in ("subject", "reply")}
                    row += (user,)
                rows.append(row)
    return sorted(rows, key=lambda r: (r[4], r[5]))


def spark_rows(df: DataFrame) -> list[Row]:
    """The DataFrame's rows in the shape of :func:`sdk_rows`, sorted."""
    columns: list[Column | str] = [
        "key",
        "value",
        "stream",
        "subject",
        "partition",
        "offset",
        F.unix_micros("timestamp").alias("timestamp"),
    ]
    if "headers" in df.columns:
        columns.append("headers")
    rows = []
    for r in df.select(*columns).collect():
        row = tuple(bytes(v) if isinstance(v, bytearray) else v for v in r)
        if "headers" in df.columns:
            headers: dict[str, Any] = r["headers"] or {}
            row = (*row[:-1], {k: bytes(v) for k, v in headers.items()})
        rows.append(row)
    return sorted(rows, key=lambda r: (r[4], r[5]))
