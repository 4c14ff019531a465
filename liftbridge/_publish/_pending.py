"""A publish on the PublishAsync stream waiting for its ack, as
:class:`~liftbridge._publish._publisher.Publisher` tracks it; a run of acks
claiming their publishes (:func:`claim_responses`, the acks thread's loop);
and the settled Futures the publisher keeps for its publishing threads to free.

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
its request, and frees a settled Future (with the response it holds, and
its Ack if one was made); per ack the acks thread makes the response and its
ack (and an Ack only for an ack handler or a batch: a Future makes its own
when read), and frees the settled :class:`Pending` and its request (it lets go of it in
the ack timer's queue: ``OrderedDeadlines.drop_done_held``). Left to the
publishing thread, those two frees made its side three short a publish and
the acks thread's three over an ack: one read of a few hundred acks set off
a collection over everything in flight.
"""

from __future__ import annotations

import collections
import contextlib
from collections.abc import Callable, Iterable
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass

from liftbridge._core._acks import (
    ACK_OK,
    ACK_POLICIES,
    Ack,
    has_field,
    new_ack,
    response_outcome,
    set_ack_pb,
)
from liftbridge._core._callbacks import Outcome
from liftbridge._errors import ClientClosedError, LiftbridgeError, naming
from liftbridge._publish._batch import Batch, settle_members
from liftbridge._publish._request_bytes import Request
from liftbridge_api import api_pb2


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


class _Blank(Pending):
    """A :class:`Pending` to be filled in field by field (:func:`new_pending`).
    Its ``__init__`` is object's: ``_Blank()`` runs C slots alone, ~390
    instructions cheaper than ``object.__new__(Pending)`` (a C call with an
    argument tuple made and sliced; callgrind). It reads as a Pending
    (``isinstance``, its fields, its repr)."""

    __slots__ = ()
    __init__ = object.__init__
    __qualname__ = "Pending"


def new_pending(
    correlation_id: str,
    request: Request,
    future: Future[Ack | None] | None,
    handler: Callable[[Ack | None, BaseException | None], None] | None,
    expects_ack: bool,
    leader: str | None,
) -> Pending:
    """``Pending(correlation_id, request, future, handler, expects_ack,
    leader=leader)``, every other field its default: a publish as
    ``Publisher.submit`` makes one, every ``publish_async``. Made here, not
    by calling the class, whose ``__init__`` runs in a C call of its own
    (``type.__call__``): ~500 instructions a publish more (callgrind). A
    unit test holds every field to the class's own."""
    pending: Pending = _Blank()
    pending.correlation_id = correlation_id
    pending.request = request
    pending.future = future
    pending.handler = handler
    pending.expects_ack = expects_ack
    pending.deadline = 0.0
    pending.generation = -1
    pending.leader = leader
    pending.suspect = False
    pending.done = False
    pending.batch = None
    pending.index = 0
    return pending


Claim = tuple[Pending, Ack | None, LiftbridgeError | None]
"""A publish and its outcome, to claim and settle."""


def claim_responses(
    responses: Iterable[api_pb2.PublishResponse],
    pop: Callable[[str, None], Pending | None],
    *,
    wire_acks: bool = False,
) -> tuple[list[Outcome], list[Claim], list[tuple[str, LiftbridgeError | None]]]:
    """Reads each response's outcome and claims its publish, in order: takes
    it out of the table of pending publishes with ``pop`` (the table's
    ``dict.pop``) and marks it done. For a caller holding the lock that guards
    the table (the publisher's ``_lock``).

    The acks thread's loop, once per ack: a plain ack (a correlation id on
    the response, no async error, no ack error, an ack policy this SDK
    knows) costs five protobuf field reads and an Ack made in two C calls
    (none with ``wire_acks``, below, for a publish without an ack handler); a
    field read costs about as much as a dozen lines of Python, so none is
    read twice. Any other response takes :func:`response_outcome`'s way, to
    which a plain ack's outcome is equal. One loop reads and claims: a
    tuple an ack built in a first and unpacked in a second cost this thread
    ~4 % more.

    With ``wire_acks`` (the publisher's Futures are made by
    :meth:`CallbackRunner.future_made_on_read` with :func:`ack_of_checked`), a
    plain ack's outcome for a publish without an ack handler is the wire
    protobuf itself: its Future makes the Ack when it is first read, and a
    pipelined publish's Future is mostly dropped unread.

    Returns:
        ``(settled, members, unknown)``: each claimed publish's outcome for
        :meth:`CallbackRunner.settle_run`, the publish letting go of its
        Future (as :func:`claimed_outcomes`); the claims of
        ``publish_many_async`` batches' publishes, for :func:`settle_members`;
        and the correlation id and error of each response no pending publish
        had (unknown, or resolved already: timed out).
    """
    settled: list[Outcome] = []
    members: list[Claim] = []
    unknown: list[tuple[str, LiftbridgeError | None]] = []
    policies = ACK_POLICIES
    error: LiftbridgeError | None
    for response in responses:
        correlation_id = response.correlationId
        if (
            correlation_id
            and not has_field(response, "asyncError")
            and (pb := response.ack).ackError == ACK_OK
            and pb.ackPolicy in policies
        ):
            ack: Ack | api_pb2.Ack | None = pb  # the Ack made below, if needed
            error = None
            plain = True
        else:
            correlation_id, ack, error = response_outcome(response)
            plain = False
        pending = pop(correlation_id, None)
        if pending is None:  # unknown, or resolved already (timed out)
            unknown.append((correlation_id, error))
            continue
        pending.done = True
        if error is not None:  # "no such partition: 3" says which stream, too
            error = naming(error, pending.request.stream, pending.request.partition)
        elif plain:
            handler = pending.handler if pending.expects_ack else None
            if handler is None and wire_acks and pending.batch is None:  # the Future makes it
                future, pending.future = pending.future, None
                settled.append((future, None, pb, None))
                continue
            ack = new_ack(Ack)
            set_ack_pb(ack, pb)
        if pending.batch is not None:
            members.append((pending, ack, error))  # type: ignore[arg-type]  # an Ack or None
            continue
        future, pending.future = pending.future, None
        settled.append((future, pending.handler if pending.expects_ack else None, ack, error))
    return settled, members, unknown


