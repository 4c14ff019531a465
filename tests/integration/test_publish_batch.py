"""``publish_many_async``: a batch of publishes with one Future, over gRPC
(``Client``) and NATS (``NatsStreamPublisher``), against the real server."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any

import pytest

import liftbridge
from liftbridge.testing import LocalServer

DEADLINE = 30.0

PublishMany = Callable[..., "Future[list[liftbridge.Ack]]"]


@pytest.fixture(params=["grpc", "nats"])
def publish_many_async(
    request: pytest.FixtureRequest, server: LocalServer, client: liftbridge.Client
) -> Iterator[PublishMany]:
    if request.param == "grpc":
        yield client.publish_many_async
        return
    with liftbridge.NatsStreamPublisher(client, server.nats_url, ack_wait=DEADLINE) as nats:
        yield nats.publish_many_async


def test_acks_come_in_the_order_of_the_values(
    publish_many_async: PublishMany, client: liftbridge.Client, stream: str
) -> None:
    values = [f"m{i}".encode() for i in range(300)]
    future = publish_many_async(stream, values, key=b"k", partition=0)
    acks = future.result(timeout=DEADLINE)
    assert [ack.offset for ack in acks] == list(range(300))
    assert len({ack.correlation_id for ack in acks}) == 300
    assert future.cancel() is False and not future.cancelled()
    stored = client.get(stream, 299)
    assert stored.value == b"m299" and stored.key == b"k"


def test_one_refused_message_fails_the_batch_future(
    publish_many_async: PublishMany, client: liftbridge.Client, unique_name: str
) -> None:
    client.create_stream(unique_name, optimistic_concurrency_control=True)
    # Both expect offset 0: the first is stored there, the second is refused.
    future = publish_many_async(unique_name, [b"first", b"second"], expected_offset=0)
    error = future.exception(timeout=DEADLINE)
    assert isinstance(error, liftbridge.IncorrectOffsetError)
    with pytest.raises(liftbridge.IncorrectOffsetError):
        future.result(timeout=0)
    # The other message of the batch was stored: the next offset is 1.
    assert client.get(unique_name, 0).value == b"first"
    assert client.publish(unique_name, b"third", expected_offset=1).offset == 1


def test_empty_batch_and_done_callbacks(publish_many_async: PublishMany, stream: str) -> None:
    assert publish_many_async(stream, []).result(timeout=0) == []
    ran: list[tuple[str, Any]] = []
    done = threading.Event()

    def on_done(future: Future[list[liftbridge.Ack]]) -> None:
        ran.append((threading.current_thread().name, len(future.result(timeout=0))))
        done.set()

    publish_many_async(stream, (b"a", b"b")).add_done_callback(on_done)
    assert done.wait(DEADLINE)
    assert ran == [("liftbridge-callbacks", 2)]


def test_asyncio_can_await_a_batch(publish_many_async: PublishMany, stream: str) -> None:
    async def main() -> list[liftbridge.Ack]:
        return await asyncio.wait_for(
            asyncio.wrap_future(publish_many_async(stream, [b"x", b"y", b"z"])), DEADLINE
        )

    assert [ack.offset for ack in asyncio.run(main())] == [0, 1, 2]
