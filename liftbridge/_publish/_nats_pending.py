"""A publish of a :class:`~liftbridge._publish._nats_stream.NatsStreamPublisher`
waiting for its ack: :class:`Pending`, the entry
:class:`~liftbridge._publish._nats_window.AckWindow` keeps by correlation id
until the publish has its outcome, and :func:`new_pending`, how a publish
makes one."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass

from liftbridge._core._acks import Ack
from liftbridge._core._futures import Waiter
from liftbridge._publish._batch import Batch

AckHandler = Callable[[Ack | None, BaseException | None], None]


@dataclass(slots=True, eq=False)
class Pending:
    """A publish waiting for its ack. Whoever takes it out of the window's
    table (under the window's lock) resolves it."""

    correlation_id: str
    future: Future[Ack | None] | Waiter | None  # None: the caller asked for none (Waiter: publish)
    handler: AckHandler | None
    timeout: float
    subject: str
    deadline: float = 0.0  # time.monotonic(), set when admitted
    seq: int = 0  # the order publishes were admitted in, for flush()
    leader: str | None = None  # the partition leader's address when published, if known
    batch: Batch | None = None  # the publish_many_async batch it settles, if any
    index: int = 0  # its place in that batch


_new = object.__new__


def new_pending(
    correlation_id: str,
    future: Future[Ack | None] | Waiter | None,
    handler: AckHandler | None,
    timeout: float,
    subject: str,
    leader: str | None,
) -> Pending:
    """``Pending(correlation_id, future, handler, timeout, subject,
    leader=leader)``, every other field its default: a publish as
    ``NatsStreamPublisher.publish_async`` makes one. Made here, not by calling
    the class, whose ``__init__`` runs in a C call of its own
    (``type.__call__``): ~600 instructions a publish more (callgrind). A unit
    test holds every field to the class's own."""
    pending: Pending = _new(Pending)
    pending.correlation_id = correlation_id
    pending.future = future
    pending.handler = handler
    pending.timeout = timeout
    pending.subject = subject
    pending.deadline = 0.0
    pending.seq = 0
    pending.leader = leader
    pending.batch = None
    pending.index = 0
    return pending
