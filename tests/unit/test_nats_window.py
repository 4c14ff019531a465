"""AckWindow, the pending acks and in-flight window of NatsStreamPublisher, on
its own: every publish is resolved exactly once, by its ack, its deadline on
the shared ack timer, or a failure; no NATS server needed."""

from __future__ import annotations

import dataclasses
import gc
import threading
import time
import weakref
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass

import pytest

from liftbridge._core._acks import Ack, ack_outcome
from liftbridge._core._callbacks import CallbackRunner
from liftbridge._core._deadlines import AckTimer, Watched
from liftbridge._core._envelope import EnvelopeType, ack_wire, encode_envelope
from liftbridge._errors import (
    AckTimeoutError,
    ClientClosedError,
    ConnectionLostError,
    EnvelopeError,
    LeaderLostError,
    LiftbridgeError,
    PublishWindowFullError,
    ServerError,
)
from liftbridge._publish._nats_pending import Pending, new_pending
from liftbridge._publish._nats_window import AckWindow
from liftbridge_api import api_pb2

TIMEOUT = 5.0


@pytest.fixture
def parts() -> Iterator[tuple[AckTimer, CallbackRunner]]:
    timer, runner = AckTimer(), CallbackRunner()
    yield timer, runner
    timer.close(time.monotonic() + 5)
    runner.close(time.monotonic() + 5)


def _window(parts: tuple[AckTimer, CallbackRunner], max_inflight: int = 8) -> AckWindow:
    timer, runner = parts
    window = AckWindow(
        max_inflight=max_inflight, ack_timeout=TIMEOUT, timer=timer, runner=runner, inbox="in"
    )
    window.watch()
    return window


def _pending(
    runner: CallbackRunner, correlation_id: str, handler: object = None, timeout: float = TIMEOUT
) -> Pending:
    return Pending(correlation_id, runner.future(), handler, timeout, "orders")  # type: ignore[arg-type]


def _f(entry: Pending) -> Future[Ack | None]:
    assert isinstance(entry.future, Future)
    return entry.future


def _ack(correlation_id: str, offset: int) -> bytes:
    pb = api_pb2.Ack(stream="orders", offset=offset, correlationId=correlation_id)
    return encode_envelope(EnvelopeType.ACK, pb.SerializeToString())


class _Outcomes:
    """An ack handler that records each (ack, error) it is called with."""

    def __init__(self) -> None:
        self.calls: list[tuple[Ack | None, BaseException | None]] = []
        self.handled = threading.Event()

    def __call__(self, ack: Ack | None, error: BaseException | None) -> None:
        self.calls.append((ack, error))
        self.handled.set()


def test_acks_resolve_their_publishes_once(parts: tuple[AckTimer, CallbackRunner]) -> None:
    window = _window(parts)
    handler = _Outcomes()
    first, second = _pending(parts[1], "a", handler), _pending(parts[1], "b")
    window.admit(first)
    window.admit(second)
    window.settle_acks([_ack("b", 7), b"not an envelope", _ack("a", 6), _ack("a", 99)])
    ack = _f(first).result(0)
    assert ack is not None and ack.offset == 6  # the late duplicate was dropped
    second_ack = _f(second).result(0)
    assert second_ack is not None and second_ack.offset == 7
    assert handler.handled.wait(TIMEOUT) and [o[0].offset for o in handler.calls if o[0]] == [6]
    assert window.flush(time.monotonic())  # nothing left pending


def test_an_ack_envelope_whose_ack_does_not_parse_is_dropped_and_logged(
    parts: tuple[AckTimer, CallbackRunner], caplog: pytest.LogCaptureFixture
) -> None:
    window = _window(parts)
    entry = _pending(parts[1], "a")
    window.admit(entry)
    broken = encode_envelope(EnvelopeType.ACK, b"\x0a\xff")  # a string field past the end
    with caplog.at_level("WARNING", logger="liftbridge._publish._nats_window"):
        window.settle_acks([broken, _ack("a", 5)])
    ack = _f(entry).result(0)
    assert ack is not None and ack.offset == 5
    with pytest.raises(EnvelopeError) as told:  # what the log line says: ack_wire's error
        ack_wire(broken)
    assert "not a valid Ack protobuf" in str(told.value)
    assert [r.getMessage() for r in caplog.records] == [
        f"Dropping a message on ack inbox in: {told.value}"
    ]


