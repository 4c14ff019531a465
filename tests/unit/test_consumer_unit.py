"""Consumer groups without a server: cursor ids and their routing, the backlog
and overflow rules, member ids, refusal texts, start positions, commits."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import Any, cast

import grpc
import pytest

import liftbridge
from liftbridge._consume._activity import ActivityEvent, ActivityOp
from liftbridge._consume._cursors import Cursors, cursor_key, cursors_partition
from liftbridge._consume._positions import StartPosition
from liftbridge._consume._subscription import Subscription
from liftbridge._core._router import Deadline, Leader
from liftbridge._errors import Refusal
from liftbridge._groups._consumer import Consumer
from liftbridge._groups._describe import AssignmentReplay, pin_holder
from liftbridge._groups._member import GroupMember
from liftbridge._groups._options import MemberOptions
from liftbridge._groups._partitions import Assigned, StartPlan, backoff, plan_start, transient
from liftbridge._groups._pin import PinState, UnpinReason
from liftbridge._groups._pull import PullBuffer, next_message, pull_errors
from liftbridge._groups._values import (
    AutoOffset,
    Backlog,
    OverflowRule,
    StreamPartition,
    assignment_from_proto,
    classify,
    group_backlog,
    group_cursor_id,
    new_consumer_id,
    partition_backlog,
)
from liftbridge._transport._status import from_rpc_error
from liftbridge_api import api_pb2
from tests.unit.fake_router import FakeRouter, FakeRpcError, metadata_with


def crc32_ieee(data: bytes) -> int:
    """Bitwise CRC-32 (IEEE 802.3, reflected, polynomial 0xEDB88320): an
    implementation independent of zlib, as Go's hash/crc32.ChecksumIEEE."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0xEDB88320 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


# ---------------------------------------------------------------- cursors --


def test_group_cursor_id_is_the_go_clients() -> None:
    assert group_cursor_id("orders") == "__group:orders"
    assert group_cursor_id("a:b") == "__group:a:b"


def test_cursor_key_joins_id_stream_and_partition_with_commas() -> None:
    assert cursor_key("__group:g", "orders", 3) == "__group:g,orders,3"


def test_crc32_reference_value() -> None:
    assert crc32_ieee(b"123456789") == 0xCBF43926  # the CRC-32 check value


@pytest.mark.parametrize(
    ("group", "stream", "partition", "partitions"),
    [("g", "orders", 0, 2), ("g", "orders", 1, 2), ("billing", "events", 7, 5), ("x", "y", 0, 1)],
)
def test_cursors_partition_is_crc32_of_the_key_mod_partitions(
    group: str, stream: str, partition: int, partitions: int
) -> None:
    key = f"__group:{group},{stream},{partition}".encode()
    expected = crc32_ieee(key) % partitions
    assert cursors_partition(group_cursor_id(group), stream, partition, partitions) == expected


def test_cursors_partition_known_values() -> None:
    # Fixed points of the routing, so a change of key format or hash shows.
    assert crc32_ieee(b"__group:g,orders,0") == 0x1FBCBD2C
    assert cursors_partition("__group:g", "orders", 0, 10) == 2
    assert cursors_partition("__group:g", "orders", 0, 7) == 0x1FBCBD2C % 7


def test_cursors_partition_needs_partitions() -> None:
    with pytest.raises(liftbridge.InvalidArgumentError):
        cursors_partition("__group:g", "s", 0, 0)


@pytest.mark.parametrize("count", [1, 2, 3, 10])
def test_cursors_are_routed_to_the_partition_the_server_uses(count: int) -> None:
    router = FakeRouter(metadata=metadata_with({"__cursors": count}))
    cursors = Cursors(router.as_router())
    cases = [("g", "orders", 0), ("g", "orders", 5), ("h", "s", 2)]
    for group, stream, partition in cases:
        router.answer("SetCursor", api_pb2.SetCursorResponse())
        cursors.set(group_cursor_id(group), stream, partition, 7, Deadline(5))
    targets = [target for method, _, target in router.calls]
    expected = [
        Leader(
            "__cursors",
            crc32_ieee(f"{group_cursor_id(g)},{s},{p}".encode()) % count,
        )
        for g, s, p in cases
    ]
    assert targets == expected
    for g, s, p in cases:
        assert (
            cursors_partition(group_cursor_id(g), s, p, count)
            == expected[cases.index((g, s, p))].partition
        )


