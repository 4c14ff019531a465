"""The pre-fetch buffer of a :class:`~liftbridge._consume._pull.PullConsumer`:
one bounded FIFO shared by the partitions' subscription threads (which fill
it) and the consumer's takers (``fetch``, iteration, a ``consume`` thread).

The bound is a message count or a byte count (values and keys), never both,
and it holds at every moment: a message counts from the moment it is put in
until it is handed out (returned by ``fetch``, yielded, or its handler
returned), so messages a taker moved into its own chunk still count. A full
buffer makes the subscription threads wait (which holds the gRPC streams back)
until the level fell to the refill threshold. One message larger than a byte
bound is let in when nothing else is held, so that it is not stuck forever.

Takers move many messages per lock: ``take`` what a ``fetch`` returns,
``take_chunk`` up to 64 at a time for iteration and ``consume``; they settle
each message with :meth:`PullBuffer.hand_out` as they hand it on, and give
back what they did not hand on with :meth:`PullBuffer.put_back`. While
messages stream in, a taker that emptied its chunk lingers briefly for a
whole one (as :mod:`liftbridge._consume._handoff` does), so that it wakes once
per chunk rather than once per message.

The buffer also keeps each partition's :class:`Reader` (what arrived, what was
handed out): both change under its one lock, with the message.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Sequence

from liftbridge._consume._direct import message_size
from liftbridge._consume._pull_options import Start
from liftbridge._consume._subscription import Handler, Subscription
from liftbridge._core._messages import Message

WAIT_SLICE = 0.5
"""Seconds of one bounded wait inside a longer wait that re-checks state."""

_CHUNK = 64
"""Messages a chunk holds at most (fewer when the bound minus the refill
threshold is smaller)."""

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


class Chunk:
    """Messages a taker moved out of the buffer in one go. They still count
    against the bound until settled one by one with
    :meth:`PullBuffer.hand_out`. Only its taker touches it."""

    __slots__ = ("discards", "messages")

    def __init__(self, messages: collections.deque[Message], discards: int) -> None:
        self.messages = messages
        self.discards = discards  # the buffer's discard count when taken


class PullBuffer:
    """See the module docstring. Thread-safe; methods named "under the lock"
    expect :attr:`lock` held."""

    def __init__(
        self, limit: int, threshold: int, *, by_bytes: bool, ended: Callable[[], bool]
    ) -> None:
        self.limit = limit
        self.by_bytes = by_bytes
        self._threshold = threshold
        self._source_ended = ended
        # _mutex guards everything below and every Reader; the hot paths take
        # it directly (cheaper than through a Condition), the rest through
        # ``lock`` (takers wait on it for messages) or _room (subscription
        # threads wait on it for room).
        self._mutex = threading.Lock()
        self.lock = threading.Condition(self._mutex)
        self._room = threading.Condition(self._mutex)
        self._needs: list[int] = []  # how many messages each waiting taker wants
        self._need = 0  # the smallest of them; 0 when no taker waits
        self._buffer: collections.deque[Message] = collections.deque()
        # Messages (or bytes) held: in _buffer plus in takers' chunks.
        self._level = 0
        self._chunk_weight = max(1, limit - threshold)
        self._chunk_need = _CHUNK if by_bytes else min(_CHUNK, self._chunk_weight)
        self.discards = 0  # times buffered messages were dropped (chunks go too)
        self.full = False  # producers wait until the level falls to the threshold
        # The level up to which a subscription thread may fill without waiting:
        # the bound, or -1 while it is full or closed (one field for the hot path).
        self._cap = limit
        self.closed = False
        self.error: BaseException | None = None
        self.consuming = False  # a consume() thread is the one taker
        self.readers: dict[int, Reader] = {}

    # ------------------------------------------------------------ filling --

    def handler(self, reader: Reader, generation: int) -> Handler:
        """A subscription handler putting ``reader``'s messages in: runs on
        the subscription's thread, only SDK code."""
        acquire, release = self._mutex.acquire, self._mutex.release
        buffer, notify = self._buffer, self.lock.notify_all
        # Offsets below ``below`` take the hot path; the stop offset and past
        # it go through _offer, which ends the partition's reading.
        below = _NO_STOP if reader.stop is None else reader.stop
        by_bytes, limit = self.by_bytes, self.limit

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
            # The hot path, kept short (one plain lock, few fields): a message
            # of this subscription that fits, before the stop. Anything else
            # (full, closed, replaced, a late copy, the stop) goes through
            # _offer, which decides again under the lock.
            if offset < below:
                acquire()  # not ``with lock``: its method lookups cost as much again
                try:
                    level = self._level + weight
                    received = reader.received
                    if (
                        level <= self._cap
                        and reader.generation == generation
                        and (received is None or offset > received)
                    ):
                        buffer.append(message)
                        self._level = level
                        reader.received = offset
                        if level >= limit:
                            self._set_full()
                            notify()
                        elif self._need and len(buffer) >= self._need:
                            self._need = 0  # woken; they ask again if they wait again
                            notify()
                        return
                finally:
                    release()
            self._offer(reader, generation, message, weight)

        return handle

    def _offer(self, reader: Reader, generation: int, message: Message, weight: int) -> None:
        stop = reader.stop
        with self.lock:
            while True:
                if self.closed or reader.generation != generation or reader.finished:
                    return
                if reader.received is not None and message.offset <= reader.received:
                    return  # a late copy from a replaced subscription
                if stop is not None and message.offset > stop:
                    self.finish(reader)  # the stop offset itself was compacted away
                    return
                room = self._level == 0 or (not self.full and self._level + weight <= self.limit)
                if room:
                    break
                if not self.full:
                    self._set_full()
                    self.lock.notify_all()  # a taker wanting more than fits
                subscription = reader.subscription
                if subscription is not None and subscription.closed:
                    return  # e.g. the client is closing: do not hold its thread
                self._room.wait(WAIT_SLICE)
            buffer = self._buffer
            buffer.append(message)
            self._level += weight
            reader.received = message.offset
            if self._level >= self.limit:
                self._set_full()
                self.lock.notify_all()
            elif self._need and len(buffer) >= self._need:
                # Takers are woken when what they wait for is there, not per
                # message: once woken they are not woken again until they wait again.
                self._need = 0
                self.lock.notify_all()
            if stop is not None and message.offset >= stop:
                self.finish(reader)

    def _set_full(self) -> None:
        self.full = True
        self._cap = -1

    def finish(self, reader: Reader) -> None:
        """The reader reached its stop offset. Under the lock."""
        reader.finished = True
        subscription = reader.subscription
        if subscription is not None:
            subscription.close()  # from the subscription's own thread it returns at once
        self.lock.notify_all()

    def close(self, *, discard: bool) -> list[Subscription]:
        """Takes nothing more in (late messages are dropped), optionally drops
        what is held; returns the subscriptions to close (outside the lock)."""
        with self.lock:
            self.closed = True
            self._cap = -1
            if discard:
                self.discard()
            subscriptions = [r.subscription for r in self.readers.values() if r.subscription]
            for reader in self.readers.values():
                reader.generation += 1  # late messages from these are dropped
            self.wake_all()
        return subscriptions

    def wake_all(self) -> None:
        """Wakes every waiting thread to look at the state again. Under the lock."""
        self.lock.notify_all()
        self._room.notify_all()

    # ------------------------------------------------------------- taking --

    @property
    def buffered(self) -> int:
        """Messages in the buffer (not in takers' chunks)."""
        with self.lock:
            return len(self._buffer)

    @property
    def buffered_bytes(self) -> int:
        with self.lock:
            return sum(message_size(m) for m in self._buffer)

    def has_messages(self) -> bool:
        """Under the lock."""
        return bool(self._buffer)

    def ended(self) -> bool:
        """Nothing more can arrive: closed, or the client closed. Under the lock."""
        return self.closed or self._source_ended()

    def exhausted(self) -> bool:
        """Every partition reached its stop and nothing is buffered. Under the lock."""
        return not self._buffer and all(r.finished for r in self.readers.values())

    def wait_for(self, need: int, timeout: float) -> None:
        """Waits (under the lock) until ``need`` messages are buffered, the
        buffer is full, something ends, or ``timeout`` passes."""
        needs = self._needs
        needs.append(need)
        self._need = min(needs)
        try:
            self.lock.wait(timeout)
        finally:
            needs.remove(need)
            self._need = min(needs) if needs else 0

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
        buffer = self._buffer
        with self._mutex:
            try:
                while True:
                    if buffer:
                        if count_limit is not None and not self.by_bytes:
                            take = min(len(buffer), count_limit - len(batch))
                            popleft = buffer.popleft
                            batch.extend([popleft() for _ in range(take)])
                            self._level -= take
                            self._taken()
                        elif byte_limit is None:
                            batch.append(self._pop())
                        else:
                            weight = message_size(buffer[0])
                            if batch and size + weight > byte_limit:
                                break
                            size += weight
                            batch.append(self._pop())
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
                    self.wait_for(need, min(left, WAIT_SLICE))
            finally:
                self._mark_delivered(batch)
        return batch

    def _pop(self) -> Message:
        message = self._buffer.popleft()
        self._level -= message_size(message) if self.by_bytes else 1
        self._taken()
        return message

    def _taken(self) -> None:
        """After the level fell: lets the subscription threads fill again once
        it is at the threshold. Under the lock."""
        if self.full and self._level <= self._threshold:
            self.full = False
            if not self.closed:
                self._cap = self.limit
            self._room.notify_all()

    def _mark_delivered(self, batch: list[Message]) -> None:
        if not batch:
            return
        if len(self.readers) == 1:
            self._delivered(batch[-1])
            return
        for message in batch:
            self._delivered(message)

    def _delivered(self, message: Message) -> None:
        reader = self.readers.get(message.partition)
        if reader is not None and (reader.delivered is None or message.offset > reader.delivered):
            reader.delivered = message.offset

    def next_chunk(
        self, *, linger: bool, stop: threading.Event | None = None
    ) -> Chunk | BaseException | None:
        """Waits for messages and moves up to a chunk of them (at most the
        bound minus the threshold in weight, at least one) out of the buffer.
        ``linger``: first wait briefly for a whole chunk.

        Returns:
            The chunk; the terminal error once nothing is buffered; None when
            nothing more will come (or ``stop`` is set: then what is held is
            dropped first).
        """
        with self.lock:
            if linger and (stop is None or not stop.is_set()):
                self._linger_for_chunk()
            while True:
                if stop is not None and stop.is_set():
                    self.discard()
                    return None
                if self._buffer:
                    return Chunk(self._take_chunk(), self.discards)
                if self.ended() or self.exhausted():
                    return None
                if self.error is not None:
                    return self.error
                self.wait_for(1, WAIT_SLICE)

    def _take_chunk(self) -> collections.deque[Message]:
        buffer = self._buffer
        chunk: collections.deque[Message] = collections.deque()
        if not self.by_bytes:
            take = min(len(buffer), _CHUNK, self._chunk_weight)
            popleft = buffer.popleft
            chunk.extend([popleft() for _ in range(take)])
        else:
            weight = 0
            while buffer and len(chunk) < _CHUNK:
                size = message_size(buffer[0])
                if chunk and weight + size > self._chunk_weight:
                    break
                chunk.append(buffer.popleft())
                weight += size
        return chunk  # the level counts it until hand_out

    def _linger_for_chunk(self) -> None:
        if (
            self._level < self._chunk_weight
            and len(self._buffer) < self._chunk_need
            and not self.full
            and not self.ended()
        ):
            self.wait_for(self._chunk_need, _LINGER)

    def hand_out(self, chunk: Chunk, message: Message, *, move_position: bool = True) -> bool:
        """``message``, just taken from ``chunk``, is being handed on: it stops
        counting against the bound and (``move_position``) the partition's
        position moves (a consume thread moves it with :meth:`delivered` once
        the handler returned). False, and nothing changes, when the chunk was
        dropped meanwhile (``close``/``stop``)."""
        with self._mutex:
            if chunk.discards != self.discards:
                chunk.messages.clear()
                return False
            self._level -= message_size(message) if self.by_bytes else 1
            self._taken()
            if move_position:
                self._delivered(message)
            return True

    def delivered(self, message: Message) -> None:
        """``message`` was handed on for good: the partition's position moves."""
        with self._mutex:
            self._delivered(message)

    def put_back(self, chunk: Chunk, first: Message | None = None) -> None:
        """Returns what ``chunk`` still holds to the buffer's front, in order,
        after ``first`` (a message handed out from it and given back, e.g.
        its handler raised)."""
        with self._mutex:
            if chunk.discards == self.discards:
                messages: Sequence[Message] = chunk.messages
                if first is not None:
                    messages = [first, *messages]
                    self._level += message_size(first) if self.by_bytes else 1
                # The chunk's own messages never stopped counting.
                self._buffer.extendleft(reversed(messages))
            chunk.messages.clear()

    def discard(self) -> None:
        """Drops every buffered message, and the chunks takers hold. Under the lock."""
        self._buffer.clear()
        self._level = 0
        self.discards += 1
        if self.full:
            self._taken()