def test_an_ack_with_an_unknown_policy_fails_its_publish_at_once(
    parts: tuple[AckTimer, CallbackRunner],
) -> None:
    window = _window(parts)
    handler = _Outcomes()
    entry = _pending(parts[1], "x", handler)
    window.admit(entry)
    unknown_policy = api_pb2.Ack(
        correlationId="x", ackPolicy=api_pb2.AckPolicy.ValueType(7)
    ).SerializeToString()
    window.settle_acks([encode_envelope(EnvelopeType.ACK, unknown_policy)])
    with pytest.raises(ServerError, match="does not know"):
        _f(entry).result(0)  # not left to its deadline, TIMEOUT away
    assert handler.handled.wait(TIMEOUT)
    assert handler.calls[0][0] is None and isinstance(handler.calls[0][1], ServerError)
    assert window.flush(time.monotonic())


def test_a_refused_ack_among_others_fails_only_its_own_publish(
    parts: tuple[AckTimer, CallbackRunner],
) -> None:
    # A payload dropped ahead of it must not shift which publish the refusal goes to.
    window = _window(parts)
    entries = [_pending(parts[1], name) for name in ("a", "b", "c")]
    for entry in entries:
        window.admit(entry)
    refused = api_pb2.Ack(correlationId="b", ackError=api_pb2.Ack.INCORRECT_OFFSET)
    window.settle_acks(
        [
            b"not an envelope",
            _ack("a", 1),
            encode_envelope(EnvelopeType.ACK, refused.SerializeToString()),
            _ack("c", 3),
        ]
    )
    first, third = _f(entries[0]).result(0), _f(entries[2]).result(0)
    assert first is not None and first.offset == 1
    assert third is not None and third.offset == 3
    assert isinstance(_f(entries[1]).exception(0), LiftbridgeError)
    assert window.flush(time.monotonic())


def test_deadlines_expire_on_the_timer_in_order_and_by_heap(
    parts: tuple[AckTimer, CallbackRunner],
) -> None:
    timer, runner = parts
    window = AckWindow(max_inflight=8, ack_timeout=0.05, timer=timer, runner=runner, inbox="in")
    window.watch()
    default, custom = _pending(runner, "a", timeout=0.05), _pending(runner, "b", timeout=0.1)
    window.admit(default)  # expired in admission order
    window.admit(custom)  # the heap
    for entry in (default, custom):
        with pytest.raises(AckTimeoutError, match="no ack within"):
            _f(entry).result(TIMEOUT)
    assert window.flush(time.monotonic())  # both out of the table, their slots freed
    window.settle_acks([_ack("a", 1)])  # too late: dropped, not resolved twice
    window.release_timer()


def test_a_full_window_waits_then_refuses(parts: tuple[AckTimer, CallbackRunner]) -> None:
    window = _window(parts, max_inflight=1)
    window.admit(_pending(parts[1], "a"))
    with pytest.raises(PublishWindowFullError, match=r"after 0\.05s"):
        window.admit(_pending(parts[1], "b", timeout=0.05))


def test_an_ack_lets_in_a_publish_waiting_on_the_full_window(
    parts: tuple[AckTimer, CallbackRunner],
) -> None:
    # _release notifies only while someone waits: the waiter must still be woken.
    window = _window(parts, max_inflight=1)
    window.admit(_pending(parts[1], "a"))
    outcomes: list[BaseException | None] = []

    def admit() -> None:
        try:
            window.admit(_pending(parts[1], "b", timeout=30))
        except BaseException as e:
            outcomes.append(e)
        else:
            outcomes.append(None)

    waiter = threading.Thread(target=admit, name="test-window-waiter")
    waiter.start()
    time.sleep(0.05)  # most likely waiting on the full window by now; either way it gets in
    window.settle_acks([_ack("a", 1)])
    waiter.join(TIMEOUT)  # not woken: it would wait out its 30 s
    assert not waiter.is_alive() and outcomes == [None]
    window.settle_acks([_ack("b", 2)])
    assert window.flush(time.monotonic() + TIMEOUT)


def test_refusals_wake_waiters_and_the_first_one_stays(
    parts: tuple[AckTimer, CallbackRunner],
) -> None:
    window = _window(parts, max_inflight=1)
    window.admit(_pending(parts[1], "a"))
    errors: list[BaseException] = []

    def admit() -> None:
        try:
            window.admit(_pending(parts[1], "b", timeout=30))
        except BaseException as e:
            errors.append(e)

    waiter = threading.Thread(target=admit, name="test-window-waiter")
    waiter.start()
    time.sleep(0.05)  # most likely waiting on the full window by now; either way it must raise
    assert window.refuse(lambda: ClientClosedError("closed"), replace=True)
    waiter.join(TIMEOUT)
    assert [type(e) for e in errors] == [ClientClosedError]
    assert not window.refuse(lambda: ConnectionLostError("lost"), replace=False)
    with pytest.raises(ClientClosedError):
        window.check_open()


