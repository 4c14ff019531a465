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


def test_a_run_of_outcomes_settles_each_and_runs_each_handler_in_order() -> None:
    """settle_run: every Future gets its own outcome; the handlers run on the
    callbacks thread in order, and one that raises does not stop the others."""
    runner = CallbackRunner()
    heard: list[tuple[str, object, object]] = []
    done = threading.Event()

    def handler(result: object, error: BaseException | None) -> None:
        heard.append((threading.current_thread().name, result, error))
        if result == 3:
            done.set()
        if result == 1:
            raise RuntimeError("a handler that fails")

    try:
        futures = [runner.future() for _ in range(3)]
        refused = ValueError("refused")
        runner.settle_run(
            [
                (futures[0], handler, 1, None),
                (futures[1], None, 2, None),  # a Future alone
                (None, handler, None, refused),  # a handler alone
                (futures[2], handler, 3, None),
            ]
        )
        assert [f.result(0) for f in futures] == [1, 2, 3]
        assert done.wait(5)
        assert heard == [
            ("liftbridge-callbacks", 1, None),
            ("liftbridge-callbacks", None, refused),
            ("liftbridge-callbacks", 3, None),
        ]
    finally:
        runner.close(time.monotonic() + 5)
