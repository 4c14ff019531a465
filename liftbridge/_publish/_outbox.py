"""The request iterator gRPC's sender consumes on the client's PublishAsync
stream (:mod:`liftbridge._publish._publisher`), one per stream generation.

It pulls from the publisher's shared queue rather than holding requests of
its own, so requests not yet sent survive a stream that breaks and go out on
the next one, in their order. It takes them a run at a time (every request
queued at that moment, up to a bound), and hands them to the sender one by
one: one round of the publisher's locks per run, not per request.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from liftbridge._publish._request_bytes import Request

NextRequests = Callable[..., list[Request]]
"""``next_requests(generation, *, block)``: the requests queued for that
stream generation, in order; empty when not blocking and none is queued.
StopIteration when the generation ended."""


class Outbox:
    """The requests of one stream generation, as gRPC's sender iterates them.
    Only that sender calls it."""

    __slots__ = ("_generation", "_next_requests", "_run")

    def __init__(self, next_requests: NextRequests, generation: int) -> None:
        self._next_requests = next_requests
        self._generation = generation
        self._run: list[Request] = []  # the run taken, last request first

    def __iter__(self) -> Iterator[Request]:
        return self

    def __next__(self) -> Request:
        run = self._run
        if not run:
            run = self._take(block=True)
        return run.pop()

    def next_ready(self) -> Request | None:
        """The next request if one is queued, else None at once: lets a
        sender gather every ready request into one write."""
        run = self._run
        if not run:
            run = self._take(block=False)
            if not run:
                return None
        return run.pop()

    def _take(self, *, block: bool) -> list[Request]:
        run = self._next_requests(self._generation, block=block)
        run.reverse()
        self._run = run
        return run
