"""Ctrl-C while a subscription, a pull consumer or a group consumer closes:
whatever point of ``close()`` the interrupt lands on, a second ``close()``
finishes the job (its threads end, its streams are cancelled, a group member
leaves), and a third is harmless. And while a group consumer subscribes:
wherever the interrupt lands, what it took is given back with no ``close()``.

The interrupt is raised at each point of ``close()`` where an interrupt's
handler runs, in the SDK's frames (:mod:`tests.unit.interrupts`), on
subscriptions reading a fake router's streams (no network).
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest

import liftbridge
from liftbridge._consume._cursors import Cursors
from liftbridge._consume._positions import StartPosition, StopPosition, subscribe_request
from liftbridge._consume._pull import PullConsumer
from liftbridge._consume._subscription import Handler, Subscription, start_subscription
from liftbridge._core._router import ANY, Deadline, Target
from liftbridge._groups._consumer import Consumer
from liftbridge_api import api_pb2
from tests.unit.fake_router import FakeRouter, FakeStream, handshake, message, metadata_with
from tests.unit.interrupts import in_sdk, in_sdk_or_thread_start, interrupted_at, sweep_whole
from tests.unit.test_pull_unit import STREAM, FakeSource

MOST = 400  # interrupt points one close has, at most (a bound on each sweep)
BOUND = 30.0  # seconds a handle's threads may take to end (a loaded machine)
WHOLE = 5  # a sweep ends after this many runs in a row had no point left to interrupt


def _ended(before: set[threading.Thread], streams: list[FakeStream], where: str | None) -> None:
    """Every liftbridge-* thread started since ``before`` ends within BOUND
    and every stream was cancelled (not merely left to time out)."""
    deadline = time.monotonic() + BOUND
    for thread in threading.enumerate():
        if thread in before or not thread.name.startswith("liftbridge-"):
            continue
        thread.join(max(0.0, deadline - time.monotonic()))
        assert not thread.is_alive(), f"{thread.name} still runs (interrupted in {where})"
    for stream in streams:
        assert stream.done(), f"a stream left open (interrupted in {where})"


def _sweep(open_handle: Callable[[], tuple[Callable[[], object], list[FakeStream]]]) -> set[str]:
    """For each point of a fresh handle's ``close()`` in turn: the interrupt
    there, then a second close that must finish it, then a third. Returns the
    functions interrupted."""
    before = set(threading.enumerate())

    def run(n: int) -> str | None:
        close, streams = open_handle()
        where = interrupted_at(n, close, in_sdk)
        close()
        _ended(before, streams, where)
        close()  # harmless once closed
        return where

    return sweep_whole(run, WHOLE, MOST)


def _subscribe(router: FakeRouter, handler: Handler | None, partition: int = 0) -> Subscription:
    """A subscription that read offset 0 and waits on a live stream."""
    return start_subscription(
        router.as_router(),
        subscribe_request(STREAM, partition, 0, None, False, False),
        handler,
        resubscribe_wait=BOUND,
        open_timeout=BOUND,
    )


@pytest.mark.parametrize("iterated", [False, True], ids=["handler", "iterated"])
def test_a_subscription_close_interrupted_anywhere_is_finished_by_the_next(
    iterated: bool,
) -> None:
    def open_handle() -> tuple[Callable[[], object], list[FakeStream]]:
        router = FakeRouter(metadata=metadata_with({STREAM: 1}))
        stream = FakeStream([handshake(), message(STREAM, 0)])
        router.streams.append(stream)
        got = threading.Event()

        def handler(message: liftbridge.Message | None, error: BaseException | None) -> None:
            got.set()

        subscription = _subscribe(router, None if iterated else handler)
        if iterated:
            assert next(iter(subscription)).offset == 0
        else:
            assert got.wait(BOUND)
        return subscription.close, [stream]

    interrupted = _sweep(open_handle)
    assert {"close", "close_all", "_signal_close", "_join"} <= interrupted


class _StreamingSource(FakeSource):
    """A pull consumer's source whose subscriptions are real ones, reading
    a fake router's live streams."""

    def __init__(self) -> None:
        super().__init__()
        self.metadata = metadata_with({STREAM: 2})
        self.router = FakeRouter(metadata=self.metadata)
        self.streams: list[FakeStream] = []

    def subscribe(
        self,
        stream: str,
        handler: Handler | None = None,
        *,
        partition: int = 0,
        start: StartPosition | int | datetime | timedelta = StartPosition.NEW_ONLY,
        stop: StopPosition | int | datetime | None = None,
        read_replica: bool = False,
        resume: bool = False,
    ) -> Subscription:
        opened = FakeStream([handshake(), message(STREAM, 0, partition)])
        self.streams.append(opened)
        self.router.streams.append(opened)
        return _subscribe(self.router, handler, partition)


