"""The gRPC publisher's settled Futures: kept for the publishing threads to
free, one per publish (liftbridge/_publish/_pending.py says why)."""

from __future__ import annotations

import dataclasses
import weakref
from concurrent.futures import Future

from liftbridge._core._acks import Ack
from liftbridge._core._callbacks import Outcome
from liftbridge._publish._pending import Pending, Spent, claimed_outcomes, new_pending
from liftbridge_api import api_pb2


def _pending(future: Future[Ack | None] | None, *, expects_ack: bool = True) -> Pending:
    def handler(ack: Ack | None, error: BaseException | None) -> None: ...

    request = api_pb2.PublishRequest(stream="s", correlationId="c")
    return Pending("c", request, future, handler, expects_ack)


def test_an_outcome_lets_go_of_the_future_and_names_the_handler_only_for_an_ack() -> None:
    future: Future[Ack | None] = Future()
    pending = _pending(future)
    [settled] = claimed_outcomes([(pending, None, None)])
    assert settled[0] is future and settled[1] is pending.handler
    assert pending.future is None
    assert claimed_outcomes([(_pending(None, expects_ack=False), None, None)])[0][1] is None


def test_new_pending_sets_every_field_as_the_class_does() -> None:
    """new_pending writes each slot itself: a field added to Pending and not
    to it would be missing (an AttributeError on first read) or differ here."""
    future: Future[Ack | None] = Future()
    request = api_pb2.PublishRequest(stream="s", correlationId="c")
    made = new_pending("c", request, future, print, False, "h:1")
    expected = Pending("c", request, future, print, False, leader="h:1")
    for field in dataclasses.fields(Pending):
        assert getattr(made, field.name) == getattr(expected, field.name), field.name
    assert new_pending("c", request, None, None, True, None).leader is None


def test_spent_futures_are_freed_one_per_call_oldest_first_and_all_on_clear() -> None:
    spent = Spent()
    futures: list[Future[Ack | None]] = [Future() for _ in range(3)]
    refs = [weakref.ref(f) for f in futures]
    settled: list[Outcome] = [(f, None, None, None) for f in futures]
    settled.append((None, None, None, None))  # a publish without a Future
    spent.keep(settled)
    del futures, settled
    assert all(ref() is not None for ref in refs)  # kept
    spent.free_one()
    assert [ref() is None for ref in refs] == [True, False, False]
    spent.clear()
    assert all(ref() is None for ref in refs)
    spent.free_one()  # nothing kept: no error