def test_a_missing_cursor_is_none() -> None:
    router = FakeRouter(metadata=metadata_with({"__cursors": 3}))
    router.answer("FetchCursor", api_pb2.FetchCursorResponse(offset=-1))
    router.answer("FetchCursor", api_pb2.FetchCursorResponse(offset=4))
    cursors = Cursors(router.as_router())
    assert cursors.fetch("c", "s", 0, Deadline(5)) is None
    assert cursors.fetch("c", "s", 0, Deadline(5)) == 4


def test_no_cursors_stream_is_a_clear_error() -> None:
    cursors = Cursors(FakeRouter().as_router())
    with pytest.raises(liftbridge.ServerError, match=r"cursors\.stream\.partitions"):
        cursors.fetch("c", "s", 0, Deadline(5))


# ---------------------------------------------------------------- backlog --


@pytest.mark.parametrize(
    ("high_watermark", "committed", "position", "pending", "ack_pending"),
    [
        (-1, -1, -1, 0, 0),  # empty partition, no cursor
        (9, -1, -1, 10, 0),  # no cursor: every message counts
        (9, 9, -1, 0, 0),  # all committed
        (9, 4, -1, 5, 0),
        (3, 7, -1, 0, 0),  # a cursor past the watermark (never negative)
        (9, 4, 7, 2, 3),  # given to a handler up to 7, committed up to 4
        (9, -1, 2, 7, 3),  # given up to 2, nothing committed
        (9, 4, 2, 5, 0),  # a stale position behind the cursor
        (9, 4, 12, 0, 5),  # a position past the watermark counts as the watermark
    ],
)
def test_partition_backlog(
    high_watermark: int, committed: int, position: int, pending: int, ack_pending: int
) -> None:
    backlog = partition_backlog(high_watermark, committed, position)
    assert backlog == Backlog(pending, ack_pending)
    assert backlog.total == partition_backlog(high_watermark, committed).total


def test_group_backlog_sums_partitions() -> None:
    assert group_backlog([(9, 4, -1), (9, -1, 3), (-1, -1, -1)]) == Backlog(11, 4)
    assert group_backlog([]) == Backlog(0, 0)


def test_overflow_rule_defaults_low_marks_to_half() -> None:
    assert OverflowRule.from_options(None, None) is None
    assert OverflowRule.from_options(100, None) == OverflowRule(100, 50)
    assert OverflowRule.from_options(1, None) == OverflowRule(1, 0)
    assert OverflowRule.from_options(10, 3) == OverflowRule(10, 3)
    assert OverflowRule.from_options(None, None, 40) == OverflowRule(None, 0, 40, 20)
    assert OverflowRule.from_options(10, 3, 40) == OverflowRule(10, 3, 40, 20)


@pytest.mark.parametrize(
    ("min_pending", "low_pending", "min_ack_pending"),
    [
        (0, None, None),
        (-5, None, None),
        (10, 10, None),
        (10, 11, None),
        (10, -1, None),
        (None, None, 0),
        (None, None, -1),
        (None, 3, 10),
        (10, None, "5"),
    ],
)
def test_overflow_rule_rejects_bad_marks(
    min_pending: int | None, low_pending: int | None, min_ack_pending: Any
) -> None:
    with pytest.raises(liftbridge.InvalidArgumentError):
        OverflowRule.from_options(min_pending, low_pending, min_ack_pending)


def test_overflow_rule_needs_min_pending_for_low_pending() -> None:
    with pytest.raises(liftbridge.InvalidArgumentError, match="min_pending"):
        OverflowRule.from_options(None, 5)
    with pytest.raises(liftbridge.InvalidArgumentError, match="min_pending or min_ack_pending"):
        OverflowRule(None)


def test_overflow_rule_has_hysteresis() -> None:
    rule = OverflowRule(min_pending=100, low_pending=20)
    # Outside: join at >= 100 only.
    assert not rule.wants_membership(False, Backlog(0))
    assert not rule.wants_membership(False, Backlog(99, 5000))  # ack pending plays no part
    assert rule.wants_membership(False, Backlog(100))
    assert rule.wants_membership(False, Backlog(5000))
    # Inside: stay above 20, leave at <= 20.
    assert rule.wants_membership(True, Backlog(99))
    assert rule.wants_membership(True, Backlog(21))
    assert not rule.wants_membership(True, Backlog(20, 5000))
    assert not rule.wants_membership(True, Backlog(0))


