"""Semantics of liftbridge._publish._publisher against a fake PublishAsync stream (no network).

They prove that every publish resolves exactly once: acks come back in
submission order; when a stream breaks, publishes already sent on it fail with
ConnectionLostError and unsent ones are resent in order on the next stream; ack
timeouts, a full window, a duplicate correlation id and close each fail a publish
with its specific error; AckPolicy NONE resolves once sent; close stops the
publisher's threads; and the deadline queue stays bounded.
"""

from __future__ import annotations

import concurrent.futures
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import cast

import grpc
import pytest

import liftbridge
from liftbridge._core._callbacks import CallbackRunner
from liftbridge._core._deadlines import AckTimer
from liftbridge._core._metadata import BrokerInfo, PartitionInfo
from liftbridge._core._retry import DEFAULT_RETRY_POLICY
from liftbridge._core._router import Deadline, Router
from liftbridge._publish import _sending
from liftbridge._publish._outbox import Outbox
from liftbridge._publish._pending import Pending
from liftbridge._publish._publisher import _RUN, Publisher
from liftbridge._publish._sending import BURST_OWN
from liftbridge_api import api_pb2
from tests.unit.fake_router import FakeRpcError


class FakeCall:
    """Consumes requests on a thread like gRPC's sender; acks per `mode`."""

    def __init__(self, requests: Iterator[api_pb2.PublishRequest], server: FakeServer) -> None:
        self._requests = requests
        self._responses: queue.SimpleQueue[
            api_pb2.PublishResponse | BaseException | list[api_pb2.PublishResponse]
        ] = queue.SimpleQueue()
        self._read: deque[api_pb2.PublishResponse] = deque()  # read together, not yet returned
        self._broken = False
        self.server = server
        self.received: list[api_pb2.PublishRequest] = []
        self._thread = threading.Thread(target=self._consume, daemon=True, name="fake-sender")

    def start(self) -> None:
        """Starts consuming the requests (once the server has listed the call)."""
        self._thread.start()

    def _consume(self) -> None:
        for request in self._requests:
            gate = self.server.gates.get(request.correlationId)
            if gate is not None:  # the sender is held up with this request in hand
                gate.wait(5)
            if self._broken:
                self.server.dropped.append(request.correlationId)
                return
            self._take_in(request)

    def _take_in(self, request: api_pb2.PublishRequest) -> None:
        self.received.append(request)
        self.server.log.append(request.correlationId)
        if request.ackPolicy == api_pb2.NONE:
            return
        if self.server.ack:
            self.ack(request)
        elif self.server.hold:
            self.server.held.put((self, request))

    def write_now(self, request: api_pb2.PublishRequest) -> bool:
        """A request written by the publishing thread, as the HTTP/2 call
        takes it (unless ``server.direct`` is off, as when its window is short)."""
        if self._broken or not self.server.direct:
            return False
        gate = self.server.write_gates.get(request.correlationId)
        if gate is not None:  # the publishing thread is held up mid-write
            self.server.writing.set()
            gate.wait(5)
        self.server.writers.append(threading.current_thread().name)
        self._take_in(request)
        return True

    def ack(self, request: api_pb2.PublishRequest) -> None:
        self._responses.put(self.ack_for(request))

    def ack_for(self, request: api_pb2.PublishRequest) -> api_pb2.PublishResponse:
        return api_pb2.PublishResponse(
            correlationId=request.correlationId,
            ack=api_pb2.Ack(
                stream=request.stream,
                correlationId=request.correlationId,
                offset=self.server.log.index(request.correlationId),
                ackPolicy=request.ackPolicy,
            ),
        )

    def answer_together(self, responses: list[api_pb2.PublishResponse]) -> None:
        """Puts ``responses`` where one read finds them all: the first from
        ``next``, the others from ``take_ready``."""
        self._responses.put(responses)

    def break_(self) -> None:
        self._broken = True
        self._responses.put(FakeRpcError(grpc.StatusCode.UNAVAILABLE, "fake broken"))

    def __iter__(self) -> FakeCall:
        return self

    def __next__(self) -> api_pb2.PublishResponse:
        if self._read:
            return self._read.popleft()
        return self._returned(self._responses.get())

    def take_ready(self, run: list[api_pb2.PublishResponse], limit: int) -> None:
        while len(run) < limit:
            if self._read:
                run.append(self._read.popleft())
                continue
            try:
                item = self._responses.get_nowait()
            except queue.Empty:
                return
            run.append(self._returned(item))

    def _returned(
        self, item: api_pb2.PublishResponse | BaseException | list[api_pb2.PublishResponse]
    ) -> api_pb2.PublishResponse:
        if isinstance(item, BaseException):
            raise item
        if isinstance(item, list):
            self._read.extend(item[1:])
            return item[0]
        return item

    def cancel(self) -> bool:
        self._broken = True
        self._responses.put(FakeRpcError(grpc.StatusCode.CANCELLED, "fake broken"))
        return True


class FakeStub:
    def __init__(self, server: FakeServer) -> None:
        self.server = server

    def PublishAsync(self, requests: Iterator[api_pb2.PublishRequest]) -> FakeCall:
        if not self.server.up:
            call = FakeCall(iter(()), self.server)
            call.break_()
            call.start()
            return call
        call = FakeCall(requests, self.server)
        # Listed before its sender starts: a test that waits for requests
        # to arrive then reaches for the call must find it.
        self.server.calls.append(call)
        call.start()
        return call


