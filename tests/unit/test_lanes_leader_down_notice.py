"""A broker-down notice for a synchronous publish's partition leader that
lands while the publish is being registered on its lane is never missed: the
lane registers the publish (its leader and deadline) before it checks whether
that leader is down, so a notice after the check cancels the lane at once
(LeaderLostError), and one before it holds the publish for the new leader.
Before, the check came first and a notice in between found no publish
waiting on the leader: the publish waited out its whole ack timeout.

The notice is injected from inside the router's ``broker_down`` (the check
itself) and applied synchronously, so the interleaving is exact, no sleeps."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator

import pytest

import liftbridge
from liftbridge._core._deadlines import AckTimer
from liftbridge._core._router import Deadline
from liftbridge._publish._lanes import Lanes
from liftbridge_api import api_pb2

ACK_TIMEOUT = 5.0  # what a missed notice costs; the fixed code takes none of it


class FakeStream:
    """A PublishAsync stream: acks what is written when ``acking``, else
    stays silent; ``cancel`` ends it with ConnectionLostError."""

    def __init__(self, acking: bool) -> None:
        self.acking = acking
        self.written: list[api_pb2.PublishRequest] = []
        self._responses: queue.SimpleQueue[api_pb2.PublishResponse | None] = queue.SimpleQueue()
        self._cancelled = threading.Event()

    def __iter__(self) -> Iterator[api_pb2.PublishResponse]:
        return self

    def __next__(self) -> api_pb2.PublishResponse:
        response = self._responses.get(timeout=30)
        if response is None:
            raise liftbridge.ConnectionLostError("cancelled")
        return response

    def cancel(self) -> bool:
        self._cancelled.set()
        self._responses.put(None)
        return True

    def done(self) -> bool:
        return self._cancelled.is_set()

    def write_now(self, request: api_pb2.PublishRequest) -> bool:
        if self._cancelled.is_set():
            return True  # dropped, as a cancelled call does
        self.written.append(request)
        if self.acking:
            self._responses.put(
                api_pb2.PublishResponse(
                    correlationId=request.correlationId,
                    ack=api_pb2.Ack(
                        stream=request.stream,
                        offset=7,
                        correlationId=request.correlationId,
                        ackPolicy=request.ackPolicy,
                    ),
                )
            )
        return True


class NoticeRouter:
    """Leader ``old:1`` until a refresh after it went down, then ``new:2``.
    The first ``broker_down("old:1")`` marks it down and delivers the notice
    to the listeners right then; it answers ``answer_first``."""

    rpc_timeout = 5.0

    def __init__(self, answer_first: bool) -> None:
        self.answer_first = answer_first
        self.listeners: list[Callable[[str], None]] = []
        self.down: set[str] = set()
        self.refreshed = False
        self.streams: list[FakeStream] = []

    def on_broker_down(self, listener: Callable[[str], None]) -> None:
        self.listeners.append(listener)

    def open_stream(
        self, method: str, requests: object, *, target: object, deadline: Deadline
    ) -> tuple[str, FakeStream]:
        stream = FakeStream(acking=True)
        self.streams.append(stream)
        return "lane:9", stream

    def leader_address(self, stream: str, partition: int) -> str:
        return "new:2" if self.refreshed and "old:1" in self.down else "old:1"

    def broker_down(self, address: str) -> bool:
        if address == "old:1" and not self.down:
            self.down.add(address)
            for listener in self.listeners:
                listener(address)
            return self.answer_first
        return address in self.down

    def suspect(self, address: str) -> bool:
        return False

    def answered(self, address: str) -> None:
        pass

    def refresh(self, deadline: Deadline | None = None, *, shared: bool = True) -> None:
        self.refreshed = True

    def invoke(self, address: str, method: str, request: object, timeout: float) -> object:
        assert (address, method) == ("new:2", "FetchPartitionMetadata")
        return object()

    def failed(self, address: str, error: Exception) -> None:
        pass

    def broker_failed(self, error: Exception, deadline: Deadline, *, address: str) -> None:
        pass


class SyncTimer(AckTimer):
    """Runs what is already due on the calling thread (the broker-down
    notice, so it lands exactly where the router delivers it); the rest on
    the real timer thread."""

    def schedule(self, deadline: float, expire: Callable[[], None]) -> None:
        if deadline <= time.monotonic():
            expire()
        else:
            super().schedule(deadline, expire)


REQUEST = api_pb2.PublishRequest(
    stream="s", partition=2, value=b"v", correlationId="c1", ackPolicy=api_pb2.AckPolicy.LEADER
)


@pytest.fixture
def timer() -> Iterator[SyncTimer]:
    timer = SyncTimer()
    yield timer
    timer.close(time.monotonic() + 5)


def test_a_notice_just_after_the_check_fails_the_publish_at_once(timer: SyncTimer) -> None:
    router = NoticeRouter(answer_first=False)
    router.streams.append(FakeStream(acking=False))  # the old leader never answers
    router.open_stream = lambda *a, **k: ("lane:9", router.streams[0])  # type: ignore[method-assign]
    lanes = Lanes(router, timer, ack_wait=ACK_TIMEOUT, max_lanes=4)  # type: ignore[arg-type]
    started = time.monotonic()
    with pytest.raises(liftbridge.LeaderLostError):
        lanes.publish(REQUEST, ACK_TIMEOUT)
    assert time.monotonic() - started < ACK_TIMEOUT  # not the ack timeout's AckTimeoutError
    lanes.close()


def test_a_notice_between_registering_and_the_check_holds_it_for_the_new_leader(
    timer: SyncTimer,
) -> None:
    router = NoticeRouter(answer_first=True)
    lanes = Lanes(router, timer, ack_wait=ACK_TIMEOUT, max_lanes=4)  # type: ignore[arg-type]
    ack = lanes.publish(REQUEST, ACK_TIMEOUT)
    assert ack is not None and ack.offset == 7
    first, second = router.streams  # the cancelled lane was replaced before sending
    assert first.written == [] and first.done()
    assert [r.correlationId for r in second.written] == ["c1"]
    lanes.close()
