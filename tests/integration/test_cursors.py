"""Cursors against a real server, and the seed's resume-from-cursor consumer."""

from __future__ import annotations

import zlib

import pytest

import liftbridge
from liftbridge.testing import LocalServer


def test_set_and_fetch(client: liftbridge.Client, stream: str) -> None:
    assert client.fetch_cursor("reader", stream, 0) is None
    client.set_cursor("reader", stream, 0, 41)
    assert client.fetch_cursor("reader", stream, 0) == 41
    client.set_cursor("reader", stream, 0, 42)
    assert client.fetch_cursor("reader", stream, 0) == 42
    assert client.fetch_cursor("other", stream, 0) is None


def test_cursors_survive_a_client_restart(server: LocalServer, stream: str) -> None:
    with liftbridge.Client(server.address) as first:
        first.set_cursor("durable", stream, 0, 7)
    with liftbridge.Client(server.address) as second:
        assert second.fetch_cursor("durable", stream, 0) == 7


def test_cursor_is_stored_in_the_partition_the_go_key_picks(
    client: liftbridge.Client, stream: str
) -> None:
    count = client.fetch_metadata().partition_count("__cursors")
    assert count > 1
    client.set_cursor("my-cursor", stream, 0, 3)
    key = f"my-cursor,{stream},0".encode()
    expected = zlib.crc32(key) % count
    found = []
    for partition in range(count):
        with client.subscribe(
            "__cursors",
            partition=partition,
            start=liftbridge.StartPosition.EARLIEST,
            stop=liftbridge.StopPosition.LATEST,
        ) as sub:
            found += [partition for m in sub if m.key == key]
    assert found == [expected]


def test_bad_cursor_input(client: liftbridge.Client, stream: str) -> None:
    with pytest.raises(liftbridge.InvalidArgumentError, match="cursor_id"):
        client.set_cursor("", stream, 0, 1)
    with pytest.raises(liftbridge.InvalidArgumentError, match="offset"):
        client.set_cursor("c", stream, 0, -5)