def test_overflow_rule_either_threshold_engages() -> None:
    rule = OverflowRule(min_pending=100, low_pending=20, min_ack_pending=10, low_ack_pending=5)
    assert not rule.wants_membership(False, Backlog(99, 9))
    assert rule.wants_membership(False, Backlog(0, 10))  # ack pending alone
    assert rule.wants_membership(False, Backlog(100, 0))  # pending alone
    assert rule.wants_membership(True, Backlog(0, 6))  # stays while either is above its low mark
    assert rule.wants_membership(True, Backlog(21, 0))
    assert not rule.wants_membership(True, Backlog(20, 5))  # both at their low marks: leaves


def test_overflow_rule_with_zero_low_mark_leaves_when_drained() -> None:
    rule = OverflowRule(1, 0)
    assert rule.wants_membership(False, Backlog(1))
    assert rule.wants_membership(True, Backlog(1))
    assert not rule.wants_membership(True, Backlog(0))


# ------------------------------------------------------------ member ids --


def test_overflow_ids_sort_after_regular_ids_whenever_made() -> None:
    overflow = new_consumer_id(1_000, overflow=True)
    assert overflow.startswith("~overflow-")
    assert overflow > new_consumer_id(9_999_999_999_999_999_999)
    assert overflow > "worker-zzz"  # after chosen ids of letters and digits too
    assert new_consumer_id(1_000, overflow=True) < new_consumer_id(2_000, overflow=True)


def test_set_overflow_needs_an_overflow_member() -> None:
    with pytest.raises(liftbridge.InvalidArgumentError, match="overflow member"):
        _offline_consumer("g").set_overflow(min_pending=5)
    helper = _offline_consumer("g", min_pending=10)
    assert helper.consumer_id.startswith("~overflow-")
    with pytest.raises(liftbridge.InvalidArgumentError, match="low_pending"):
        helper.set_overflow(min_pending=5, low_pending=5)
    with pytest.raises(liftbridge.InvalidArgumentError, match="min_ack_pending"):
        helper.set_overflow()
    helper.set_overflow(min_ack_pending=8)
    assert helper.overflow == OverflowRule(None, 0, 8, 4)


def test_generated_consumer_ids_sort_by_creation_time() -> None:
    earlier = new_consumer_id(1_700_000_000_000_000_000)
    later = new_consumer_id(1_700_000_000_000_000_001)
    much_later = new_consumer_id(17_000_000_000_000_000_000)
    assert earlier < later < much_later
    assert earlier.startswith("01700000000000000000-") and len(earlier) == 29
    assert new_consumer_id() != new_consumer_id()
    assert new_consumer_id() > earlier


# -------------------------------------------------------------- refusals --


@pytest.mark.parametrize(
    ("text", "refusal"),
    [
        (
            "client-provided group epoch differs from broker group epoch",
            Refusal.STALE_EPOCH,
        ),
        ("broker is not the consumer group coordinator", Refusal.NOT_COORDINATOR),
        ("consumer is already a member of the consumer group", Refusal.ALREADY_MEMBER),
        ("consumer is not a member of the consumer group", Refusal.NOT_MEMBER),
        ("Consumer c is not a member of consumer group g", Refusal.NOT_MEMBER),
        ("consumer group does not exist (gRPC NOT_FOUND)", Refusal.NO_GROUP),
        ("No such consumer group g", Refusal.NO_GROUP),
        ("consumer group already exists", Refusal.GROUP_EXISTS),
        ("stream does not exist (gRPC FAILED_PRECONDITION)", Refusal.NO_STREAM),
        ("Consumer is not currently assigned this partition", Refusal.FENCED),
        (
            "Coordinator generation mismatch, current coordinator: b epoch: 29, got coordinator: "
            "a epoch: 21",
            Refusal.COORDINATOR_CHANGED,
        ),
        ("Server not partition leader", None),
    ],
)
def test_classify_tells_the_servers_group_refusals_apart(
    text: str, refusal: Refusal | None
) -> None:
    # The one mapping from gRPC errors recognises the refusal; classify reads it.
    error = from_rpc_error(FakeRpcError(grpc.StatusCode.FAILED_PRECONDITION, text))
    assert error.refusal is refusal
    assert classify(error) is refusal
    assert classify(liftbridge.ConsumerGroupError(text)) is None  # not from the server


