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
from tests.integration.frozen import frozen

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


@pytest.fixture(params=["grpc", "nats"])
def small_window(
    request: pytest.FixtureRequest, server: LocalServer
) -> Iterator[tuple[liftbridge.Client, PublishMany]]:
    """A client and its publish_many_async, with a window of 8 publishes."""
    with liftbridge.Client(server.addresses, max_inflight=8, ack_wait=DEADLINE) as client:
        if request.param == "grpc":
            yield client, client.publish_many_async
            return
        with liftbridge.NatsStreamPublisher(
            client, server.nats_url, max_inflight=8, ack_wait=DEADLINE
        ) as nats:
            yield client, nats.publish_many_async


def test_a_batch_larger_than_the_window_goes_in_parts_in_order(
    small_window: tuple[liftbridge.Client, PublishMany], unique_name: str
) -> None:
    client, publish_many_async = small_window
    client.create_stream(unique_name)
    values = [b"v%d" % i for i in range(200)]
    acks = publish_many_async(unique_name, values).result(timeout=DEADLINE)
    assert [ack.offset for ack in acks] == list(range(200))
    assert client.get(unique_name, 137).value == b"v137"


def test_a_partitioner_picks_each_messages_partition_and_acks_keep_the_values_order(
    small_window: tuple[liftbridge.Client, PublishMany], unique_name: str
) -> None:
    client, publish_many_async = small_window
    client.create_stream(unique_name, partitions=3)
    values = [b"p%d" % i for i in range(30)]
    acks = publish_many_async(
        unique_name, values, partitioner=liftbridge.PartitionByRoundRobin()
    ).result(timeout=DEADLINE)
    assert sorted({ack.partition for ack in acks}) == [0, 1, 2]
    # Each partition got its messages in the order of the values.
    for partition in range(3):
        mine = [ack for ack in acks if ack.partition == partition]
        assert [ack.offset for ack in mine] == list(range(len(mine)))
        stored = [client.get(unique_name, ack.offset, partition=partition).value for ack in mine]
        assert stored == [values[acks.index(ack)] for ack in mine]


@pytest.mark.parametrize("path", ["grpc", "nats"])
def test_a_stopped_server_times_a_batch_out_and_close_ends_one_waiting_for_the_window(
    path: str, unique_name: str
) -> None:
    """With the server stopped (no acks): a batch with a short timeout fails
    with AckTimeoutError; a batch larger than the window waits for room
    until the publisher closes, then raises ClientClosedError; nothing hangs."""
    with LocalServer() as own, liftbridge.Client(own.address, max_inflight=8) as client:
        client.create_stream(unique_name)
        nats = (
            liftbridge.NatsStreamPublisher(client, own.nats_url, max_inflight=8)
            if path == "nats"
            else None
        )
        target = nats or client
        target.publish_many_async(unique_name, [b"warm"]).result(timeout=DEADLINE)
        raised: list[BaseException] = []

        def larger_than_the_window() -> None:
            try:
                target.publish_many_async(unique_name, [b"x"] * 20, timeout=DEADLINE)
            except BaseException as e:
                raised.append(e)

        with frozen(own.pid):
            timed_out = target.publish_many_async(unique_name, [b"a", b"b"], timeout=0.3)
            assert isinstance(timed_out.exception(timeout=DEADLINE), liftbridge.AckTimeoutError)
            waiter = threading.Thread(target=larger_than_the_window, name="test-batch-waiter")
            waiter.start()
            waiter.join(0.5)
            assert waiter.is_alive(), "a batch went past a full window"
            target.close()
            waiter.join(DEADLINE)
        assert [type(e) for e in raised] == [liftbridge.ClientClosedError]
