"""Admin operations and subscriptions on a fake router: the behaviours that a
real server cannot show on cue (a lost answer, a leader that forgot its
partition, a reader slower than the stream)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

import grpc
import pytest

import liftbridge
from liftbridge._consume._cursors import Cursors
from liftbridge._consume._positions import subscribe_request
from liftbridge._consume._subscription import Subscription, start_subscription
from liftbridge._core._admin import Admin
from liftbridge._core._router import BrokerId, Deadline, Leader, Replica
from liftbridge._groups._partitions import open_reading
from liftbridge._groups._session import GroupSession
from liftbridge._groups._values import StreamPartition
from liftbridge_api import api_pb2
from tests.unit.fake_router import (
    FakeRouter,
    FakeRpcError,
    FakeStream,
    handshake,
    message,
    metadata_with,
)

# ------------------------------------------------------------------ admin --


def _unavailable() -> liftbridge.UnavailableError:
    return liftbridge.UnavailableError("broker went away")


def test_a_create_retried_after_a_lost_answer_is_success() -> None:
    router = FakeRouter()
    router.answer("CreateStream", _unavailable(), liftbridge.StreamExistsError("exists"))
    Admin(router.as_router()).create_stream(api_pb2.CreateStreamRequest(name="s"), Deadline(5))
    assert [method for method, _, _ in router.calls] == ["CreateStream", "CreateStream"]


def test_a_create_that_finds_the_stream_at_once_is_refused() -> None:
    router = FakeRouter()
    router.answer("CreateStream", liftbridge.StreamExistsError("exists"))
    with pytest.raises(liftbridge.StreamExistsError):
        Admin(router.as_router()).create_stream(api_pb2.CreateStreamRequest(name="s"), Deadline(5))


def test_a_delete_retried_after_a_lost_answer_is_success() -> None:
    router = FakeRouter()
    router.answer("DeleteStream", _unavailable(), liftbridge.NoSuchStreamError("gone"))
    Admin(router.as_router()).delete_stream("s", Deadline(5))


def test_a_delete_of_a_missing_stream_is_refused() -> None:
    router = FakeRouter()
    router.answer("DeleteStream", liftbridge.NoSuchStreamError("gone"))
    with pytest.raises(liftbridge.NoSuchStreamError):
        Admin(router.as_router()).delete_stream("s", Deadline(5))


def test_partition_metadata_goes_to_the_leader() -> None:
    router = FakeRouter(metadata=metadata_with({"s": 2}))
    router.answer(
        "FetchPartitionMetadata",
        api_pb2.FetchPartitionMetadataResponse(
            metadata=api_pb2.PartitionMetadata(id=1, highWatermark=9, newestOffset=9)
        ),
    )
    meta = Admin(router.as_router()).fetch_partition_metadata("s", 1, Deadline(5))
    assert meta.high_watermark == 9
    assert router.calls[0][2] == Leader("s", 1)


# ---------------------------------------------------------- subscriptions --


def _subscribe(
    router: FakeRouter,
    *,
    start: int = 0,
    replica: bool = False,
    handler: liftbridge.Handler | None = None,
    buffer: int = 1024,
    wait: float = 5.0,
) -> Subscription:
    request = subscribe_request("s", 0, start, None, replica, False)
    return start_subscription(
        router.as_router(),
        request,
        handler,
        resubscribe_wait=wait,
        open_timeout=1.0,
        buffer=buffer,
    )


def _take(subscription: Subscription, count: int) -> list[int]:
    offsets = []
    for m in subscription:
        offsets.append(m.offset)
        if len(offsets) == count:
            break
    return offsets


@pytest.fixture
def router() -> Iterator[FakeRouter]:
    yield FakeRouter(metadata=metadata_with({"s": 1}))


def _lost() -> FakeRpcError:
    return FakeRpcError(grpc.StatusCode.UNAVAILABLE, "connection reset")


def test_resubscribes_after_the_last_offset_with_no_repeat(router: FakeRouter) -> None:
    router.streams.append(FakeStream([handshake(), message("s", 0), message("s", 1), _lost()]))
    # The new stream starts over at 1 (a lagging leader): 1 must not repeat.
    router.streams.append(FakeStream([handshake(), message("s", 1), message("s", 2)]))
    with _subscribe(router) as sub:
        assert _take(sub, 3) == [0, 1, 2]
    resumed = router.calls[1][1]
    assert isinstance(resumed, api_pb2.SubscribeRequest)
    assert resumed.startPosition == api_pb2.OFFSET and resumed.startOffset == 2


def test_no_such_partition_while_resubscribing_is_retried_while_listed(
    router: FakeRouter,
) -> None:
    """A restarted leader serves its API before it has replayed its streams."""
    not_yet = FakeRpcError(grpc.StatusCode.NOT_FOUND, "No such partition")
    router.streams.append(FakeStream([handshake(), message("s", 0), _lost()]))
    router.streams.append(FakeStream([not_yet]))
    router.streams.append(FakeStream([not_yet]))
    router.streams.append(FakeStream([handshake(), message("s", 1)]))
    with _subscribe(router) as sub:
        assert _take(sub, 2) == [0, 1]
        assert sub.error is None


def test_no_such_partition_at_the_first_opening_is_final(router: FakeRouter) -> None:
    router.streams.append(
        FakeStream([FakeRpcError(grpc.StatusCode.NOT_FOUND, "No such partition")])
    )
    with pytest.raises(liftbridge.NoSuchPartitionError):
        _subscribe(router)


def test_a_deleted_stream_ends_the_subscription(router: FakeRouter) -> None:
    deleted = FakeRpcError(grpc.StatusCode.NOT_FOUND, "stream deleted")
    router.streams.append(FakeStream([handshake(), message("s", 0), deleted]))
    errors: list[BaseException | None] = []
    sub = _subscribe(router, handler=lambda m, e: errors.append(e))
    assert sub.wait(5)
    assert isinstance(sub.error, liftbridge.StreamDeletedError)
    assert isinstance(errors[-1], liftbridge.StreamDeletedError)


def test_a_segment_closed_by_retention_resubscribes(router: FakeRouter) -> None:
    closed = FakeRpcError(grpc.StatusCode.INTERNAL, "segment has been closed")
    router.streams.append(FakeStream([handshake(), message("s", 0), closed]))
    router.streams.append(FakeStream([handshake(), message("s", 5)]))
    with _subscribe(router) as sub:
        assert _take(sub, 2) == [0, 5]


def test_replica_reads_target_a_replica(router: FakeRouter) -> None:
    router.streams.append(FakeStream([handshake(), message("s", 0)]))
    with _subscribe(router, replica=True) as sub:
        assert _take(sub, 1) == [0]
        assert sub.broker == "127.0.0.1:1000"
    assert router.calls[0][2] == Replica("s", 0)


def test_an_iterated_subscription_holds_at_most_its_buffer(router: FakeRouter) -> None:
    router.streams.append(FakeStream([handshake()] + [message("s", i) for i in range(50)]))
    with _subscribe(router, buffer=4) as sub:
        time.sleep(0.3)  # let the reader run ahead as far as it can
        assert sub.last_offset is None  # nothing was taken yet
        assert _take(sub, 3) == [0, 1, 2]
        assert sub.last_offset == 2  # advanced by taking, not by reading


def test_iterating_an_ended_subscription_again_ends_at_once(router: FakeRouter) -> None:
    stop = FakeRpcError(grpc.StatusCode.RESOURCE_EXHAUSTED, "Stop offset reached")
    router.streams.append(FakeStream([handshake(), message("s", 0), stop]))
    request = subscribe_request("s", 0, 0, 0, False, False)
    sub = start_subscription(router.as_router(), request, None, resubscribe_wait=5, open_timeout=1)
    assert [m.offset for m in sub] == [0]
    assert sub.stop_position_reached
    again: list[list[liftbridge.Message]] = []
    reader = threading.Thread(target=lambda: again.append(list(sub)))
    reader.start()
    reader.join(5)  # it used to wait for ever
    assert again == [[]]
    sub.close()


def test_close_does_not_wait_per_stuck_handler(router: FakeRouter) -> None:
    from liftbridge._consume._subscription import close_all

    release = threading.Event()

    def stuck(message: liftbridge.Message | None, error: BaseException | None) -> None:
        release.wait(10)

    subs = []
    for _ in range(5):
        router.streams.append(FakeStream([handshake(), message("s", 0)]))
        subs.append(_subscribe(router, handler=stuck))
    time.sleep(0.1)
    started = time.monotonic()
    close_all(subs, time.monotonic() + 1.0)
    waited = time.monotonic() - started
    release.set()
    for sub in subs:
        assert sub.wait(5)
    assert waited < 3.5  # one shared wait of 1 s, not five in a row


# ------------------------------------------------------------- groups --


def _leader_down_for_good(router: FakeRouter) -> None:
    """Scripts a stream that breaks after offset 0, then a leader refusing
    every re-opening (more than a short ``resubscribe_wait`` can use up)."""
    router.streams.append(FakeStream([handshake(), message("s", 0), _lost()]))
    router.streams.extend(FakeStream([_lost()]) for _ in range(500))


def _give_ups(caplog: pytest.LogCaptureFixture) -> list[int]:
    """Levels of the "gave up" lines logged."""
    return [r.levelno for r in caplog.records if "gave up" in r.getMessage()]


def _errors_to(errors: list[BaseException]) -> liftbridge.Handler:
    """A handler keeping the errors it is told of."""

    def handler(message: liftbridge.Message | None, error: BaseException | None) -> None:
        if error is not None:
            errors.append(error)

    return handler


def _group_reading(router: FakeRouter, errors: list[BaseException]) -> Subscription:
    return open_reading(
        router.as_router(),
        StreamPartition("s", 0),
        0,
        api_pb2.Consumer(groupId="g", groupEpoch=1, consumerId="m"),
        _errors_to(errors),
        0.3,
    )


def test_a_group_reading_giving_up_on_a_down_leader_logs_no_warning(
    router: FakeRouter, caplog: pytest.LogCaptureFixture
) -> None:
    """Its member reads the partition again and logs that (INFO): a WARNING
    for each failover the SDK handled was noise. It was a WARNING."""
    caplog.set_level(logging.DEBUG, logger="liftbridge._consume._subscription")
    _leader_down_for_good(router)
    errors: list[BaseException] = []
    sub = _group_reading(router, errors)
    assert sub.wait(10)
    assert isinstance(sub.error, liftbridge.UnavailableError)
    assert [type(e) for e in errors] == [liftbridge.UnavailableError]  # the member still hears it
    assert _give_ups(caplog) == [logging.DEBUG]


def test_a_group_reading_giving_up_for_good_still_warns(
    router: FakeRouter, caplog: pytest.LogCaptureFixture
) -> None:
    """A failure the member does not cure by reading again (here the stream
    was deleted) is reported as before: a WARNING, and the handler hears it."""
    caplog.set_level(logging.DEBUG, logger="liftbridge._consume._subscription")
    deleted = FakeRpcError(grpc.StatusCode.NOT_FOUND, "stream deleted")
    router.streams.append(FakeStream([handshake(), message("s", 0), deleted]))
    errors: list[BaseException] = []
    sub = _group_reading(router, errors)
    assert sub.wait(10)
    assert [type(e) for e in errors] == [liftbridge.StreamDeletedError]
    assert _give_ups(caplog) == [logging.WARNING]


def test_a_plain_subscription_giving_up_on_a_down_leader_warns(
    router: FakeRouter, caplog: pytest.LogCaptureFixture
) -> None:
    """Nobody opens a plain subscription again: its give-up is its end."""
    caplog.set_level(logging.DEBUG, logger="liftbridge._consume._subscription")
    _leader_down_for_good(router)
    errors: list[BaseException] = []
    sub = _subscribe(router, handler=_errors_to(errors), wait=0.3)
    assert sub.wait(10)
    assert [type(e) for e in errors] == [liftbridge.UnavailableError]
    assert _give_ups(caplog) == [logging.WARNING]


def test_the_group_thread_makes_one_bounded_attempt_per_rpc() -> None:
    """The group thread is the heartbeat: none of its RPCs may retry for
    longer than its budget (they used the client-wide policy: 30 s)."""
    router = FakeRouter(metadata=metadata_with({"s": 2, "__cursors": 3}))
    session = GroupSession(router.as_router(), Cursors(router.as_router()), "g", ["s"])
    router.answer(
        "JoinConsumerGroup",
        api_pb2.JoinConsumerGroupResponse(
            coordinator="a",
            epoch=3,
            consumerTimeout=3_000_000_000,
            coordinatorTimeout=3_000_000_000,
        ),
    )
    membership = session.join("m1", 1.0)
    router.answer(
        "FetchConsumerGroupAssignments",
        api_pb2.FetchConsumerGroupAssignmentsResponse(
            epoch=3,
            assignments=[api_pb2.PartitionAssignment(stream="s", partitions=[0, 1])],
        ),
    )
    assigned, epoch = session.fetch_assignments(membership, 1.0)
    router.answer("SetCursor", api_pb2.SetCursorResponse())
    session.set_cursor(sorted(assigned)[0], 9, 1.0)
    assert epoch == 3 and len(assigned) == 2
    assert router.single_attempts == [
        "JoinConsumerGroup",
        "FetchConsumerGroupAssignments",
        "SetCursor",
    ]
    targets = {method: target for method, _, target in router.calls}
    assert targets["FetchConsumerGroupAssignments"] == BrokerId("a")  # the coordinator
    assert isinstance(targets["SetCursor"], Leader) and targets["SetCursor"].stream == "__cursors"
