"""Oversized publishes are refused before sending, so they cannot break the
shared PublishAsync stream the other publishes are in flight on."""

from __future__ import annotations

from concurrent.futures import Future

import pytest

import liftbridge
from liftbridge._core import _validate
from liftbridge.testing import LocalServer
from liftbridge_api import api_pb2

MiB = 1024 * 1024


def test_an_oversized_publish_fails_alone_among_600_in_flight(
    client: liftbridge.Client, stream: str
) -> None:
    futures: list[Future[liftbridge.Ack | None]] = []
    for i in range(600):
        futures.append(client.publish_async(stream, b"small %d" % i))
        if i == 300:
            # 5 MiB is past the server's 4 MiB gRPC limit: sent, it broke the
            # stream and failed every publish in flight with ConnectionLostError.
            with pytest.raises(liftbridge.MessageTooLargeError, match="max_message_size"):
                client.publish_async(stream, b"x" * (5 * MiB))
    acks = [f.result(timeout=30) for f in futures]
    assert [a.offset for a in acks if a is not None] == list(range(600))


def test_the_default_limit_leaves_room_for_the_servers_envelope(
    client: liftbridge.Client, stream: str
) -> None:
    """The largest message the default limit lets through is stored; one byte
    more is refused before sending."""
    correlation_id = "c" * 32
    probe = api_pb2.PublishRequest(
        stream=stream, value=b"", correlationId=correlation_id, expectedOffset=-1
    )
    # The value's length prefix grows from 1 to 3 bytes for large values.
    largest = _validate.SERVER_MAX_MESSAGE - _validate.ENVELOPE_ALLOWANCE - probe.ByteSize() - 4
    ack = client.publish(stream, b"v" * largest, correlation_id=correlation_id, timeout=30)
    assert ack is not None
    assert ack.offset == 0
    with pytest.raises(liftbridge.MessageTooLargeError, match=r"1048577|exceeds"):
        client.publish(stream, b"v" * (largest + 1), correlation_id=correlation_id)
    with pytest.raises(liftbridge.MessageTooLargeError):
        client.publish_to_subject(stream, b"v" * (largest + 100))


def test_max_message_size_is_the_clients_to_choose(server: LocalServer, stream: str) -> None:
    with liftbridge.Client(server.address, max_message_size=64 * 1024) as small:
        with pytest.raises(liftbridge.MessageTooLargeError, match="65536"):
            small.publish(stream, b"x" * (64 * 1024))
        assert small.publish(stream, b"x" * (32 * 1024)) is not None
    for bad in (4095, 4 * MiB + 1):
        with pytest.raises(liftbridge.InvalidArgumentError, match=r"^max_message_size"):
            liftbridge.Client(server.address, max_message_size=bad)