def claimed_outcomes(
    claimed: list[Claim],
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
        try:
            settle_members(members)
        finally:  # Publisher._claim's stand-in for flush(), if it made one
            for claim in members:
                if claim[0].future is not None:
                    claim[0].future.set_result(None)
    return settled


def settle_gathered(
    members: list[Claim], gathered: Future[None], unsettled: dict[object, object]
) -> None:
    """:func:`settle_members` for batch members claimed under the
    publisher's lock, then resolves ``gathered`` and takes it out of
    ``unsettled`` (``Spent.unsettled``): put there in that lock, it has
    ``flush()`` wait until they are counted in their batches (their
    publishes are out of the pending table by then)."""
    try:
        settle_members(members)
    finally:
        gathered.set_result(None)
        unsettled.pop(gathered, None)


def fail_all(
    finish: Callable[[Pending, None, LiftbridgeError], None],
    unresolved: list[tuple[Pending, Future[Ack | None] | None]],
) -> None:
    """Fails each publish of ``unresolved`` (each with the Future it had
    when listed) with :class:`ClientClosedError` through ``finish``, as its
    publisher closes. Interrupted (Ctrl-C), maybe between a publish's claim
    and its settling, it fails every Future not settled yet before the
    interrupt goes on, so none is left unresolved for good (a handler may
    then miss its call); a publish not claimed yet is failed by the next
    close."""
    try:
        for pending, _ in unresolved:
            finish(pending, None, ClientClosedError("the client was closed before the ack arrived"))
    except BaseException:
        for _, future in unresolved:
            if future is not None:
                with contextlib.suppress(InvalidStateError):  # settled, or the user cancelled it
                    future.set_exception(
                        ClientClosedError("the client was closed before the ack arrived")
                    )
        raise


class Spent:
    """Settled publishes kept for the publishing threads to free, one per
    publish (see the module docstring): the gRPC publisher keeps each
    outcome, the NATS window each Future (its Ack with it) or publish entry.
    And, apart from them, the gRPC publisher's claimed publishes not settled
    yet, for ``flush()`` (:attr:`unsettled`). Thread-safe (deque and dict
    operations)."""

    __slots__ = ("kept", "unsettled")

    def __init__(self) -> None:
        self.kept: collections.deque[object] = collections.deque()
        """Oldest first. A publishing thread's own loop may do what
        :meth:`free_one` does on it (a call the less per publish), the
        acks thread's what :meth:`keep` does (a call the less per read)."""
        self.unsettled: dict[object, object] = {}
        """Claimed publishes not all settled yet (Futures resolved, handlers
        handed over), for ``flush()`` to wait on: a Future (by itself), a
        publish without one (by itself), or a read's outcomes (by the list's
        id). Put here in the publisher's lock as they are
        claimed, taken out by whoever settles them once settled. Not
        :attr:`kept`: another publishing thread frees (pops) those at any
        time and ``flush()`` clears them, settled or not."""

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

    def gather(self) -> Future[None]:
        """In the publisher's lock, as a read's batch members are claimed: a
        Future in :attr:`unsettled`, resolved and taken out once they are
        settled into their batches (:func:`settle_gathered`). (What else
        :meth:`Publisher._resolve` claims goes there by the list's id,
        written out: no call a read.)"""
        gathered: Future[None] = Future()
        self.unsettled[gathered] = gathered
        return gathered

    def settle_claim(self, claim: Claim, settle: Callable[..., None]) -> None:
        """Settles one publish claimed alone (its Future, or itself without
        one, in :attr:`unsettled` since the claim): its outcome through ``settle``
        (:meth:`CallbackRunner.settle`; a batch's publish goes to its batch),
        then takes it out of :attr:`unsettled`, even if interrupted."""
        future = claim[0].future  # None once claimed_outcomes lets go of it
        key = future if future is not None else claim[0]  # as Publisher._claim put it
        try:
            for settled in claimed_outcomes([claim]):  # none for a batch's publish
                settle(*settled)
        finally:
            self.unsettled.pop(key, None)

    def clear(self) -> None:
        """Drops everything kept (flush, close): no Future outlives them."""
        self.kept.clear()