class FakeServer:
    def __init__(self) -> None:
        self.ack = True
        self.hold = False  # with ack False: keep requests in `held` for release()
        self.held: queue.SimpleQueue[tuple[FakeCall, api_pb2.PublishRequest]] = queue.SimpleQueue()
        self.up = True
        self.calls: list[FakeCall] = []
        self.log: list[str] = []
        self.dropped: list[str] = []
        self.direct = True  # calls take requests the publishing thread writes (write_now)
        self.writers: list[str] = []  # the threads that wrote with write_now, one per request
        self.gates: dict[str, threading.Event] = {}  # the sender waits on one before its request
        self.write_gates: dict[str, threading.Event] = {}  # as gates, for write_now
        self.writing = threading.Event()  # set when write_now waits at a write gate
        # Partition leaders: stream -> address; brokers known down; what a
        # metadata refresh names as the leader (stream -> address, "" = none).
        self.leaders: dict[str, str] = {}
        self.down: set[str] = set()
        self.fresh_leaders: dict[str, str] = {}
        self.refreshes = 0
        self.back_on_refresh = False  # the down brokers come back while metadata is fetched
        self.listeners: list[Callable[[str], None]] = []
        # broker_failed's metadata refresh lasts until its deadline (or `unblocked`).
        self.metadata_blocks = False
        self.unblocked = threading.Event()
        self.stream_failed = threading.Event()  # set when broker_failed is called

    # What the publisher uses of the router.
    rpc_timeout = 5.0
    retry_policy = DEFAULT_RETRY_POLICY

    def leader_address(self, stream: str, partition: int) -> str | None:
        return self.leaders.get(stream)

    def on_broker_down(self, listener: Callable[[str], None]) -> None:
        self.listeners.append(listener)

    def broker_down(self, address: str) -> bool:
        return address in self.down

    def any_broker_down(self) -> bool:
        return bool(self.down)

    def refresh(self, deadline: object = None, *, shared: bool = True) -> FakeMetadata:
        assert not shared
        self.refreshes += 1
        if self.back_on_refresh:
            self.down.clear()
        return FakeMetadata(dict(self.fresh_leaders))

    def kill(self, address: str) -> None:
        """The broker at ``address`` is found down, as the router's watch reports it."""
        self.down.add(address)
        for listener in self.listeners:
            listener(address)

    def open_stream(
        self, method: str, requests: Iterator[api_pb2.PublishRequest], **_: object
    ) -> tuple[str, FakeCall]:
        assert method == "PublishAsync"
        return "fake:1", FakeStub(self).PublishAsync(requests)

    def broker_failed(self, error: BaseException, deadline: Deadline | None = None) -> None:
        self.stream_failed.set()
        if self.metadata_blocks:
            # FetchMetadata that answers only at the caller's deadline (the
            # server's while a broker is down); the router's own deadline is
            # min(rpc_timeout, 5 s) when the caller gives none.
            self.unblocked.wait(self.rpc_timeout if deadline is None else deadline.remaining())

    def release(self, count: int) -> None:
        """Acks the next ``count`` held requests, waiting for them to arrive."""
        for _ in range(count):
            call, request = self.held.get(timeout=5)
            call.ack(request)


class FakeMetadata:
    """What the publisher reads of fresh metadata: each stream's partition
    leader, where a leader's id is its address."""

    def __init__(self, leaders: dict[str, str]) -> None:
        self._leaders = leaders

    def partition(self, stream: str, partition: int) -> PartitionInfo | None:
        if stream not in self._leaders:
            return None
        leader = self._leaders[stream]
        return PartitionInfo(stream, partition, leader, (), (), False, False)

    def broker(self, broker_id: str) -> BrokerInfo | None:
        host, _, port = broker_id.rpartition(":")
        return BrokerInfo(broker_id, host, int(port), 0, 0)


def request(i: int, policy: api_pb2.AckPolicy.ValueType = api_pb2.LEADER) -> api_pb2.PublishRequest:
    return api_pb2.PublishRequest(
        stream="s", value=b"%d" % i, correlationId=f"c{i}", ackPolicy=policy, expectedOffset=-1
    )


_threads: list[CallbackRunner | AckTimer] = []


@pytest.fixture(autouse=True)
def _close_client_threads() -> Iterator[None]:
    yield
    while _threads:
        _threads.pop().close(time.monotonic() + 5)


def make(server: FakeServer, *, ack_wait: float = 5.0, max_inflight: int = 1024) -> Publisher:
    runner, timer = CallbackRunner(), AckTimer()
    _threads.extend((runner, timer))
    return Publisher(
        cast(Router, server), runner, timer, ack_wait=ack_wait, max_inflight=max_inflight
    )


def _soon() -> float:
    return time.monotonic() + 5


def test_all_acked_in_order() -> None:
    server = FakeServer()
    p = make(server)
    futures = [p.submit(request(i), None, None) for i in range(3000)]
    assert p.flush(10)
    acked: list[str] = []
    for f in futures:
        ack = f.result()
        assert ack is not None
        acked.append(ack.correlation_id)
    assert acked == [f"c{i}" for i in range(3000)]
    assert server.log == [f"c{i}" for i in range(3000)]
    p.close(_soon())


def test_break_fails_sent_and_resends_unsent_in_order() -> None:
    server = FakeServer()
    server.ack = False
    p = make(server, ack_wait=30.0)
    first = [p.submit(request(i), None, None) for i in range(10)]
    deadline = time.monotonic() + 5
    while len(server.log) < 10:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    server.up = False
    server.calls[0].break_()
    time.sleep(0.05)
    later = [p.submit(request(i), None, None) for i in range(10, 20)]
    for f in first:
        assert isinstance(f.exception(timeout=5), liftbridge.ConnectionLostError)
    time.sleep(0.2)
    server.ack = True
    server.up = True
    for i, f in enumerate(later, start=10):
        ack = f.result(timeout=10)
        assert ack is not None
        assert ack.correlation_id == f"c{i}"  # all sent on a later stream
    sent_later = [cid for cid in server.log[10:]]
    assert sent_later == [f"c{i}" for i in range(10, 20)], sent_later
    assert server.dropped == [] or all(d.startswith("c1") for d in server.dropped)
    p.close(_soon())


