"""How far a streaming read is behind the newest offsets, from a query's
progress report.

Spark's Kafka source reports ``avgOffsetsBehindLatest`` /
``maxOffsetsBehindLatest`` / ``minOffsetsBehindLatest`` in
``sources[].metrics`` of ``query.lastProgress``, through the JVM interface
``ReportsSourceMetrics``. PySpark's Python data sources cannot: in pyspark
4.3 none of the JVM classes that run a Python stream reader
(``PythonMicroBatchStream`` and its admission-control and availableNow
subclasses) implements that interface, and the Python API has no metrics
method. What it does carry is ``reportLatestOffset``: this connector reports
the partitions' ends there, so each progress entry has both ``endOffset``
(what the micro-batch read up to) and ``latestOffset`` (the newest offsets
seen), and :func:`offsets_behind_latest` computes Kafka's three figures from
them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def _offsets(value: Any) -> dict[tuple[str, str], int]:
    if isinstance(value, str):
        value = json.loads(value)
    if not isinstance(value, Mapping):
        return {}
    return {
        (str(stream), str(partition)): int(offset)
        for stream, per_partition in value.items()
        if isinstance(per_partition, Mapping)
        for partition, offset in per_partition.items()
    }


def offsets_behind_latest(progress: Mapping[str, Any], source: int = 0) -> dict[str, float]:
    """Kafka's ``avgOffsetsBehindLatest``, ``maxOffsetsBehindLatest`` and
    ``minOffsetsBehindLatest`` for one Liftbridge source of a progress report.

    Args:
        progress: ``query.lastProgress`` (or an entry of ``recentProgress``).
        source: which entry of ``progress["sources"]``.

    Returns:
        The three figures (offsets per partition between the micro-batch's
        end and the newest offsets seen); empty when the report has no
        offsets yet.
    """
    sources = progress.get("sources") or []
    if source >= len(sources):
        return {}
    entry = sources[source]
    end, latest = _offsets(entry.get("endOffset")), _offsets(entry.get("latestOffset"))
    behind = [max(0, offset - end.get(p, 0)) for p, offset in latest.items()]
    if not behind:
        return {}
    return {
        "avgOffsetsBehindLatest": sum(behind) / len(behind),
        "maxOffsetsBehindLatest": float(max(behind)),
        "minOffsetsBehindLatest": float(min(behind)),
    }
