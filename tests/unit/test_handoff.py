"""The batched hand-over between a subscription's thread and the iterating one."""

from __future__ import annotations

import threading
from collections import deque

import pytest

from liftbridge._consume._handoff import Chunk, Empty, Handoff


def test_items_come_out_once_in_order_across_threads() -> None:
    buffer: Handoff[int] = Handoff(16, linger=0.001)
    count = 20_000
    taken: list[int] = []

    def take() -> None:
        while len(taken) < count:
            try:
                taken.append(buffer.get(5.0))
            except Empty:
                return

    taker = threading.Thread(target=take, name="test-handoff-taker")
    taker.start()
    for i in range(count):
        assert buffer.put(i, 5.0)
    taker.join(30.0)
    assert not taker.is_alive()
    assert taken == list(range(count))


def test_capacity_counts_what_a_taker_has_moved_to_its_batch() -> None:
    buffer: Handoff[str] = Handoff(3)
    for item in "abc":
        assert buffer.put(item, 0.01)
    assert not buffer.put("d", 0.01)  # full
    assert buffer.get(0) == "a"  # the taker moved a, b and c over: they count until taken
    assert not buffer.put("d", 0.01)
    assert [buffer.get(0), buffer.get(0)] == ["b", "c"]  # the last one frees the batch's room
    assert all(buffer.put(item, 0.01) for item in "def")
    assert not buffer.put("g", 0.01)


def test_a_weighted_bound_with_a_refill_threshold_fills_in_runs() -> None:
    buffer: Handoff[bytes] = Handoff(10, refill_at=4, weigh=len)
    assert buffer.put(b"x" * 6, 0.01) and buffer.put(b"y" * 4, 0.01)
    assert not buffer.put(b"z", 0.01)  # 10 of 10
    with buffer.lock:
        chunk = buffer.take_chunk(Chunk(deque(), buffer.discards))  # at most 10 - 4 in weight
        assert list(chunk.items) == [b"x" * 6]
        assert buffer.settle(chunk, chunk.items.popleft())
    assert buffer.put(b"z", 0.01)  # level 4: at the threshold, room again
    assert [buffer.get(0), buffer.get(0)] == [b"y" * 4, b"z"]


def test_a_chunk_put_back_comes_out_first_and_a_discard_drops_chunks() -> None:
    buffer: Handoff[int] = Handoff(8, refill_at=4)
    for i in range(6):
        assert buffer.put(i, 0.01)
    with buffer.lock:
        chunk = buffer.take_chunk(Chunk(deque(), buffer.discards))
        assert list(chunk.items) == [0, 1, 2, 3]  # the bound minus the threshold
        first = chunk.items.popleft()
        assert buffer.settle(chunk, first)
        buffer.put_back(chunk, first)
        assert list(buffer.items) == [0, 1, 2, 3, 4, 5] and buffer.level == 6
        held = buffer.take_chunk(Chunk(deque(), buffer.discards))
        buffer.discard()
        assert not buffer.settle(held, 0) and not held.items and buffer.level == 0


def test_one_item_heavier_than_the_bound_goes_in_when_nothing_is_held() -> None:
    buffer: Handoff[bytes] = Handoff(4, weigh=len)
    assert buffer.put(b"123456", 0.01)
    assert not buffer.put(b"1", 0.01)
    assert buffer.get(0) == b"123456"
    with pytest.raises(Empty):
        buffer.get(0)
    assert buffer.put(b"1", 0.01)


def test_get_without_waiting_on_an_empty_buffer_raises_empty() -> None:
    buffer: Handoff[int] = Handoff(4)
    with pytest.raises(Empty):
        buffer.get(0)
    with pytest.raises(Empty):
        buffer.get(0.01)


def test_a_waiting_taker_is_woken_by_one_item_after_a_batch() -> None:
    # After a batch (the taker lingers for more), one late item still comes out.
    buffer: Handoff[int] = Handoff(1024, linger=0.05)
    for i in range(10):
        buffer.put(i, 0.01)
    assert [buffer.get(1.0) for _ in range(10)] == list(range(10))
    late = threading.Timer(0.01, buffer.put, args=(10, 1.0))
    late.name = "test-handoff-late"
    late.start()
    try:
        assert buffer.get(5.0) == 10
    finally:
        late.join(5.0)


def test_a_blocked_producer_gets_room_when_the_taker_refills() -> None:
    buffer: Handoff[int] = Handoff(2)
    buffer.put(0, 0.01)
    buffer.put(1, 0.01)
    result: list[bool] = []
    producer = threading.Thread(
        target=lambda: result.append(buffer.put(2, 5.0)), name="test-handoff-producer"
    )
    producer.start()
    assert [buffer.get(1.0), buffer.get(1.0)] == [0, 1]
    assert buffer.get(5.0) == 2  # the taker's refill made room and woke the producer
    producer.join(5.0)
    assert result == [True]


def test_close_wakes_a_waiting_taker_and_producer_and_keeps_what_is_in() -> None:
    buffer: Handoff[int] = Handoff(1, linger=0.001)
    assert buffer.put(1, 0.01)
    results: list[object] = []

    def produce() -> None:
        results.append(buffer.put(2, 30.0))  # full: waits until close()

    producer = threading.Thread(target=produce, name="test-handoff-producer")
    producer.start()
    while not buffer._putters:  # wait until it waits for room
        producer.join(0.001)
    buffer.close()
    producer.join(5.0)
    assert not producer.is_alive()
    assert results == [False]
    assert not buffer.put(3, 0.01)  # closed: nothing added
    assert buffer.get(30.0) == 1  # what was in still comes out
    with pytest.raises(Empty):
        buffer.get(30.0)  # closed and empty: returns at once

    empty: Handoff[int] = Handoff(4)

    def take() -> None:
        try:
            results.append(empty.get(30.0))
        except Empty:
            results.append("empty")

    taker = threading.Thread(target=take, name="test-handoff-taker")
    taker.start()
    while not empty._needs:  # wait until it waits for an item
        taker.join(0.001)
    empty.close()
    taker.join(5.0)
    assert not taker.is_alive()
    assert results[-1] == "empty"


def test_items_of_several_producers_come_out_once_each_in_their_order() -> None:
    buffer: Handoff[tuple[int, int]] = Handoff(8, linger=0.001)
    count = 3_000

    def produce(producer: int) -> None:
        for i in range(count):
            assert buffer.put((producer, i), 30.0)

    producers = [
        threading.Thread(target=produce, args=(p,), name=f"test-handoff-producer-{p}")
        for p in range(3)
    ]
    for producer in producers:
        producer.start()
    taken = [buffer.get(30.0) for _ in range(3 * count)]
    for producer in producers:
        producer.join(30.0)
        assert not producer.is_alive()
    for p in range(3):
        assert [i for q, i in taken if q == p] == list(range(count))
    with pytest.raises(Empty):
        buffer.get(0)


def test_a_producer_waiting_for_room_is_woken_once_the_taker_emptied_its_batch() -> None:
    buffer: Handoff[int] = Handoff(2)
    assert buffer.put(0, 0.01)
    assert buffer.put(1, 0.01)
    producer = threading.Thread(target=buffer.put, args=(2, 30.0), name="test-handoff-producer")
    producer.start()
    while not buffer._putters:  # until it waits for room
        producer.join(0.001)
    assert [buffer.get(5.0), buffer.get(5.0)] == [0, 1]
    # The room came as items were taken; the producer must not sleep out its 30 s.
    assert buffer.get(5.0) == 2
    producer.join(5.0)
    assert not producer.is_alive()
