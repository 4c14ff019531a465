"""Client fixtures for the real-server tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import liftbridge
from liftbridge.testing import LocalServer


@pytest.fixture
def client(server: LocalServer) -> Iterator[liftbridge.Client]:
    """A client of the session server, closed after the test."""
    with liftbridge.Client(server.addresses, ack_wait=10.0) as c:
        yield c


@pytest.fixture
def stream(client: liftbridge.Client, unique_name: str) -> str:
    """A fresh one-partition stream whose subject is its name."""
    client.create_stream(unique_name)
    return unique_name
