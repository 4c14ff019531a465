"""The acks thread's share of the collector's tally (liftbridge/_publish/_pending.py
says why it matters): a run of acks frees the entries it settles on the thread
that settles it, instead of leaving them to the publishing threads."""

from __future__ import annotations

import gc
import time

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
