"""Direct reads on a real server: get, get_batch and get_last_by_key, also on
a compacted stream whose old offsets are gone."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

import pytest

import liftbridge

TOTAL = 60
# get_batch and get_last_by_key read up to the high watermark, which a LEADER
# ack comes before (the leader acks as it writes the message, and moves the HW
# after): the tests that count on a message just published being read publish
# with ALL, acked once the HW covers the message.
ALL = liftbridge.AckPolicy.ALL


def _key(i: int) -> bytes:
    """Every fifth message has a key of its own (it survives compaction); the
    others share three keys (only the last of each survives)."""
    return f"u{i}".encode() if i % 5 == 0 else f"k{i % 3}".encode()


@pytest.fixture
def compacted(client: liftbridge.Client, unique_name: str) -> str:
    """A stream whose compaction has removed the overwritten offsets."""
    client.create_stream(
        unique_name, compact_enabled=True, segment_max_bytes=512, cleaner_interval=1.0
    )
    for i in range(TOTAL):
        client.publish(unique_name, f"v{i}".encode(), key=_key(i))
    deadline = time.monotonic() + 30
    while True:  # until the first 25 offsets are compacted
        page = client.get_batch(unique_name, 0, max_messages=5)
        if [m.offset for m in page.messages] == [0, 5, 10, 15, 20]:
            return unique_name
        assert time.monotonic() < deadline, "compaction did not happen within 30s"
        time.sleep(0.2)


def _survivors() -> list[int]:
    last = {_key(i): i for i in range(TOTAL)}
    return sorted(last.values())


def test_get_returns_the_message_at_an_offset(client: liftbridge.Client, stream: str) -> None:
    for i in range(5):
        client.publish(stream, f"m{i}".encode(), key=b"k")
    message = client.get(stream, 3)
    assert (message.offset, message.value, message.key) == (3, b"m3", b"k")
    assert client.get(stream, 0).value == b"m0"


def test_get_beyond_the_newest_offset_is_not_found(client: liftbridge.Client, stream: str) -> None:
    client.publish(stream, b"only")
    with pytest.raises(liftbridge.OffsetNotFoundError) as caught:
        client.get(stream, 1)
    assert caught.value.offset == 1 and caught.value.partition == 0
    assert "beyond the newest" in str(caught.value)


def test_get_on_an_empty_partition_is_not_found(client: liftbridge.Client, stream: str) -> None:
    with pytest.raises(liftbridge.OffsetNotFoundError):
        client.get(stream, 0)


def test_get_bad_input_fails_before_any_rpc(client: liftbridge.Client) -> None:
    with pytest.raises(liftbridge.InvalidArgumentError, match="offset"):
        client.get("no-such-stream-at-all", -1)
    with pytest.raises(liftbridge.ArgumentTypeError, match="offset"):
        client.get("no-such-stream-at-all", "3")  # type: ignore[arg-type]
    with pytest.raises(liftbridge.InvalidArgumentError, match="not both"):
        client.get_batch("s", 0, max_messages=1, max_bytes=1)
    with pytest.raises(liftbridge.InvalidArgumentError, match="not both"):
        client.get_last_by_key("s", keys=[b"a"], prefix=b"a")


def test_reads_of_a_paused_partition_fail_typed(client: liftbridge.Client, stream: str) -> None:
    client.publish(stream, b"x")
    client.pause_stream(stream)
    with pytest.raises(liftbridge.PartitionPausedError):
        client.get(stream, 0, timeout=20)
    with pytest.raises(liftbridge.PartitionPausedError):
        client.get_batch(stream, 0, timeout=20)


def test_get_from_a_missing_stream(client: liftbridge.Client, unique_name: str) -> None:
    with pytest.raises(liftbridge.NoSuchPartitionError):
        client.get(unique_name, 0, timeout=5)


def test_get_batch_pages_through_a_partition(client: liftbridge.Client, stream: str) -> None:
    for i in range(25):
        client.publish(stream, f"m{i:02d}".encode(), ack_policy=ALL)
    seen: list[int] = []
    start = 0
    pages = 0
    while True:
        batch = client.get_batch(stream, start, max_messages=10)
        pages += 1
        seen.extend(m.offset for m in batch.messages)
        assert batch.last_offset is not None
        assert batch.pending == 24 - batch.last_offset
        if not batch.pending:
            break
        start = batch.last_offset + 1
    assert seen == list(range(25)) and pages == 3
    past = client.get_batch(stream, 25)
    assert (past.messages, past.pending, past.last_offset) == ((), 0, None)


def test_get_batch_by_bytes(client: liftbridge.Client, stream: str) -> None:
    for _ in range(10):
        client.publish(stream, b"x" * 100, ack_policy=ALL)
    batch = client.get_batch(stream, 2, max_bytes=350)
    assert [m.offset for m in batch.messages] == [2, 3, 4]
    assert (batch.pending, batch.last_offset) == (5, 4)
    # One message larger than the limit still comes (a page is never empty).
    assert [m.offset for m in client.get_batch(stream, 0, max_bytes=1).messages] == [0]


def test_compacted_offsets_are_not_found(client: liftbridge.Client, compacted: str) -> None:
    survivors = _survivors()
    for offset in (1, 2, 3):  # overwritten by later messages with the same keys
        assert offset not in survivors
        with pytest.raises(liftbridge.OffsetNotFoundError, match="removed"):
            client.get(compacted, offset)
    assert client.get(compacted, 5).key == b"u5"


def test_get_batch_skips_compacted_gaps(client: liftbridge.Client, compacted: str) -> None:
    survivors = _survivors()
    batch = client.get_batch(compacted, 1, max_messages=4)
    assert [m.offset for m in batch.messages] == [o for o in survivors if o >= 1][:4]
    assert batch.last_offset is not None
    assert batch.pending == TOTAL - 1 - batch.last_offset
    everything = client.get_batch(compacted, 0, max_messages=1000)
    assert [m.offset for m in everything.messages] == survivors
    assert everything.pending == 0


def test_get_last_by_key_on_a_compacted_stream(client: liftbridge.Client, compacted: str) -> None:
    latest = client.get_last_by_key(compacted)
    expected = {_key(i): f"v{i}".encode() for i in range(TOTAL)}
    assert {k: m.value for k, m in latest.items()} == expected
    some = client.get_last_by_key(compacted, keys=[b"u10", "k2", b"missing"])
    assert {k: m.value for k, m in some.items()} == {
        b"u10": expected[b"u10"],
        b"k2": expected[b"k2"],
    }
    by_prefix = client.get_last_by_key(compacted, prefix=b"u")
    assert set(by_prefix) == {_key(i) for i in range(0, TOTAL, 5)}
    # Offset 12 was compacted away (key k0, overwritten later): the read
    # still ends there and sees only what existed up to it.
    early = client.get_last_by_key(compacted, up_to_offset=12)
    assert {k: m.offset for k, m in early.items()} == {b"u0": 0, b"u5": 5, b"u10": 10}


def test_get_last_by_key_across_partitions_as_of_a_time(
    client: liftbridge.Client, unique_name: str
) -> None:
    client.create_stream(unique_name, partitions=3)
    for i in range(6):
        client.publish(unique_name, f"a{i}".encode(), key=f"key{i}".encode(), ack_policy=ALL)
    time.sleep(0.05)
    cut = datetime.now(UTC)
    time.sleep(0.05)
    for i in range(6):
        client.publish(unique_name, f"b{i}".encode(), key=f"key{i}".encode(), ack_policy=ALL)
    now = client.get_last_by_key(unique_name)
    assert {k: m.value for k, m in now.items()} == {
        f"key{i}".encode(): f"b{i}".encode() for i in range(6)
    }
    assert len({m.partition for m in now.values()}) > 1
    then = client.get_last_by_key(unique_name, keys=[b"key1", b"key4"], up_to_time=cut)
    assert {k: m.value for k, m in then.items()} == {b"key1": b"a1", b"key4": b"a4"}


def test_reads_below_the_oldest_held_offset_are_not_found_at_once(
    client: liftbridge.Client, unique_name: str
) -> None:
    # Segments roll by age; retention by count then deletes the first one
    # (offsets 0-4) and keeps the second (5-9). A read below offset 5 is
    # answered by the server sending offset 5: "not found" at once, never an
    # OffsetUnavailableError at the deadline.
    client.create_stream(
        unique_name, retention_max_messages=5, segment_max_age=0.4, cleaner_interval=0.2
    )
    for i in range(5):
        client.publish(unique_name, f"a{i}".encode())
    time.sleep(1.0)  # the first segment rolls (0.4 s after its first write)
    for i in range(5):
        client.publish(unique_name, f"b{i}".encode())
    deadline = time.monotonic() + 20
    while True:  # until retention removed offsets 0-4
        try:
            client.get(unique_name, 2, timeout=10.0)
        except liftbridge.OffsetNotFoundError as e:
            assert "next held offset: 5" in str(e)
            break
        assert time.monotonic() < deadline, "retention did not remove offsets 0-4 within 20s"
        time.sleep(0.2)
    page = client.get_batch(unique_name, 0, timeout=10.0)
    assert [m.value for m in page.messages] == [f"b{i}".encode() for i in range(5)]
    assert (page.last_offset, page.pending) == (9, 0)


def _publish_when_read_waits(client: liftbridge.Client, stream: str) -> liftbridge.Ack:
    """Publishes one message to ``stream`` a moment later (whether the read
    started by then or not, it must see the message)."""
    time.sleep(0.3)
    return client.publish(stream, b"late")


def test_reads_of_offsets_retention_removed_end_typed(
    client: liftbridge.Client, unique_name: str
) -> None:
    # Every message ages away: the server then waits for the next publish and
    # v1.9.0 reports no oldest offset, so a read ends at its deadline with an
    # error naming the offset, never a "not found" of a message that may exist.
    readonly = unique_name + "-ro"
    for name in (unique_name, readonly):
        client.create_stream(name, retention_max_age=1.0, segment_max_age=0.5, cleaner_interval=0.5)
        for i in range(12):
            client.publish(name, f"m{i}".encode())
        assert client.get(name, 11).value == b"m11"
    deadline = time.monotonic() + 20
    for name in (unique_name, readonly):
        while True:  # until retention removed every message
            try:
                client.get(name, 11, timeout=1.0)
            except liftbridge.OffsetUnavailableError:
                break
            assert time.monotonic() < deadline, "retention did not remove the messages within 20s"
            time.sleep(0.3)
    with pytest.raises(liftbridge.OffsetUnavailableError) as caught:
        client.get(unique_name, 0, timeout=1.5)
    assert isinstance(caught.value, liftbridge.DeadlineExceededError)
    assert caught.value.offset == 0 and "retention may have removed" in str(caught.value)
    with pytest.raises(liftbridge.OffsetUnavailableError) as paged:
        client.get_batch(unique_name, 0, timeout=1.5)
    assert (paged.value.offset, paged.value.high_watermark) == (0, 11)
    with pytest.raises(liftbridge.OffsetNotFoundError, match="beyond the newest"):
        client.get(unique_name, 12, timeout=1.5)  # still at once
    # A readonly partition ends the read at once: nothing at or after 0 is left.
    client.set_stream_readonly(readonly)
    with pytest.raises(liftbridge.OffsetNotFoundError, match="readonly partition holds nothing"):
        client.get(readonly, 0, timeout=30.0)
    empty = client.get_batch(readonly, 3, timeout=30.0)
    assert (empty.messages, empty.last_offset, empty.pending) == ((), None, 0)
    assert client.get_last_by_key(readonly, timeout=30.0) == {}
    # A writable one: the next publish ends the wait, as the next held offset.
    with ThreadPoolExecutor(1) as pool:
        ack = pool.submit(_publish_when_read_waits, client, unique_name)
        with pytest.raises(liftbridge.OffsetNotFoundError, match="next held offset: 12"):
            client.get(unique_name, 3, timeout=30.0)
        assert ack.result(10).offset == 12