def test_fail_all_and_a_refused_write(parts: tuple[AckTimer, CallbackRunner]) -> None:
    window = _window(parts)
    refused, left = _pending(parts[1], "a"), _pending(parts[1], "b")
    window.admit(refused)
    window.admit(left)
    window.settle(refused, ConnectionLostError("not taken"))
    window.settle(refused, ConnectionLostError("twice"))  # already resolved: ignored
    window.fail_all(lambda entry: ClientClosedError(f"closed before {entry.correlation_id}"))
    with pytest.raises(ConnectionLostError, match="not taken"):
        _f(refused).result(0)
    with pytest.raises(ClientClosedError, match="closed before b"):
        _f(left).result(0)
    assert window.flush(None)


def test_a_leader_found_down_fails_only_its_publishes(
    parts: tuple[AckTimer, CallbackRunner],
) -> None:
    window = _window(parts)
    _, runner = parts
    doomed, healthy, acked = (_pending(runner, c) for c in ("d", "h", "a"))
    doomed.leader, healthy.leader, acked.leader = "10.0.0.1:1", "10.0.0.2:1", "10.0.0.1:1"
    for entry in (doomed, healthy, acked):
        window.admit(entry)
    window.settle_acks([_ack("a", 0)])
    window.fail_led_by("10.0.0.1:1")
    error = _f(doomed).exception(timeout=5)
    assert isinstance(error, LeaderLostError) and error.address == "10.0.0.1:1"
    assert _f(acked).result(timeout=5) is not None
    assert not _f(healthy).done()
    window.settle_acks([_ack("h", 1)])
    assert _f(healthy).result(timeout=5) is not None
    assert window.flush(time.monotonic() + 5)


@dataclass(eq=False)
class _Due:
    deadline: float
    done: bool = False


def test_the_in_order_queue_sweeps_resolved_items_and_keeps_pending_ones() -> None:
    """With more publishes pending than ``compact_at`` (a wide window) each
    sweep keeps them all, and the next one waits until the queue has doubled
    (sweeping at every append would walk all of them each time)."""
    timer = AckTimer()
    expired: list[_Due] = []
    queue = timer.ordered(expired.append, wait=60.0, compact_at=8)
    try:
        items = [_Due(time.monotonic() + 60.0) for _ in range(100)]
        for item in items:
            queue.append(item)
        assert len(queue) == 100  # nothing resolved: nothing swept away
        for item in items[1:]:  # the oldest stays pending, so only a sweep drops the rest
            item.done = True
        late = [_Due(time.monotonic() + 60.0) for _ in range(200)]
        for item in late:
            queue.append(item)
        assert len(queue) < 100 + len(late)  # the resolved ones were swept
        assert not expired
    finally:
        timer.close(time.monotonic() + 5)


def test_a_watched_poll_that_raises_is_logged_and_polled_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    timer = AckTimer()
    polled = threading.Event()
    calls: list[float] = []

    def poll(now: float) -> float | None:
        calls.append(now)
        if len(calls) == 1:
            raise RuntimeError("a broken poll")
        polled.set()
        return None

    watched = Watched(poll, 0.01)
    timer.watch(watched)
    try:
        assert polled.wait(TIMEOUT)
        assert "the ack timer failed on an expiry" in caplog.text
        timer.unwatch(watched)
        timer.unwatch(watched)  # idempotent
    finally:
        timer.close(time.monotonic() + 5)


def test_a_settled_future_is_let_go_of_by_the_next_admission_or_a_flush(
    parts: tuple[AckTimer, CallbackRunner],
) -> None:
    # The I/O thread that settles a Future does not free it: the publishing
    # thread does, right after its own publish's allocations (GC accounting:
    # see _nats_window's docstring).
    window = _window(parts)
    entries = [_pending(parts[1], name) for name in ("a", "b", "c")]
    window.admit(entries[0])
    window.admit(entries[1])
    gone = [weakref.ref(_f(entry)) for entry in entries]
    window.settle_acks([_ack("a", 1), _ack("b", 2)])
    del entries[:2]
    gc.collect()
    assert gone[0]() is not None and gone[1]() is not None  # kept for the next admission
    window.admit(entries[0])  # lets go of the oldest settled one, "a"
    assert gone[0]() is None and gone[1]() is not None
    window.settle_acks([_ack("c", 3)])
    ack = _f(entries.pop()).result(0)
    assert ack is not None and ack.offset == 3
    assert window.flush(time.monotonic() + TIMEOUT)  # lets go of the rest
    assert gone[1]() is None and gone[2]() is None