def test_transient_failures() -> None:
    assert transient(None)
    assert transient(liftbridge.UnavailableError("x"))
    assert transient(liftbridge.NotLeaderError("x"))
    assert transient(liftbridge.ConsumerGroupError("fenced"))
    assert transient(liftbridge.ServerError("log closed", "INTERNAL"))
    assert transient(liftbridge.ClientClosedError("x"))
    assert not transient(liftbridge.NoCursorError("x"))
    assert not transient(liftbridge.StreamDeletedError("x"))
    assert not transient(liftbridge.PartitionPausedError("x"))
    assert not transient(liftbridge.ServerError("x", "UNKNOWN"))


# ------------------------------------------------------------ partitions --


def test_stream_partition_is_an_ordered_frozen_value() -> None:
    a0, a1, b0 = StreamPartition("a", 0), StreamPartition("a", 1), StreamPartition("b", 0)
    assert sorted([b0, a1, a0]) == [a0, a1, b0]
    assert {a0, StreamPartition("a", 0)} == {a0}
    assert str(a1) == "a/1"
    with pytest.raises(AttributeError):
        a0.partition = 2  # type: ignore[misc]


def test_assignment_from_proto() -> None:
    response = api_pb2.FetchConsumerGroupAssignmentsResponse(
        epoch=7,
        assignments=[
            api_pb2.PartitionAssignment(stream="a", partitions=[0, 2]),
            api_pb2.PartitionAssignment(stream="b", partitions=[1]),
        ],
    )
    assert assignment_from_proto(response.assignments) == {
        StreamPartition("a", 0),
        StreamPartition("a", 2),
        StreamPartition("b", 1),
    }


def _never() -> int:
    raise AssertionError("the newest offset is not needed")


@pytest.mark.parametrize("policy", list(AutoOffset))
def test_plan_start_resumes_after_the_committed_offset(policy: AutoOffset) -> None:
    assert plan_start(41, None, policy, _never, "s/0") == StartPlan(42)
    assert plan_start(41, 39, policy, _never, "s/0") == StartPlan(42)
    # This member's own progress, when later than the cursor, wins.
    assert plan_start(41, 50, policy, _never, "s/0") == StartPlan(51)
    assert plan_start(-1, 0, policy, _never, "s/0") == StartPlan(1)


def test_plan_start_without_a_cursor() -> None:
    assert plan_start(-1, None, AutoOffset.EARLIEST, _never, "s/0") == StartPlan(
        StartPosition.EARLIEST
    )
    with pytest.raises(liftbridge.NoCursorError, match="s/0"):
        plan_start(-1, None, AutoOffset.ERROR, _never, "s/0")
    # NEW_ONLY and LATEST resolve to an offset and pin it as the group's start.
    assert plan_start(-1, None, AutoOffset.NEW_ONLY, lambda: 9, "s/0") == StartPlan(10, pin=9)
    assert plan_start(-1, None, AutoOffset.LATEST, lambda: 9, "s/0") == StartPlan(9, pin=8)
    # An empty partition (or only one message, for LATEST) cannot be pinned.
    assert plan_start(-1, None, AutoOffset.NEW_ONLY, lambda: -1, "s/0") == StartPlan(0)
    assert plan_start(-1, None, AutoOffset.LATEST, lambda: 0, "s/0") == StartPlan(0)


class _FakeSubscription:
    def __init__(self, last_offset: int | None, error: BaseException | None = None) -> None:
        self.last_offset = last_offset
        self.error = error
        self.closed = False

    def close(self, timeout: float | None = None) -> None:
        self.closed = True


def _sub(last_offset: int | None, error: BaseException | None = None) -> Subscription:
    return cast(Subscription, _FakeSubscription(last_offset, error))


def test_commits_cover_only_handled_messages() -> None:
    stored: list[tuple[StreamPartition, int]] = []
    entry = Assigned(StreamPartition("s", 0), committed=4)
    entry.commit(lambda tp, offset: stored.append((tp, offset)))
    assert stored == []  # nothing handled yet
    entry.started(_sub(None))
    entry.commit(lambda tp, offset: stored.append((tp, offset)))
    assert stored == []
    entry.started(_sub(7))
    entry.commit(lambda tp, offset: stored.append((tp, offset)))
    entry.commit(lambda tp, offset: stored.append((tp, offset)))  # no change: no RPC
    assert stored == [(StreamPartition("s", 0), 7)]
    assert entry.committed == 7


def test_commit_failure_keeps_the_old_cursor() -> None:
    entry = Assigned(StreamPartition("s", 0), committed=4)
    entry.started(_sub(9))

    def fail(tp: StreamPartition, offset: int) -> None:
        raise liftbridge.UnavailableError("down")

    with pytest.raises(liftbridge.UnavailableError):
        entry.commit(fail)
    assert entry.committed == 4


