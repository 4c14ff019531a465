"""``publish_many_async``'s batch path on its own (no network): the windows
admit a batch a part at a time and never past their size, a batch's
outcomes are gathered in the order of its values with the first error
winning, and close, timeouts and a broken stream settle every message of a
batch exactly once (the gRPC publisher against the fake PublishAsync stream
of test_publisher_unit, the NATS window directly)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any

import pytest

import liftbridge
from liftbridge._core._acks import Ack, ack_outcome
from liftbridge._core._callbacks import CallbackRunner
from liftbridge._core._deadlines import AckTimer
from liftbridge._core._envelope import EnvelopeType, encode_envelope
from liftbridge._errors import (
    AckTimeoutError,
    ClientClosedError,
    IncorrectOffsetError,
    PublishWindowFullError,
    ServerError,
)
from liftbridge._publish import _pending
from liftbridge._publish._batch import Batch, settle_members
from liftbridge._publish._nats_pending import Pending
from liftbridge._publish._nats_window import AckWindow
from liftbridge._publish._publisher import Publisher
from liftbridge._publish._window import Window
from liftbridge_api import api_pb2
from tests.unit.test_nats_window import _ack
from tests.unit.test_publisher_unit import (
    FakeServer,
    _close_client_threads,  # noqa: F401 (autouse: closes the runners and timers made)
    _soon,
    make,
    request,
)

WAIT = 5.0


def _batch(size: int) -> Batch:
    return Batch(Future(), size)


def _acks(count: int) -> list[Ack]:
    acks = [
        ack_outcome(api_pb2.Ack(stream="s", offset=i, correlationId=f"c{i}"))[0]
        for i in range(count)
    ]
    assert all(ack is not None for ack in acks)
    return acks  # type: ignore[return-value]


def _submitted(
    p: Publisher, count: int, timeout: float | None = None
) -> tuple[Batch, threading.Thread, list[BaseException]]:
    """``submit_many`` of requests c0..c<count-1> on a thread of its own
    (it blocks while the window is full); the list gets what it raised."""
    batch, raised = _batch(count), []

    def submit() -> None:
        try:
            p.submit_many([request(i) for i in range(count)], batch, timeout, one_partition=True)
        except BaseException as e:
            raised.append(e)

    thread = threading.Thread(target=submit, name="test-batch-submit")
    thread.start()
    return batch, thread, raised


# ------------------------------------------------------------------ Batch --


def test_a_batch_gathers_acks_in_the_order_of_its_values_and_the_first_error_wins() -> None:
    acks = _acks(3)
    ordered = _batch(3)
    ordered.settle([(2, acks[2], None)])
    ordered.settle([(0, acks[0], None)])
    assert not ordered.future.done()
    ordered.settle([(1, acks[1], None)])
    assert ordered.future.result(0) == acks
    failed = _batch(3)
    first, second = IncorrectOffsetError("first"), ServerError("second")
    failed.settle([(1, None, first), (0, acks[0], None)])
    assert not failed.future.done()  # resolved once every message has its outcome
    failed.settle([(2, None, second)])
    assert failed.future.exception(0) is first
    assert _batch(0).future.result(0) == []


def test_no_outcome_left_to_fail_leaves_a_resolved_batch_as_it_is() -> None:
    # An admission that raised after its last message was admitted fails "the
    # rest" from the end: nothing. Every ack came already and resolved it.
    acks = _acks(2)
    batch = _batch(2)
    batch.settle([(0, acks[0], None), (1, acks[1], None)])
    batch.fail_rest(2, ServerError("after the last message"))
    batch.settle([])
    assert batch.future.result(0) == acks


def test_members_of_interleaved_batches_each_settle_their_own() -> None:
    class Member:
        def __init__(self, batch: Batch, index: int) -> None:
            self.batch: Batch | None = batch
            self.index = index

    a, b = _batch(2), _batch(2)
    ack = _acks(1)[0]
    settle_members(
        [(Member(a, 0), ack, None), (Member(b, 1), ack, None), (Member(a, 1), ack, None)]
    )
    assert a.future.result(0) == [ack, ack]
    assert not b.future.done()
    settle_members([(Member(b, 0), None, ServerError("no"))])
    assert isinstance(b.future.exception(0), ServerError)


# ------------------------------------------------------- the gRPC window --


def _take_some(window: Window, wait: float, want: int) -> int:
    """Up to ``want`` slots, as ``BatchSubmit._admit_part`` takes a part's:
    what :meth:`Window.room` says is free, at least one."""
    taken = min(want, window.room(wait))
    window.used += taken
    return taken


def test_the_window_takes_what_is_free_at_least_one_and_never_past_its_size() -> None:
    lock = threading.Lock()
    window = Window(lock, 8)
    with lock:
        assert _take_some(window, WAIT, 5) == 5
        assert _take_some(window, WAIT, 5) == 3  # the rest of the window, not 5
        assert window.used == 8
        with pytest.raises(PublishWindowFullError):
            _take_some(window, 0.05, 1)
        window.give()
        assert _take_some(window, 0.05, 4) == 1  # at its timeout, the one free slot
        assert window.used == 8


def test_a_full_window_wakes_a_batch_at_its_resume_mark_with_an_eighth_free() -> None:
    lock = threading.Lock()
    window = Window(lock, 16)  # an eighth: 2 slots
    with lock:
        _take_some(window, WAIT, 16)
    taken: list[int] = []

    def take() -> None:
        with lock:
            taken.append(_take_some(window, 30.0, 10))

    thread = threading.Thread(target=take, name="test-window-batch")
    thread.start()
    with lock:
        window.give()
        window.give()
    thread.join(WAIT)
    assert taken == [2] and window.used == 16


# ------------------------------------------------- the gRPC publisher --


def test_a_batch_larger_than_the_window_goes_in_parts_in_order_never_past_it() -> None:
    server = FakeServer()
    server.ack, server.hold = False, True
    p = make(server, max_inflight=8, ack_wait=30.0)
    batch, thread, raised = _submitted(p, 50)
    for released in range(50):
        call, sent = server.held.get(timeout=WAIT)
        # Requests reach the server only once admitted: never more than the
        # window past the acks sent so far.
        assert len(server.log) <= released + 8
        call.ack(sent)
    thread.join(WAIT)
    assert raised == []
    acks = batch.future.result(WAIT)
    assert [ack.correlation_id for ack in acks] == [f"c{i}" for i in range(50)]
    assert [ack.offset for ack in acks] == list(range(50))
    assert server.log == [f"c{i}" for i in range(50)]
    assert p.flush(WAIT)
    p.close(_soon())


def test_acks_out_of_order_and_a_refusal_in_the_middle() -> None:
    server = FakeServer()
    server.ack, server.hold = False, True
    p = make(server, ack_wait=30.0)
    ordered, failing = _batch(4), _batch(4)
    p.submit_many([request(i) for i in range(4)], ordered, None, one_partition=True)
    p.submit_many([request(i) for i in range(4, 8)], failing, None, one_partition=True)
    held = [server.held.get(timeout=WAIT) for _ in range(8)]
    call = held[0][0]
    refused = api_pb2.PublishResponse(
        correlationId="c5",
        asyncError=api_pb2.PublishAsyncError(
            code=api_pb2.PublishAsyncError.INCORRECT_OFFSET, message="incorrect offset"
        ),
    )
    call.answer_together([call.ack_for(request) for _, request in reversed(held[:4])])
    call.answer_together(
        [call.ack_for(held[4][1]), refused] + [call.ack_for(r) for _, r in held[6:]]
    )
    assert [ack.offset for ack in ordered.future.result(WAIT)] == [0, 1, 2, 3]
    assert isinstance(failing.future.exception(WAIT), IncorrectOffsetError)
    assert p.flush(WAIT)
    p.close(_soon())


def test_a_broken_stream_fails_the_batch_sent_on_it_and_resends_one_never_sent() -> None:
    server = FakeServer()
    server.ack = False
    p = make(server, ack_wait=30.0)
    sent = _batch(10)
    p.submit_many([request(i) for i in range(10)], sent, None, one_partition=True)
    deadline = time.monotonic() + WAIT
    while len(server.log) < 10:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    server.up = False
    server.calls[0].break_()
    assert isinstance(sent.future.exception(WAIT), liftbridge.ConnectionLostError)
    unsent = _batch(10)  # queued while no stream is up: nothing of it was sent
    p.submit_many([request(i) for i in range(10, 20)], unsent, None, one_partition=True)
    server.ack = server.up = True
    acks = unsent.future.result(WAIT)
    assert [ack.correlation_id for ack in acks] == [f"c{i}" for i in range(10, 20)]
    assert server.log[10:] == [f"c{i}" for i in range(10, 20)]  # once each, in order
    assert p.flush(WAIT)
    p.close(_soon())


def _until(done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not done():
        assert time.monotonic() < deadline, what
        time.sleep(0.005)


def test_a_batch_part_is_queued_as_one_item_and_goes_out_in_order_in_runs() -> None:
    server = FakeServer()
    server.ack = False
    p = make(server, ack_wait=30.0)
    gate = server.gates["c0"] = threading.Event()
    p.submit(request(0), None, None)  # the sender holds it at the gate
    _until(p._outbox.empty, "the sender never took c0")
    batch = _batch(40)
    p.submit_many([request(i) for i in range(1, 41)], batch, None, one_partition=True)
    p.submit(request(41), None, None)
    assert p._outbox._queue.qsize() == 2  # the batch's part, then c41
    gate.set()
    _until(lambda: len(server.log) == 42, "not everything was written")
    assert server.log == [f"c{i}" for i in range(42)]
    p.close(_soon())


def test_the_rest_of_a_part_a_broken_stream_left_unsent_goes_first_on_the_next() -> None:
    server = FakeServer()
    server.ack = False
    p = make(server, ack_wait=30.0)
    gate = server.gates["c5"] = threading.Event()
    batch = _batch(40)  # the sender takes c0..c15 (a run), the rest waits first in line
    p.submit_many([request(i) for i in range(40)], batch, None, one_partition=True)
    _until(lambda: len(server.log) == 5, "the sender never reached c5")
    server.up = False
    server.calls[0].break_()
    gate.set()
    assert server.stream_failed.wait(WAIT)  # c0..c15 failed: sent on the broken stream
    server.ack = server.up = True
    assert isinstance(batch.future.exception(WAIT), liftbridge.ConnectionLostError)
    assert p.flush(WAIT)
    assert server.log == [f"c{i}" for i in (*range(5), *range(16, 40))]  # once each, in order
    p.close(_soon())


def test_close_while_a_batch_waits_for_the_window_settles_every_message() -> None:
    server = FakeServer()
    server.ack = False
    p = make(server, max_inflight=4, ack_wait=30.0)
    batch, thread, raised = _submitted(p, 10)
    deadline = time.monotonic() + WAIT
    while len(server.log) < 4:  # the first part is in; the rest waits for room
        assert time.monotonic() < deadline
        time.sleep(0.01)
    p.close(_soon())
    thread.join(WAIT)
    assert [type(e) for e in raised] == [ClientClosedError]
    assert isinstance(batch.future.exception(WAIT), ClientClosedError)
    assert server.log == [f"c{i}" for i in range(4)]


def test_a_batch_with_a_timeout_of_its_own_times_out_message_by_message() -> None:
    server = FakeServer()
    server.ack = False
    p = make(server, ack_wait=30.0)
    own, default = _batch(3), _batch(3)
    p.submit_many(
        [request(i) for i in range(3)], own, 0.1, one_partition=True
    )  # the timer's heap, once
    assert isinstance(own.future.exception(WAIT), AckTimeoutError)
    quick = make(server, ack_wait=0.1)
    quick.submit_many(
        [request(i) for i in range(3, 6)], default, None, one_partition=True
    )  # in order
    assert isinstance(default.future.exception(WAIT), AckTimeoutError)
    assert p.flush(WAIT) and quick.flush(WAIT)
    p.close(_soon())
    quick.close(_soon())


# ------------------------------------------------------ the NATS window --


@pytest.fixture
def nats_window() -> Iterator[Callable[..., AckWindow]]:
    made: list[tuple[AckWindow, AckTimer, CallbackRunner]] = []

    def window(max_inflight: int, ack_timeout: float = WAIT) -> AckWindow:
        timer, runner = AckTimer(), CallbackRunner()
        made.append(
            (
                AckWindow(
                    max_inflight=max_inflight,
                    ack_timeout=ack_timeout,
                    timer=timer,
                    runner=runner,
                    inbox="in",
                ),
                timer,
                runner,
            )
        )
        made[-1][0].watch()
        return made[-1][0]

    yield window
    for window_, timer, runner in made:
        window_.release_timer()
        timer.close(_soon())
        runner.close(_soon())


def _entries(batch: Batch, count: int, timeout: float = WAIT) -> list[Pending]:
    return [
        Pending(f"c{i}", None, None, timeout, "orders", 0.0, 0, None, batch, i)
        for i in range(count)
    ]


def test_the_nats_window_admits_a_batch_in_parts_and_never_past_its_size(
    nats_window: Callable[..., AckWindow],
) -> None:
    window = nats_window(4)  # resumes at 3 in flight
    batch = _batch(10)
    entries = _entries(batch, 10)
    assert window.admit_some(entries, 0, WAIT) == 4
    with pytest.raises(PublishWindowFullError):
        window.admit_some(entries, 4, 0.05)
    window.settle_acks([_ack("c1", 1)])
    assert window.admit_some(entries, 4, WAIT) == 5  # the one slot freed
    window.settle_acks([_ack(f"c{i}", i) for i in (0, 2, 3)])
    assert window.admit_some(entries, 5, WAIT) == 8
    window.settle_acks([_ack(f"c{i}", i) for i in (7, 6, 5, 4)])
    assert window.admit_some(entries, 8, WAIT) == 10
    assert not batch.future.done()
    window.settle_acks([_ack("c9", 9), _ack("c8", 8)])
    assert [ack.offset for ack in batch.future.result(WAIT)] == list(range(10))
    assert window.flush(time.monotonic() + WAIT)


def test_the_nats_window_fails_a_batch_by_its_first_error_and_times_out_a_part(
    nats_window: Callable[..., AckWindow],
) -> None:
    window = nats_window(8)
    refused = _batch(2)
    entries = _entries(refused, 2)
    window.admit_some(entries, 0, WAIT)
    unknown_policy = api_pb2.Ack(
        correlationId="c0", ackPolicy=api_pb2.AckPolicy.ValueType(7)
    ).SerializeToString()
    window.settle_acks([encode_envelope(EnvelopeType.ACK, unknown_policy), _ack("c1", 1)])
    assert isinstance(refused.future.exception(WAIT), ServerError)
    late = _batch(3)
    window.admit_some(_entries(late, 3, timeout=0.05), 0, 0.05)  # one timer entry
    assert isinstance(late.future.exception(WAIT), AckTimeoutError)
    assert window.flush(time.monotonic() + WAIT)


def test_a_refused_nats_window_fails_the_rest_of_the_batch(
    nats_window: Callable[..., AckWindow],
) -> None:
    window = nats_window(2)
    batch = _batch(5)
    entries = _entries(batch, 5)
    assert window.admit_some(entries, 0, WAIT) == 2
    window.refuse(lambda: ClientClosedError("closed"), replace=True)
    with pytest.raises(ClientClosedError):
        window.admit_some(entries, 2, WAIT)
    batch.fail_rest(2, ClientClosedError("closed"))  # as the publisher does
    window.fail_all(lambda entry: ClientClosedError(f"closed before {entry.correlation_id}"))
    assert isinstance(batch.future.exception(WAIT), ClientClosedError)


def test_a_run_of_acks_freeing_slots_at_once_wakes_a_waiter_per_slot_below_the_mark() -> None:
    # give(count) is what a run of acks frees: it must wake as many waiting
    # producers as count gives one by one would, or the second one below
    # would sleep until its 30 s timeout.
    lock = threading.Lock()
    window = Window(lock, 8)  # resumes at 7 used
    with lock:
        _take_some(window, WAIT, 8)
    took: list[str] = []

    def take(name: str) -> None:
        with lock:
            window.take(30.0)
            took.append(name)

    threads = [threading.Thread(target=take, args=(f"p{i}",), name=f"test-p{i}") for i in (1, 2)]
    for thread in threads:
        thread.start()
    while True:  # both wait for the window
        with lock:
            if window._waiters == 2:
                break
        time.sleep(0.001)
    with lock:
        window.give(3)  # 5 used: 8 -> 7 and 7 -> 6 pass the mark, 6 -> 5 too
    for thread in threads:
        thread.join(WAIT)
    assert sorted(took) == ["p1", "p2"] and window.used == 7


@pytest.mark.parametrize("how", ["acked", "timed out"])
def test_flush_waits_for_batch_members_claimed_but_not_yet_settled(
    how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch's publishes are claimed in the publisher's lock (out of the
    pending table) and settled into their batch after it: flush() called in
    between waits for that too (as for a single publish's Future). It
    returned True with the batch's Future not done."""
    server = FakeServer()
    server.ack = False
    server.hold = how == "acked"
    p = make(server, ack_wait=30.0 if how == "acked" else 0.2)
    entered, go_on = threading.Event(), threading.Event()
    settle = settle_members  # _pending calls it by its own name

    def held(outcomes: list[tuple[Any, Any, Any]]) -> None:
        entered.set()
        go_on.wait(WAIT)
        settle(outcomes)

    monkeypatch.setattr(_pending, "settle_members", held)
    batch = _batch(1)
    p.submit_many([request(0)], batch, None, one_partition=True)
    if how == "acked":
        server.release(1)
    assert entered.wait(WAIT)  # claimed: out of the pending table, not settled
    assert not batch.future.done()
    assert not p.flush(0.3)  # waits for it, and times out while it is held
    go_on.set()
    assert p.flush(WAIT)
    assert batch.future.done()
    p.close(_soon())
