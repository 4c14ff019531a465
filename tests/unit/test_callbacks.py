"""CallbackRunner's futures: running from birth, never cancelled, their
done-callbacks on the liftbridge-callbacks thread (no threads leak)."""

from __future__ import annotations

import threading
import time

from liftbridge._core._callbacks import CallbackRunner


def test_a_future_runs_until_done_and_cannot_be_cancelled() -> None:
    runner = CallbackRunner()
    try:
        future = runner.future()
        assert future.running()
        assert not future.cancel()
        assert not future.cancelled()
        assert future.running()
        future.set_result(7)
        assert not future.running()
        assert future.done()
        assert not future.cancel()
        assert future.result(0) == 7
    finally:
        runner.close(time.monotonic() + 5)


def test_done_callbacks_run_on_the_callbacks_thread() -> None:
    runner = CallbackRunner()
    ran_on: list[str] = []
    done = threading.Event()

    def callback(_: object) -> None:
        ran_on.append(threading.current_thread().name)
        done.set()

    try:
        future = runner.future()
        future.add_done_callback(callback)
        future.set_exception(ValueError("refused"))
        assert done.wait(5)
        assert ran_on == ["liftbridge-callbacks"]
        assert isinstance(future.exception(0), ValueError)
    finally:
        runner.close(time.monotonic() + 5)


def test_after_close_callbacks_run_on_a_late_thread_that_ends() -> None:
    runner = CallbackRunner()
    runner.close(time.monotonic() + 5)
    ran_on: list[str] = []
    done = threading.Event()
    release = threading.Event()

    def blocking(value: int) -> None:
        ran_on.append(threading.current_thread().name)
        release.wait(5)
        if value == 2:
            done.set()

    runner.submit(blocking, 1)  # blocks its thread, never the submitting one
    runner.submit(blocking, 2)
    assert threading.current_thread().name not in ran_on
    release.set()
    assert done.wait(5)
    assert ran_on == ["liftbridge-callbacks-late"] * 2
    deadline = time.monotonic() + 5
    while any(t.name == "liftbridge-callbacks-late" for t in threading.enumerate()):
        assert time.monotonic() < deadline, "the late thread did not end"
        time.sleep(0.01)
