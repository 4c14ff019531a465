"""AckWindow.flush never returns True while a publish admitted before the
call is taken out of the window's table but not resolved yet: each way a
publish gets its outcome (its ack, a refused write, the connection given up
or close, a leader found down, its deadline, a withdrawal) takes it out in
the window's lock and resolves it after. Each test holds that resolving
(a Future whose set_result and set_exception wait) and flushes meanwhile."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any

import pytest

from liftbridge._core._callbacks import CallbackRunner
from liftbridge._core._deadlines import AckTimer
from liftbridge._errors import ConnectionLostError, LiftbridgeError
from liftbridge._publish._nats_pending import Pending
from liftbridge._publish._nats_window import AckWindow
from tests.unit.test_nats_window import _ack

TIMEOUT = 5.0
HELD = 0.3  # how long a flush gets while a resolving is held: it must return False


class _Held(Future[Any]):
    """A Future whose resolving waits until ``go`` is set (``reached`` says it began)."""

    def __init__(self) -> None:
        super().__init__()
        self.reached = threading.Event()
        self.go = threading.Event()

    def _hold(self) -> None:
        self.reached.set()
        assert self.go.wait(TIMEOUT)

    def set_result(self, result: Any) -> None:
        self._hold()
        super().set_result(result)

    def set_exception(self, exception: BaseException | None) -> None:
        self._hold()
        super().set_exception(exception)


@pytest.fixture
def window() -> Iterator[AckWindow]:
    timer, runner = AckTimer(), CallbackRunner()
    window = AckWindow(max_inflight=8, ack_timeout=TIMEOUT, timer=timer, runner=runner, inbox="in")
    window.watch()
    yield window
    window.release_timer()
    timer.close(time.monotonic() + 5)
    runner.close(time.monotonic() + 5)


def _entry(future: Future[Any], correlation_id: str, timeout: float = TIMEOUT) -> Pending:
    entry = Pending(correlation_id, future, None, timeout, "orders")
    entry.leader = "10.0.0.1:1"
    return entry


def _settle_one(window: AckWindow, held: Pending, other: Pending) -> None:
    window.settle(other, ConnectionLostError("not taken"))
    window.settle(held, ConnectionLostError("not taken"))


def _expire_own(window: AckWindow, held: Pending, other: Pending) -> None:
    window._expire([held, other])


# How the held publish (admitted first) and another (second) get their outcome.
WAYS: dict[str, Callable[[AckWindow, Pending, Pending], object]] = {
    "ack": lambda w, h, o: w.settle_acks([_ack(h.correlation_id, 1), _ack(o.correlation_id, 2)]),
    "settle": _settle_one,
    "fail_subject": lambda w, h, o: w.fail_subject("orders", lambda e: LiftbridgeError("no")),
    "fail_all": lambda w, h, o: w.fail_all(lambda e: ConnectionLostError("gone")),
    "fail_led_by": lambda w, h, o: w.fail_led_by("10.0.0.1:1"),
    "expire_due": lambda w, h, o: w._expire_due(time.monotonic() + 2 * TIMEOUT),
    "expire": _expire_own,
    "withdraw": lambda w, h, o: w.withdraw([h, o]),
}


@pytest.mark.parametrize("way", sorted(WAYS))
def test_flush_waits_for_publishes_taken_out_but_not_yet_resolved(
    window: AckWindow, way: str
) -> None:
    held = _entry(_Held(), "held")
    other = _entry(window.future(), "other")
    window.admit(held)
    window.admit(other)
    settling = threading.Thread(target=WAYS[way], args=(window, held, other))
    settling.start()
    try:
        assert held.future.reached.wait(TIMEOUT)  # type: ignore[union-attr]
        assert not window.in_flight("held")  # out of the table, not resolved
        assert not window.flush(time.monotonic() + HELD)
    finally:
        held.future.go.set()  # type: ignore[union-attr]
        settling.join(TIMEOUT)
    assert window.flush(time.monotonic() + TIMEOUT)
    assert held.future.done()  # type: ignore[union-attr]
    assert other.future.done()  # type: ignore[union-attr]


def test_two_threads_flushing_at_once_both_wait_for_what_was_taken_out(
    window: AckWindow,
) -> None:
    held = _entry(_Held(), "held")
    window.admit(held)
    settling = threading.Thread(target=window.settle_acks, args=([_ack("held", 1)],))
    settling.start()
    results: list[bool] = []
    flushers = [
        threading.Thread(target=lambda: results.append(window.flush(time.monotonic() + TIMEOUT)))
        for _ in range(2)
    ]
    try:
        assert held.future.reached.wait(TIMEOUT)  # type: ignore[union-attr]
        for flusher in flushers:
            flusher.start()
        assert not window.flush(time.monotonic() + HELD)
        assert results == []  # both still waiting
    finally:
        held.future.go.set()  # type: ignore[union-attr]
        settling.join(TIMEOUT)
        for flusher in flushers:
            flusher.join(TIMEOUT)
    assert results == [True, True] and held.future.done()  # type: ignore[union-attr]
