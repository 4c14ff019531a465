"""Publishing against a real server: sync, async, partitioning, OCC, errors."""

from __future__ import annotations

import re
import threading
import zlib
from concurrent.futures import Future

import pytest

import liftbridge
from liftbridge.testing import LocalServer


def _read_all(
    client: liftbridge.Client, stream: str, partition: int = 0
) -> list[liftbridge.Message]:
    with client.subscribe(
        stream,
        partition=partition,
        start=liftbridge.StartPosition.EARLIEST,
        stop=liftbridge.StopPosition.LATEST,
    ) as sub:
        return list(sub)


def test_publish_returns_the_ack(client: liftbridge.Client, stream: str) -> None:
    ack = client.publish(stream, b"hello", key=b"k1", headers={"trace": b"abc"})
    assert ack is not None
    assert (ack.stream, ack.offset, ack.ack_policy) == (stream, 0, liftbridge.AckPolicy.LEADER)
    assert re.fullmatch(r"[0-9a-f]+-[0-9a-f]+-0x[0-9a-f]+", ack.correlation_id)  # pid-client-seq
    assert ack.commit_timestamp_ns >= ack.reception_timestamp_ns > 0
    second = client.publish(stream, b"again", correlation_id="mine")
    assert second is not None and second.offset == 1 and second.correlation_id == "mine"


