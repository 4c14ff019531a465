"""The oracle's arithmetic, on a ledger made by hand (no server)."""

from __future__ import annotations

import time

import liftbridge
from chaos.oracle import Ledger, Outcome, SubscriptionCheck, judge


def _outcome(
    value: bytes, *, acked: bool = False, error: str | None = None, text: str = ""
) -> Outcome:
    now = time.monotonic()
    outcome = Outcome(value, now - 1, now + 5, ended=now, acked=acked, error=error)
    outcome.error_text = text
    return outcome


def test_judge_counts_lost_unexpected_recovered_duplicates_and_no_answer() -> None:
    ledger = Ledger("t")
    ledger._outcomes = [
        _outcome(b"acked-present", acked=True),
        _outcome(b"acked-lost", acked=True),
        _outcome(b"failed-present", error="AckTimeoutError", text="may or may not"),
        _outcome(b"never-sent-present", error="DeadlineExceededError", text="dropped, never sent"),
        _outcome(b"failed-absent", error="ConnectionLostError"),
        Outcome(b"unanswered", 0.0, 1.0),
    ]
    present = [b"acked-present", b"acked-present", b"failed-present", b"never-sent-present", b"x"]
    verdict = judge(ledger, present)
    assert (verdict.sent, verdict.acked, verdict.failed, verdict.no_answer) == (6, 2, 3, 1)
    assert (verdict.lost, verdict.unexpected, verdict.recovered) == (1, 1, 2)
    assert (verdict.duplicates, verdict.never_sent_present) == (1, 1)
    problems = " ".join(verdict.problems())
    for word in ("lost", "unexpected", "duplicate", "never answered", "never sent"):
        assert word in problems


def test_an_untyped_error_and_a_late_call_are_problems() -> None:
    ledger = Ledger("t")
    outcome = _outcome(b"v", error="ValueError")
    outcome.typed = False
    outcome.ended = outcome.deadline + 3.0
    ledger._outcomes = [outcome]
    verdict = judge(ledger, [])
    assert verdict.untyped == 1
    assert verdict.max_overshoot >= 3.0
    assert any("overran" in p for p in verdict.problems(overshoot_slack=2.0))


def test_subscription_check_finds_gaps_and_repeats() -> None:
    check = SubscriptionCheck()
    for offset in (0, 1, 3, 3, 2, 4):
        check.handler(liftbridge.Message(offset, b""), None)
    assert (check.gaps, check.repeats) == (0, 2)
    gappy = SubscriptionCheck()
    for offset in (5, 6, 9):
        gappy.handler(liftbridge.Message(offset, b""), None)
    assert (gappy.gaps, gappy.repeats) == (2, 0)
    clean = SubscriptionCheck()
    for offset in range(5):
        clean.handler(liftbridge.Message(offset, b""), None)
    assert (clean.gaps, clean.repeats) == (0, 0)
