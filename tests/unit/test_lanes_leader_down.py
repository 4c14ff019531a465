"""A synchronous publish whose partition leader is already known down is held
back (by _leaders.live_leader, which the lanes call before sending) until
fresh metadata names a live leader (then sent there), or fails unsent at its
timeout: sent to the dead leader it could only wait out its ack timeout.
Driven by a scripted router, since a real cluster cannot hold its metadata
still on cue."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

import liftbridge
from liftbridge._core._router import Deadline
from liftbridge._publish._leaders import live_leader
from liftbridge_api import api_pb2


class ScriptedRouter:
    """Names ``leaders[i]`` as the partition's leader after ``i`` refreshes
    (the last one from then on); ``down`` are the brokers known down."""

    def __init__(self, leaders: list[str | None], down: set[str]) -> None:
        self.leaders = leaders
        self.down = down
        self.refreshes = 0
        self.deadlines: list[float] = []
        self.serving: set[str] = {"new:2"}
        self.asked: list[str] = []
        self.suspects: set[str] = set()  # passed over after a failed call

    def on_broker_down(self, listener: Callable[[str], None]) -> None:
        pass

    def refresh(self, deadline: Deadline | None = None, *, shared: bool = True) -> None:
        assert deadline is not None and not shared
        self.deadlines.append(deadline.remaining())
        self.refreshes += 1

    def leader_address(self, stream: str, partition: int) -> str | None:
        return self.leaders[min(self.refreshes, len(self.leaders) - 1)]

    def broker_down(self, address: str) -> bool:
        return address in self.down

    def suspect(self, address: str) -> bool:
        return address in self.suspects

    def answered(self, address: str) -> None:
        self.suspects.discard(address)

    def invoke(self, address: str, method: str, request: object, timeout: float) -> object:
        """The new leader's own word: it serves the partition once ``serving``."""
        assert method == "FetchPartitionMetadata"
        self.asked.append(address)
        if address not in self.serving:
            raise liftbridge.NotLeaderError(f"{address} does not lead yet")
        return object()


REQUEST = api_pb2.PublishRequest(stream="s", partition=2, value=b"v")


def _live_leader(router: ScriptedRouter, down: str, due: float) -> str:
    return live_leader(router, REQUEST, down, due)  # type: ignore[arg-type]


def test_held_back_until_fresh_metadata_names_a_live_leader() -> None:
    router = ScriptedRouter(["dead:1", "dead:1", None, "new:2"], down={"dead:1"})
    assert _live_leader(router, "dead:1", time.monotonic() + 5) == "new:2"
    assert router.refreshes == 3  # still the dead one, then no leader, then the new one
    assert all(d <= 1.0 for d in router.deadlines)  # one refresh never takes the whole wait
    assert router.asked == ["new:2"]


def test_held_back_until_the_new_leader_says_it_serves_the_partition() -> None:
    router = ScriptedRouter(["dead:1", "new:2"], down={"dead:1"})
    router.serving = set()
    with pytest.raises(liftbridge.DeadlineExceededError, match="not sent"):
        _live_leader(router, "dead:1", time.monotonic() + 0.4)
    assert router.asked and set(router.asked) == {"new:2"}


def test_fails_unsent_at_its_timeout_when_no_live_leader_comes() -> None:
    router = ScriptedRouter(["dead:1"], down={"dead:1"})
    started = time.monotonic()
    with pytest.raises(liftbridge.DeadlineExceededError, match="not sent") as caught:
        _live_leader(router, "dead:1", started + 0.4)
    assert not isinstance(caught.value, liftbridge.AckTimeoutError)  # nothing awaits an ack
    assert "'s' partition 2" in str(caught.value) and "dead:1" in str(caught.value)
    assert router.refreshes >= 2


def test_a_suspect_leader_that_says_it_serves_the_partition_is_taken() -> None:
    """A live broker whose metadata call timed out while the cluster failed
    over (a broker waits on its dead peer before it answers one) is suspect,
    not down: asked, it says it leads, and the publish goes to it. Passing it
    over held a sync publish back until its timeout."""
    router = ScriptedRouter(["new:2"], down=set())
    router.suspects = {"new:2"}
    assert _live_leader(router, "new:2", time.monotonic() + 0.4) == "new:2"
    assert router.asked == ["new:2"]


def test_a_leader_found_serving_is_no_longer_suspect() -> None:
    """The lanes check the leader live_leader returns once more, suspicion
    included: its answer clears the suspicion, or the publish is held back
    again on the very leader that just answered."""
    router = ScriptedRouter(["dead:1", "new:2"], down={"dead:1"})
    router.suspects = {"new:2", "dead:1"}
    assert _live_leader(router, "dead:1", time.monotonic() + 5) == "new:2"
    assert router.suspects == {"dead:1"}


def test_a_suspect_leader_that_does_not_answer_stays_held_back() -> None:
    router = ScriptedRouter(["new:2"], down=set())
    router.suspects = {"new:2"}
    router.serving = set()
    with pytest.raises(liftbridge.DeadlineExceededError, match="not sent"):
        _live_leader(router, "new:2", time.monotonic() + 0.4)
    assert router.suspects == {"new:2"}
