"""PublishAsync on the SDK's own HTTP/2 connection (:mod:`liftbridge._transport._http2`)
against the real server: values far past one flow-control window and one
DATA frame come back exact, a full window of publishes in flight is acked in
order, and the stream really is on that connection for a plaintext client
(thread ``liftbridge-h2-send``); the TLS client's stays on grpcio
(``tests/integration/test_tls.py``)."""

from __future__ import annotations

import hashlib
import threading
import time
from concurrent.futures import Future

import liftbridge
from liftbridge._core import _validate
from liftbridge_api import api_pb2

SENDER = "liftbridge-h2-send"


def _senders() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == SENDER]


def _value(seed: int, size: int) -> bytes:
    """``size`` bytes that differ everywhere from another seed's (a shifted or
    spliced frame would not compare equal)."""
    block = b"".join(hashlib.sha256(b"%d-%d" % (seed, i)).digest() for i in range(size // 32 + 1))
    return block[:size]


def _largest(stream: str, correlation_id: str) -> int:
    """The largest value the client's default limit lets through (as in
    test_message_size.py)."""
    probe = api_pb2.PublishRequest(
        stream=stream, value=b"", correlationId=correlation_id, expectedOffset=-1
    )
    return _validate.SERVER_MAX_MESSAGE - _validate.ENVELOPE_ALLOWANCE - probe.ByteSize() - 4


def _values(client: liftbridge.Client, stream: str, last: int) -> list[bytes]:
    with client.subscribe(stream, start=0, stop=last) as sub:
        return [m.value for m in sub]


def test_values_near_the_max_message_size_come_back_exact(
    client: liftbridge.Client, stream: str
) -> None:
    correlation = "c" * 32
    largest = _largest(stream, correlation)
    # Each ~1 MiB value is 16 times the stream's first flow-control window
    # and 64 DATA frames; several in flight at once share the connection's.
    sizes = [largest, largest - 1, 300_000, largest, 65_536, largest]
    values = [_value(i, size) for i, size in enumerate(sizes)]
    futures = [
        client.publish_async(stream, value, correlation_id=f"{i:032d}")
        for i, value in enumerate(values[:4])
    ]
    acks = [f.result(timeout=60) for f in futures]
    assert [a.offset for a in acks if a is not None] == [0, 1, 2, 3]
    # A synchronous publish goes on this thread's own stream (a lane).
    for value in values[4:]:
        ack = client.publish(stream, value, correlation_id=correlation, timeout=60)
        assert ack is not None
    assert _values(client, stream, len(values) - 1) == values


def test_a_full_window_in_flight_twenty_times_over_is_acked_in_order(
    client: liftbridge.Client, stream: str
) -> None:
    """20,000 publishes through the default window (max_inflight 1024): the
    producer blocks on a full window, the stream never stalls, and the acks
    come back for every publish, in the order of its offsets."""
    count = 20_000
    futures: list[Future[liftbridge.Ack | None]] = [
        client.publish_async(stream, b"%d" % i) for i in range(count)
    ]
    acks = [f.result(timeout=120) for f in futures]
    assert [a.offset if a is not None else None for a in acks] == list(range(count))
    tail = _values(client, stream, count - 1)[-3:]
    assert tail == [b"%d" % i for i in range(count - 3, count)]


def test_a_plaintext_clients_publish_stream_is_its_own_connection(
    client: liftbridge.Client, stream: str
) -> None:
    assert _senders() == []  # no stream before the first publish
    ack = client.publish_async(stream, b"first").result(timeout=30)
    assert ack is not None and ack.offset == 0
    assert len(_senders()) == 1  # the shared PublishAsync stream, open for more
    ack = client.publish(stream, b"second")
    assert ack is not None and ack.offset == 1
    assert len(_senders()) == 2  # and this thread's lane
    client.close()
    deadline = time.monotonic() + 10
    for sender in _senders():
        sender.join(max(0.0, deadline - time.monotonic()))
    assert _senders() == []