def test_concurrent_producers_with_breaks_resolve_exactly_once() -> None:
    server = FakeServer()
    p = make(server, max_inflight=64, ack_wait=20.0)
    results: list[object] = []
    lock = threading.Lock()

    def handler(ack: liftbridge.Ack | None, error: BaseException | None) -> None:
        with lock:
            results.append((ack, error))

    def produce(base: int) -> list[Future[liftbridge.Ack | None]]:
        return [p.submit(request(base + i), handler, None) for i in range(2000)]

    out: list[Future[liftbridge.Ack | None]] = []
    threads = [threading.Thread(target=lambda b=b: out.extend(produce(b))) for b in (0, 100000)]
    for t in threads:
        t.start()
    for _ in range(5):
        time.sleep(0.05)
        if server.calls:
            server.calls[-1].break_()
    for t in threads:
        t.join(30)
    assert p.flush(30)
    assert len(out) == 4000
    outcomes = [f.exception(timeout=1) for f in out]
    deadline = time.monotonic() + 10  # handlers run on liftbridge-callbacks, after the futures
    while len(results) < 4000 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(results) == 4000
    ok = sum(1 for e in outcomes if e is None)
    lost = sum(1 for e in outcomes if isinstance(e, liftbridge.ConnectionLostError))
    assert ok + lost == 4000, [
        e for e in outcomes if e is not None and not isinstance(e, liftbridge.ConnectionLostError)
    ][:3]
    # per producer, the publishes that made it are in submission order
    for base in (0, 100000):
        seq = [int(c[1:]) for c in server.log if base <= int(c[1:]) < base + 100000]
        assert seq == sorted(seq)
    p.close(_soon())


def test_timeouts_sent_and_unsent() -> None:
    server = FakeServer()
    server.ack = False
    p = make(server, ack_wait=0.3)
    started = time.monotonic()
    f = p.submit(request(1), None, None)
    assert isinstance(f.exception(timeout=5), liftbridge.AckTimeoutError)
    # ack_wait applies (not at once, not make()'s 5 s); the upper bound leaves
    # a loaded CI machine 2.7 s to wake the timer and this thread.
    assert 0.25 < time.monotonic() - started < 3.0
    g = p.submit(request(2), None, 0.1)  # own timeout: the heap
    # h outlives g by 2.9 s: this thread must see g fail before h is due, and
    # on a loaded machine its wake-up after g can take most of a second.
    h = p.submit(request(3), None, 3.0)
    assert isinstance(g.exception(timeout=5), liftbridge.AckTimeoutError)
    assert not h.done()
    assert isinstance(h.exception(timeout=10), liftbridge.AckTimeoutError)
    p.close(_soon())
    server2 = FakeServer()
    server2.up = False
    p2 = make(server2, ack_wait=0.3)
    u = p2.submit(request(4), None, None)
    assert isinstance(u.exception(timeout=5), liftbridge.DeadlineExceededError)
    p2.close(_soon())


def test_a_publish_without_a_future_times_out_to_its_handler_and_flush_waits() -> None:
    server = FakeServer()
    server.ack = False
    p = make(server, ack_wait=0.5)
    outcomes: queue.SimpleQueue[tuple[object, BaseException | None]] = queue.SimpleQueue()
    assert p.submit(request(1), lambda a, e: outcomes.put((a, e)), None, future=False) is None
    assert not p.flush(0.05)  # still waiting for its ack
    assert p.flush(5)  # resolved by the ack timeout
    ack, error = outcomes.get(timeout=5)
    assert ack is None and isinstance(error, liftbridge.AckTimeoutError)
    p.close(_soon())


def test_window_blocks_then_fails_and_frees() -> None:
    server = FakeServer()
    server.ack = False
    # Every publish names its own timeout; ack_wait only sets when a silent
    # stream counts as hung (2 x ack_wait): far off, so a's timeout does not
    # also cancel the stream (c, already written on it, would then fail with
    # ConnectionLostError instead of the ClientClosedError of close()).
    p = make(server, max_inflight=2, ack_wait=60.0)
    a = p.submit(request(1), None, 5.0)
    b = p.submit(request(2), None, 5.0)
    with pytest.raises(liftbridge.PublishWindowFullError):
        p.submit(request(3), None, 0.2)
    # A slot frees when a or b times out (5 s); the waiting producer gets it.
    c = p.submit(request(4), None, 10.0)
    # The slot is freed just before the timed-out publish's future is failed,
    # on the timer thread: wait for that (bounded) rather than race it.
    concurrent.futures.wait([a, b], timeout=5, return_when=concurrent.futures.FIRST_COMPLETED)
    assert a.done() or b.done()
    p.close(_soon())
    assert isinstance(c.exception(timeout=5), liftbridge.ClientClosedError)


def _blocked_submit(p: Publisher, i: int, timeout: float) -> tuple[threading.Thread, list[object]]:
    """Submits request i on a thread of its own; the list gets its future or error."""
    outcome: list[object] = []

    def submit() -> None:
        try:
            outcome.append(p.submit(request(i), None, timeout))
        except BaseException as e:
            outcome.append(e)

    thread = threading.Thread(target=submit)
    thread.start()
    return thread, outcome


def test_a_full_window_lets_a_producer_go_once_an_eighth_of_it_is_free() -> None:
    server = FakeServer()
    server.ack, server.hold = False, True
    p = make(server, max_inflight=16)  # an eighth: 2 slots
    for i in range(16):
        p.submit(request(i), None, 30.0)
    thread, outcome = _blocked_submit(p, 16, 30.0)
    server.release(1)
    thread.join(0.3)
    assert thread.is_alive() and not outcome  # one free slot does not wake it
    server.release(1)
    thread.join(5)
    assert isinstance(outcome[0], Future)
    server.release(15)
    assert p.flush(5)
    p.close(_soon())


