"""The acks thread's share of the collector's tally (liftbridge/_publish/_pending.py
says why it matters): a run of acks frees the entries it settles on the thread
that settles it, instead of leaving them to the publishing threads."""

from __future__ import annotations

import gc
import queue
import time
import weakref
from concurrent.futures import Future

from liftbridge._core._messages import Ack
from liftbridge_api import api_pb2
from tests.unit.test_publisher_unit import (
    FakeServer,
    _close_client_threads,  # noqa: F401 (autouse: closes make()'s timer and callbacks thread)
    _until_idle,
    make,
    request,
)


def test_a_run_of_acks_frees_the_entries_it_settles_where_it_settles_them() -> None:
    # CPython starts a young collection once tracked allocations outnumber
    # frees by 700. Settling an ack makes an Ack (the Future keeps it) and
    # lets go of the publish's entry and request. When the timer's queue
    # kept the entries for the publishing thread to drop, a run grew the
    # tally by two per ack and the publishing thread's frees fell on a tally
    # already at zero: a read of a few hundred acks set off a collection over
    # every Future in flight.
    count = 600
    server = FakeServer()
    server.ack = False  # the test answers, in one run
    p = make(server, ack_wait=30.0, max_inflight=count)
    futures = [p.submit(request(i), None, None) for i in range(count)]
    _until_idle(p)  # every request taken by the sender
    [call] = server.calls
    responses = [call.ack_for(r) for r in call.received]
    call.received.clear()  # the fake server's copies: only the publisher's are left
    gc.collect()
    gc.disable()  # the tally still counts; no collection resets it meanwhile
    try:
        lift: list[list[int]] = [[] for _ in range(4 * count)]  # a tally above zero: frees count
        before = gc.get_count()[0]
        p._resolve(responses)
        grown = gc.get_count()[0] - before
    finally:
        gc.enable()
    del lift
    assert [f.result(0).offset for f in futures] == list(range(count))  # type: ignore[union-attr]
    assert len(p._in_order) == 0  # the timer's queue let go of every settled entry
    # Per ack: its Ack, the ack's protobuf, the outcome kept for a publishing
    # thread to free and (tuples freed onto a free list do not count down)
    # up to one more, less the entry and its request: one or two. Four or
    # five when the entries outlived the run (the publishing threads freed them).
    assert grown < 3 * count
    p.close(time.monotonic() + 5)


def test_a_future_the_caller_dropped_is_left_unresolved_and_every_other_is_told() -> None:
    # Completing a Future no one can reach is work for no one (~1.6 us on the
    # acks thread): a caller that drops it, as publish_async in a loop with
    # flush does, loses nothing. Anything that can still read a Future (a
    # reference, a weak one, a done-callback) sees it resolved, and the
    # handler of a publish whose Future was dropped still hears its ack.
    server = FakeServer()
    server.ack = False  # the test answers, in one run
    p = make(server, ack_wait=30.0)
    handled: queue.SimpleQueue[int] = queue.SimpleQueue()
    called_back: queue.SimpleQueue[int] = queue.SimpleQueue()

    def handler(ack: Ack | None, error: BaseException | None) -> None:
        handled.put(-1 if ack is None else ack.offset)

    dropped = id(p.submit(request(0), None, None))  # the caller lets go at once
    held = p.submit(request(1), None, None)
    p.submit(request(2), None, None).add_done_callback(
        lambda future: called_back.put(future.result(0).offset)  # type: ignore[union-attr]
    )
    watched = p.submit(request(3), None, None)
    weak = weakref.ref(watched)
    del watched
    p.submit(request(4), handler, None)  # its Future dropped, its handler still hears
    _until_idle(p)
    [call] = server.calls
    p._resolve([call.ack_for(r) for r in call.received])
    assert held.result(0).offset == 1  # type: ignore[union-attr]
    assert called_back.get(timeout=5) == 2
    future = weak()
    assert future is not None and future.result(0).offset == 3  # type: ignore[union-attr]
    assert handled.get(timeout=5) == 4
    # The publisher keeps the dropped one for its publishing thread to free;
    # gc can still find it: it was not resolved.
    alive = {id(o): o for o in gc.get_objects() if isinstance(o, Future)}
    assert not alive[dropped].done()
    p.close(time.monotonic() + 5)


def test_a_response_naming_its_publish_in_its_ack_alone_still_resolves_it() -> None:
    # The run claims by the response's correlation id; one that carries it in
    # its ack alone (and one naming no publish at all) is worked out whole.
    server = FakeServer()
    server.ack = False
    p = make(server, ack_wait=30.0)
    futures = [p.submit(request(i), None, None) for i in range(3)]
    _until_idle(p)
    [call] = server.calls
    first, second, third = (call.ack_for(r) for r in call.received)
    second.ClearField("correlationId")  # its ack still says c1
    stranger = api_pb2.PublishResponse(correlationId="nobody's", ack=second.ack)
    p._resolve([first, second, stranger, third])
    assert [f.result(0).offset for f in futures] == [0, 1, 2]  # type: ignore[union-attr]
    assert len(p._pending) == 0
    assert p._window.used == 0
    p.close(time.monotonic() + 5)
