"""The pre-fetch buffer of a :class:`~liftbridge._consume._pull.PullConsumer`:
one bounded FIFO shared by the partitions' subscription threads (which fill
it) and the consumer's takers (``fetch``, iteration, a ``consume`` thread).

The FIFO is the SDK's one bounded buffer, a
:class:`~liftbridge._consume._handoff.Handoff` weighed by message (count
bound) or by value and key bytes (byte bound), with the consumer's refill
threshold: the bound holds at every moment, a full buffer makes the
subscription threads wait (which holds the gRPC streams back) until the level
fell to the threshold, and messages a taker moved into its chunk count until
handed out (returned by ``fetch``, yielded, or its handler returned).

This module adds what is the pull consumer's own: each partition's
:class:`Reader` (what arrived, what was handed out, which subscription is
current), changed under the Handoff's lock together with the message; the stop
offsets; the subscriptions' terminal error; and ``fetch``'s count and byte
limits.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from liftbridge._consume._direct import message_size
from liftbridge._consume._handoff import Chunk, Handoff
from liftbridge._consume._pull_options import Start
from liftbridge._consume._subscription import Handler, Subscription
from liftbridge._core._messages import Message

WAIT_SLICE = 0.5
"""Seconds of one bounded wait inside a longer wait that re-checks state."""

_LINGER = 0.0005
"""Seconds a taker that emptied its chunk while messages stream in waits for a
whole chunk before asking to be woken by the next message."""

_NO_STOP = 2**63
"""Above every offset (offsets are int64)."""


class Reader:
    """One partition's state. Fields guarded by the buffer's lock."""

    def __init__(self, partition: int, start: Start, stop: int | None) -> None:
        self.partition = partition
        self.start = start
        self.stop = stop  # the last offset to read; None: no end
        self.subscription: Subscription | None = None
        self.generation = 0
        self.received: int | None = None  # last offset put into the buffer
        self.delivered: int | None = None  # last offset handed out
        # ``received`` at the watcher's last look (it grows with every
        # message put in, so a change means something arrived).
        self.seen_received: int | None = None
        self.quiet_since = time.monotonic()  # since when nothing arrived
        self.watermark: int | None = None  # high watermark at the last look
        self.finished = False  # reached the stop offset
        self.pending_resume: Start | None = None  # where a failed resubscribe must retry
        self.read_replica = False


class PullBuffer:
    """See the module docstring. Thread-safe; methods named "under the lock"
    expect :attr:`lock` held."""

    def __init__(
        self, limit: int, threshold: int, *, by_bytes: bool, ended: Callable[[], bool]
    ) -> None:
        self.limit = limit
        self.by_bytes = by_bytes
        self._source_ended = ended
        self._queue: Handoff[Message] = Handoff(
            limit, refill_at=threshold, weigh=message_size if by_bytes else None, linger=_LINGER
        )
        # The Handoff's lock (a plain lock, also named mutex) guards its
        # state and everything below, every Reader included.
        self._mutex = self._queue.mutex
        self.lock = self._queue.lock
        self.error: BaseException | None = None
        self.consuming = False  # a consume() thread is the one taker
        self.readers: dict[int, Reader] = {}

    @property
    def closed(self) -> bool:
        return self._queue.closed

    @property
    def full(self) -> bool:
        """Producers wait until the level falls to the threshold. Under the lock."""
        return self._queue.full

    @property
    def discards(self) -> int:
        return self._queue.discards

    # ------------------------------------------------------------ filling --

    def handler(self, reader: Reader, generation: int) -> Handler:
        """A subscription handler putting ``reader``'s messages in: runs on
        the subscription's thread, only SDK code."""
        # Taken by ``with``: pre-bound acquire/release cost ~640 instructions less
        # a message (callgrind, 3.11), but an interrupt between acquire and try
        # would leave it held.
        mutex = self._mutex
        offer = self._queue.offer
        # Offsets below ``below`` take the hot path; the stop offset and past
        # it go through _offer, which ends the partition's reading.
        below = _NO_STOP if reader.stop is None else reader.stop
        by_bytes = self.by_bytes

        def handle(message: Message | None, error: BaseException | None) -> None:
            if message is None:
                if error is not None:
                    with self.lock:
                        if reader.generation == generation and self.error is None:
                            self.error = error
                        self.wake_all()
                return
            offset = message.offset
            weight = message_size(message) if by_bytes else 1
            # The hot path, kept short: a message of this subscription that
            # fits, before the stop. Anything else (full, closed, replaced, a
            # late copy, the stop) goes through _offer, which decides again
            # under the lock.
            if offset < below:
                with mutex:
                    received = reader.received
                    if (
                        reader.generation == generation
                        and (received is None or offset > received)
                        and offer(message, weight)
                    ):
                        reader.received = offset
                        return
            self._offer(reader, generation, message, weight)

        return handle

    def _offer(self, reader: Reader, generation: int, message: Message, weight: int) -> None:
        stop, queue = reader.stop, self._queue
        with self.lock:
            while True:
                if queue.closed or reader.generation != generation or reader.finished:
                    return
                if reader.received is not None and message.offset <= reader.received:
                    return  # a late copy from a replaced subscription
                if stop is not None and message.offset > stop:
                    self.finish(reader)  # the stop offset itself was compacted away
                    return
                if queue.fits(weight):
                    break
                queue.hold()
                subscription = reader.subscription
                if subscription is not None and subscription.closed:
                    return  # e.g. the client is closing: do not hold its thread
                queue.wait_for_room(WAIT_SLICE)
            queue.append(message, weight)
            reader.received = message.offset
            if stop is not None and message.offset >= stop:
                self.finish(reader)

    def finish(self, reader: Reader) -> None:
        """The reader reached its stop offset. Under the lock."""
        reader.finished = True
        subscription = reader.subscription
        if subscription is not None:
            subscription.close()  # from the subscription's own thread it returns at once
        self._queue.wake_takers()

    def close(self, *, discard: bool) -> list[Subscription]:
        """Takes nothing more in (late messages are dropped), optionally drops
        what is held; returns the subscriptions to close (outside the lock)."""
        with self.lock:
            if discard:
                self.discard()
            subscriptions = [r.subscription for r in self.readers.values() if r.subscription]
            for reader in self.readers.values():
                reader.generation += 1  # late messages from these are dropped
            self._queue.shut()
        return subscriptions

    def wake_all(self) -> None:
        """Wakes every waiting thread to look at the state again. Under the lock."""
        self._queue.wake_all()

    # ------------------------------------------------------------- taking --

    @property
    def buffered(self) -> int:
        """Messages in the buffer (not in takers' chunks)."""
        with self.lock:
            return len(self._queue.items)

    @property
    def buffered_bytes(self) -> int:
        with self.lock:
            return sum(message_size(m) for m in self._queue.items)

    def has_messages(self) -> bool:
        """Under the lock."""
        return bool(self._queue.items)

    def ended(self) -> bool:
        """Nothing more can arrive: closed, or the client closed. Under the lock."""
        return self._queue.closed or self._source_ended()

    def exhausted(self) -> bool:
        """Every partition reached its stop and nothing is buffered. Under the lock."""
        return not self._queue.items and all(r.finished for r in self.readers.values())

    def wait_for(self, need: int, timeout: float) -> None:
        """Waits (under the lock) until ``need`` messages are buffered, the
        buffer is full, something ends, or ``timeout`` passes."""
        self._queue.wait_for(need, timeout)

    def take(
        self, count_limit: int | None, byte_limit: int | None, deadline: float
    ) -> list[Message]:
        """What a ``fetch`` returns: up to ``count_limit`` messages or
        ``byte_limit`` bytes (at least one message), waiting until
        ``deadline`` (monotonic) to fill the batch; handed out at once.

        Raises:
            BaseException: a subscription's terminal error, once nothing is
                buffered any more.
        """
        batch: list[Message] = []
        size = 0
        queue = self._queue
        buffer = queue.items
        # The positions before this batch moved them (None: not moved yet).
        before: list[tuple[Reader, int | None]] | None = None
        try:
            with self._mutex:
                discards = queue.discards
                while True:
                    if buffer:
                        if count_limit is not None and not self.by_bytes:
                            queue.pop_into(batch, min(len(buffer), count_limit - len(batch)))
                        elif byte_limit is None:
                            queue.pop_into(batch, 1)
                        else:
                            weight = message_size(buffer[0])
                            if batch and size + weight > byte_limit:
                                break
                            size += weight
                            queue.pop_into(batch, 1)
                        if count_limit is not None and len(batch) >= count_limit:
                            break
                        continue
                    if self.ended() or self.exhausted():
                        break
                    if self.error is not None:
                        if batch:
                            break
                        raise self.error
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    need = 1 if count_limit is None else count_limit - len(batch)
                    queue.wait_for(need, min(left, WAIT_SLICE))
                if batch:
                    before = [(r, r.delivered) for r in self.readers.values()]
                    self._mark_delivered(batch)
            return batch  # nothing from letting go of the lock to here can be interrupted
        except BaseException:
            # An interrupt (Ctrl-C) before the batch reached the caller: it
            # goes back to the front, and the positions it moved go back.
            if batch:
                with self._mutex:
                    if before is not None:
                        self._unmark_delivered(batch, before)
                    queue.unpop(batch, discards)
            raise

    def _mark_delivered(self, batch: list[Message]) -> None:
        if len(self.readers) == 1:
            self._delivered(batch[-1])
            return
        for message in batch:
            self._delivered(message)

    def _unmark_delivered(
        self, batch: list[Message], before: list[tuple[Reader, int | None]]
    ) -> None:
        """Moves back the positions ``batch`` moved (those no other taker
        moved on since). Under the lock."""
        last = {m.partition: m.offset for m in batch}
        for reader, delivered in before:
            now, ours = reader.delivered, last.get(reader.partition)
            if ours is not None and now is not None and now != delivered and now <= ours:
                reader.delivered = delivered

    def _delivered(self, message: Message) -> None:
        reader = self.readers.get(message.partition)
        if reader is not None and (reader.delivered is None or message.offset > reader.delivered):
            reader.delivered = message.offset

    def next_chunk(
        self, chunk: Chunk[Message], *, linger: bool, stop: threading.Event | None = None
    ) -> Chunk[Message] | BaseException | None:
        """Waits for messages and moves up to a chunk of them (at most the
        bound minus the threshold in weight, at least one) out of the buffer
        into ``chunk`` (empty; its taker keeps it, so that an interrupt
        leaves every message in the buffer or in it).
        ``linger``: first wait briefly for a whole chunk.

        Returns:
            The chunk; the terminal error once nothing is buffered; None when
            nothing more will come (or ``stop`` is set: then what is held is
            dropped first).
        """
        queue = self._queue
        with self.lock:
            if linger and (stop is None or not stop.is_set()) and not self._source_ended():
                queue.linger_for_chunk()
            while True:
                if stop is not None and stop.is_set():
                    self.discard()
                    return None
                if queue.items:
                    return queue.take_chunk(chunk)
                if self.ended() or self.exhausted():
                    return None
                if self.error is not None:
                    return self.error
                queue.wait_for(1, WAIT_SLICE)

    def hand_out(
        self, chunk: Chunk[Message], message: Message, *, move_position: bool = True
    ) -> bool:
        """``message``, just taken from ``chunk``, is being handed on: it stops
        counting against the bound and (``move_position``) the partition's
        position moves (a consume thread moves it with :meth:`delivered` once
        the handler returned). False, and nothing changes, when the chunk was
        dropped meanwhile (``close``/``stop``).

        Until its taker clears ``chunk.out`` (as it hands ``message`` on,
        with no call between), :meth:`give_back` can undo this: ``chunk.out``
        is set before the message stops counting, ``chunk.mark`` (the
        partition's position before) before the position moves."""
        with self._mutex:
            if not self._queue.settle(chunk, message):
                return False
            if move_position:
                reader = self.readers.get(message.partition)
                if reader is not None:
                    delivered = reader.delivered
                    if delivered is None or message.offset > delivered:
                        chunk.mark = (reader, delivered)  # no call from here to the move
                        reader.delivered = message.offset
            return True

    def delivered(self, message: Message) -> None:
        """``message`` was handed on for good: the partition's position moves."""
        with self._mutex:
            self._delivered(message)

    def put_back(self, chunk: Chunk[Message], first: Message | None = None) -> None:
        """Returns what ``chunk`` still holds to the buffer's front, in order,
        after ``first`` (a message handed out from it and given back, e.g.
        its handler raised)."""
        with self._mutex:
            self._queue.put_back(chunk, first)

    def give_back(self, chunk: Chunk[Message], held: Message | None) -> None:
        """An iterating taker stopped (``break``, an error, an interrupt):
        what ``chunk`` holds goes back to the buffer's front, in order, after
        ``held`` (taken from it, not handed on yet) or the message
        :meth:`hand_out` settled and the taker did not hand on (``chunk.out``;
        the position it moved goes back)."""
        with self._mutex:
            out = chunk.out
            if out is not None:
                mark = chunk.mark
                if isinstance(mark, tuple):
                    reader, delivered = mark
                    if reader.partition == out.partition and reader.delivered == out.offset:
                        reader.delivered = delivered
                self._queue.put_back(chunk, out)
                return
            if held is not None:
                chunk.items.appendleft(held)  # it still counts
            self._queue.put_back(chunk)

    def discard(self) -> None:
        """Drops every buffered message, and the chunks takers hold. Under the lock."""
        self._queue.discard()
