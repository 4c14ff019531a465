"""Wire protobufs with every field filled, for tests of the value objects built from them."""

from __future__ import annotations

from typing import Any

from liftbridge_api import api_pb2


def wire_ack(**fields: Any) -> api_pb2.Ack:
    """A wire Ack of "orders" at offset 42; ``fields`` override any field."""
    defaults: dict[str, Any] = {
        "stream": "orders",
        "partitionSubject": "orders.1",
        "msgSubject": "orders.1",
        "offset": 42,
        "ackInbox": "acks",
        "correlationId": "c-7",
        "ackPolicy": api_pb2.ALL,
        "receptionTimestamp": 1_000,
        "commitTimestamp": 2_000,
    }
    defaults.update(fields)
    return api_pb2.Ack(**defaults)
