"""Subscribe streams of a plaintext client, each on an HTTP/2 connection of
its own (liftbridge._transport._http2), against a real server: what the connection
changes (how a failed connect, a client close and a large request end)."""

from __future__ import annotations

import threading

import grpc
import pytest

import liftbridge
from liftbridge._transport._channels import Channels
from liftbridge._transport._http2 import Http2Call
from liftbridge.testing import LocalServer
from liftbridge_api import api_pb2


def _request(stream: str) -> api_pb2.SubscribeRequest:
    return api_pb2.SubscribeRequest(stream=stream, startPosition=api_pb2.EARLIEST)


def test_a_subscription_reads_without_a_sender_thread(
    client: liftbridge.Client, stream: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The one SubscribeRequest goes out with the call's headers."""
    for i in range(3):
        client.publish(stream, b"m%d" % i)
    started: list[str] = []
    start = threading.Thread.start

    def recording_start(thread: threading.Thread) -> None:
        started.append(thread.name)
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", recording_start)
    with client.subscribe(stream, start=liftbridge.StartPosition.EARLIEST) as sub:
        messages = iter(sub)
        values = [next(messages).value for _ in range(3)]
    assert values == [b"m0", b"m1", b"m2"]
    assert started and "liftbridge-h2-send" not in started, started


def test_a_broker_that_is_gone_is_a_typed_error_from_subscribe(unique_name: str) -> None:
    """The connection is made when the stream opens: refused, it is an
    UnavailableError (retried within resubscribe_wait), not a raw gRPC one."""
    with LocalServer() as server:
        client = liftbridge.Client(server.address, resubscribe_wait=1.0, rpc_timeout=2.0)
        try:
            client.create_stream(unique_name)
            client.fetch_partition_metadata(unique_name)  # the leader is in the cache
            server.stop()
            with pytest.raises(liftbridge.UnavailableError):  # the start asks for no metadata
                client.subscribe(
                    unique_name, lambda m, e: None, start=liftbridge.StartPosition.EARLIEST
                )
        finally:
            client.close()


def test_closing_the_channels_cancels_a_subscribe_on_its_own_connection(
    server_address: str, stream: str
) -> None:
    channels = Channels(None)
    call = channels.open_stream(server_address, "Subscribe", _request(stream), connect_timeout=5)
    assert isinstance(call, Http2Call)
    outcome: list[BaseException] = []

    def read() -> None:
        try:
            next(call)  # the handshake
            next(call)  # nothing is published: waits until cancelled
        except BaseException as e:
            outcome.append(e)

    reader = threading.Thread(target=read, name="test-reader")
    reader.start()
    channels.close()
    reader.join(10)
    if reader.is_alive():
        call.cancel()
        reader.join(10)
        pytest.fail("closing the channels left the Subscribe call reading")
    # The SDK's error for CANCELLED, caused by the call's own status.
    assert len(outcome) == 1 and isinstance(outcome[0], liftbridge.ConnectionLostError), outcome
    cause = outcome[0].__cause__
    assert isinstance(cause, grpc.RpcError) and cause.code() == grpc.StatusCode.CANCELLED


def test_a_request_larger_than_a_first_frame_still_reaches_the_server(
    server_address: str,
) -> None:
    """Over 16 KiB, the request is split into frames by the sender thread;
    the server reads all of it (and finds no such stream)."""
    name = "x" * 20_000
    call = Http2Call(
        server_address,
        "/proto.API/Subscribe",
        _request(name),
        api_pb2.Message.FromString,
        connect_timeout=5,
    )
    try:
        with pytest.raises(liftbridge.NoSuchPartitionError) as raised:
            next(call)
        cause = raised.value.__cause__
        assert isinstance(cause, grpc.RpcError) and cause.code() == grpc.StatusCode.NOT_FOUND
    finally:
        call.cancel()