def test_a_producer_takes_a_free_slot_at_its_timeout_instead_of_failing() -> None:
    server = FakeServer()
    server.ack, server.hold = False, True
    p = make(server, max_inflight=16)
    for i in range(16):
        p.submit(request(i), None, 30.0)
    thread, outcome = _blocked_submit(p, 16, 0.5)
    server.release(1)  # fewer than an eighth: no wake-up, but a slot is free
    thread.join(5)
    assert isinstance(outcome[0], Future)
    thread, outcome = _blocked_submit(p, 17, 0.3)  # the window is full again
    thread.join(5)
    assert isinstance(outcome[0], liftbridge.PublishWindowFullError)
    p.close(_soon())


def test_producers_sharing_a_small_window_all_get_through() -> None:
    """Blocked producers are woken one per freed slot once the window is down
    to its resume mark: none is left waiting while acks keep coming."""
    server = FakeServer()
    p = make(server, max_inflight=8)
    futures: list[Future[liftbridge.Ack | None]] = []
    errors: list[BaseException] = []

    def produce(worker: int) -> None:
        try:
            for i in range(300):
                futures.append(p.submit(request(worker * 1000 + i), None, 10.0))
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=produce, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == [] and len(futures) == 1200
    assert p.flush(10)
    assert all(f.result() is not None for f in futures)
    p.close(_soon())


def test_close_wakes_a_producer_waiting_for_a_slot() -> None:
    server = FakeServer()
    server.ack = False
    p = make(server, max_inflight=1, ack_wait=30.0)
    p.submit(request(1), None, None)
    errors: list[BaseException] = []

    def blocked() -> None:
        try:
            p.submit(request(2), None, None)
        except BaseException as e:
            errors.append(e)

    t = threading.Thread(target=blocked)
    t.start()
    time.sleep(0.2)
    p.close(_soon())
    t.join(5)
    assert not t.is_alive()
    assert isinstance(errors[0], liftbridge.ClientClosedError)


def test_ack_policy_none_resolves_when_sent() -> None:
    server = FakeServer()
    p = make(server)
    called: list[liftbridge.Ack | None] = []
    f = p.submit(request(1, api_pb2.NONE), lambda a, e: called.append(a), None)
    assert f.result(timeout=5) is None
    assert called == []
    assert p.flush(1)
    p.close(_soon())


def test_close_fails_unresolved_and_stops_threads() -> None:
    server = FakeServer()
    server.ack = False
    p = make(server, ack_wait=30.0)
    fs = [p.submit(request(i), None, None) for i in range(100)]
    p.close(_soon())
    for f in fs:
        assert isinstance(f.exception(timeout=5), liftbridge.ClientClosedError)
    time.sleep(0.2)
    # The timer and callbacks threads are the client's, closed after the publisher.
    assert not [t for t in threading.enumerate() if t.name == "liftbridge-acks"]
    with pytest.raises(liftbridge.ClientClosedError):
        p.submit(request(1000), None, None)


def test_duplicate_correlation_id() -> None:
    server = FakeServer()
    server.ack = False
    p = make(server)
    p.submit(request(1), None, None)
    with pytest.raises(liftbridge.InvalidArgumentError):
        p.submit(request(1), None, None)
    p.close(_soon())


# 20,000 publishes through a fake gRPC server, 16 at a time: past the suite's 120 s
# once on a two-core machine at load 15-18.
@pytest.mark.timeout(300)
def test_memory_of_fifo_stays_bounded() -> None:
    server = FakeServer()
    p = make(server, max_inflight=16)
    for i in range(20000):
        p.submit(request(i), None, None)
    assert p.flush(10)
    assert len(p._in_order) <= 2 * 1024 + 16
    p.close(_soon())


def test_a_blocking_ack_handler_stalls_neither_acks_nor_timeouts() -> None:
    """Handlers run on liftbridge-callbacks: one that blocks (here on an
    event; in the wild, a blocking publish while the stream is down) leaves
    the acks and the ack timer running for every other publish."""
    server = FakeServer()
    server.ack = False
    server.hold = True
    p = make(server, ack_wait=30.0)
    release = threading.Event()
    entered = threading.Event()

    def blocking(ack: liftbridge.Ack | None, error: BaseException | None) -> None:
        entered.set()
        release.wait(20)

    first = p.submit(request(0), blocking, None)
    server.release(1)
    assert first.result(timeout=5) is not None
    assert entered.wait(5)  # the handler now blocks the callbacks thread
    timing_out = p.submit(request(1), None, 0.2)
    assert isinstance(timing_out.exception(timeout=5), liftbridge.AckTimeoutError)
    acked = p.submit(request(2), None, None)
    server.release(2)  # request 1 (late: ignored) and request 2
    assert acked.result(timeout=5) is not None
    release.set()
    p.close(_soon())


def test_acks_read_together_resolve_in_order_each_to_its_own_outcome() -> None:
    """The acks thread resolves the responses one read brought as a run:
    each publish gets its own outcome, in order, a late ack among them
    changes nothing, and the window slots come back."""
    server = FakeServer()
    server.ack = False
    server.hold = True
    p = make(server, ack_wait=30.0, max_inflight=4)
    heard: queue.SimpleQueue[tuple[str, str]] = queue.SimpleQueue()

    def handler(ack: liftbridge.Ack | None, error: BaseException | None) -> None:
        heard.put((ack.correlation_id, "ack") if ack else ("?", type(error).__name__))

    futures = [p.submit(request(i), handler, 0.3 if i == 1 else None) for i in range(4)]
    assert isinstance(futures[1].exception(timeout=5), liftbridge.AckTimeoutError)
    held = [server.held.get(timeout=5) for _ in range(4)]
    call = held[0][0]
    refused = api_pb2.PublishResponse(
        correlationId="c2",
        asyncError=api_pb2.PublishAsyncError(
            code=api_pb2.PublishAsyncError.NOT_FOUND, message="no such partition"
        ),
    )
    call.answer_together(
        [call.ack_for(held[0][1]), call.ack_for(held[1][1]), refused, call.ack_for(held[3][1])]
    )
    first, third = futures[0].result(timeout=5), futures[3].result(timeout=5)
    assert first is not None and first.offset == 0
    assert third is not None and third.offset == 3
    error = futures[2].exception(timeout=5)
    assert isinstance(error, liftbridge.NoSuchPartitionError) and "'s'" in str(error)
    assert p.flush(5)
    # All four slots are free again: four more publishes go without waiting.
    more = [p.submit(request(i), None, 0.1) for i in range(4, 8)]
    assert all(isinstance(f.exception(timeout=5), liftbridge.AckTimeoutError) for f in more)
    p.close(_soon())
    # The timeout's handler may run before or after the acks' (set from another thread).
    outcomes = [heard.get(timeout=5) for _ in range(4)]
    outcomes.remove(("?", "AckTimeoutError"))
    assert outcomes == [("c0", "ack"), ("?", "NoSuchPartitionError"), ("c3", "ack")]


