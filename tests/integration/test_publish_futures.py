"""What users do with the Future ``publish_async`` returns, over gRPC and NATS.

The contract the SDK's cheaper future type (issue 29, ``_core/_futures.py``)
keeps: ``result`` with a timeout, ``exception``, ``done``,
``add_done_callback`` (run on the callbacks thread), ``cancel`` refused (a
publish cannot be taken back once queued), ``concurrent.futures.wait`` and
``as_completed``, and ``asyncio.wrap_future``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any

import pytest

import liftbridge
from liftbridge.testing import LocalServer

DEADLINE = 30.0

PublishAsync = Callable[..., "Future[liftbridge.Ack | None] | None"]


@pytest.fixture(params=["grpc", "nats"])
def publish_async(
    request: pytest.FixtureRequest, server: LocalServer, client: liftbridge.Client
) -> Iterator[PublishAsync]:
    if request.param == "grpc":
        yield client.publish_async
        return
    with liftbridge.NatsStreamPublisher(client, server.nats_url, ack_wait=DEADLINE) as nats:
        yield nats.publish_async


def _future(outcome: Future[liftbridge.Ack | None] | None) -> Future[liftbridge.Ack | None]:
    assert isinstance(outcome, Future)
    return outcome


def test_result_exception_done_and_cancel(publish_async: PublishAsync, stream: str) -> None:
    future = _future(publish_async(stream, b"one"))
    ack = future.result(timeout=DEADLINE)
    assert ack is not None and ack.stream == stream and ack.offset >= 0
    assert future.done() and not future.running() and not future.cancelled()
    assert future.exception(timeout=0) is None
    assert future.cancel() is False  # settled: nothing to cancel
    pending = _future(publish_async(stream, b"two"))
    assert pending.cancel() is False  # queued: a publish is not taken back
    assert not pending.cancelled()
    assert pending.result(timeout=DEADLINE) is not None


def test_a_refused_publish_fails_its_future(
    publish_async: PublishAsync, client: liftbridge.Client, unique_name: str
) -> None:
    client.create_stream(unique_name, optimistic_concurrency_control=True)
    future = _future(publish_async(unique_name, b"v", expected_offset=7))
    error = future.exception(timeout=DEADLINE)
    assert isinstance(error, liftbridge.IncorrectOffsetError)
    with pytest.raises(liftbridge.IncorrectOffsetError):
        future.result(timeout=0)
    assert future.done()


def test_done_callbacks_run_on_the_callbacks_thread(
    publish_async: PublishAsync, stream: str
) -> None:
    ran: list[tuple[str, Any]] = []
    both = threading.Event()

    def on_done(future: Future[liftbridge.Ack | None]) -> None:
        ran.append((threading.current_thread().name, future.result(timeout=0)))
        if len(ran) == 2:
            both.set()

    future = _future(publish_async(stream, b"v"))
    future.add_done_callback(on_done)  # before or after the ack: either way
    future.result(timeout=DEADLINE)
    future.add_done_callback(on_done)  # already done: still not on this thread
    assert both.wait(DEADLINE)
    assert [name for name, _ in ran] == ["liftbridge-callbacks"] * 2
    assert all(ack is not None for _, ack in ran)


def test_wait_and_as_completed(publish_async: PublishAsync, stream: str) -> None:
    futures = [_future(publish_async(stream, b"%d" % i)) for i in range(200)]
    done, not_done = concurrent.futures.wait(futures, timeout=DEADLINE)
    assert not not_done and done == set(futures)
    more = [_future(publish_async(stream, b"again %d" % i)) for i in range(200)]
    completed = list(concurrent.futures.as_completed(more, timeout=DEADLINE))
    assert sorted(map(id, completed)) == sorted(map(id, more))
    offsets = {f.result(timeout=0).offset for f in futures + more}  # type: ignore[union-attr]
    assert len(offsets) == 400


def test_asyncio_wrap_future(publish_async: PublishAsync, stream: str) -> None:
    async def publish_three() -> list[liftbridge.Ack | None]:
        wrapped = [asyncio.wrap_future(_future(publish_async(stream, b"%d" % i))) for i in range(3)]
        return await asyncio.wait_for(asyncio.gather(*wrapped), DEADLINE)

    acks = asyncio.run(publish_three())
    assert all(ack is not None and ack.stream == stream for ack in acks)
    assert len({ack.offset for ack in acks if ack is not None}) == 3


def test_the_client_lets_go_of_a_resolved_future(client: liftbridge.Client, stream: str) -> None:
    """Over gRPC a resolved publish waits in the ack timer's deadline queue
    until it is swept: it must not keep its Future alive for the collector.
    The publisher keeps a settled Future for the publishing thread to free
    (one per later publish): the next publish, or a flush, lets go of it."""
    futures = [client.publish_async(stream, b"v") for _ in range(2)]
    assert all(future.result(timeout=DEADLINE) is not None for future in futures)
    first, second = (weakref.ref(future) for future in futures)
    del futures
    gc.collect()
    assert first() is not None and second() is not None  # kept: no publish since
    client.publish_async(stream, b"v", ack_policy=liftbridge.AckPolicy.NONE, future=False)
    # Freed by that publish (once the acks thread has let go of the run it settled).
    assert _gone(first) and second() is not None
    assert client.flush(DEADLINE)
    assert _gone(second)


def _gone(ref: weakref.ref[Future[liftbridge.Ack | None]]) -> bool:
    """Whether ``ref``'s object is freed within the test's deadline."""
    deadline = time.monotonic() + DEADLINE
    while ref() is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    return ref() is None
