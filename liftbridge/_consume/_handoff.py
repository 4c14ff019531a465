"""A bounded buffer from producing threads to the threads that take from it,
handed over in batches.

A subscription read without a handler hands every message from its thread to
the iterating one. With ``queue.Queue`` that cost two condition variables per
message and woke the iterating thread for every one or two: under the GIL the
two threads then traded it back and forth per message, and iterating read at
less than half the rate of a handler. Here the producer appends under one
lock, and a taker moves everything put so far into its own batch at once,
then takes item after item from it without locking. A taker that emptied a
batch and finds nothing new lingers (up to ``linger`` seconds, or until a
batch of items is in) before it waits for the next single item, so that
while messages stream in it wakes once per batch rather than once per
message. An item put while no messages streamed in wakes a waiting taker at
once; one put while the taker lingers waits at most ``linger`` longer.

Iterated subscriptions (one producer) and a consumer-group member's pull
buffer (one producer per partition) use it.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Generic, TypeVar

T = TypeVar("T")

_WAKE_BATCH = 64
"""Items that wake a lingering taker before its linger is over."""


class Empty(Exception):
    """Nothing arrived within the time a taker waited."""


class Handoff(Generic[T]):
    """A FIFO buffer holding at most ``capacity`` items (put and not yet
    taken, a taker's batch included).

    Thread-safety: ``put``, ``get`` and ``close`` from any thread (each item
    comes out once, in the order of the puts).
    """

    def __init__(self, capacity: int, *, linger: float = 0.0) -> None:
        self._capacity = capacity
        self._linger = linger
        self._lock = threading.Lock()  # guards every field below but _batch
        self._arrived = threading.Condition(self._lock)  # takers wait here for items
        self._room = threading.Condition(self._lock)  # the producer waits here for room
        self._items: list[T] = []  # put, not yet moved to _batch
        # Moved over by a taker and taken item by item without the lock
        # (deque.popleft is atomic); refilled only under the lock.
        self._batch: deque[T] = deque()
        self._waiting = 0  # takers on _arrived to be woken by the next item
        self._lingering = 0  # takers on _arrived to be woken by _wake_batch items
        self._putters = 0  # producers waiting on _room
        self._streaming = False  # the last refill found items
        self._closed = False  # close() was called
        self._wake_batch = max(1, min(_WAKE_BATCH, capacity))

    def put(self, item: T, timeout: float) -> bool:
        """Appends ``item``, waiting up to ``timeout`` seconds for room.

        Returns:
            False when there was no room in time or the buffer is closed (the
            item was not added).
        """
        with self._lock:
            if self._full() and not self._closed:
                deadline = time.monotonic() + timeout
                self._putters += 1
                try:  # other producers may take the room first: wait again
                    while self._full() and not self._closed:
                        remaining = deadline - time.monotonic()
                        if remaining <= 0:
                            break
                        self._room.wait(remaining)
                finally:
                    self._putters -= 1
            if self._closed or self._full():
                return False
            self._items.append(item)
            if self._waiting or (self._lingering and len(self._items) >= self._wake_batch):
                self._arrived.notify_all()
        return True

    def get(self, timeout: float) -> T:
        """The oldest item, waiting up to ``timeout`` seconds (0: not at all;
        a closed buffer: not at all).

        Raises:
            Empty: nothing arrived in time.
        """
        while True:
            try:
                return self._batch.popleft()
            except IndexError:
                pass
            with self._lock:
                if self._batch:  # another taker refilled it meanwhile
                    continue
                if self._putters:  # the batch emptied without the lock: room for them
                    self._room.notify_all()
                if not self._items and timeout > 0 and not self._closed:
                    deadline = time.monotonic() + timeout
                    if self._streaming and self._linger > 0:
                        self._linger_for_batch(min(self._linger, timeout))
                    if not self._items and not self._closed:
                        self._wait_for_one(deadline - time.monotonic())
                self._streaming = bool(self._items)
                if not self._items:
                    raise Empty
                self._batch.extend(self._items)
                self._items.clear()

    def close(self) -> None:
        """Wakes every waiting taker and producer: from now on ``put`` adds
        nothing and ``get`` does not wait (items already in still come out)."""
        with self._lock:
            self._closed = True
            self._arrived.notify_all()
            self._room.notify_all()

    def _full(self) -> bool:
        return len(self._items) + len(self._batch) >= self._capacity

    def _linger_for_batch(self, timeout: float) -> None:
        """Waits (``_lock`` held) until a batch of items is in or ``timeout`` passed."""
        self._lingering += 1
        try:
            self._arrived.wait(timeout)
        finally:
            self._lingering -= 1

    def _wait_for_one(self, timeout: float) -> None:
        """Waits (``_lock`` held) until an item is in or ``timeout`` passed."""
        if timeout <= 0:
            return
        self._waiting += 1
        try:
            self._arrived.wait(timeout)
        finally:
            self._waiting -= 1
