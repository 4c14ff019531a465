"""A second Ctrl-C while an interrupted publish is withdrawn.

A publish interrupted in ``Publisher.submit`` before a sender took it is
withdrawn (:meth:`~liftbridge._publish._interrupts.Interrupts._withdraw`):
claimed, its window slot freed, its Future failed. A second interrupt can
land there too (Ctrl-C pressed twice), between the claim and the failing of
its Future: the Future, kept for ``flush()`` by the claim, was then left
unresolved for good, and every later ``flush()`` without a timeout waited
for it forever. Each point of the withdrawal is interrupted in turn
(:func:`~tests.unit.interrupts.sweep`); after each, the publish ends, and
``flush`` returns True.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from concurrent.futures import Future

import pytest

from liftbridge._core._acks import Ack
from liftbridge._publish._pending import Pending
from liftbridge._publish._publisher import Publisher
from tests.unit.interrupts import Interrupted, in_sdk, interrupted_at
from tests.unit.test_publisher_unit import (
    FakeServer,
    _close_client_threads,  # noqa: F401 (autouse: closes the runners and timers made)
    _soon,
    make,
    request,
)

BOUND = 10.0  # seconds a flush may take (a publish left in times out in ACK_WAIT)
ACK_WAIT = 0.5
MOST = 300  # points of one withdrawal, at most


def _unsent(p: Publisher, with_future: bool) -> Future[Ack | None] | None:
    """A publish queued on a publisher with no stream (never sent), with a
    handler, and a Future or not."""
    return p.submit(request(0), lambda ack, error: None, None, with_future)


@pytest.mark.parametrize("with_future", [True, False], ids=["future", "handler alone"])
def _sweep(
    setup: Callable[[Publisher], tuple[Callable[[], object], Future[Ack | None] | None]],
) -> set[str]:
    """Interrupts, on a fresh publisher with no stream each time, the action
    ``setup`` made for it at each of its points in turn; after each, the
    publish ends (its Future, if any, done), its slot is freed and ``flush``
    returns. Returns the functions interrupted."""
    interrupted: set[str] = set()
    for n in range(MOST):
        server = FakeServer()
        server.up = False  # no stream: a publish left in stays unsent until its deadline
        p = make(server, ack_wait=ACK_WAIT)
        action, future = setup(p)
        where = interrupted_at(n, action, in_sdk)
        assert p.flush(BOUND), f"flush() waits for good, interrupted at {n} ({where})"
        assert future is None or future.done(), f"interrupted at {n} ({where})"
        assert p._window.used == 0 and not p._pending, f"interrupted at {n} ({where})"
        p.close(_soon())
        if where is None:
            return interrupted
        interrupted.add(where)
    raise AssertionError(f"still interrupt points after {MOST}")


@pytest.mark.parametrize("with_future", [True, False], ids=["future", "handler alone"])
def test_a_withdrawal_interrupted_anywhere_ends_its_publish(with_future: bool) -> None:
    def withdrawal(p: Publisher) -> tuple[Callable[[], object], Future[Ack | None] | None]:
        future = _unsent(p, with_future)
        return functools.partial(p._withdraw, p._pending["c0"]), future

    interrupted = _sweep(withdrawal)
    assert {"_withdraw", "_complete", "settle_run"} <= interrupted, interrupted


def _second_interrupt_at_entry(p: Publisher) -> None:
    """Makes ``p``'s first withdrawal raise as it starts (Ctrl-C again),
    before any of it ran; later ones run."""
    withdraw = p._withdraw
    calls: list[Pending] = []

    def second_at_entry(pending: Pending) -> None:
        calls.append(pending)
        if len(calls) == 1:
            raise Interrupted
        withdraw(pending)

    p._withdraw = second_at_entry  # type: ignore[method-assign]


@pytest.mark.parametrize("with_future", [True, False], ids=["future", "handler alone"])
def test_a_second_interrupt_as_the_withdrawal_starts_still_ends_the_publish(
    with_future: bool,
) -> None:
    """The first interrupt anywhere in ``submit``, the second as its
    withdrawal starts (before any of it ran): the publish still ends, its
    slot is freed and ``flush`` returns. A publish interrupted before it was
    queued and on the timer stayed registered with no deadline, and every
    ``flush()`` without a timeout waited for it for good."""

    def submit(p: Publisher) -> tuple[Callable[[], object], Future[Ack | None] | None]:
        _second_interrupt_at_entry(p)
        return functools.partial(
            p.submit, request(0), lambda ack, error: None, None, with_future
        ), None

    interrupted = _sweep(submit)
    assert {"submit", "start_thread", "append_held"} <= interrupted, interrupted
