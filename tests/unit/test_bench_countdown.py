"""bench.countdown.CountDown: the handler rows' count of outcomes."""

from __future__ import annotations

import threading

import pytest

from bench.countdown import CountDown


def test_the_wait_ends_at_the_last_outcome_and_keeps_the_failures() -> None:
    outcomes = CountDown(3)
    boom = RuntimeError("boom")
    outcomes.on_ack(None, None)
    outcomes.on_ack(None, boom)
    assert not outcomes.wait(0)  # one outcome still to come
    assert outcomes.left == 1
    last = threading.Thread(target=outcomes.on_ack, args=(None, None))
    last.start()
    assert outcomes.wait(10.0)
    last.join(10.0)
    assert outcomes.left == 0 and outcomes.failures == [boom]


def test_nothing_expected_is_heard_at_once() -> None:
    assert CountDown(0).wait(0)


def test_a_negative_count_is_refused() -> None:
    with pytest.raises(ValueError, match="count"):
        CountDown(-1)
