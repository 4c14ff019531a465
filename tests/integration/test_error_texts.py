"""Error texts a user reads first: a missing stream is named (and its
partition when the call named one), a server that is gone is "could not
reach <address>" from the SDK itself, and a direct read that ran out of time
says "deadline" once."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import pytest

import liftbridge
from liftbridge.testing import LocalServer


def _result(future: Future[liftbridge.Ack | None] | None) -> object:
    assert future is not None
    return future.result(timeout=10)


def test_no_such_stream_names_the_stream_and_partition(
    client: liftbridge.Client, unique_name: str
) -> None:
    missing = f"{unique_name}-missing"
    calls: tuple[Callable[[], object], ...] = (
        lambda: client.delete_stream(missing),
        lambda: client.pause_stream(missing),
        lambda: client.set_stream_readonly(missing),
        lambda: client.publish(missing, b"v"),
        lambda: _result(client.publish_async(missing, b"v")),
        lambda: client.get(missing, 0),
        lambda: client.fetch_partition_metadata(missing),
        lambda: client.set_cursor("c", missing, 0, 1),  # the server itself would store it
        lambda: client.fetch_cursor("c", missing, 0),
    )
    for call in calls:
        with pytest.raises(liftbridge.NoSuchStreamError) as caught:
            call()
        assert f"no such stream: {missing!r}" in str(caught.value)
    client.create_stream(unique_name)
    calls = (
        lambda: client.pause_stream(unique_name, partitions=[5]),
        lambda: client.publish(unique_name, b"v", partition=5),
        lambda: _result(client.publish_async(unique_name, b"v", partition=5)),
        lambda: client.get(unique_name, 0, partition=5),
        lambda: client.set_cursor("c", unique_name, 5, 1),
        lambda: client.fetch_cursor("c", unique_name, 5),
    )
    for call in calls:
        with pytest.raises(liftbridge.NoSuchPartitionError) as partition_error:
            call()
        assert not isinstance(partition_error.value, liftbridge.NoSuchStreamError)
        assert f"stream {unique_name!r} has no partition 5" in str(partition_error.value)
    client.create_stream(missing)  # the refused set_cursor stored nothing
    assert client.fetch_cursor("c", missing, 0) is None


def test_cursor_calls_check_the_stream_without_an_extra_rpc_once_it_is_known(
    client: liftbridge.Client, stream: str
) -> None:
    channels = client._router._channels  # the one place RPCs start
    rpcs: list[str] = []
    real = channels.invoke

    def invoke(address: str, method: str, *args: Any, **kwargs: Any) -> Any:
        rpcs.append(method)
        return real(address, method, *args, **kwargs)

    client.fetch_metadata()  # the stream is in the client's cache now
    channels.invoke = invoke  # type: ignore[method-assign]
    try:
        client.set_cursor("c", stream, 0, 4)
        assert client.fetch_cursor("c", stream, 0) == 4
    finally:
        channels.invoke = real  # type: ignore[method-assign]
    assert rpcs == ["SetCursor", "FetchCursor"]


def test_a_server_that_is_gone_could_not_be_reached() -> None:
    with pytest.raises(liftbridge.UnavailableError) as caught:
        liftbridge.Client(["127.0.0.1:1", "127.0.0.1:2"], connect_timeout=1.0)
    assert "could not reach 127.0.0.1:1, 127.0.0.1:2 within 1s" in str(caught.value)
    with LocalServer() as local:
        address = local.address
        client = liftbridge.Client(address, rpc_timeout=1.0)
        with client:
            client.create_stream("texts")
            local.stop()
            for call in (
                lambda: client.fetch_metadata(timeout=1.5),
                lambda: client.delete_stream("texts", timeout=1.5),
                lambda: client.get("texts", 0, timeout=1.5),
            ):
                with pytest.raises(liftbridge.LiftbridgeError) as failed:
                    call()
                text = str(failed.value)
                assert f"could not reach {address}" in text, text
                assert text.count("deadline") <= 1, text


def test_a_read_past_its_deadline_says_deadline_once(
    client: liftbridge.Client, unique_name: str
) -> None:
    client.create_stream(unique_name)
    client.publish(unique_name, b"v")
    texts = []
    for timeout in (1e-6, 1e-4, 1e-3, 3e-3, 1e-2):  # out of time at different steps
        try:
            client.get(unique_name, 0, timeout=timeout)
        except liftbridge.DeadlineExceededError as e:
            texts.append(str(e))
    assert texts  # at least the smallest timeout runs out
    for text in texts:
        assert text.replace(unique_name, "").count("deadline") == 1, text
