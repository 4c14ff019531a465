"""Ctrl-C while ``publish_many_async`` admits a batch: whatever step it
lands on, each of the batch's publishes is left out (its window slot given
back, its outcome an error) or in (queued or sent, with its deadline), never
half, as :mod:`tests.unit.test_interrupted_submit` holds ``publish_async`` to.
A slot left taken shrinks the ``max_inflight`` window for good; a publish
registered but never queued nor given a deadline makes ``flush()`` wait
forever (a batch's publishes have no Future: flush waits for their claim).

The interrupt is raised at each point of one batch where an interrupt's
handler runs, in the SDK's frames (:mod:`tests.unit.interrupts`).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import liftbridge
from bench.publish_cg import STREAM, AckingBroker
from tests.unit.fake_broker import serving
from tests.unit.interrupts import in_sdk, sweep
from tests.unit.test_interrupted_submit import BOUND, WINDOW, _settled

MOST = 1500  # interrupt points one batch has, at most (a bound on each sweep)
VALUES = [b"v"] * (WINDOW + WINDOW // 2)  # two parts: the second waits for room


@pytest.fixture
def broker() -> Iterator[AckingBroker]:
    # The bench driver's broker: a port as a FakeBroker has, no subclass of it.
    with serving(AckingBroker()) as served:  # type: ignore[abstract, type-var]
        yield served


@pytest.mark.parametrize("timeout", [None, BOUND], ids=["default-timeout", "own-timeout"])
def test_a_batch_interrupted_anywhere_is_out_or_in(
    broker: AckingBroker, timeout: float | None
) -> None:
    """The default timeout puts a part's deadlines in the timer's ordered
    queue (under the publisher's lock), its own timeout schedules the part
    after; a batch larger than the window is admitted in two parts."""
    with liftbridge.Client(f"127.0.0.1:{broker.port}", max_inflight=WINDOW) as client:
        assert isinstance(client.publish(STREAM, b"first", timeout=BOUND), liftbridge.Ack)
        _settled(client)  # the publisher's threads started
        interrupted = sweep(
            lambda: client.publish_many_async(STREAM, VALUES, timeout=timeout),
            lambda: _settled(client),
            in_sdk,
            MOST,
        )
        acks = client.publish_many_async(STREAM, VALUES, timeout=timeout).result(BOUND)
        assert len(acks) == len(VALUES)
    # Points where a slot was left taken, or a publish unqueued or without a deadline.
    assert {"submit_many", "_admit_part", "put"} <= interrupted
    assert ("extend_held" if timeout is None else "schedule") in interrupted
