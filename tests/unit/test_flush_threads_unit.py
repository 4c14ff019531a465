"""Publisher.flush with other threads publishing and flushing: a publish
claimed (out of the pending table) but not settled yet is waited for, even
when another publishing thread frees the settled Futures the publisher keeps
for it (Spent.kept, popped one per publish) or another thread's flush lets go
of them all as it returns (Spent.clear). Both used to drop the claimed
Future before this flush saw it, and flush returned True with it not done."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from liftbridge._publish._publisher import Publisher
from tests.unit.test_publisher_unit import (  # noqa: F401 (_close_client_threads: autouse)
    FakeServer,
    _close_client_threads,
    _soon,
    hold_settle_run,
    make,
    request,
)

WAIT = 10.0


def _free_all(p: Publisher) -> None:
    """What other publishing threads do, a publish each: free the oldest kept."""
    for _ in range(len(p._spent.kept) + 1):
        p._spent.free_one()


def _flushed(p: Publisher) -> None:
    """What another thread's flush does as it returns: let go of everything kept."""
    p._spent.clear()


OTHERS: dict[str, Callable[[Publisher], None]] = {"publish": _free_all, "flush": _flushed}


@pytest.mark.parametrize("how", ["acked", "timed out"])
@pytest.mark.parametrize("other", sorted(OTHERS))
def test_flush_waits_for_a_claimed_future_whatever_other_threads_free(
    how: str, other: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = FakeServer()
    server.ack = False
    server.hold = how == "acked"
    p = make(server, ack_wait=30.0 if how == "acked" else 0.2)
    future = p.submit(request(0), None, None)
    entered, go_on = hold_settle_run(monkeypatch, WAIT)
    if how == "acked":
        server.release(1)
    try:
        assert entered.wait(WAIT)  # claimed (acked or timed out), not settled
        assert not future.done()
        freeing = threading.Thread(target=OTHERS[other], args=(p,))
        freeing.start()
        freeing.join(WAIT)
        assert not p.flush(0.3)  # waits for it, and times out while it is held
    finally:
        go_on.set()
    assert p.flush(WAIT)
    assert future.done()
    assert not p._spent.unsettled  # each settled claim taken out
    p.close(_soon())


def test_two_threads_flushing_at_once_both_wait_for_a_claimed_future(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = FakeServer()
    server.ack = False
    server.hold = True
    p = make(server, ack_wait=30.0)
    future = p.submit(request(0), None, None)
    entered, go_on = hold_settle_run(monkeypatch, WAIT)
    server.release(1)
    results: list[bool] = []
    flushers = [threading.Thread(target=lambda: results.append(p.flush(WAIT))) for _ in range(2)]
    try:
        assert entered.wait(WAIT)
        for flusher in flushers:
            flusher.start()
        assert not p.flush(0.3)
        assert results == []  # both still waiting
    finally:
        go_on.set()
        for flusher in flushers:
            flusher.join(WAIT)
    assert results == [True, True] and future.done()
    p.close(_soon())