def test_sync_publishes_from_many_threads(client: liftbridge.Client, stream: str) -> None:
    """Each thread publishes on a stream of its own (a lane); every ack is
    its own message's, and the partition holds each message once."""
    threads, each = 6, 40
    acks: dict[bytes, liftbridge.Ack] = {}
    failures: list[BaseException] = []

    def publish(worker: int) -> None:
        try:
            for i in range(each):
                value = b"%d-%d" % (worker, i)
                ack = client.publish(stream, value, correlation_id=value.decode())
                assert ack is not None and ack.correlation_id == value.decode()
                acks[value] = ack
        except BaseException as e:
            failures.append(e)

    workers = [threading.Thread(target=publish, args=(w,)) for w in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert failures == []
    assert sorted(a.offset for a in acks.values()) == list(range(threads * each))
    stored = {m.offset: m.value for m in _read_all(client, stream)}
    assert all(stored[ack.offset] == value for value, ack in acks.items())


def test_keys_and_headers_round_trip(client: liftbridge.Client, stream: str) -> None:
    client.publish(stream, b"v1", key=b"key-1", headers={"a": b"1", "b": b"\x00\xff"})
    client.publish(stream, bytearray(b"v2"))
    first, second = _read_all(client, stream)
    assert (first.key, first.value, first.offset) == (b"key-1", b"v1", 0)
    assert first.headers["a"] == b"1" and first.headers["b"] == b"\x00\xff"
    assert first.headers["subject"] == stream.encode()  # added by the server
    assert second.key is None and second.value == b"v2"
    with pytest.raises(TypeError):
        first.headers["c"] = b"x"  # type: ignore[index]


def test_publish_async_future_and_handler(client: liftbridge.Client, stream: str) -> None:
    seen: list[tuple[liftbridge.Ack | None, BaseException | None, str]] = []
    done = threading.Event()

    def on_ack(ack: liftbridge.Ack | None, error: BaseException | None) -> None:
        seen.append((ack, error, threading.current_thread().name))
        if len(seen) == 50:
            done.set()

    futures = [client.publish_async(stream, b"m%d" % i, on_ack) for i in range(50)]
    offsets = sorted(f.result(timeout=10).offset for f in futures)  # type: ignore[union-attr]
    assert offsets == list(range(50))
    assert done.wait(10)
    assert all(error is None and ack is not None for ack, error, _ in seen)
    # User code runs on the callbacks thread, never on the threads reading acks.
    assert {name for _, _, name in seen} == {"liftbridge-callbacks"}
    callback_threads: list[str] = []
    finished = threading.Event()

    def on_done(future: object) -> None:
        callback_threads.append(threading.current_thread().name)
        finished.set()

    futures[0].add_done_callback(on_done)  # already done: still not run here
    assert finished.wait(10)
    assert callback_threads == ["liftbridge-callbacks"]


def test_ack_policy_none(client: liftbridge.Client, stream: str) -> None:
    called: list[object] = []
    future = client.publish_async(
        stream, b"fire", lambda a, e: called.append(a), ack_policy=liftbridge.AckPolicy.NONE
    )
    assert future.result(timeout=10) is None
    assert client.publish(stream, b"forget", ack_policy=liftbridge.AckPolicy.NONE) is None
    ack = client.publish(stream, b"sync", ack_policy=liftbridge.AckPolicy.ALL)
    assert ack is not None
    # Unacknowledged publishes travel on the shared stream, the acked one on
    # the thread's own: all three are stored, in no promised order.
    with client.subscribe(stream, start=liftbridge.StartPosition.EARLIEST) as sub:
        values = sorted(m.value for _, m in zip(range(3), sub, strict=False))
    assert values == [b"fire", b"forget", b"sync"]
    assert called == []


def test_partition_by_key_matches_go_formula(client: liftbridge.Client, unique_name: str) -> None:
    client.create_stream(unique_name, partitions=5)
    keys = [f"customer-{i}".encode() for i in range(20)]
    for key in keys:
        client.publish(unique_name, key, key=key, partitioner=liftbridge.PartitionByKey())
    for partition in range(5):
        for message in _read_all(client, unique_name, partition):
            assert message.key is not None
            assert zlib.crc32(message.key) % 5 == partition == message.partition


def test_key_alone_picks_the_keys_partition(client: liftbridge.Client, unique_name: str) -> None:
    client.create_stream(unique_name, partitions=5)
    keys = [f"customer-{i}".encode() for i in range(20)]
    acks: list[liftbridge.Ack | None] = [client.publish(unique_name, key, key=key) for key in keys]
    futures = [client.publish_async(unique_name, key, key=key) for key in keys]
    acks += [f.result(10) for f in futures]
    assert {zlib.crc32(key) % 5 for key in keys} != {0}  # the keys spread out

    def subject(partition: int) -> str:
        return unique_name if partition == 0 else f"{unique_name}.{partition}"

    for key, ack in zip(keys * 2, acks, strict=True):
        assert ack is not None and ack.message_subject == subject(zlib.crc32(key) % 5)
    unkeyed = client.publish(unique_name, b"no key")
    assert unkeyed is not None and unkeyed.message_subject == subject(0)


def test_round_robin_and_explicit_partition(client: liftbridge.Client, unique_name: str) -> None:
    client.create_stream(unique_name, partitions=3)
    rr = liftbridge.PartitionByRoundRobin()
    for i in range(6):
        client.publish(unique_name, b"%d" % i, partitioner=rr)
    client.publish(unique_name, b"explicit", partition=2, partitioner=rr)
    counts = [len(_read_all(client, unique_name, p)) for p in range(3)]
    assert counts == [2, 2, 3]


def test_bad_partitioner_choice_is_caught(client: liftbridge.Client, unique_name: str) -> None:
    client.create_stream(unique_name, partitions=2)

    class Broken:
        def partition(
            self, stream: str, key: bytes | None, value: bytes, metadata: liftbridge.Metadata
        ) -> int:
            return 9

    with pytest.raises(liftbridge.InvalidArgumentError, match="chose partition 9"):
        client.publish(unique_name, b"x", partitioner=Broken())


def test_optimistic_concurrency(client: liftbridge.Client, unique_name: str) -> None:
    client.create_stream(unique_name, optimistic_concurrency_control=True)
    ack = client.publish(unique_name, b"first", expected_offset=0)
    assert ack is not None and ack.offset == 0
    with pytest.raises(liftbridge.IncorrectOffsetError):
        client.publish(unique_name, b"stale", expected_offset=0)
    ack = client.publish(unique_name, b"second", expected_offset=1)
    assert ack is not None and ack.offset == 1
    # Without expected_offset the SDK sends -1: no check, even on an OCC stream.
    ack = client.publish(unique_name, b"unchecked")
    assert ack is not None and ack.offset == 2
    with pytest.raises(liftbridge.InvalidArgumentError, match="needs an ack"):
        client.publish(unique_name, b"x", expected_offset=3, ack_policy=liftbridge.AckPolicy.NONE)


def test_missing_stream_or_partition(client: liftbridge.Client, stream: str) -> None:
    with pytest.raises(liftbridge.NoSuchPartitionError):
        client.publish(stream, b"x", partition=3)
    with pytest.raises(liftbridge.NoSuchPartitionError):
        client.publish("no-such-stream", b"x")
    with pytest.raises(liftbridge.NoSuchStreamError):
        client.publish("no-such-stream", b"x", partitioner=liftbridge.PartitionByKey())


def test_too_large(client: liftbridge.Client, stream: str) -> None:
    with pytest.raises(liftbridge.MessageTooLargeError):
        client.publish(stream, b"x" * (2 * 1024 * 1024))
    assert client.publish(stream, b"small") is not None  # the stream still works


def test_bad_input(client: liftbridge.Client, stream: str) -> None:
    with pytest.raises(liftbridge.ArgumentTypeError, match="encode"):
        client.publish(stream, "text")  # type: ignore[call-overload]
    with pytest.raises(liftbridge.InvalidArgumentError, match="partition must be >= 0"):
        client.publish(stream, b"x", partition=-1)
    with pytest.raises(liftbridge.ArgumentTypeError, match="ack_policy"):
        client.publish(stream, b"x", ack_policy="ALL")  # type: ignore[call-overload]
    with pytest.raises(liftbridge.InvalidArgumentError, match="timeout"):
        client.publish(stream, b"x", timeout=0)


def test_duplicate_correlation_id_in_flight(server: LocalServer, stream: str) -> None:
    with liftbridge.Client(server.address, max_inflight=4) as c:
        futures = [c.publish_async(stream, b"a", correlation_id="same")]
        try:
            c.publish_async(stream, b"b", correlation_id="same")
        except liftbridge.InvalidArgumentError as e:
            assert "already in flight" in str(e)
        futures[0].result(timeout=10)


def test_a_blocked_ack_handler_holds_no_window_slot(server: LocalServer, stream: str) -> None:
    # A slot is freed when the outcome is known, before the handler runs, and
    # handlers run on liftbridge-callbacks: a handler that blocks holds up
    # later handlers, not acks, so publishing goes on past the window's size.
    # (The window filling up is unit-tested with a broker that never acks.)
    with liftbridge.Client(server.address, max_inflight=2) as c:
        gate = threading.Event()

        def slow(ack: liftbridge.Ack | None, error: BaseException | None) -> None:
            gate.wait(10)

        first = c.publish_async(stream, b"1", slow)
        more = [c.publish_async(stream, b"%d" % i, timeout=5) for i in range(2, 8)]
        assert [f.result(timeout=10).offset for f in more] == list(range(1, 7))  # type: ignore[union-attr]
        gate.set()
        ack = first.result(timeout=10)
        assert ack is not None and ack.offset == 0


def test_an_ack_handler_can_publish_synchronously(client: liftbridge.Client, stream: str) -> None:
    """The handler runs on liftbridge-callbacks; its publish() goes out on a
    stream of that thread's own."""
    follow_ups: list[object] = []
    done = threading.Event()

    def on_ack(ack: liftbridge.Ack | None, error: BaseException | None) -> None:
        try:
            follow_ups.append(client.publish(stream, b"follow-up", timeout=10))
        except BaseException as e:
            follow_ups.append(e)
        done.set()

    client.publish_async(stream, b"first", on_ack)
    assert done.wait(20)
    (follow_up,) = follow_ups
    assert isinstance(follow_up, liftbridge.Ack) and follow_up.offset == 1


def test_an_ack_handler_waiting_for_a_full_window_does_not_stall_the_acks(
    server: LocalServer, stream: str
) -> None:
    """Handlers run on liftbridge-callbacks, so a handler's publish_async on a
    full window waits for liftbridge-acks to free a slot instead of stalling it."""
    with liftbridge.Client(server.address, max_inflight=2) as c:
        entered, gate, done = threading.Event(), threading.Event(), threading.Event()
        outcome: list[BaseException] = []

        published: list[Future[liftbridge.Ack | None]] = []

        def on_ack(ack: liftbridge.Ack | None, error: BaseException | None) -> None:
            entered.set()
            gate.wait(10)
            try:
                published.append(c.publish_async(stream, b"from the handler", timeout=60))
            except BaseException as e:
                outcome.append(e)
            done.set()

        c.publish_async(stream, b"1", on_ack)
        assert entered.wait(10)
        later = [c.publish_async(stream, b"%d" % i) for i in (2, 3)]  # the window is full
        gate.set()
        assert done.wait(20)  # well before the publish's own 60 s timeout
        assert outcome == []
        assert all(f.result(timeout=10) is not None for f in later)
        (from_handler,) = published
        ack = from_handler.result(timeout=10)
        assert ack is not None and ack.offset == 3


def test_close_fails_pending_publishes(server: LocalServer, stream: str) -> None:
    c = liftbridge.Client(server.address)
    gate = threading.Event()

    def hold(ack: liftbridge.Ack | None, error: BaseException | None) -> None:
        gate.wait(5)

    first = c.publish_async(stream, b"1", hold)
    pending = [c.publish_async(stream, b"x") for _ in range(5)]
    c.close()
    gate.set()
    first.exception(timeout=10)
    for f in pending:
        error = f.exception(timeout=10)
        assert error is None or isinstance(error, liftbridge.ClientClosedError)


def test_flush_waits_for_everything(client: liftbridge.Client, stream: str) -> None:
    futures = [client.publish_async(stream, b"%d" % i) for i in range(200)]
    assert client.flush(timeout=10)
    assert all(f.done() for f in futures)


def test_publish_async_without_a_future_reports_to_the_handler(
    client: liftbridge.Client, stream: str
) -> None:
    seen: list[tuple[liftbridge.Ack | None, BaseException | None, str]] = []
    lock = threading.Lock()
    all_seen = threading.Event()

    def on_ack(ack: liftbridge.Ack | None, error: BaseException | None) -> None:
        with lock:
            seen.append((ack, error, threading.current_thread().name))
            if len(seen) == 300:
                all_seen.set()

    returned = [client.publish_async(stream, b"h%d" % i, on_ack, future=False) for i in range(300)]
    assert returned == [None] * 300
    # flush waits for publishes that have no Future too (their outcomes are
    # decided; the handlers run after, on liftbridge-callbacks).
    assert client.flush(timeout=10)
    assert all_seen.wait(10)
    with lock:
        assert len(seen) == 300
        assert all(error is None and ack is not None for ack, error, _ in seen)
        assert sorted(ack.offset for ack, _, _ in seen if ack is not None) == list(range(300))
        assert {name for _, _, name in seen} == {"liftbridge-callbacks"}
    # Fire and forget: AckPolicy.NONE needs no handler.
    assert (
        client.publish_async(stream, b"none", ack_policy=liftbridge.AckPolicy.NONE, future=False)
        is None
    )
    assert client.flush(timeout=10)
    with client.subscribe(stream, start=liftbridge.StartPosition.EARLIEST) as sub:
        values = [m.value for _, m in zip(range(301), sub, strict=False)]
    assert values[:300] == [b"h%d" % i for i in range(300)]
    assert values[300] == b"none"


def test_publish_async_future_argument_is_checked_before_sending(
    client: liftbridge.Client, stream: str
) -> None:
    with pytest.raises(liftbridge.ArgumentTypeError, match="future must be a bool"):
        client.publish_async(stream, b"x", lambda a, e: None, future="no")  # type: ignore[call-overload]
    with pytest.raises(liftbridge.InvalidArgumentError, match="future=False needs an ack_handler"):
        client.publish_async(stream, b"x", future=False)
    assert client.fetch_partition_metadata(stream, 0).high_watermark == -1  # nothing was sent


def test_publish_to_subject(client: liftbridge.Client, unique_name: str) -> None:
    client.create_stream(unique_name, partitions=2)
    ack = client.publish_to_subject(f"{unique_name}.1", b"direct", key=b"k", headers={"h": b"v"})
    assert ack is not None and ack.offset == 0
    (message,) = _read_all(client, unique_name, 1)
    assert message.value == b"direct" and message.key == b"k"
    assert message.headers["h"] == b"v"  # the Go client drops these
    assert (
        client.publish_to_subject(unique_name, b"none", ack_policy=liftbridge.AckPolicy.NONE)
        is None
    )


def test_publish_to_subject_without_streams_times_out(
    client: liftbridge.Client, unique_name: str
) -> None:
    with pytest.raises(liftbridge.AckTimeoutError):
        client.publish_to_subject(f"{unique_name}.nobody", b"lost", timeout=0.5)
    with pytest.raises(liftbridge.InvalidArgumentError, match="wildcards"):
        client.publish_to_subject("a.*", b"x")


def test_publish_after_stream_readonly_async(client: liftbridge.Client, stream: str) -> None:
    client.set_stream_readonly(stream)
    future = client.publish_async(stream, b"x")
    assert isinstance(future.exception(timeout=10), liftbridge.ReadonlyPartitionError)


def test_a_missing_stream_is_the_same_error_from_publish_and_subscribe(
    client: liftbridge.Client, unique_name: str
) -> None:
    with pytest.raises(liftbridge.NoSuchStreamError):
        client.publish(unique_name, b"x")
    with pytest.raises(liftbridge.NoSuchStreamError):
        client.publish_async(unique_name, b"x").result(timeout=10)
    with pytest.raises(liftbridge.NoSuchStreamError):
        client.subscribe(unique_name)
