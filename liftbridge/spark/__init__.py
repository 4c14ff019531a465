"""Spark connector: ``format("liftbridge")`` for ``read``, ``readStream``,
``write`` and ``writeStream`` (PySpark's Python data source API).

Needs the ``spark`` extra: ``pip install 'liftbridge[spark]'`` (pyspark >= 4.2
and pyarrow). Once installed, PySpark finds the source by itself (through the
top-level ``pyspark_liftbridge`` module); :func:`register` registers it
explicitly, e.g. where the package is not on the Python path Spark searches.

Example:
    >>> df = (spark.read.format("liftbridge")
    ...       .option("servers", "127.0.0.1:9292")
    ...       .option("stream", "orders")
    ...       .load())
"""

from __future__ import annotations

from liftbridge import MissingDependencyError

try:
    import pyarrow  # noqa: F401
    import pyspark.sql.datasource  # noqa: F401
except ImportError as e:  # pragma: no cover - exercised without the extra only
    raise MissingDependencyError(
        f"liftbridge.spark needs pyspark >= 4.2 and pyarrow ({e.name} is missing): "
        "pip install 'liftbridge[spark]'"
    ) from e

from typing import TYPE_CHECKING

from liftbridge.spark._fetch import DataLossError
from liftbridge.spark._progress import offsets_behind_latest
from liftbridge.spark._python import check_worker_python
from liftbridge.spark._source import LiftbridgeDataSource
from liftbridge.spark._writer import LiftbridgeCommitMessage, PartitionWrite

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def register(spark: SparkSession) -> None:
    """Registers the ``liftbridge`` data source with a session.

    On a local master it first checks that the Python Spark starts its
    workers with can import this connector (see the README's Spark section).

    Args:
        spark: the session; ``format("liftbridge")`` works in it afterwards.

    Raises:
        MissingDependencyError: the workers' Python cannot import
            ``liftbridge.spark``; the message says what to set.
    """
    check_worker_python(spark)
    spark.dataSource.register(LiftbridgeDataSource)


__all__ = [
    "DataLossError",
    "LiftbridgeCommitMessage",
    "LiftbridgeDataSource",
    "PartitionWrite",
    "offsets_behind_latest",
    "register",
]
