"""Ctrl-C while an exactly-once Spark task waits for its read-back
(``_Tail.read_to``; in local mode the task may run on the main thread): an
interrupt anywhere in the wait must leave the tail's lock free and raise
itself, not ``RuntimeError``. Its ``threading.Condition`` did not: its wait,
interrupted as it let go of the lock or took it back, raised with the lock
not held, and the ``with`` then raised ``RuntimeError`` (the interrupt lost as
its context), leaving its waiter listed for good."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

from liftbridge import Message
from tests.unit.interrupts import sweep
from tests.unit.test_interrupted_wait import _waiting

pytest.importorskip("pyspark", reason="the spark extra is not installed")
pytest.importorskip("pyarrow", reason="the spark extra is not installed")

from liftbridge.spark._exactly_once import _Tail

MOST = 200  # interrupt points of one wait, at most
BOUND = 30.0  # seconds a wait may take (a loaded machine)


class _Client:
    """What _Tail uses of a client: a subscription it closes."""

    def subscribe(self, *args: object, **kwargs: object) -> _Client:
        return self

    def close(self) -> None:
        pass


def _message(offset: int, headers: dict[str, bytes] | None = None) -> Message:
    """What _Tail reads of a message: its offset and headers."""
    return SimpleNamespace(offset=offset, headers=headers or {})  # type: ignore[return-value]


class _Deliverer:
    """Delivers the message that ends the wait once the main thread waits."""

    def __init__(self, tail: _Tail) -> None:
        self.tail = tail
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="test-tail-deliverer")
        self._thread.start()

    def _run(self) -> None:
        tail = self.tail
        while not self._stop.is_set():
            with tail._lock:
                waiting = bool(tail._changed._waiting)
            if waiting:
                tail._on_message(_message(9), None)
                return
            time.sleep(0.001)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(BOUND)
        assert not self._thread.is_alive()
        assert self.tail._lock.acquire(False), "the lock was left held"
        try:
            assert not self.tail._changed._waiting, "a waiter left listed"
        finally:
            self.tail._lock.release()


def _fresh() -> _Deliverer:
    return _Deliverer(_Tail(_Client(), "s", 0, 0, "w"))  # type: ignore[arg-type]


def test_a_read_back_interrupted_anywhere_raises_the_interrupt_with_the_lock_free() -> None:
    deliverer = [_fresh()]

    def check() -> None:
        deliverer[0].stop()
        deliverer[0] = _fresh()

    try:
        interrupted = sweep(lambda: deliverer[0].tail.read_to(10, BOUND), check, _waiting, MOST)
    finally:
        deliverer[0].stop()
    assert {"read_to", "wait"} <= interrupted, interrupted


def test_read_to_returns_what_was_seen_or_times_out() -> None:
    tail = _Tail(_Client(), "s", 0, 0, "w/")  # type: ignore[arg-type]
    tail._on_message(_message(4, {"liftbridge-spark-row": b"w/7"}), None)
    assert tail.read_to(5, BOUND) == {7}
    with pytest.raises(Exception, match="not 6"):
        tail.read_to(6, 0.05)
