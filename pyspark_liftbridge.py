"""Lets PySpark find the ``liftbridge`` data source by itself: PySpark imports
every top-level module named ``pyspark_*`` and registers its ``DefaultSource``.
The connector lives in :mod:`liftbridge.spark`."""

from liftbridge.spark import LiftbridgeDataSource as DefaultSource

__all__ = ["DefaultSource"]
