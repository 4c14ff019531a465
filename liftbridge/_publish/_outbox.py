"""The request iterator gRPC's sender consumes on the client's PublishAsync
stream (:mod:`liftbridge._publish._publisher`), one per stream generation.

It pulls from the publisher's shared queue rather than holding requests of
its own, so requests not yet sent survive a stream that breaks and go out on
the next one, in their order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from liftbridge_api import api_pb2

NextRequest = Callable[..., api_pb2.PublishRequest | None]
"""``next_request(generation, *, block)``: the next request for that stream
generation; None when not blocking and none is queued (or the generation ended)."""


class Outbox:
    """The requests of one stream generation, as gRPC's sender iterates them."""

    def __init__(self, next_request: NextRequest, generation: int) -> None:
        self._next_request = next_request
        self._generation = generation

    def __iter__(self) -> Iterator[api_pb2.PublishRequest]:
        return self

    def __next__(self) -> api_pb2.PublishRequest:
        request = self._next_request(self._generation, block=True)
        assert request is not None
        return request

    def next_ready(self) -> api_pb2.PublishRequest | None:
        """The next request if one is queued, else None at once: lets a
        sender gather every ready request into one write."""
        return self._next_request(self._generation, block=False)
