"""The three publishers take the same message options with the same values
(bytes-like keys, values and headers, correlation ids, expected offsets),
against the real server, and refuse an option they do not take before
sending anything."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import liftbridge
from liftbridge.testing import LocalServer

DEADLINE = 10.0


def test_the_three_publishers_take_the_same_options(
    client: liftbridge.Client, server: LocalServer, unique_name: str
) -> None:
    client.create_stream(unique_name, optimistic_concurrency_control=True)
    key, headers = bytearray(b"k"), {"h": memoryview(b"x")}
    with (
        liftbridge.NatsStreamPublisher(client, server.nats_url) as stream_pub,
        liftbridge.NatsPublisher(server.nats_url) as nats_pub,
    ):
        acks = [
            client.publish(
                unique_name,
                bytearray(b"v0"),
                key=key,
                headers=headers,
                expected_offset=0,
                correlation_id="c0",
                timeout=DEADLINE,
            ),
            stream_pub.publish(
                unique_name,
                memoryview(b"v1"),
                key=key,
                headers=headers,
                expected_offset=1,
                correlation_id="c1",
                timeout=DEADLINE,
            ),
            # Partition 0 of a stream created without a subject listens on its name.
            nats_pub.publish(
                unique_name,
                bytearray(b"v2"),
                key=key,
                headers=headers,
                expected_offset=2,
                correlation_id="c2",
                timeout=DEADLINE,
            ),
        ]
        # The correlation id the caller gave comes back on the ack, for each.
        assert [(a.offset, a.correlation_id) for a in acks] == [(0, "c0"), (1, "c1"), (2, "c2")]
        for publisher in (client, stream_pub, nats_pub):
            with pytest.raises(liftbridge.IncorrectOffsetError):
                publisher.publish(unique_name, b"late", expected_offset=0, timeout=DEADLINE)
    for offset in range(3):
        message = client.get(unique_name, offset, timeout=DEADLINE)
        assert (message.value, message.key) == (f"v{offset}".encode(), b"k")
        assert message.headers["h"] == b"x"


def test_an_option_a_publisher_does_not_take_is_refused_unsent(
    client: liftbridge.Client, server: LocalServer, stream: str
) -> None:
    with (
        liftbridge.NatsStreamPublisher(client, server.nats_url) as stream_pub,
        liftbridge.NatsPublisher(server.nats_url) as nats_pub,
    ):
        refused: list[Callable[[], object]] = [
            lambda: client.publish(stream, b"v", expected_ofset=1),  # type: ignore[call-overload]
            lambda: stream_pub.publish(stream, b"v", ack_inbox="inbox"),  # type: ignore[call-overload]
            lambda: stream_pub.publish_async(stream, b"v", ack_inbox="inbox"),  # type: ignore[call-overload]
            lambda: nats_pub.publish(stream, b"v", partition=0),  # type: ignore[call-overload]
        ]
        for call in refused:
            with pytest.raises(liftbridge.ArgumentTypeError, match="unexpected keyword") as caught:
                call()
            assert isinstance(caught.value, TypeError)
    assert client.fetch_partition_metadata(stream, timeout=DEADLINE).newest_offset == -1
