"""Spark fixtures: one ``local[2,3]`` SparkSession for the whole run.

Spark's Python workers are separate processes started by the JVM; they find
this checkout (``liftbridge``, ``pyspark_liftbridge`` and the test helpers in
``tests.spark``) through ``PYTHONPATH``, set here before the JVM starts.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import liftbridge
from liftbridge.testing import LocalServer

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

REPO_ROOT = Path(__file__).resolve().parents[2]

# py4j logs every command it sends to the JVM at DEBUG.
logging.getLogger("py4j").setLevel(logging.WARNING)

JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
"""For every JVM the Spark tests start, through the environment they inherit:
the session's driver, a standalone cluster's master, workers and executors, the
drivers of ``eo_job`` and of the example. Each runs a few small jobs and exits,
so the C2 compiler's work never pays off and parallel GC threads only compete
for the cores. A local session starting and running five small reads and
writes used a quarter less CPU with them (all its processes, two runs each,
alternated: 71.2 and 81.2 s without, 55.8 and 57.5 s with)."""

if JVM_OPTIONS not in os.environ.get("JDK_JAVA_OPTIONS", ""):
    # JDK_JAVA_OPTIONS is read by the java launcher alone (not by other JDK tools).
    os.environ["JDK_JAVA_OPTIONS"] = " ".join(
        o for o in (os.environ.get("JDK_JAVA_OPTIONS", ""), JVM_OPTIONS) if o
    )


def python_path() -> str:
    """PYTHONPATH for Spark's Python workers: this checkout first."""
    rest = os.environ.get("PYTHONPATH", "")
    return os.pathsep.join(p for p in (str(REPO_ROOT), rest) if p)


def need_java() -> None:
    """Skips the calling test when Spark cannot start for want of Java."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("Spark needs Java 17 or 21, which is not installed")


def spark_session(master: str, **conf: str) -> SparkSession:
    """A new SparkSession for ``master``, configured for small tests."""
    from pyspark.sql import SparkSession

    need_java()
    os.environ["PYTHONPATH"] = python_path()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    builder = (
        SparkSession.builder.master(master)
        .appName("liftbridge-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.executorEnv.PYTHONPATH", python_path())
        .config("spark.executorEnv.PYSPARK_PYTHON", sys.executable)
        .config("spark.python.worker.reuse", "true")
    )
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


_shared: list[SparkSession] = []  # the session every module shares, once started


def stop_shared_session() -> None:
    """Stops the shared ``local[2,3]`` session if it runs (a module that needs
    a session of its own, such as a standalone cluster's, calls this first:
    ``getOrCreate`` would hand it the shared one)."""
    while _shared:
        _shared.pop().stop()


@pytest.fixture(scope="session")
def _spark_run() -> Iterator[None]:
    yield
    stop_shared_session()


@pytest.fixture(scope="module")
def spark(_spark_run: None) -> Iterator[SparkSession]:
    """A ``local[2]`` session shared by every module of the run; a failed
    task is tried up to 3 times (``local[2,3]``), as on a cluster. Started on
    first use, stopped at the end of the run (a new session costs a context
    and new Python workers, which import pyspark, pyarrow and the connector
    again). A module leaves no query running and nothing cached behind it."""
    if not _shared:
        _shared.append(spark_session("local[2,3]"))
    session = _shared[0]
    yield session
    for query in session.streams.active:
        query.stop()
    session.catalog.clearCache()


@pytest.fixture
def client(server: LocalServer) -> Iterator[liftbridge.Client]:
    """A client of the session server, closed after the test."""
    with liftbridge.Client(server.address) as c:
        yield c
