"""What a consumer group looks like from outside: coordinator, epoch, members
and their assignments.

Liftbridge v1.9.0 answers only part of this. ``FetchMetadata`` with the group
named gives its coordinator and epoch (``ConsumerGroupMetadata`` has no other
fields), and ``FetchConsumerGroupAssignments`` answers only a member about
itself. Who the members are is in the activity stream (``__activity``, when
the server runs with ``activity.stream.enabled``): every join and leave, in
the order the server applied them. Replaying them through the server's own
assignment rule gives each member's partitions: on every membership change
the server reassigns each stream the change touches, partition by partition,
to the subscriber holding the fewest partitions (over all its streams), ties
to the smaller consumer id. The replay is pure (:class:`AssignmentReplay`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from liftbridge._consume._activity import (
    ACTIVITY_STREAM,
    ActivityEvent,
    ActivityOp,
    activity_event_from_message,
)
from liftbridge._consume._positions import StartPosition, StopPosition, subscribe_request
from liftbridge._consume._subscription import start_subscription
from liftbridge._core._messages import Message
from liftbridge._core._router import Deadline, Router
from liftbridge._errors import DeadlineExceededError, InvalidArgumentError
from liftbridge._groups._pin import pin_group_id
from liftbridge._groups._values import StreamPartition
from liftbridge_api import api_pb2


@dataclass(frozen=True, slots=True)
class GroupMemberInfo:
    """One member of a consumer group, as the activity stream tells it. Immutable.

    Attributes:
        consumer_id: the member's id.
        streams: the streams it joined with.
        assignment: the partitions the server's rule gives it, sorted.
    """

    consumer_id: str
    streams: tuple[str, ...]
    assignment: tuple[StreamPartition, ...]


@dataclass(frozen=True, slots=True)
class GroupDescription:
    """A consumer group seen from outside (:meth:`Client.describe_group`). Immutable.

    Attributes:
        group_id: the group.
        coordinator: broker id of its coordinator (from the server).
        epoch: its generation, bumped at every membership or coordinator
            change (from the server).
        members: the members in join order with their assignments, replayed
            from the activity stream; None when the server has no activity
            stream. It can trail ``epoch`` by the moment the server takes to
            publish a change.
        pinned: for a pinned group (``pinned=True`` members), the consumer id
            holding the pin; None otherwise or when unknown.
    """

    group_id: str
    coordinator: str
    epoch: int
    members: tuple[GroupMemberInfo, ...] | None
    pinned: str | None = None


class AssignmentReplay:
    """Replays a group's joins and leaves through the server's assignment rule.

    Args:
        partitions: the number of partitions of a stream (0 if unknown).
    """

    def __init__(self, partitions: Callable[[str], int]) -> None:
        self._partitions = partitions
        self._streams: dict[str, frozenset[str]] = {}  # member -> streams, in join order
        self._held: dict[str, dict[str, list[int]]] = {}  # member -> stream -> partitions
        self._seen: set[int] = set()  # event ids, to drop an event read twice

    def apply(self, event: ActivityEvent, group_id: str) -> None:
        """Applies one activity event; others than this group's are ignored
        (stream deletions excepted: they change every group reading the stream)."""
        if event.id in self._seen:
            return
        self._seen.add(event.id)
        if event.op is ActivityOp.DELETE_STREAM and event.stream:
            self._stream_deleted(event.stream)
        if event.group_id != group_id or event.consumer_id is None:
            return
        if event.op is ActivityOp.JOIN_CONSUMER_GROUP:
            self._join(event.consumer_id, event.streams)
        elif event.op is ActivityOp.LEAVE_CONSUMER_GROUP:
            self._leave(event.consumer_id)

    def members(self) -> tuple[GroupMemberInfo, ...]:
        """The members now, in join order."""
        return tuple(
            GroupMemberInfo(
                consumer_id,
                tuple(sorted(streams)),
                tuple(
                    sorted(
                        StreamPartition(stream, p)
                        for stream, parts in self._held[consumer_id].items()
                        for p in parts
                    )
                ),
            )
            for consumer_id, streams in self._streams.items()
        )

    def _count(self, consumer_id: str) -> int:
        return sum(len(parts) for parts in self._held[consumer_id].values())

    def _balance(self, stream: str) -> None:
        readers = [c for c, streams in self._streams.items() if stream in streams]
        if not readers:
            return
        for consumer_id in readers:
            self._held[consumer_id].pop(stream, None)
        for partition in range(self._partitions(stream)):
            chosen = min(readers, key=lambda c: (self._count(c), c))
            self._held[chosen].setdefault(stream, []).append(partition)

    def _join(self, consumer_id: str, streams: Iterable[str]) -> None:
        self._leave(consumer_id)  # a join for a member already listed: take it as new
        self._streams[consumer_id] = frozenset(streams)
        self._held[consumer_id] = {}
        for stream in sorted(self._streams[consumer_id]):
            self._balance(stream)

    def _leave(self, consumer_id: str) -> None:
        streams = self._streams.pop(consumer_id, None)
        if streams is None:
            return
        held = self._held.pop(consumer_id)
        for stream in sorted(streams):
            if stream in held:
                self._balance(stream)

    def _stream_deleted(self, stream: str) -> None:
        touched: set[str] = set()
        for consumer_id, streams in list(self._streams.items()):
            if stream in streams:
                self._streams[consumer_id] = streams - {stream}
                self._held[consumer_id].pop(stream, None)
                touched |= self._streams[consumer_id]
        for other in sorted(touched):
            self._balance(other)


def pin_holder(members: Iterable[GroupMemberInfo]) -> str | None:
    """The pin holder of a pin election group's members: the one assigned
    partition 0 of the stream they stand on (see :mod:`liftbridge._groups._pin`)."""
    for member in members:
        if any(tp.partition == 0 for tp in member.assignment):
            return member.consumer_id
    return None


def describe_group(router: Router, group_id: str, deadline: Deadline) -> GroupDescription | None:
    """Describes a group (see :class:`GroupDescription`); None when the
    server does not know it (it has no members).

    Raises:
        DeadlineExceededError: not within ``deadline``.
        LiftbridgeError: the metadata or the activity stream could not be read.
    """
    election = pin_group_id(group_id)
    request = api_pb2.FetchMetadataRequest(streams=[ACTIVITY_STREAM], groups=[group_id, election])
    response = router.call("FetchMetadata", request, deadline=deadline, idempotent=True)
    known = {
        g.groupId: (g.coordinator, int(g.epoch))
        for g in response.groupMetadata
        if g.error == api_pb2.ConsumerGroupMetadata.OK
    }
    if group_id not in known:
        return None
    coordinator, epoch = known[group_id]
    if not any(s.name == ACTIVITY_STREAM and s.partitions for s in response.streamMetadata):
        return GroupDescription(group_id, coordinator, epoch, None)
    events = read_activity(router, deadline)
    metadata = router.metadata
    missing = {s for e in events for s in e.streams if metadata.partition_count(s) == 0}
    if missing:
        metadata = router.refresh(deadline)
    replays = {g: AssignmentReplay(metadata.partition_count) for g in (group_id, election)}
    for event in events:
        for g, replay in replays.items():
            replay.apply(event, g)
    pinned = pin_holder(replays[election].members()) if election in known else None
    return GroupDescription(group_id, coordinator, epoch, replays[group_id].members(), pinned)


def read_activity(router: Router, deadline: Deadline) -> list[ActivityEvent]:
    """Every event of the activity stream, from its oldest to its newest now.

    Raises:
        DeadlineExceededError: not read within ``deadline``.
    """
    # Filled on the subscription's thread; read here after wait() saw it end.
    events: list[ActivityEvent] = []
    failure: list[BaseException] = []

    def collect(message: Message | None, error: BaseException | None) -> None:
        if message is None:
            if error is not None:
                failure.append(error)
            return
        with contextlib.suppress(InvalidArgumentError):  # an op unknown here: no group change
            events.append(activity_event_from_message(message))

    request = subscribe_request(
        ACTIVITY_STREAM, 0, StartPosition.EARLIEST, StopPosition.LATEST, False, False
    )
    wait = max(0.05, deadline.remaining())
    subscription = start_subscription(
        router,
        request,
        collect,
        resubscribe_wait=wait,
        open_timeout=wait,
    )
    try:
        if not subscription.wait(max(0.0, deadline.remaining())):
            raise DeadlineExceededError("the activity stream was not read in time")
    finally:
        subscription.close(timeout=max(0.0, deadline.remaining()))
    if failure:
        raise failure[0]
    return events
