"""Where a call goes and by when: the :class:`Deadline` of a whole call, and
the routing targets a call names (any broker, a partition's leader, an
in-sync replica, a broker by id). The :class:`~liftbridge._core._router.Router`
turns a target into an address."""

from __future__ import annotations

import time
from dataclasses import dataclass

from liftbridge._errors import DeadlineExceededError


class Deadline:
    """A point in ``time.monotonic()`` by which a whole call must finish."""

    __slots__ = ("expires",)

    def __init__(self, seconds: float) -> None:
        self.expires = time.monotonic() + seconds

    def remaining(self) -> float:
        """Seconds left, never negative."""
        return max(0.0, self.expires - time.monotonic())

    @property
    def expired(self) -> bool:
        """True once the deadline has passed."""
        return time.monotonic() >= self.expires

    def attempt(self, cap: float) -> float:
        """The timeout of one attempt: ``cap`` or what remains, if less.

        Raises:
            DeadlineExceededError: nothing remains.
        """
        left = self.expires - time.monotonic()
        if left <= 0:
            raise DeadlineExceededError("the call's deadline passed")
        return min(cap, left)

    def __repr__(self) -> str:
        return f"Deadline(remaining={self.remaining():.3f}s)"


# ----------------------------------------------------------------- targets --


@dataclass(frozen=True, slots=True)
class AnyBroker:
    """Any broker: the current one of the rotation, the next after a failure."""


@dataclass(frozen=True, slots=True)
class Leader:
    """The leader of a stream partition."""

    stream: str
    partition: int


@dataclass(frozen=True, slots=True)
class Replica:
    """A random in-sync replica of a stream partition (the leader when none is known)."""

    stream: str
    partition: int


@dataclass(frozen=True, slots=True)
class BrokerId:
    """The broker with this server id (e.g. a consumer group's coordinator)."""

    broker_id: str


Target = AnyBroker | Leader | Replica | BrokerId
ANY = AnyBroker()
