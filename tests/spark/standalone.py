"""A Spark standalone cluster on loopback: one master and N workers started
from the installed pyspark (``bin/spark-class``), stopped by pid."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from types import TracebackType

import pyspark

from tests.spark.conftest import python_path

SPARK_HOME = Path(pyspark.__file__).resolve().parent
START_TIMEOUT = 180.0
STOP_TIMEOUT = 20.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class StandaloneCluster:
    """``spark://127.0.0.1:<port>`` with ``workers`` workers of one core and
    512 MB each. Use as a context manager; logs go to ``directory``."""

    def __init__(self, directory: Path, workers: int = 2) -> None:
        self._directory = directory
        self._workers = workers
        self._port = _free_port()
        self._ui_port = _free_port()
        self._processes: list[subprocess.Popen[bytes]] = []
        self._env = {
            **os.environ,
            "SPARK_HOME": str(SPARK_HOME),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOG_DIR": str(directory),
            "PYTHONPATH": python_path(),
        }

    @property
    def master(self) -> str:
        """The master URL."""
        return f"spark://127.0.0.1:{self._port}"

    @property
    def pids(self) -> list[int]:
        """The master's and the workers' process ids (executors run below the workers)."""
        return [p.pid for p in self._processes if p.poll() is None]

    def _start(self, name: str, *args: str) -> None:
        log = (self._directory / f"{name}.log").open("wb")
        try:
            process = subprocess.Popen(
                [str(SPARK_HOME / "bin" / "spark-class"), *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self._env,
                cwd=self._directory,
            )
        finally:
            log.close()
        self._processes.append(process)

    def _alive_workers(self) -> int:
        url = f"http://127.0.0.1:{self._ui_port}/json/"
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                state = json.load(response)
        except OSError:
            return -1
        return int(state.get("aliveworkers", 0))

    def __enter__(self) -> StandaloneCluster:
        try:
            self._start(
                "master",
                "org.apache.spark.deploy.master.Master",
                "--host", "127.0.0.1",
                "--port", str(self._port),
                "--webui-port", str(self._ui_port),
            )  # fmt: skip
            for i in range(self._workers):
                work = self._directory / f"worker-{i}"
                work.mkdir()
                self._start(
                    f"worker-{i}",
                    "org.apache.spark.deploy.worker.Worker",
                    self.master,
                    "--host", "127.0.0.1",
                    "--cores", "1",
                    "--memory", "512m",
                    "--webui-port", str(_free_port()),
                    "--work-dir", str(work),
                )  # fmt: skip
            deadline = time.monotonic() + START_TIMEOUT
            while self._alive_workers() < self._workers:
                for process in self._processes:
                    if process.poll() is not None:
                        raise RuntimeError(f"a Spark process exited: see {self._directory}")
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"{self._workers} workers did not register within {START_TIMEOUT:g}s"
                    )
                time.sleep(0.5)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stops the workers, then the master: SIGTERM (their executors stop
        with them), SIGKILL after ``STOP_TIMEOUT``."""
        for process in reversed(self._processes):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
            try:
                process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(STOP_TIMEOUT)
        self._processes.clear()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