@pytest.mark.parametrize("discard", [True, False])
def test_a_pull_consumer_close_interrupted_anywhere_is_finished_by_the_next(
    discard: bool,
) -> None:
    def open_handle() -> tuple[Callable[[], object], list[FakeStream]]:
        source = _StreamingSource()
        consumer = PullConsumer(
            source,
            STREAM,
            partitions=None,
            start=0,
            stop=None,
            read_replica=False,
            max_buffered_messages=None,
            max_buffered_bytes=None,
            refill_threshold=None,
            stall_timeout=10 * BOUND,  # a watcher thread that runs till closed
            on_stall=None,
        )
        assert len(consumer.fetch(2, timeout=BOUND)) == 2
        return functools.partial(consumer.close, discard=discard), source.streams

    interrupted = _sweep(open_handle)
    assert {"close", "stop", "_signal_close"} <= interrupted


_GROUP_ANSWERS: dict[str, Callable[[], object]] = {
    "JoinConsumerGroup": lambda: api_pb2.JoinConsumerGroupResponse(
        coordinator="a", epoch=1, consumerTimeout=60_000_000_000, coordinatorTimeout=60_000_000_000
    ),
    "FetchConsumerGroupAssignments": lambda: api_pb2.FetchConsumerGroupAssignmentsResponse(
        epoch=1, assignments=[api_pb2.PartitionAssignment(stream=STREAM, partitions=[0, 1])]
    ),
    "FetchCursor": lambda: api_pb2.FetchCursorResponse(offset=-1),
    "SetCursor": api_pb2.SetCursorResponse,
    "FetchPartitionMetadata": lambda: api_pb2.FetchPartitionMetadataResponse(
        metadata=api_pb2.PartitionMetadata(highWatermark=-1, newestOffset=-1)
    ),
    "LeaveConsumerGroup": api_pb2.LeaveConsumerGroupResponse,
}


class _GroupRouter(FakeRouter):
    """Answers a group member's RPCs as a one-member group's coordinator
    would, as often as asked; each Subscribe opens a live stream holding
    offset 0."""

    def __init__(self) -> None:
        super().__init__(metadata=metadata_with({STREAM: 2, "__cursors": 1}))
        self.opened: list[FakeStream] = []

    def call(self, method: str, request: Any, **options: Any) -> Any:
        self.calls.append((method, request, options.get("target", ANY)))
        return _GROUP_ANSWERS[method]()

    def open_stream(
        self, method: str, request: Any, *, target: Target, deadline: Deadline
    ) -> tuple[str, FakeStream]:
        opened = FakeStream([handshake(), message(STREAM, 0, request.partition)])
        self.opened.append(opened)
        return "127.0.0.1:1000", opened


@pytest.mark.parametrize("pulled", [False, True], ids=["handler", "pulled"])
def test_a_group_consumer_close_interrupted_anywhere_is_finished_by_the_next(
    pulled: bool,
) -> None:
    routers: list[_GroupRouter] = []

    def open_handle() -> tuple[Callable[[], object], list[FakeStream]]:
        router = _GroupRouter()
        routers.append(router)
        consumer = Consumer(router.as_router(), Cursors(router.as_router()), "g")
        handled: list[int] = []

        def handler(message: liftbridge.Message | None, error: BaseException | None) -> None:
            assert message is not None, error
            handled.append(message.partition)

        consumer.subscribe(STREAM, None if pulled else handler)
        deadline = time.monotonic() + BOUND
        while len(handled) < 2:
            assert time.monotonic() < deadline, "both partitions read"
            if pulled:
                handled += [m.partition for m in consumer.fetch(2, timeout=0.1)]
            else:
                time.sleep(0.01)
        return consumer.close, router.opened

    interrupted = _sweep(open_handle)
    assert {"close", "_stop", "stop"} <= interrupted
    for router in routers:  # each member committed and left
        methods = [method for method, _, _ in router.calls]
        assert "LeaveConsumerGroup" in methods


@pytest.mark.parametrize(
    ("pulled", "pinned"),
    [(False, False), (True, False), (False, True)],
    ids=["handler", "pulled", "pinned"],
)
def test_a_group_subscribe_interrupted_anywhere_leaves_nothing(pulled: bool, pinned: bool) -> None:
    """A group consumer's ``subscribe`` interrupted anywhere gives back what
    it took, with no ``close()``: its threads end, its streams are
    cancelled, and a member that joined leaves."""
    before = set(threading.enumerate())

    def handler(message: liftbridge.Message | None, error: BaseException | None) -> None:
        pass

    def run(n: int) -> str | None:
        router = _GroupRouter()
        consumer = Consumer(
            router.as_router(),
            Cursors(router.as_router()),
            "g",
            pinned=pinned,
            on_pin=(lambda event: None) if pinned else None,
        )
        where = interrupted_at(
            n,
            lambda: consumer.subscribe(STREAM, None if pulled else handler),
            in_sdk_or_thread_start,
        )
        if where is None:
            consumer.close()
        _ended(before, router.opened, where)
        methods = [method for method, _, _ in router.calls]
        if "JoinConsumerGroup" in methods:
            assert "LeaveConsumerGroup" in methods, f"a member left joined (in {where})"
        return where

    interrupted = sweep_whole(run, WHOLE, MOST)
    assert ("start" if pinned else "join_first") in interrupted
