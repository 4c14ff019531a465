"""A broker that failed is passed over by "any broker" calls for a while, so a
dead first seed never pins the client (issue 25)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import liftbridge
from liftbridge._core._retry import RetryPolicy
from liftbridge._core._router import ANY, Deadline, Router

SEEDS = ("127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3")


@pytest.fixture
def router() -> Iterator[Router]:
    made = Router(SEEDS, tls=None, rpc_timeout=1.0, retry_policy=RetryPolicy())
    yield made
    made.close()


def test_any_broker_skips_a_failed_one(router: Router) -> None:
    assert router.address(ANY, Deadline(1)) == SEEDS[0]
    router.failed(SEEDS[0], liftbridge.UnavailableError("refused"))
    assert router.suspect(SEEDS[0])
    assert router.address(ANY, Deadline(1)) == SEEDS[1]
    router.failed(SEEDS[1], liftbridge.UnavailableError("refused"))
    assert router.address(ANY, Deadline(1)) == SEEDS[2]


def test_an_answer_clears_the_suspicion(router: Router) -> None:
    router.failed(SEEDS[1], liftbridge.UnavailableError("refused"))
    router.answered(SEEDS[1])
    assert not router.suspect(SEEDS[1])


def test_when_every_broker_failed_the_rotation_still_names_one(router: Router) -> None:
    for seed in SEEDS:
        router.failed(seed, liftbridge.UnavailableError("refused"))
    assert router.address(ANY, Deadline(1)) in SEEDS


def test_a_stream_opens_on_the_next_broker_when_one_refuses(router: Router) -> None:
    # Nothing listens on these ports: every connection is refused at once, so
    # the open tries each broker once, then fails with the last refusal.
    with pytest.raises(liftbridge.UnavailableError):
        router.open_stream("PublishAsync", iter(()), target=ANY, deadline=Deadline(2))
    assert all(router.suspect(seed) for seed in SEEDS)
