"""A publish on the PublishAsync stream waiting for its ack, as
:class:`~liftbridge._publish._publisher.Publisher` tracks it, and the
settled Futures the publisher keeps for its publishing threads to free.

Why the publishing thread frees them: CPython starts a young-generation
collection once allocations of container objects outnumber their frees by
700, and a free counts only while that tally is above zero. A full Future
is eleven such objects (its Condition, RLock, bound lock methods, waiter
deque and lists) living for a window of publishes; the SDK's
(:class:`~liftbridge._core._futures.CallbackFuture`) is one until something
waits on it, but it still holds its Ack. Freed by the acks thread, in
runs, most of those frees fell on a tally the publishing thread's
allocations had already spent, so publishing paid a young collection every
few dozen publishes and, as the survivors aged, older and full ones. Freed
one per publish, right after that publish's own allocations, they balance
the tally.

The same rule the other way: each thread frees about what it makes. Per
publish the publishing thread makes the Future, the :class:`Pending` and
its request, and frees a settled Future (with the Ack and response it
holds); per ack the acks thread makes the response, its ack and the Ack,
and frees the settled :class:`Pending` and its request (it lets go of it in
the ack timer's queue: ``OrderedDeadlines.drop_done_held``). Left to the
publishing thread, those two frees made its side three short a publish and
the acks thread's three over an ack: one read of a few hundred acks set off
a collection over everything in flight.
"""

from __future__ import annotations

import collections
import contextlib
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass

from liftbridge._core._acks import Ack
from liftbridge._core._callbacks import Outcome
from liftbridge._errors import LiftbridgeError
from liftbridge._publish._batch import Batch, settle_members
from liftbridge._publish._request_bytes import Request


@dataclass(eq=False, slots=True)
class Pending:
    """One publish waiting for its ack."""

    correlation_id: str
    request: Request
    future: Future[Ack | None] | None  # None: the outcome goes to the handler alone
    handler: Callable[[Ack | None, BaseException | None], None] | None
    expects_ack: bool
    deadline: float = 0.0  # time.monotonic(); set when the publish gets its window slot
    generation: int = -1  # stream generation it was sent on; -1 = not sent yet
    leader: str | None = None  # the partition leader's address when submitted, if known
    suspect: bool = False  # sent while that leader was known to be down
    done: bool = False  # claimed for completion (under Publisher._lock)
    batch: Batch | None = None  # the publish_many_async batch it settles, if any
    index: int = 0  # its place in that batch


def claimed_outcomes(
    claimed: list[tuple[Pending, Ack | None, LiftbridgeError | None]],
) -> list[Outcome]:
    """Each claimed publish's outcome for :meth:`CallbackRunner.settle_run`,
    in order, the publish letting go of its Future (the ack timer's deque
    keeps the entry until it sweeps it); but for those of a
    ``publish_many_async`` batch: their outcomes go to their batch at once
    (:func:`settle_members`: SDK code, no user code), with no outcome here."""
    settled: list[Outcome] = []
    members = []
    for claim in claimed:
        pending = claim[0]
        if pending.batch is None:
            future, pending.future = pending.future, None
            handler = pending.handler if pending.expects_ack else None
            settled.append((future, handler, claim[1], claim[2]))
        else:
            members.append(claim)
    if members:
        settle_members(members)
    return settled


class Spent:
    """Settled publishes kept for the publishing threads to free, one per
    publish (see the module docstring): the gRPC publisher keeps each
    outcome, the NATS window each Future (its Ack with it).
    Thread-safe (deque operations)."""

    __slots__ = ("kept",)

    def __init__(self) -> None:
        self.kept: collections.deque[object] = collections.deque()
        """Oldest first. A publishing thread's own loop may do what
        :meth:`free_one` does on it (a call the less per publish)."""

    def keep(self, settled: Iterable[object]) -> None:
        """On the thread that settled them: keeps ``settled`` (each holding
        its Future) until publishing threads free them."""
        self.kept.extend(settled)

    def free_one(self) -> None:
        """On a publishing thread: drops the oldest kept, if any. Once per
        publish: a ``try`` costs nothing unless it catches, where
        ``contextlib.suppress`` cost three Python calls (~0.5 us)."""
        kept = self.kept
        if kept:
            try:  # noqa: SIM105 (contextlib.suppress: the cost this avoids)
                kept.popleft()
            except IndexError:  # another publishing thread took the last
                pass

    def free(self, count: int) -> None:
        """:meth:`free_one` for each of ``count`` publishes (a batch's part)."""
        kept = self.kept
        with contextlib.suppress(IndexError):  # another publishing thread took the last
            for _ in range(min(count, len(kept))):
                kept.popleft()

    def clear(self) -> None:
        """Drops everything kept (flush, close): no Future outlives them."""
        self.kept.clear()