def test_a_read_of_more_acks_than_a_run_settles_every_one_in_order() -> None:
    """One read brings more responses than a run takes (``_RUN``): the acks
    thread settles every one, run after run, each publish with its own
    outcome and the handlers in the order the responses came; an error
    among them (in the second run) reaches its own publish only."""
    server = FakeServer()
    server.ack = False
    server.hold = True
    p = make(server, ack_wait=30.0)
    count, refused_at = 3 * _RUN + 5, _RUN + 3
    heard: queue.SimpleQueue[str] = queue.SimpleQueue()

    def handler(ack: liftbridge.Ack | None, error: BaseException | None) -> None:
        heard.put(ack.correlation_id if ack else type(error).__name__)

    futures = [p.submit(request(i), handler, None) for i in range(count)]
    held = [server.held.get(timeout=5) for _ in range(count)]
    call = held[0][0]
    responses = [call.ack_for(each) for _, each in held]
    responses[refused_at] = api_pb2.PublishResponse(
        correlationId=f"c{refused_at}",
        asyncError=api_pb2.PublishAsyncError(
            code=api_pb2.PublishAsyncError.NOT_FOUND, message="no such partition"
        ),
    )
    call.answer_together(responses)
    for i, future in enumerate(futures):
        if i == refused_at:
            assert isinstance(future.exception(timeout=5), liftbridge.NoSuchPartitionError)
        else:
            ack = future.result(timeout=5)
            assert ack is not None and ack.correlation_id == f"c{i}" and ack.offset == i
    assert p.flush(5)
    expected = [f"c{i}" for i in range(count)]
    expected[refused_at] = "NoSuchPartitionError"
    assert [heard.get(timeout=5) for _ in range(count)] == expected
    p.close(_soon())


def test_flush_waits_only_for_what_was_pending_when_called() -> None:
    server = FakeServer()
    server.ack = False
    server.hold = True
    p = make(server, ack_wait=30.0)
    earlier = [p.submit(request(i), None, None) for i in range(3)]
    later: list[Future[liftbridge.Ack | None]] = []

    def meanwhile() -> None:
        time.sleep(0.3)  # flush() is waiting by now
        later.append(p.submit(request(3), None, None))
        server.release(3)

    other = threading.Thread(target=meanwhile)
    other.start()
    assert p.flush(10)  # did not wait for the publish made while it waited
    other.join(10)
    assert all(f.done() for f in earlier)
    assert not later[0].done()
    server.release(1)
    assert later[0].result(timeout=5) is not None
    p.close(_soon())


def hold_settle_run(
    monkeypatch: pytest.MonkeyPatch, wait: float
) -> tuple[threading.Event, threading.Event]:
    """Holds the acks thread's settling of a read's claimed publishes
    (``CallbackRunner.settle_run``): ``entered`` is set once it is held there,
    and it goes on when ``go_on`` is set (or after ``wait`` seconds)."""
    entered, go_on = threading.Event(), threading.Event()
    settle_run = CallbackRunner.settle_run

    def held(runner: CallbackRunner, settled: list[object]) -> None:
        entered.set()
        go_on.wait(wait)
        settle_run(runner, settled)  # type: ignore[arg-type]

    monkeypatch.setattr(CallbackRunner, "settle_run", held)
    return entered, go_on