def test_commit_skips_when_another_commit_runs() -> None:
    entry = Assigned(StreamPartition("s", 0))
    entry.started(_sub(3))
    started, finish = threading.Event(), threading.Event()

    def slow_store(tp: StreamPartition, offset: int) -> None:
        started.set()
        finish.wait(30)

    other = threading.Thread(target=entry.commit, args=(slow_store,), name="test-commit")
    other.start()
    try:
        assert started.wait(30)
        assert entry.commit(lambda tp, offset: None, wait=0.01) is False
    finally:
        finish.set()
        other.join(30)
    assert not other.is_alive() and entry.committed == 3


def test_retired_readings_keep_their_progress_and_back_off_without_it() -> None:
    entry = Assigned(StreamPartition("s", 0))
    entry.started(_sub(5))
    delay, error = entry.retire()
    assert (delay, error, entry.carried, entry.progress()) == (0.0, None, 5, 5)
    # A reading that ends without progress (a handler raising on offset 6).
    failure = liftbridge.HandlerError(6, RuntimeError("boom"))
    delays = []
    for _ in range(4):
        entry.started(_sub(None, failure))
        delay, error = entry.retire()
        delays.append(delay)
        assert error is failure and entry.progress() == 5
    assert delays == [0.5, 1.0, 2.0, 4.0]
    entry.started(_sub(8))
    assert entry.retire()[0] == 0.0  # progress resets the pause


def test_backoff_is_capped() -> None:
    assert [backoff(n) for n in (0, 1, 2, 3)] == [0.0, 0.5, 1.0, 2.0]
    assert backoff(50) == 30.0


# -------------------------------------------------------------- options --


