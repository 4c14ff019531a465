"""Which Python Spark starts its workers with, and whether that Python can
import this connector.

Spark starts its Python workers (and the driver-side processes that plan a
Python data source) with ``spark.pyspark.python``, else the environment
variable ``PYSPARK_PYTHON``, else ``python3`` from ``PATH``. A script run
with a virtualenv's Python without activating the virtualenv therefore gets
workers on another Python, where ``import liftbridge`` fails deep in a Spark
trace. :func:`check_worker_python` finds that out before any query runs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from typing import TYPE_CHECKING

from liftbridge import MissingDependencyError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_PROBE_TIMEOUT = 60.0
_checked: dict[str, str | None] = {}  # worker python -> why it cannot import us (None: it can)


def worker_python(spark: SparkSession) -> str:
    """The command Spark starts Python workers with."""
    configured = spark.sparkContext.getConf().get("spark.pyspark.python")
    return configured or os.environ.get("PYSPARK_PYTHON") or "python3"


def _same(command: str) -> bool:
    found = shutil.which(command)
    if found is None:
        return False
    return os.path.realpath(found) == os.path.realpath(sys.executable) or (
        os.path.abspath(found) == os.path.abspath(sys.executable)
    )


def _probe(command: str) -> str | None:
    """Why ``command`` cannot import ``liftbridge.spark``; None when it can."""
    if command not in _checked:
        try:
            result = subprocess.run(
                [command, "-c", "import liftbridge.spark"],
                capture_output=True,
                timeout=_PROBE_TIMEOUT,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            _checked[command] = f"it could not be run ({e})"
        else:
            lines = result.stderr.decode(errors="replace").strip().splitlines()
            _checked[command] = None if result.returncode == 0 else (lines or ["failed"])[-1]
    return _checked[command]


def check_worker_python(spark: SparkSession) -> None:
    """Fails when Spark's Python workers would run a Python that cannot import
    this connector (local masters only: on a cluster the workers' Python lives
    on other machines).

    Raises:
        MissingDependencyError: naming the worker Python and what to set.
    """
    master = spark.sparkContext.master or ""
    if not master.startswith("local"):
        return
    command = worker_python(spark)
    if _same(command):
        return
    problem = _probe(command)
    if problem is None:
        return
    raise MissingDependencyError(
        f"Spark starts its Python workers with {command!r}, which cannot import "
        f"liftbridge.spark ({problem}); this script runs on {sys.executable}. Set "
        f"PYSPARK_PYTHON={sys.executable} in the environment (or the Spark setting "
        "spark.pyspark.python) before the SparkSession starts, or activate the "
        "virtualenv that has liftbridge installed"
    )