def test_flush_waits_for_futures_claimed_but_not_yet_settled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The acks thread claims a read's publishes (taking them out of the
    pending table) in the lock and settles their Futures after it: flush()
    called in between waits for those Futures too. It returned True at once
    with them not done (seen in make test: test_flush_waits_for_everything)."""
    server = FakeServer()
    server.ack = False
    server.hold = True
    p = make(server, ack_wait=30.0)
    future = p.submit(request(0), None, None)
    entered, go_on = hold_settle_run(monkeypatch, 10)
    server.release(1)
    assert entered.wait(5)  # its ack is read: the publish is claimed, not settled
    assert not future.done()
    assert not p.flush(0.3)  # waits for it, and times out while it is held
    go_on.set()
    assert p.flush(10)
    assert future.done()
    p.close(_soon())


def test_a_stream_that_answers_nothing_is_given_up_for_another() -> None:
    """A hung broker: publishes time out and nothing at all comes back on the
    stream for two ack timeouts; the stream is cancelled and reopened (on the
    next broker), instead of timing out every publish for the whole hang."""
    server = FakeServer()
    server.ack = False
    p = make(server, ack_wait=0.2)
    first = p.submit(request(1), None, None)
    assert isinstance(first.exception(timeout=5), liftbridge.AckTimeoutError)
    assert len(server.calls) == 1  # one timeout alone does not condemn it
    time.sleep(0.3)
    second = p.submit(request(2), None, None)
    assert isinstance(second.exception(timeout=5), liftbridge.AckTimeoutError)
    deadline = time.monotonic() + 5
    while len(server.calls) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(server.calls) == 2
    server.ack = True
    assert p.submit(request(3), None, None).result(timeout=5) is not None
    p.close(_soon())


def test_a_hung_stream_is_replaced_without_waiting_out_a_slow_metadata_refresh() -> None:
    """Between giving up a hung stream and opening the next, the publisher
    refreshes the metadata; while a broker is down a FetchMetadata can block
    until its deadline. That refresh gets a short one, so a publish made
    right after the give-up still goes out on the next stream within its
    own 4.5 s timeout (with the router's 5 s default it was dropped unsent).
    The refresh takes 1 s here; the rest of the 4.5 s is room for a loaded
    machine (3 s failed once under load 8 on two workers)."""
    server = FakeServer()
    server.ack = False
    server.metadata_blocks = True
    p = make(server, ack_wait=0.2)
    first = p.submit(request(1), None, None)
    assert isinstance(first.exception(timeout=5), liftbridge.AckTimeoutError)
    time.sleep(0.3)
    second = p.submit(request(2), None, None)
    assert isinstance(second.exception(timeout=5), liftbridge.AckTimeoutError)  # given up
    assert server.stream_failed.wait(5)  # the stream broke; the refresh has begun
    server.ack = True
    after = p.submit(request(3), None, 4.5)
    try:
        assert after.result(timeout=10) is not None
        assert len(server.calls) == 2
    finally:
        server.unblocked.set()
        p.close(_soon())


def _request_to(stream: str, i: int) -> api_pb2.PublishRequest:
    return api_pb2.PublishRequest(
        stream=stream, value=b"%d" % i, correlationId=f"{stream}{i}", ackPolicy=api_pb2.ALL
    )


def _wait_sent(server: FakeServer, count: int) -> None:
    deadline = time.monotonic() + 5
    while len(server.log) < count:
        assert time.monotonic() < deadline, server.log
        time.sleep(0.01)


def test_publishes_to_a_leader_found_down_fail_fast_and_others_do_not() -> None:
    """The stream's broker forwards to two leaders; one is found down: only
    the publishes awaiting its acks fail, with LeaderLostError, at once;
    those acked before stay acked, and the window is free again."""
    server = FakeServer()
    server.leaders = {"dead": "10.0.0.1:1", "alive": "10.0.0.2:1"}
    server.ack, server.hold = False, True
    p = make(server, ack_wait=60.0, max_inflight=64)
    acked = p.submit(_request_to("dead", 0), None, None)
    server.release(1)
    assert acked.result(timeout=5) is not None
    doomed = [p.submit(_request_to("dead", i), None, None) for i in range(1, 11)]
    healthy = [p.submit(_request_to("alive", i), None, None) for i in range(10)]
    _wait_sent(server, 21)
    server.kill("10.0.0.1:1")
    for future in doomed:
        error = future.exception(timeout=5)  # well before the 60 s ack timeout
        assert isinstance(error, liftbridge.LeaderLostError), error
        assert error.address == "10.0.0.1:1"
        assert error.maybe_applied
    assert acked.exception() is None
    assert not any(f.done() for f in healthy)
    server.release(20)  # the dead leader's requests, then the healthy ones
    for future in healthy:
        assert future.result(timeout=5) is not None
    assert p.flush(5)
    assert len(p._pending) == 0
    p.close(_soon())


def test_publishes_sent_while_their_leader_is_known_down_are_decided_by_fresh_metadata() -> None:
    """Sent after the leader was found down: fresh metadata still naming it
    fails them fast; fresh metadata naming a new leader lets them wait for
    their acks (that leader may have them)."""
    server = FakeServer()
    server.leaders = {"s": "10.0.0.1:1"}
    server.ack, server.hold = False, True
    p = make(server, ack_wait=60.0)
    p.submit(_request_to("s", 0), None, None)  # starts the stream
    _wait_sent(server, 1)
    server.fresh_leaders = {"s": "10.0.0.1:1"}  # no failover yet
    server.kill("10.0.0.1:1")
    stranded = [p.submit(_request_to("s", i), None, None) for i in range(1, 6)]
    for future in stranded:
        assert isinstance(future.exception(timeout=5), liftbridge.LeaderLostError)
    assert server.refreshes >= 1
    server.fresh_leaders = {"s": "10.0.0.2:1"}  # a new leader took over
    maybe_taken = [p.submit(_request_to("s", i), None, None) for i in range(6, 11)]
    _wait_sent(server, 11)
    time.sleep(1.0)  # several checks
    assert not any(f.done() for f in maybe_taken)
    for _ in range(11):  # c0 to c10, in order: ack those sent after the failover
        call, request = server.held.get(timeout=5)
        if int(request.correlationId.removeprefix("s")) >= 6:
            call.ack(request)
    for future in maybe_taken:
        assert future.result(timeout=5) is not None
    p.close(_soon())


def test_a_leader_back_up_while_the_metadata_is_fetched_keeps_its_publishes() -> None:
    """A quick restart: the metadata still names the same leader, and it is
    back up before the check decides: its publishes wait for their acks."""
    server = FakeServer()
    server.leaders = {"s": "10.0.0.1:1"}
    server.ack, server.hold = False, True
    p = make(server, ack_wait=60.0)
    server.fresh_leaders = {"s": "10.0.0.1:1"}
    server.back_on_refresh = True
    server.kill("10.0.0.1:1")
    kept = [p.submit(_request_to("s", i), None, None) for i in range(5)]
    _wait_sent(server, 5)
    deadline = time.monotonic() + 5
    while server.refreshes < 1:
        assert time.monotonic() < deadline, "the leader check never asked for metadata"
        time.sleep(0.01)
    time.sleep(0.3)  # the check has decided by now
    assert not any(f.done() for f in kept), [f.exception() for f in kept if f.done()]
    server.release(5)
    for future in kept:
        assert future.result(timeout=5) is not None
    p.close(_soon())


def _until_idle(p: Publisher) -> None:
    """Waits (bounded) until the stream's sender waits with nothing in hand
    and the publisher holds the stream: the fake call's sender starts inside
    open_stream, so it can go idle before ``_call`` is set (a publish then
    goes to the sender, as it should, and a test expecting its own write fails)."""
    deadline = time.monotonic() + 5
    while p._outbox.idle != p._generation or p._call is None:
        assert time.monotonic() < deadline, "the sender never went idle"
        time.sleep(0.005)


def test_at_low_rates_the_publishing_thread_writes_and_never_overtakes_a_queued_publish() -> None:
    server = FakeServer()  # acks every request as it takes it
    p = make(server, ack_wait=30.0)
    assert p.submit(request(0), None, None).result(timeout=5) is not None  # via the sender
    _until_idle(p)
    assert p.submit(request(1), None, None).result(timeout=5) is not None
    assert server.writers == [threading.current_thread().name]  # nothing else in flight
    assert server.log == ["c0", "c1"]

    # A NONE publish is resolved once the sender takes it, before it is
    # written: held at the gate, it is in flight no more, yet unwritten.
    gate = server.gates["c2"] = threading.Event()
    server.direct = False  # the windows do not take it: c2 goes to the sender after all
    assert p.submit(request(2, api_pb2.NONE), None, None).result(timeout=5) is None
    server.direct = True
    later = p.submit(request(3), None, None)  # c2 is unwritten: this one waits its turn
    assert len(server.writers) == 1
    gate.set()
    assert later.result(timeout=5) is not None
    assert server.log == [f"c{i}" for i in range(4)]
    _until_idle(p)
    none = p.submit(request(4, api_pb2.NONE), None, None)
    assert none.result(timeout=5) is None  # AckPolicy.NONE, written here: resolved
    assert len(server.writers) == 2
    p.close(_soon())


def test_with_publishes_in_flight_the_sender_writes_a_burst(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A paced loop that fell behind catches up with a few publishes back to
    back: their own thread writes the first BURST_OWN - 1 that follow the last
    soon (after one apart: BURST_OWN in a row), the sender the rest of a
    longer burst, in order."""
    monkeypatch.setattr(_sending, "BURST_GAP", 3600.0)  # every publish follows the last soon
    server = FakeServer()
    server.ack = False
    p = make(server, ack_wait=30.0)
    p.submit(request(0), None, None)
    _until_idle(p)
    for i in range(1, BURST_OWN + 3):
        p.submit(request(i), None, None)
    assert server.writers == [threading.current_thread().name] * (BURST_OWN - 1)
    _until_idle(p)
    assert server.log == [f"c{i}" for i in range(BURST_OWN + 3)]
    p.close(_soon())


class _IdleCall:
    """A PublishAsync call whose sender is the test itself: it hands the
    request iterator out and reads nothing until cancelled."""

    def __init__(self) -> None:
        self.cancelled = threading.Event()

    def __iter__(self) -> Iterator[api_pb2.PublishResponse]:
        self.cancelled.wait(10)
        return iter(())

    def take_ready(self, run: list[api_pb2.PublishResponse], limit: int) -> None:
        pass

    def cancel(self) -> bool:
        self.cancelled.set()
        return True


class _HandOutServer(FakeServer):
    """Gives the test the Outbox a stream's sender would iterate."""

    def __init__(self) -> None:
        super().__init__()
        self.outboxes: queue.SimpleQueue[Iterator[api_pb2.PublishRequest]] = queue.SimpleQueue()

    def open_stream(  # type: ignore[override]
        self, method: str, requests: Iterator[api_pb2.PublishRequest], **_: object
    ) -> tuple[str, _IdleCall]:
        self.outboxes.put(requests)
        return "fake:1", _IdleCall()


def test_a_sender_that_looked_just_before_close_ends_its_stream_after_it() -> None:
    """The sender asked for ready requests (none) just before close(); the
    wake-up close() queues is then the first thing its next blocking wait
    takes. That wait must end the stream, not block for a request that can
    never come (the sender thread outlived Client.close())."""
    server = _HandOutServer()
    p = make(server)
    p.submit(request(1, api_pb2.NONE), None, None)
    outbox = cast(Outbox, server.outboxes.get(timeout=5))
    assert next(outbox).correlationId == "c1"
    assert outbox.next_ready() is None  # nothing queued, not closed yet
    p.close(_soon())
    ended: queue.SimpleQueue[str] = queue.SimpleQueue()

    def sender() -> None:
        try:
            next(outbox)
            ended.put("a request")
        except StopIteration:
            ended.put("stopped")

    thread = threading.Thread(target=sender, daemon=True, name="test-sender")
    thread.start()
    try:
        assert ended.get(timeout=5) == "stopped"
    finally:
        server.outboxes.put(iter(()))  # nothing more to hand out
        p._outbox.put(None)  # frees the sender should it still wait (the old defect)
        thread.join(5)


def _sender_idle_after_c0(
    monkeypatch: pytest.MonkeyPatch, max_inflight: int = 1024
) -> tuple[FakeServer, Publisher, Future[liftbridge.Ack | None]]:
    """A publisher whose every publish counts as apart from the last, no
    acks coming, c0 written by the sender (its stream was not open yet),
    and the sender idle again."""
    monkeypatch.setattr(_sending, "BURST_GAP", 0.0)
    server = FakeServer()
    server.ack = False
    p = make(server, ack_wait=30.0, max_inflight=max_inflight)
    first = p.submit(request(0), None, None)
    _until_idle(p)
    return server, p, first


def test_a_publish_apart_from_the_last_is_written_by_its_thread_with_others_in_flight(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At 10,000 msgs/s a few publishes await their acks at any time: one
    submitted apart from the last, with the sender idle, goes out on the
    publishing thread (no sender wake-up per publish)."""
    server, p, _ = _sender_idle_after_c0(monkeypatch)
    for i in range(1, 6):
        p.submit(request(i), None, None)
    assert server.writers == [threading.current_thread().name] * 5
    assert server.log == [f"c{i}" for i in range(6)]
    p.close(_soon())


def test_own_writes_and_the_senders_interleave_in_submission_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server, p, _ = _sender_idle_after_c0(monkeypatch)
    me = threading.current_thread().name
    p.submit(request(1), None, None)  # written here, c0 in flight
    gate = server.gates["c2"] = threading.Event()
    server.direct = False  # the window is short: c2 goes to the sender, which holds it
    p.submit(request(2), None, None)
    server.direct = True
    p.submit(request(3), None, None)  # c2 is unwritten: these queue behind it
    p.submit(request(4), None, None)
    assert server.writers == [me]
    gate.set()
    _until_idle(p)
    p.submit(request(5), None, None)  # the sender caught up: written here again
    assert server.writers == [me, me]
    assert server.log == [f"c{i}" for i in range(6)]
    p.close(_soon())


def test_publishing_threads_keep_their_order_whoever_writes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Four threads publish while the call takes own writes only now and
    then: each thread's requests reach the wire once each, in its order."""
    monkeypatch.setattr(_sending, "BURST_GAP", 0.0)
    server = FakeServer()
    p = make(server, ack_wait=30.0)

    def publish(thread: int) -> None:
        for i in range(150):
            server.direct = i % 3 != 0  # some own writes refused: those go to the sender
            p.submit(api_pb2.PublishRequest(stream="s", correlationId=f"t{thread}-{i}"), None, None)

    producers = [threading.Thread(target=publish, args=(t,)) for t in range(4)]
    for producer in producers:
        producer.start()
    for producer in producers:
        producer.join(30)
    assert p.flush(10)
    for t in range(4):
        mine = [c for c in server.log if c.startswith(f"t{t}-")]
        assert mine == [f"t{t}-{i}" for i in range(150)]
    assert len(server.log) == 600
    p.close(_soon())


def test_close_waits_for_an_own_write_under_way_and_fails_its_publish(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server, p, first = _sender_idle_after_c0(monkeypatch)
    gate = server.write_gates["c1"] = threading.Event()
    submitted: list[Future[liftbridge.Ack | None]] = []
    producer = threading.Thread(target=lambda: submitted.append(p.submit(request(1), None, None)))
    producer.start()
    assert server.writing.wait(5), "c1 was not written by its own thread"
    closer = threading.Thread(target=p.close, args=(_soon(),))
    closer.start()
    gate.set()
    producer.join(5)
    closer.join(10)
    assert not closer.is_alive()
    assert server.log == ["c0", "c1"]
    for future in (first, submitted[0]):
        assert isinstance(future.exception(timeout=5), liftbridge.ClientClosedError)


def test_a_publish_closed_before_its_own_write_is_not_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server, p, _ = _sender_idle_after_c0(monkeypatch)
    write = p._write

    def close_first(pending: Pending, generation: int) -> None:
        p.close(_soon())  # between the decision to write it here and the write
        write(pending, generation)

    monkeypatch.setattr(p, "_write", close_first)
    late = p.submit(request(1), None, None)
    assert isinstance(late.exception(timeout=5), liftbridge.ClientClosedError)
    assert server.log == ["c0"]
    assert server.writers == []


def test_with_a_backlog_in_flight_the_sender_writes_even_publishes_apart(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """More than an eighth of the window awaiting acks is a backlog (a
    producer faster than its acks, or one woken by a run of them): the
    sender writes those publishes in runs, not one by one."""
    server, p, _ = _sender_idle_after_c0(monkeypatch, 16)  # a backlog: more than 2 in flight
    p.submit(request(1), None, None)  # written here: 2 in flight
    p.submit(request(2), None, None)  # 3: queued for the sender
    _until_idle(p)
    assert server.writers == [threading.current_thread().name]
    assert server.log == ["c0", "c1", "c2"]
    p.close(_soon())


def _waiting_for_room(p: Publisher, i: int) -> threading.Thread:
    """A thread named c<i> submitting request(i), once it waits for window room."""
    producer = threading.Thread(target=p.submit, args=(request(i), None, None), name=f"c{i}")
    producer.start()
    deadline = time.monotonic() + 5
    while p._window._waiters == 0:
        assert time.monotonic() < deadline, f"c{i} never waited for room"
        time.sleep(0.005)
    return producer


@pytest.mark.parametrize("acked", [15, 16])
def test_a_publish_that_waited_for_window_room_goes_to_the_sender(
    monkeypatch: pytest.MonkeyPatch, acked: int
) -> None:
    """Acks read in one run empty a full window at once: the publishes it
    frees are a burst, however few are left in flight when they go, none
    (16: the whole window's acks in one read, as at a window of 32 with one
    write a window) included."""
    monkeypatch.setattr(_sending, "BURST_GAP", 0.0)
    server = FakeServer()
    server.ack, server.hold = False, True
    p = make(server, ack_wait=30.0, max_inflight=16)  # a backlog: more than 2 in flight
    for i in range(16):
        p.submit(request(i), None, None)
    held = [server.held.get(timeout=5) for _ in range(16)]
    producer = _waiting_for_room(p, 16)
    call = held[0][0]
    call.answer_together([call.ack_for(request) for _, request in held[:acked]])  # one run
    producer.join(5)
    server.held.get(timeout=5)  # c16 is written
    assert "c16" not in server.writers
    assert server.log == [f"c{i}" for i in range(17)]
    p.close(_soon())


def test_a_publish_that_waited_and_fills_the_window_writes_its_own() -> None:
    """With a window of one, the publish that waited for the slot is the
    whole run: nothing can join it, so its own thread writes it."""
    server = FakeServer()
    server.ack, server.hold = False, True
    p = make(server, ack_wait=30.0, max_inflight=1)
    p.submit(request(0), None, None)
    call, first = server.held.get(timeout=5)
    _until_idle(p)
    producer = _waiting_for_room(p, 1)
    call.ack(first)
    producer.join(5)
    server.held.get(timeout=5)  # c1 is written
    assert server.writers.count("c1") == 1
    assert server.log == ["c0", "c1"]
    p.close(_soon())