def _offline_consumer(group: str, **options: Any) -> Consumer:
    router = FakeRouter().as_router()
    return Consumer(router, Cursors(router), group, **options)


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"auto_checkpoint": 0}, liftbridge.InvalidArgumentError),
        ({"auto_checkpoint": "5"}, liftbridge.ArgumentTypeError),
        ({"auto_offset": "earliest"}, liftbridge.ArgumentTypeError),
        ({"on_assigned": 3}, liftbridge.ArgumentTypeError),
        ({"consumer_id": ""}, liftbridge.InvalidArgumentError),
        ({"min_pending": 0}, liftbridge.InvalidArgumentError),
        ({"low_pending": 2}, liftbridge.InvalidArgumentError),
        ({"min_ack_pending": 0}, liftbridge.InvalidArgumentError),
        ({"join_timeout": -1}, liftbridge.InvalidArgumentError),
    ],
)
def test_consumer_options_fail_fast(options: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        _offline_consumer("group", **options)


def test_consumer_before_subscribe() -> None:
    consumer = _offline_consumer("orders")
    assert consumer.cursor_id == "__group:orders"
    assert consumer.group_id == "orders"
    assert consumer.assignment == ()
    assert not consumer.member and not consumer.closed
    consumer.checkpoint()  # nothing held, nothing to do
    with pytest.raises(liftbridge.InvalidArgumentError, match="subscribe"):
        consumer.release()
    with pytest.raises(liftbridge.InvalidArgumentError, match="subscribe"):
        consumer.backlog()
    consumer.close()
    consumer.close()
    assert consumer.closed
    with pytest.raises(liftbridge.ClientClosedError, match="consumer is closed"):
        consumer.subscribe("s", lambda m, e: None)
    assert not [t for t in threading.enumerate() if t.name.startswith("liftbridge-group")]


def test_subscribe_after_the_client_closed() -> None:
    router = FakeRouter(closed=True).as_router()
    consumer = Consumer(router, Cursors(router), "orders")
    with pytest.raises(liftbridge.ClientClosedError, match="client is closed"):
        consumer.subscribe("s", lambda m, e: None)


@pytest.mark.parametrize("streams", [b"name", bytearray(b"name"), [b"name"], [], 7])
def test_subscribe_names_the_wrong_streams_type(streams: Any) -> None:
    consumer = _offline_consumer("orders")
    with pytest.raises(liftbridge.InvalidArgumentError, match="streams") as caught:
        consumer.subscribe(streams, lambda m, e: None)
    assert "int" not in str(caught.value)
    if isinstance(streams, (bytes, bytearray)):
        assert isinstance(caught.value, liftbridge.ArgumentTypeError)
        assert type(streams).__name__ in str(caught.value)


def test_chosen_ids_are_kept_and_cannot_release() -> None:
    consumer = _offline_consumer("g", consumer_id="worker-1")
    assert consumer.consumer_id == "worker-1"
    with pytest.raises(liftbridge.InvalidArgumentError, match="generated consumer id"):
        consumer.release()


def test_a_gained_partition_waits_for_the_previous_owners_release_mark() -> None:
    entry = Assigned(StreamPartition("s", 0), handover_until=10.0, handover_epoch=5)
    assert not entry.handed_over(4, lambda: 9, lambda: -1, now=1.0)  # behind, never marked
    assert not entry.handed_over(7, lambda: 9, lambda: 4, now=2.0)  # a periodic commit only
    assert not entry.handed_over(9, lambda: 9, lambda: 4, now=2.5)  # covers all, but not first
    assert entry.handed_over(7, lambda: 9, lambda: 5, now=3.0)  # released at this epoch
    assert entry.handed_over(7, lambda: 9, lambda: -1, now=3.1)  # and stays handed over
    late = Assigned(StreamPartition("s", 0), handover_until=10.0, handover_epoch=5)
    assert late.handed_over(4, lambda: 9, lambda: 6, now=1.0)  # released at a later epoch


def test_a_gained_partition_starts_at_once_when_nothing_is_left() -> None:
    def never() -> int:
        return -1

    fresh = Assigned(StreamPartition("s", 0), handover_until=10.0, handover_epoch=3)
    assert fresh.handed_over(9, lambda: 9, never, 1.0)
    empty = Assigned(StreamPartition("s", 0), handover_until=10.0, handover_epoch=3)
    assert empty.handed_over(-1, lambda: -1, never, 1.0)
    assert Assigned(StreamPartition("s", 0)).handed_over(3, lambda: 9, never, 1.0)  # no wait


def test_a_gained_partition_stops_waiting_at_the_deadline() -> None:
    entry = Assigned(StreamPartition("s", 0), handover_until=10.0, handover_epoch=3)
    assert not entry.handed_over(4, lambda: 9, lambda: 2, now=1.0)
    assert entry.handed_over(4, lambda: 9, lambda: 2, now=10.0)


# ---------------------------------------------------------- describe_group --


def _join(event_id: int, group: str, consumer: str, *streams: str) -> ActivityEvent:
    return ActivityEvent(
        event_id,
        ActivityOp.JOIN_CONSUMER_GROUP,
        group_id=group,
        consumer_id=consumer,
        streams=streams,
    )


def _leave(event_id: int, group: str, consumer: str) -> ActivityEvent:
    return ActivityEvent(
        event_id,
        ActivityOp.LEAVE_CONSUMER_GROUP,
        group_id=group,
        consumer_id=consumer,
        expired=False,
    )


def _held(replay: AssignmentReplay) -> dict[str, list[str]]:
    return {m.consumer_id: [str(tp) for tp in m.assignment] for m in replay.members()}


def test_replay_follows_the_servers_rule_through_joins_and_leaves() -> None:
    replay = AssignmentReplay(lambda stream: {"s": 3}.get(stream, 0))
    replay.apply(_join(1, "g", "b", "s"), "g")
    assert _held(replay) == {"b": ["s/0", "s/1", "s/2"]}
    replay.apply(_join(2, "g", "a", "s"), "g")  # sorts first: takes partition 0 and 2
    assert _held(replay) == {"b": ["s/1"], "a": ["s/0", "s/2"]}
    replay.apply(_join(3, "other", "z", "s"), "g")  # another group's event
    replay.apply(_join(4, "g", "c", "s"), "g")
    assert _held(replay) == {"b": ["s/1"], "a": ["s/0"], "c": ["s/2"]}
    replay.apply(_leave(5, "g", "a"), "g")
    assert _held(replay) == {"b": ["s/0", "s/2"], "c": ["s/1"]}
    replay.apply(_leave(5, "g", "b"), "g")  # an event read twice: applied once
    assert [m.consumer_id for m in replay.members()] == ["b", "c"]


def test_replay_counts_partitions_over_every_stream() -> None:
    replay = AssignmentReplay(lambda stream: 2)
    replay.apply(_join(1, "g", "x", "s", "t"), "g")
    replay.apply(_join(2, "g", "y", "t"), "g")
    # y holds nothing while x holds four: both of t's partitions go to y.
    assert _held(replay) == {"x": ["s/0", "s/1"], "y": ["t/0", "t/1"]}
    replay.apply(ActivityEvent(3, ActivityOp.DELETE_STREAM, stream="s"), "g")
    assert _held(replay) == {"x": ["t/0"], "y": ["t/1"]}


def test_pin_holder_is_the_member_with_partition_0() -> None:
    replay = AssignmentReplay(lambda stream: 3)
    replay.apply(_join(1, "__pin:g", "b", "s"), "__pin:g")
    replay.apply(_join(2, "__pin:g", "a", "s"), "__pin:g")
    assert pin_holder(replay.members()) == "a"
    assert pin_holder(()) is None


# ------------------------------------------------------------- pin, pull --


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"pin_timeout": 5.0}, liftbridge.InvalidArgumentError, "pinned=True"),
        ({"on_pin": print}, liftbridge.InvalidArgumentError, "pinned=True"),
        ({"pinned": 1}, liftbridge.ArgumentTypeError, "pinned"),
        ({"pinned": True, "pin_timeout": 0}, liftbridge.InvalidArgumentError, "pin_timeout"),
        ({"pinned": True, "on_pin": 3}, liftbridge.ArgumentTypeError, "on_pin"),
        ({"pinned": True, "min_pending": 9}, liftbridge.InvalidArgumentError, "overflow"),
    ],
)
def test_pin_options_fail_fast(options: dict[str, Any], error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        _offline_consumer("g", **options)


def test_pin_state_before_subscribe() -> None:
    assert _offline_consumer("g").pin is None
    pinned = _offline_consumer("g", pinned=True)
    assert pinned.pin == PinState(False, pinned.consumer_id)


def test_pull_buffer_marks_what_the_previous_fetch_returned() -> None:
    buffer = PullBuffer(size=10)
    entry = Assigned(StreamPartition("s", 0), pulled=True)
    for offset in range(5):
        buffer.offer(entry, _message(offset))
    assert [m.offset for m in buffer.fetch(3, 1.0)] == [0, 1, 2]
    assert entry.progress() is None  # taken, not yet handled
    assert [m.offset for m in buffer.fetch(3, 1.0)] == [3, 4]
    assert entry.progress() == 2  # the first batch is handled now
    buffer.done()
    assert entry.progress() == 4
    assert buffer.fetch(3, 0.01) == []


def test_pull_buffer_drops_revoked_partitions_and_raises_errors_once() -> None:
    buffer = PullBuffer(size=10)
    kept = Assigned(StreamPartition("s", 0), pulled=True)
    lost = Assigned(StreamPartition("s", 1), pulled=True)
    buffer.offer(lost, _message(0, partition=1))
    buffer.offer(kept, _message(0))
    lost.revoked = True
    buffer.offer(lost, _message(1, partition=1))  # revoked: not even queued
    buffer.fail(liftbridge.NoCursorError("no cursor"))
    with pytest.raises(liftbridge.NoCursorError):
        buffer.fetch(5, 0.01)
    assert [(m.partition, m.offset) for m in buffer.fetch(5, 0.01)] == [(0, 0)]
    buffer.close()
    with pytest.raises(liftbridge.ClientClosedError):
        buffer.fetch(5, 0.01)
    with pytest.raises(liftbridge.ClientClosedError):
        next_message(buffer, 0.01)


def test_next_message_times_out() -> None:
    with pytest.raises(liftbridge.DeadlineExceededError):
        next_message(PullBuffer(), 0.01)


def _message(offset: int, partition: int = 0) -> liftbridge.Message:
    return liftbridge.Message(offset=offset, value=b"", stream="s", partition=partition)


def test_pull_buffer_close_wakes_a_waiting_fetch_and_a_blocked_offer() -> None:
    buffer = PullBuffer(size=1)
    entry = Assigned(StreamPartition("s", 0), pulled=True)
    buffer.offer(entry, _message(0))
    outcomes: list[str] = []

    def offer() -> None:
        buffer.offer(entry, _message(1))  # full: waits until close()
        outcomes.append("offer returned")

    offerer = threading.Thread(target=offer, name="test-pull-offerer")
    offerer.start()
    assert [m.offset for m in buffer.fetch(1, 5.0)] == [0]

    waiting = PullBuffer(size=1)

    def fetch() -> None:
        try:
            waiting.fetch(1, 30.0)
        except liftbridge.ClientClosedError:
            outcomes.append("fetch closed")

    taker = threading.Thread(target=fetch, name="test-pull-taker")
    taker.start()
    while not waiting._buffer._needs:  # until the fetch waits for a message
        taker.join(0.001)
    waiting.close()
    taker.join(5.0)
    assert not taker.is_alive()
    offerer.join(5.0)  # room came when the fetch took message 0
    buffer.close()
    assert not offerer.is_alive()
    assert sorted(outcomes) == ["fetch closed", "offer returned"]


def test_pull_buffer_revoking_a_partition_releases_its_blocked_offer() -> None:
    buffer = PullBuffer(size=2)
    kept = Assigned(StreamPartition("s", 0), pulled=True)
    lost = Assigned(StreamPartition("s", 1), pulled=True)
    buffer.offer(kept, _message(0))
    buffer.offer(lost, _message(0, partition=1))
    offerer = threading.Thread(
        target=buffer.offer, args=(lost, _message(1, partition=1)), name="test-pull-offerer"
    )
    offerer.start()
    lost.revoked = True  # the blocked offer gives up within a slice, adds nothing
    offerer.join(5.0)
    assert not offerer.is_alive()
    assert [(m.partition, m.offset) for m in buffer.fetch(5, 0.01)] == [(0, 0)]
    assert buffer.fetch(5, 0.01) == []


def test_pull_buffer_hands_many_messages_over_in_order_in_batches_of_any_size() -> None:
    buffer = PullBuffer(size=50)
    entry = Assigned(StreamPartition("s", 0), pulled=True)
    count = 5_000

    def offer() -> None:
        for offset in range(count):
            buffer.offer(entry, _message(offset))

    offerer = threading.Thread(target=offer, name="test-pull-offerer")
    offerer.start()
    taken: list[int] = []
    sizes = [1, 7, 100]
    while len(taken) < count:
        batch = buffer.fetch(sizes[len(taken) % 3], 5.0)
        assert batch, "the offerer keeps offering"
        taken += [m.offset for m in batch]
        assert entry.progress() == (taken[-len(batch) - 1] if len(taken) > len(batch) else None)
    offerer.join(5.0)
    assert not offerer.is_alive()
    assert taken == list(range(count))
    buffer.done()
    assert entry.progress() == count - 1


class _ScriptedPin:
    """A pin election that gives the member the pin at its first turn."""

    def __init__(self) -> None:
        self.state = PinState(False, "m")
        self.pinned_since: float | None = None
        self.due = float("inf")
        self.resigned: list[UnpinReason] = []

    def tend(self, consumer_id: str, may_join: bool) -> UnpinReason | None:
        if not self.state.pinned:
            self.state = PinState(True, consumer_id, "0" * 16, datetime.now(UTC))
            self.pinned_since = time.monotonic()
        return None

    def resign(self, reason: UnpinReason, *, leave: bool = True) -> None:
        self.resigned.append(reason)
        self.state = PinState(False, self.state.consumer_id)
        self.pinned_since = None


def test_a_pinned_puller_counts_the_pulls_it_missed_from_when_it_took_the_pin() -> None:
    # Record 003: a pinned member that makes no fetch/next for pin_timeout
    # gives the pin up. A standby has nothing to pull: a member that stood by
    # without pulling for longer than pin_timeout gave up the pin at its first
    # turn after taking it (the pin then flapped between the standbys, ~10 times
    # a second), and its group thread woke every 10 ms while it stood by.
    router = FakeRouter().as_router()
    options = MemberOptions(
        "g", None, AutoOffset.EARLIEST, None, None, None, 5.0, pinned=True, pin_timeout=30.0
    )
    pull = PullBuffer(size=10)
    member = GroupMember(router, Cursors(router), options, "m", ("s",), pull_errors(pull), pull)
    pull._pulled_at = time.monotonic() - 60  # made a minute ago, never pulled since
    pin = _ScriptedPin()
    member._pin = pin  # type: ignore[assignment]
    assert member._idle_time() > 0.5  # standing by: no pin_timeout to wake for
    member._tend_pin(pin)  # type: ignore[arg-type]
    assert pin.state.pinned
    member._tend_pin(pin)  # type: ignore[arg-type]
    assert pin.resigned == [] and pin.state.pinned
    assert pin.pinned_since is not None
    pin.pinned_since -= 30.0  # held the pin for pin_timeout without a pull
    member._tend_pin(pin)  # type: ignore[arg-type]
    assert pin.resigned == [UnpinReason.TIMEOUT]
