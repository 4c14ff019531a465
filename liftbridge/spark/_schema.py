"""The rows a read yields, as a Spark schema and as the Arrow schema its record
batches must match exactly (types and nullability, checked by pyspark 4.2+)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

_COLUMNS = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("stream", StringType()),
        StructField("subject", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
    ]
)
_HEADERS = StructField("headers", MapType(StringType(), BinaryType()))
_HEADERS_ARRAY = StructField(
    "headers",
    ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())])),
)

SERVER_HEADERS = frozenset({"subject", "reply"})
"""Headers the server adds to every message it stores; the ``headers`` column
leaves them out (the subject has its own column)."""


def read_schema(include_headers: bool, headers_array: bool = False) -> StructType:
    """The schema of a read: ``key binary, value binary, stream string, subject
    string, partition int, offset long, timestamp timestamp`` (UTC), then
    ``headers map<string,binary>`` when asked for, or with ``headers_array``
    Kafka's ``headers array<struct<key:string,value:binary>>``."""
    fields = list(_COLUMNS.fields)
    if include_headers:
        fields.append(_HEADERS_ARRAY if headers_array else _HEADERS)
    return StructType(fields)


def arrow_schema(include_headers: bool, headers_array: bool = False) -> pa.Schema:
    """The Arrow schema pyspark expects for :func:`read_schema`."""
    return to_arrow_schema(read_schema(include_headers, headers_array), timezone="UTC")


def header_pairs(headers: Any) -> dict[str, bytes] | None:
    """A row's headers as Arrow gives them (map: key/value tuples; Kafka's
    array: ``{"key", "value"}`` dicts) as the SDK takes them. A repeated key
    keeps its last value (Liftbridge headers are a map)."""
    if not headers:
        return None
    pairs: dict[str, bytes] = {}
    for item in headers:
        if isinstance(item, dict):
            key, value = item.get("key"), item.get("value")
        else:
            key, value = item
        if key is not None:
            pairs[key] = (value.encode() if isinstance(value, str) else value) or b""
    return pairs
