"""The rows a read yields, as a Spark schema and as the Arrow schema its record
batches must match exactly (types and nullability, checked by pyspark 4.2+)."""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
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

SERVER_HEADERS = frozenset({"subject", "reply"})
"""Headers the server adds to every message it stores; the ``headers`` column
leaves them out (the subject has its own column)."""


def read_schema(include_headers: bool) -> StructType:
    """The schema of a read: ``key binary, value binary, stream string, subject
    string, partition int, offset long, timestamp timestamp`` (UTC), then
    ``headers map<string,binary>`` when asked for."""
    fields = list(_COLUMNS.fields)
    if include_headers:
        fields.append(_HEADERS)
    return StructType(fields)


def arrow_schema(include_headers: bool) -> pa.Schema:
    """The Arrow schema pyspark expects for :func:`read_schema`."""
    return to_arrow_schema(read_schema(include_headers), timezone="UTC")
