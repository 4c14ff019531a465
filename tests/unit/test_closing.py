"""close_together: every close at once, one deadline for all (issue 25)."""

from __future__ import annotations

import threading
import time

from liftbridge._core._closing import close_together


def test_closes_run_at_once_against_one_deadline() -> None:
    started: list[str] = []
    all_started = threading.Barrier(3, timeout=5)
    release = threading.Event()

    def slow(name: str) -> None:
        started.append(name)
        all_started.wait()  # breaks (and fails the test) unless all three run at once
        release.wait(5)

    closers = [(n, lambda n=n: slow(n)) for n in ("a", "b", "c")]
    close_together(closers, time.monotonic() + 0.3)
    assert sorted(started) == ["a", "b", "c"]
    assert not all_started.broken
    release.set()


def test_a_failing_close_does_not_stop_the_others() -> None:
    closed: list[str] = []

    def boom() -> None:
        raise RuntimeError("close failed")

    close_together([("boom", boom), ("ok", lambda: closed.append("ok"))], time.monotonic() + 5)
    assert closed == ["ok"]


def test_from_an_sdk_thread_the_closes_run_on_it_in_order() -> None:
    ran: list[tuple[str, str]] = []

    def record(name: str) -> None:
        ran.append((name, threading.current_thread().name))

    thread = threading.Thread(
        target=close_together,
        args=([("x", lambda: record("x")), ("y", lambda: record("y"))], time.monotonic() + 5),
        name="liftbridge-sub-test",
    )
    thread.start()
    thread.join(5)
    assert ran == [("x", "liftbridge-sub-test"), ("y", "liftbridge-sub-test")]
