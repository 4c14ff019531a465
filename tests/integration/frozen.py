"""Freezing a server the test started (SIGSTOP) until every one of its
threads has stopped.

``os.kill(pid, SIGSTOP)`` returns before the process is stopped: one of its
threads takes the signal when the kernel next runs it, and only then are the
others told to stop. On a loaded machine the rest of a Go server can go on
for milliseconds, long enough to ack a publish the test sends "to a stopped
server". :func:`frozen` returns only once every thread reads stopped in
``/proc``.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

STOP_DEADLINE = 10.0
"""Seconds for every thread of the process to read stopped."""


def _all_stopped(pid: int) -> bool:
    tasks = Path(f"/proc/{pid}/task")
    states = []
    for task in tasks.iterdir():
        try:
            stat = (task / "stat").read_text()
        except FileNotFoundError:  # the thread ended meanwhile
            continue
        # "pid (comm) S ...": the state follows the last ')' (comm may hold one).
        states.append(stat.rsplit(")", 1)[1].split()[0])
    return bool(states) and all(state in ("T", "t") for state in states)


def freeze(pid: int) -> None:
    """SIGSTOPs ``pid`` and returns once all its threads are stopped.

    Raises:
        TimeoutError: some thread still ran after :data:`STOP_DEADLINE`.
    """
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + STOP_DEADLINE
    while not _all_stopped(pid):
        if time.monotonic() > deadline:
            raise TimeoutError(f"process {pid} did not stop within {STOP_DEADLINE:g}s")
        time.sleep(0.001)


@contextmanager
def frozen(pid: int | None) -> Iterator[None]:
    """The process ``pid`` (one the test started) stopped for the block, then continued."""
    assert pid is not None
    try:
        freeze(pid)
        yield
    finally:
        os.kill(pid, signal.SIGCONT)