def test_settling_a_batch_of_acks_frees_as_many_tracked_objects_as_it_keeps(
    parts: tuple[AckTimer, CallbackRunner],
) -> None:
    # CPython starts a young collection once tracked allocations outnumber
    # frees by 700. Settling an ack makes its Ack (the Future keeps it) and
    # frees the publish's entry; its protobuf is freed at once (the Ack keeps
    # the bytes). Keeping the protobuf was one tracked object more per ack,
    # so a socket read of ~700 acks set off a collection over every Future in
    # flight; kept as (entry, protobuf) pairs it was three, at ~230 acks.
    count = 600
    window = _window(parts, max_inflight=count)
    futures = []
    for i in range(count):
        entry = _pending(parts[1], f"c{i}")
        window.admit(entry)
        futures.append(_f(entry))
    del entry
    acks = [_ack(f"c{i}", i) for i in range(count)]
    gc.collect()
    gc.disable()  # the tally still counts; no collection resets it meanwhile
    try:
        before = gc.get_count()[0]
        window.settle_acks(acks)
        grown = gc.get_count()[0] - before
        kept_protobufs = sum(type(o) is api_pb2.Ack for o in gc.get_objects())
    finally:
        gc.enable()
    assert grown < count // 10  # was ~count with the protobuf kept, ~3 * count with pairs
    assert kept_protobufs == 0
    assert [f.result(0).offset for f in futures] == list(range(count))  # type: ignore[union-attr]
    assert window.flush(time.monotonic() + TIMEOUT)


def test_a_future_alone_makes_its_ack_when_first_read(
    parts: tuple[AckTimer, CallbackRunner],
) -> None:
    # The I/O thread resolves a publish's own Future (window.future(), no
    # handler) with the ack's wire bytes: no Ack is made until the Future is
    # read, and every read gets the one made then. It does not free that
    # publish either: its entry and Future go to the next admission (it made
    # neither; GC accounting: see _nats_window's docstring).
    window = _window(parts)
    outcomes = _Outcomes()
    alone, handled = (
        Pending(name, window.future(), handler, TIMEOUT, "orders")
        for name, handler in (("a", None), ("h", outcomes))
    )
    window.admit(alone)
    window.admit(handled)
    gone = weakref.ref(_f(alone))
    del alone
    gc.collect()
    window.settle_acks([_ack("a", 1), _ack("h", 2)])
    assert outcomes.handled.wait(TIMEOUT)
    handled_ack = outcomes.calls[0][0]
    assert [type(o) is Ack for o in gc.get_objects()].count(True) == 1  # the handler's alone
    future = gone()
    assert future is not None and future.done() and future.exception() is None
    ack = future.result(0)
    assert isinstance(ack, Ack) and ack.offset == 1 and ack.correlation_id == "a"
    assert future.result(0) is ack and ack == ack_outcome(ack_wire(_ack("a", 1))[1])[0]
    assert _f(handled).result(0) is handled_ack and handled_ack is not None
    assert handled_ack.offset == 2
    del future, ack
    refused = Pending("r", window.future(), None, TIMEOUT, "orders")
    window.admit(refused)
    assert gone() is None  # freed by the next admission
    wire = api_pb2.Ack(correlationId="r", ackError=api_pb2.Ack.INCORRECT_OFFSET)
    window.settle_acks([encode_envelope(EnvelopeType.ACK, wire.SerializeToString())])
    assert isinstance(_f(refused).exception(0), LiftbridgeError)
    assert window.flush(time.monotonic() + TIMEOUT)


def test_new_pending_sets_every_field_as_the_class_does() -> None:
    """new_pending writes each slot itself: a field added to Pending and not
    to it would be missing (an AttributeError on first read) or differ here."""
    future: Future[Ack | None] = Future()
    made = new_pending("c", future, print, 2.5, "s", "h:1")
    expected = Pending("c", future, print, 2.5, "s", leader="h:1")
    for field in dataclasses.fields(Pending):
        assert getattr(made, field.name) == getattr(expected, field.name), field.name
    assert new_pending("c", None, None, 1.0, "s", None).leader is None
