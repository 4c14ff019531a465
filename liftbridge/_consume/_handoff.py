"""The SDK's one bounded buffer from producing threads to the threads that
take from it, handed over in batches.

A subscription read without a handler hands every message from its thread to
the iterating one. With ``queue.Queue`` that cost two condition variables per
message and woke the iterating thread for every one or two: under the GIL the
two threads then traded it back and forth per message, and iterating read at
less than half the rate of a handler. Here the producer appends under one
lock, and a taker moves up to a chunk of items into its own batch at once,
then takes item after item from it without locking. A taker that emptied a
batch and finds nothing new lingers (up to ``linger`` seconds, or until a
chunk is in) before it waits for the next single item, so that while items
stream in it wakes once per chunk rather than once per item. An item put
while nothing streamed in wakes a waiting taker at once.

The bound is a weight: one per item, or ``weigh(item)`` (a pull consumer's
byte bound). It holds at every moment: an item counts from the moment it is
put in until its taker is done with it. With :meth:`Handoff.get` that is when
the last item of the taker's batch is taken (one lock per batch); a taker that hands
items on one by one (a pull consumer's ``consume`` thread) moves a
:class:`Chunk` out and settles each item with :meth:`Handoff.settle`, or gives
what it did not hand on back to the front with :meth:`Handoff.put_back`. Once
full, producers wait until the level fell to the refill threshold (a pull
consumer's ``refill_threshold``; by default one free unit), so that they fill
in runs. One item heavier than the bound is let in when nothing else is held,
so that it is not stuck forever.

Ctrl-C on a taker (the iterating thread is often the main one): a signal's
handler runs as a call returns or a function starts, so items move in one C
call (``extend`` over ``map(deque.popleft, ...)``: nothing runs between an
item leaving one deque and entering the other) with the weight they carry
written, with no call between, just before it; ``get`` takes its item with
a ``for`` over such a map (the item bound to its name as it leaves the
batch). An interrupt then leaves every item in the buffer or handed out,
once, and the level equal to what is held. A taker keeps its chunk and
refills it in place (:meth:`Handoff.take_chunk`), and :meth:`Handoff.settle`
records the item settled in ``chunk.out`` before its weight stops counting,
so that the taker can give back one it did not hand on; what
:meth:`Handoff.pop_into` moved out goes back with :meth:`Handoff.unpop`.

Users: iterated subscriptions (one producer), a consumer-group member's pull
buffer and Spark's fetch (one producer per partition) through ``put``/``get``;
a pull consumer's buffer (:mod:`liftbridge._consume._pull_buffer`), which
keeps each partition's read state under the same lock, through the methods
marked "under the lock".
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from itertools import islice, repeat
from typing import Generic, TypeVar

from liftbridge._locks import Waiters

T = TypeVar("T")

_popleft = deque.popleft

CHUNK = 64
"""Items a taker moves out at once at most (fewer when the bound minus the
refill threshold is smaller)."""


class Empty(Exception):
    """Nothing arrived within the time a taker waited."""


class Chunk(Generic[T]):
    """Items a taker moved out in one go. They still count against the bound
    until settled one by one with :meth:`Handoff.settle`. Only its taker
    touches it."""

    __slots__ = ("discards", "items", "mark", "out")

    def __init__(self, items: deque[T], discards: int) -> None:
        self.items = items
        self.discards = discards  # the buffer's discard count when taken
        # The item last settled from it (set before its weight stops
        # counting), until its taker clears it as it hands the item on: an
        # interrupt in between leaves the item here for put_back.
        self.out: T | None = None
        self.mark: object = None  # the owner's record of what handing ``out`` changed


class Handoff(Generic[T]):
    """A FIFO buffer holding at most ``capacity`` in weight (put and not yet
    done with, takers' batches and chunks included).

    Args:
        capacity: the bound.
        refill_at: once full, producers wait until the level is at most this
            (0 <= refill_at < capacity); None: ``capacity - 1``.
        weigh: an item's weight; None: 1 per item.
        linger: seconds a taker that emptied its batch while items stream in
            waits for a whole chunk before asking to be woken by one item.

    Thread-safety: ``put``, ``get`` and ``close`` from any thread (each item
    comes out once, in the order of the puts). Methods whose docstring says
    "under the lock" expect :attr:`lock` (or :attr:`mutex`) held; owners keep
    their own state under it too.
    """

    def __init__(
        self,
        capacity: int,
        *,
        refill_at: int | None = None,
        weigh: Callable[[T], int] | None = None,
        linger: float = 0.0,
    ) -> None:
        self.capacity = capacity
        self.refill_at = capacity - 1 if refill_at is None else refill_at
        self.weigh = weigh
        self._linger = linger
        # mutex (also named lock) guards every field below but _batch. Its
        # waits are Waiters, not Conditions, for a taker an interrupt
        # (Ctrl-C) may cut short while it waits (the iterating thread, a
        # fetch): a Condition's wait could raise with the lock let go of, and
        # ``with condition`` take it without letting go. Takers wait in
        # _takers for items, producers in _room for room.
        self.mutex = threading.Lock()
        self.lock = self.mutex
        self._takers = Waiters(self.mutex)
        self._room = Waiters(self.mutex)
        self.items: deque[T] = deque()  # put, not yet moved out
        self.level = 0  # weight held: in items, in batches and chunks not yet done with
        # The level up to which a producer may fill without waiting: the
        # bound, or -1 while full or closed (one field for the hot path).
        self.cap = capacity
        self.full = False  # producers wait until the level falls to refill_at
        self.closed = False
        self.discards = 0  # times everything held was dropped (chunks go too)
        self._needs: list[int] = []  # how many items each waiting taker wants
        self._need = 0  # the smallest of them; 0 when no taker waits
        # A pull consumer's chunk is at most the bound minus its threshold;
        # without a threshold, up to a chunk of items.
        self.chunk_weight = capacity if refill_at is None else max(1, capacity - refill_at)
        self._chunk_items = CHUNK if weigh is not None else min(CHUNK, self.chunk_weight)
        # get()'s batch: moved over by a taker and taken item by item without
        # the lock (deque.popleft is atomic); refilled only under the lock,
        # and only when empty. _batch_weight: its weight, settled at refill.
        self._batch: deque[T] = deque()
        self._batch_weight = 0
        # Pops the batch's first item in the for that binds it (IndexError once empty).
        self._taking = map(_popleft, repeat(self._batch))
        self._streaming = False  # get()'s last refill found items
        self._putters = 0  # producers in put() waiting for room

    # ---------------------------------------------------------- producing --

    def put(self, item: T, timeout: float) -> bool:
        """Appends ``item``, waiting up to ``timeout`` seconds for room.

        Returns:
            False when there was no room in time or the buffer is closed (the
            item was not added).
        """
        weight = 1 if self.weigh is None else self.weigh(item)
        with self.mutex:
            if self.offer(item, weight):
                return True
            deadline = time.monotonic() + timeout
            self._putters += 1
            try:
                while not self.closed:  # other producers may take the room first
                    if self.fits(weight):
                        self.append(item, weight)
                        return True
                    self.hold()
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    self._room.wait(remaining)
            finally:
                self._putters -= 1
        return False

    def offer(self, item: T, weight: int) -> bool:
        """Appends ``item`` if it fits without waiting. Under the lock."""
        level = self.level + weight
        if level > self.cap:
            return False
        self.items.append(item)
        self.level = level
        if level >= self.capacity:
            self.full, self.cap = True, -1
            self._takers.notify_all()
        elif self._need and len(self.items) >= self._need:
            # Takers are woken when what they wait for is there, not per item:
            # once woken they are not woken again until they wait again.
            self._need = 0
            self._takers.notify_all()
        return True

    def fits(self, weight: int) -> bool:
        """Whether an item of ``weight`` may go in now (one heavier than the
        bound: when nothing is held). Under the lock."""
        if self.closed:
            return False
        return self.level == 0 or (not self.full and self.level + weight <= self.capacity)

    def append(self, item: T, weight: int) -> None:
        """Appends ``item``, which :meth:`fits`. Under the lock."""
        self.items.append(item)
        self.level += weight
        if self.level >= self.capacity:
            self.full, self.cap = True, -1
            self._takers.notify_all()
        elif self._need and len(self.items) >= self._need:
            self._need = 0
            self._takers.notify_all()

    def hold(self) -> None:
        """Marks the buffer full (an item does not fit): producers wait for
        the refill threshold, and a taker waiting for more than fits is
        woken. Under the lock."""
        if not self.full:
            self.full, self.cap = True, -1
            self._takers.notify_all()

    def wait_for_room(self, timeout: float) -> None:
        """Waits until room may have come, or ``timeout``. Under the lock."""
        self._room.wait(timeout)

    # ------------------------------------------------------------- taking --

    def get(self, timeout: float) -> T:
        """The oldest item, waiting up to ``timeout`` seconds (0: not at all;
        a closed buffer: not at all).

        Raises:
            Empty: nothing arrived in time.
        """
        batch, taking = self._batch, self._taking
        while True:
            try:
                # Not batch.popleft(): an interrupt as that call returned
                # would drop the item it took.
                for item in taking:  # noqa: B007 (used after the loop)
                    break
            except IndexError:
                pass
            else:
                if not batch:  # its last item: the batch's room is free
                    try:
                        with self.mutex:
                            self._settle_batch()
                    except BaseException:  # an interrupt (Ctrl-C): the item stays first
                        batch.appendleft(item)
                        raise
                return item
            with self.mutex:
                if batch:  # another taker refilled it meanwhile
                    continue
                self._settle_batch()
                if not self.items and timeout > 0 and not self.closed:
                    deadline = time.monotonic() + timeout
                    if self._streaming and self._linger > 0:
                        self.wait_for(self._chunk_items, min(self._linger, timeout))
                    if not self.items and not self.closed:
                        self.wait_for(1, deadline - time.monotonic())
                self._streaming = bool(self.items)
                if not self.items:
                    raise Empty
                count, weight = self._measure()
                moving = map(_popleft, repeat(self.items, count))
                self._batch_weight = weight  # no call from here to the end of the move
                batch.extend(moving)

    def _settle_batch(self) -> None:
        """Once get()'s batch is empty, its weight stops counting. Under the lock."""
        weight = self._batch_weight
        if weight and not self._batch:
            self._batch_weight = 0  # no call between: counted once, whatever interrupts
            self.level -= weight
            self._fell()

    def _measure(self) -> tuple[int, int]:
        """How many items the next move takes (up to a chunk, at least one
        when any is in) and their weight; nothing moves. Under the lock."""
        items, weigh = self.items, self.weigh
        if weigh is None:
            take = min(len(items), self._chunk_items)
            return take, take
        count = weight = 0
        for item in items:
            size = weigh(item)
            if count and (count == CHUNK or weight + size > self.chunk_weight):
                break
            count += 1
            weight += size
        return count, weight

    def wait_for(self, need: int, timeout: float) -> None:
        """Waits until ``need`` items are in, the buffer is full, something
        wakes every taker, or ``timeout`` passes. Under the lock."""
        if timeout <= 0:
            return
        needs = self._needs
        try:  # appended inside: an interrupt as append returns leaves it in otherwise
            needs.append(need)
            self._need = min(needs)
            self._takers.wait(timeout)
        finally:
            # Interrupted after the remove, _need is left too high: a taker
            # is woken early, and looks again.
            needs.remove(need)
            self._need = min(needs) if needs else 0

    def linger_for_chunk(self) -> None:
        """Waits up to ``linger`` for a whole chunk unless one (or a full
        buffer's worth) is in already. Under the lock."""
        if (
            self.level < self.chunk_weight
            and len(self.items) < self._chunk_items
            and not self.full
            and not self.closed
        ):
            self.wait_for(self._chunk_items, self._linger)

    def take_chunk(self, chunk: Chunk[T]) -> Chunk[T]:
        """Moves up to a chunk (at most the bound minus the refill threshold
        in weight, at least one item) out, into ``chunk`` (empty, kept by its
        taker); it counts until settled. Under the lock. The items move in
        one C call: an interrupt leaves each in the buffer or in the chunk."""
        count, _ = self._measure()
        chunk.discards = self.discards
        chunk.items.extend(map(_popleft, repeat(self.items, count)))
        return chunk

    def pop_into(self, into: list[T], count: int) -> None:
        """Moves the ``count`` oldest items to the end of ``into``, done with
        at once. Under the lock."""
        items, weigh = self.items, self.weigh
        weight = count if weigh is None else sum(map(weigh, islice(items, count)))
        moving = map(_popleft, repeat(items, count))
        self.level -= weight  # no call from here to the end of the move
        into.extend(moving)
        self._fell()

    def settle(self, chunk: Chunk[T], item: T) -> bool:
        """``item``, just taken from ``chunk``, is done with: it stops
        counting. False, and nothing changes, when the chunk was dropped
        meanwhile (:meth:`discard`). Under the lock."""
        if chunk.discards != self.discards:
            chunk.items.clear()
            return False
        weight = 1 if self.weigh is None else self.weigh(item)
        chunk.out = item  # no call from here to the level's change
        self.level -= weight
        self._fell()
        return True

    def _fell(self) -> None:
        """The level fell: producers may fill again once it is at the refill
        threshold. Under the lock. (Interrupted as it starts, the next fall
        does it.)"""
        if self.full and self.level <= self.refill_at:
            self.full = False
            if not self.closed:
                self.cap = self.capacity
            self._room.notify_all()

    def put_back(self, chunk: Chunk[T], first: T | None = None) -> None:
        """Returns what ``chunk`` still holds to the front, in order, after
        ``first`` (an item settled from it and given back). Under the lock."""
        chunk.out = None
        if chunk.discards == self.discards:
            items: Sequence[T] = chunk.items
            if first is not None:
                items = [first, *items]
                self.level += 1 if self.weigh is None else self.weigh(first)
            # The chunk's own items never stopped counting.
            self.items.extendleft(reversed(items))
        chunk.items.clear()

    def unpop(self, items: list[T], discards: int) -> None:
        """Returns ``items`` (moved out by :meth:`pop_into` while the discard
        count was ``discards``, e.g. a fetch interrupted) to the front, in
        order, unless everything was dropped since. Under the lock."""
        if discards != self.discards or not items:
            return
        self.level += len(items) if self.weigh is None else sum(map(self.weigh, items))
        self.items.extendleft(reversed(items))
        if self.level >= self.capacity:
            self.hold()
        self._takers.notify_all()

    def discard(self) -> None:
        """Drops everything held, chunks included. Under the lock."""
        self.items.clear()
        self.level = self._batch_weight = 0
        self.discards += 1
        if self.full:
            self._fell()

    # ------------------------------------------------------------ closing --

    def close(self) -> None:
        """Wakes every waiting taker and producer: from now on ``put`` adds
        nothing and ``get`` does not wait (items already in still come out)."""
        with self.mutex:
            self.shut()

    def shut(self) -> None:
        """:meth:`close`. Under the lock."""
        self.closed = True
        self.cap = -1
        self.wake_all()

    def wake_takers(self) -> None:
        """Wakes every waiting taker to look at the state again. Under the lock."""
        self._takers.notify_all()

    def wake_all(self) -> None:
        """Wakes every waiting thread to look at the state again. Under the lock."""
        self._takers.notify_all()
        self._room.notify_all()
