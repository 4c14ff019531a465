"""The objects a paced ``publish_async`` reads most attributes of keep them
inline, where CPython's specialised attribute reads find them.

CPython 3.11 keeps an instance's attributes beside it (inline values, which
``self.x`` reads and method look-ups specialise on) only while its class's
shared keys hold fewer than 30 names; from the 30th on, each instance keeps
them in a dict of its own and every ``self.x`` is a dict look-up. The
``Publisher`` had 32: a paced ``publish_async`` with a Future cost its thread
~1,400 instructions more (callgrind, ``bench/publish_cg.py``'s loop). Its
HTTP/2 call (``Http2Call``, 30) is read by every thread of a publish.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import liftbridge
from bench.publish_cg import STREAM, AckingBroker
from tests.unit.fake_broker import serving

_INLINE_MAX = 29
"""Attributes an instance keeps inline at most (CPython 3.11: fewer than 30)."""


@pytest.fixture
def broker() -> Iterator[AckingBroker]:
    with serving(AckingBroker()) as served:  # type: ignore[abstract, type-var]
        yield served


def test_the_publisher_and_its_stream_keep_their_attributes_inline(broker: AckingBroker) -> None:
    with liftbridge.Client(f"127.0.0.1:{broker.port}") as client:
        client.publish_async(STREAM, b"v").result(30)
        publisher = client._publishing._publisher
        call = publisher._call  # the SDK's own HTTP/2 call: write_now, the acks thread's reads
        assert call is not None and type(call).__name__ == "Http2Call"
        for held in (publisher, call):
            names = vars(held)
            assert len(names) <= _INLINE_MAX, f"{type(held).__name__}: {sorted(names)}"
