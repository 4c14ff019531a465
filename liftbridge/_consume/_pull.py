"""Pull consumption: a consumer over one stream that you ask for messages
(``fetch``, ``next``, iteration) or that feeds a handler from a bounded
pre-fetch buffer (``consume``).

Underneath, each partition read is an ordinary subscription (so leader
failover and broker loss resume from the last offset + 1: no gap, no
duplicate). Its handler puts messages into one buffer shared by the
partitions, bounded by a message count or a byte count (never both). When the
buffer is full the subscription threads wait, which holds the gRPC streams
back (flow control), until the buffer has fallen to the refill threshold
(default half the bound). Messages leave the buffer through the consumer,
many under one lock: ``fetch`` takes what it returns at once, iteration and
``consume`` a chunk of up to 64 (at most the bound minus the threshold),
putting back what they did not hand out. Per message the partition's thread
takes one plain lock; a waiting taker is woken once what it waits for is in.

Order: within a partition, offset order; across partitions, the order in
which messages arrived (partitions are not interleaved by any rule).

Liveness: Liftbridge sends no heartbeats, so a read that silently hangs (a
broker frozen but its TCP connection open) is only visible from outside. A
watcher thread asks a partition's leader for its high watermark when nothing
arrived for ``stall_timeout`` seconds while the buffer had room; when the
watermark is past what arrived (or moved since the last look), the partition
is resubscribed from its leader at the last offset + 1 and ``on_stall`` is
told.

Threads: ``liftbridge-sub-<stream>-<partition>`` (one per partition, SDK
code only), ``liftbridge-pull-<stream>-watch`` (liveness),
``liftbridge-pull-<stream>-calls`` (runs ``on_stall``), and while
``consume`` runs, ``liftbridge-pull-<stream>`` (runs your handler).
"""

from __future__ import annotations

import collections
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence

from liftbridge._consume._direct import message_size
from liftbridge._consume._pull_consume import ConsumeHandle
from liftbridge._consume._pull_options import (
    FromCursor,
    PullSource,
    PullStart,
    Stall,
    StallCallback,
    Start,
    check_start,
)
from liftbridge._consume._subscription import Handler, StartPosition, StopPosition, Subscription
from liftbridge._core import _validate as check
from liftbridge._core._messages import Message
from liftbridge._errors import (
    ArgumentTypeError,
    ClientClosedError,
    InvalidArgumentError,
    LiftbridgeError,
    PullTimeoutError,
    StopPositionReached,
)

_log = logging.getLogger(__name__)

_JOIN_TIMEOUT = 5.0
_WAIT_SLICE = 0.5
"""Seconds of one bounded wait inside a longer wait that re-checks state."""

_CHUNK = 64
"""Messages iteration and a consume() thread move out of the buffer under one
lock (fewer when the buffer's bound minus its refill threshold is smaller)."""

_LINGER = 0.0005
"""Seconds a taker that emptied its chunk while messages stream in waits for a
whole chunk before asking to be woken by the next message (as
:mod:`liftbridge._consume._handoff` does): woken per message, it would trade the GIL
with the partition's thread for every one."""

_NO_STOP = 2**63
"""Above every offset (offsets are int64)."""

DEFAULT_MAX_BUFFERED_MESSAGES = 512
DEFAULT_FETCH_MESSAGES = 100


class _Reader:
    """One partition's state. Fields guarded by the consumer's lock."""

    def __init__(self, partition: int, start: Start) -> None:
        self.partition = partition
        self.start = start
        self.subscription: Subscription | None = None
        self.generation = 0
        self.received: int | None = None  # last offset put into the buffer
        self.delivered: int | None = None  # last offset handed to the user
        # ``received`` at the watcher's last look (it grows with every
        # message put into the buffer, so a change means something arrived).
        self.seen_received: int | None = None
        self.quiet_since = time.monotonic()  # since when nothing arrived
        self.watermark: int | None = None  # high watermark at the last look
        self.finished = False  # reached the stop offset
        self.pending_resume: Start | None = None  # where a failed resubscribe must retry
        self.read_replica = False


class PullConsumer:
    """Messages of one stream, pulled when you want them. Thread-safe.

    Made by :meth:`Client.pull`. Take messages with :meth:`fetch` (a list,
    like nats.py's ``fetch`` and confluent-kafka's ``consume``), :meth:`next`
    (one, or a timeout error), :meth:`poll` (one, or None), by iterating (like
    nats.py's ``messages()``), or hand them to a handler with :meth:`consume`.
    Use it as a context manager, or call :meth:`close`.

    :meth:`position` is the last offset handed out per partition;
    :meth:`commit` stores it in a cursor, and ``Client.pull(...,
    start=FromCursor(id))`` resumes after it.

    When a partition's subscription fails for good (stream deleted, partition
    paused...), the messages already buffered are still handed out, then
    ``fetch``, ``next`` and iteration raise that error.
    """

    def __init__(
        self,
        source: PullSource,
        stream: str,
        *,
        partitions: Sequence[int] | None,
        start: PullStart,
        stop: StopPosition | int | None,
        read_replica: bool,
        max_buffered_messages: int | None,
        max_buffered_bytes: int | None,
        refill_threshold: int | None,
        stall_timeout: float | None,
        on_stall: StallCallback | None,
    ) -> None:
        check.stream_name(stream)
        if not isinstance(read_replica, bool):
            raise ArgumentTypeError("read_replica must be a bool")
        if on_stall is not None and not callable(on_stall):
            raise ArgumentTypeError("on_stall must be callable or None")
        if max_buffered_messages is not None and max_buffered_bytes is not None:
            raise InvalidArgumentError("give max_buffered_messages or max_buffered_bytes, not both")
        self._by_bytes = max_buffered_bytes is not None
        if max_buffered_bytes is not None:
            self._limit = check.positive_int(max_buffered_bytes, arg="max_buffered_bytes")
        else:
            self._limit = (
                DEFAULT_MAX_BUFFERED_MESSAGES
                if max_buffered_messages is None
                else check.positive_int(max_buffered_messages, arg="max_buffered_messages")
            )
        if refill_threshold is None:
            self._threshold = self._limit // 2
        else:
            self._threshold = check.positive_int(
                refill_threshold, arg="refill_threshold", minimum=0
            )
            if self._threshold >= self._limit:
                raise InvalidArgumentError(
                    f"refill_threshold must be below the buffer bound {self._limit}, "
                    f"got {self._threshold}"
                )
        self._stall_timeout = (
            None if stall_timeout is None else check.seconds(stall_timeout, arg="stall_timeout")
        )
        if not (stop is None or isinstance(stop, StopPosition)) and (
            isinstance(stop, bool) or not isinstance(stop, int) or stop < 0
        ):
            raise InvalidArgumentError(
                f"stop must be None, StopPosition.LATEST or an int offset >= 0, got {stop!r}"
            )
        check_start(start)
        chosen_partitions = None if partitions is None else check.partitions(partitions)
        self._source = source
        self._stream = stream
        self._read_replica = read_replica
        self._on_stall = on_stall
        # _mutex guards everything below and every _Reader; the hot paths take
        # it directly (cheaper than through a Condition), the rest through
        # _lock (takers wait on it for messages) or _room (subscription
        # threads wait on it for room).
        self._mutex = threading.Lock()
        self._lock = threading.Condition(self._mutex)
        self._room = threading.Condition(self._mutex)
        self._needs: list[int] = []  # how many messages each waiting taker wants
        self._need = 0  # the smallest of them; 0 when no taker waits
        self._buffer: collections.deque[Message] = collections.deque()
        self._level = 0  # messages or bytes in _buffer, per _by_bytes
        self._chunk_weight = max(1, self._limit - self._threshold)  # see _take_chunk
        # Messages a lingering taker waits for (see _linger_for_chunk).
        self._chunk_need = _CHUNK if self._by_bytes else min(_CHUNK, self._chunk_weight)
        self._discards = 0  # times buffered messages were dropped (takers' chunks go too)
        self._full = False  # producers wait until the level falls to the threshold
        # The level up to which a subscription thread may fill the buffer
        # without waiting: the bound, or -1 while it is full or the consumer
        # is closed (one field for the hot path to read instead of three).
        self._cap = self._limit
        self._closed = False
        self._error: BaseException | None = None
        self._consuming = False
        self._stops: dict[int, int | None] = {}
        self._readers: dict[int, _Reader] = {}
        self._watch_stop = threading.Event()
        self._calls: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        count = source.metadata.partition_count(stream)
        if count == 0:
            count = source.fetch_metadata().partition_count(stream)
        if count == 0:
            source.fetch_partition_metadata(stream, 0)  # raises the right "no such" error
            count = source.metadata.partition_count(stream)
        chosen = list(range(count)) if chosen_partitions is None else chosen_partitions
        if not chosen:
            raise InvalidArgumentError("partitions must name at least one partition")
        for partition in chosen:
            if partition >= count:
                raise InvalidArgumentError(
                    f"stream {stream!r} has {count} partition(s); no partition {partition}"
                )
        try:
            for partition in dict.fromkeys(chosen):
                reader = _Reader(partition, self._pin_start(partition, start))
                reader.read_replica = read_replica
                self._stops[partition] = self._pin_stop(partition, stop)
                self._readers[partition] = reader
                last = self._stops[partition]
                if last is not None and isinstance(reader.start, int) and last < reader.start:
                    reader.finished = True  # e.g. resuming after the stop already
                    continue
                if last == -1:  # stop=LATEST on an empty partition
                    reader.finished = True
                    continue
                self._subscribe(reader, reader.start)
        except BaseException:
            self.close()
            raise
        self._watcher = threading.Thread(
            target=self._watch, name=f"liftbridge-pull-{stream}-watch", daemon=True
        )
        self._caller = threading.Thread(
            target=self._call_loop, name=f"liftbridge-pull-{stream}-calls", daemon=True
        )
        self._caller.start()
        self._watcher.start()

    # --------------------------------------------------------- setting up --

    def _pin_start(self, partition: int, start: PullStart) -> Start:
        """An offset where one can be known now, so a resubscribe before the
        first message (a stall) resumes at the same place."""
        if isinstance(start, FromCursor):
            stored = self._source.fetch_cursor(start.cursor_id, self._stream, partition)
            start = start.otherwise if stored is None else stored + 1
        if start in (StartPosition.NEW_ONLY, StartPosition.LATEST):
            newest = self._source.fetch_partition_metadata(self._stream, partition).newest_offset
            return newest + 1 if start is StartPosition.NEW_ONLY else max(newest, 0)
        return start

    def _pin_stop(self, partition: int, stop: StopPosition | int | None) -> int | None:
        if isinstance(stop, StopPosition):
            return self._source.fetch_partition_metadata(self._stream, partition).newest_offset
        return stop

    def _subscribe(self, reader: _Reader, start: Start) -> None:
        """Opens (or reopens) a partition's subscription. Not under the lock:
        it makes RPCs."""
        with self._lock:
            reader.generation += 1
            generation = reader.generation
            reader.seen_received = reader.received
            reader.quiet_since = time.monotonic()
        # The server's stop offset is exact (a compacted one would never end
        # the subscription), so stops are applied here, not sent.
        subscription = self._source.subscribe(
            self._stream,
            self._handler(reader, generation),
            partition=reader.partition,
            start=start,
            read_isr_replica=reader.read_replica,
        )
        with self._lock:
            if self._closed or reader.generation != generation:
                stale = True
            else:
                reader.subscription = subscription
                # Its stop may have come before subscribe() returned, when
                # _finish could not close it yet.
                stale = reader.finished
        if stale:
            subscription.close()

    def _handler(self, reader: _Reader, generation: int) -> Handler:
        """The subscription's handler: runs on its thread, only SDK code."""
        acquire, release = self._mutex.acquire, self._mutex.release
        buffer, notify = self._buffer, self._lock.notify_all
        stop = self._stops[reader.partition]
        # Offsets below ``below`` take the hot path; the stop offset and past
        # it go through _offer, which ends the partition's reading.
        below = _NO_STOP if stop is None else stop
        by_bytes, limit = self._by_bytes, self._limit

        def handle(message: Message | None, error: BaseException | None) -> None:
            if message is None:
                if error is not None:
                    with self._lock:
                        if reader.generation == generation and self._error is None:
                            self._error = error
                        self._wake_all()
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

    def _offer(self, reader: _Reader, generation: int, message: Message, weight: int) -> None:
        stop = self._stops[reader.partition]
        with self._lock:
            while True:
                if self._closed or reader.generation != generation or reader.finished:
                    return
                if reader.received is not None and message.offset <= reader.received:
                    return  # a late copy from a replaced subscription
                if stop is not None and message.offset > stop:
                    self._finish(reader)  # the stop offset itself was compacted away
                    return
                room = self._level == 0 or (not self._full and self._level + weight <= self._limit)
                if room:
                    break
                if not self._full:
                    self._set_full()
                    self._lock.notify_all()  # a taker wanting more than fits
                subscription = reader.subscription
                if subscription is not None and subscription.closed:
                    return  # e.g. the client is closing: do not hold its thread
                self._room.wait(_WAIT_SLICE)
            buffer = self._buffer
            buffer.append(message)
            self._level += weight
            reader.received = message.offset
            if self._level >= self._limit:
                self._set_full()
                self._lock.notify_all()
            elif self._need and len(buffer) >= self._need:
                # Takers are woken when what they wait for is there, not per
                # message: a wake-up per message costs more than the message.
                # Once woken they are not woken again until they wait again.
                self._need = 0
                self._lock.notify_all()
            if stop is not None and message.offset >= stop:
                self._finish(reader)

    def _set_full(self) -> None:
        """Subscription threads wait until the level falls to the threshold. Under the lock."""
        self._full = True
        self._cap = -1

    def _finish(self, reader: _Reader) -> None:
        """The reader reached its stop offset. Under the lock."""
        reader.finished = True
        subscription = reader.subscription
        if subscription is not None:
            # Closing from the subscription's own thread returns at once.
            subscription.close()
        self._lock.notify_all()

    def _wake_all(self) -> None:
        """Wakes every waiting thread to look at the state again. Under the lock."""
        self._lock.notify_all()
        self._room.notify_all()

    def _wait_for(self, need: int, timeout: float) -> None:
        """Waits (under the lock) until ``need`` messages are buffered, the
        buffer is full, something ends, or ``timeout`` passes."""
        needs = self._needs
        needs.append(need)
        self._need = min(needs)
        try:
            self._lock.wait(timeout)
        finally:
            needs.remove(need)
            self._need = min(needs) if needs else 0

    # ------------------------------------------------------------- taking --

    def _exhausted(self) -> bool:
        """Every partition reached its stop and nothing is buffered. Under the lock."""
        return not self._buffer and all(r.finished for r in self._readers.values())

    def _ended(self) -> bool:
        """Nothing more can arrive: closed, or the client closed. Under the lock."""
        return self._closed or self._source.closed

    def _pop(self) -> Message:
        """Takes the first buffered message. Under the lock."""
        message = self._buffer.popleft()
        self._level -= message_size(message) if self._by_bytes else 1
        self._taken()
        return message

    def _taken(self) -> None:
        """After messages left the buffer: lets the subscription threads fill
        it again once it fell to the threshold. Under the lock."""
        if self._full and self._level <= self._threshold:
            self._full = False
            if not self._closed:
                self._cap = self._limit
            self._room.notify_all()

    def _mark_delivered(self, batch: list[Message]) -> None:
        """Positions after handing out ``batch`` (offset order per partition). Under the lock."""
        if not batch:
            return
        if len(self._readers) == 1:
            self._delivered(batch[-1])
            return
        for message in batch:
            self._delivered(message)

    def _put_back(self, messages: Sequence[Message]) -> None:
        """Returns messages taken but not handed out to the buffer's front,
        in their order. Under the lock."""
        self._buffer.extendleft(reversed(messages))
        if self._by_bytes:
            self._level += sum(message_size(m) for m in messages)
        else:
            self._level += len(messages)

    def _take_chunk(self) -> list[Message]:
        """Under the lock: up to :data:`_CHUNK` messages from the front, at
        most the buffer's bound minus its threshold in weight (at least one),
        so that a taker holding a chunk keeps less than the buffer refills."""
        buffer = self._buffer
        if not self._by_bytes:
            take = min(len(buffer), _CHUNK, self._chunk_weight)
            popleft = buffer.popleft
            chunk = [popleft() for _ in range(take)]
            self._level -= take
        else:
            chunk = []
            weight = 0
            while buffer and len(chunk) < _CHUNK:
                size = message_size(buffer[0])
                if chunk and weight + size > self._chunk_weight:
                    break
                chunk.append(buffer.popleft())
                weight += size
            self._level -= weight
        self._taken()
        return chunk

    def _linger_for_chunk(self) -> None:
        """Under the lock, for a taker whose last chunk came without waiting:
        waits up to :data:`_LINGER` for a whole chunk (or a full buffer), so
        that while messages stream in it wakes once per chunk."""
        if (
            self._level < self._chunk_weight
            and len(self._buffer) < self._chunk_need
            and not self._full
            and not self._ended()
        ):
            self._wait_for(self._chunk_need, _LINGER)

    def _discard(self) -> None:
        """Drops every buffered message, and the chunks takers hold. Under the lock."""
        self._buffer.clear()
        self._level = 0
        self._discards += 1

    def _delivered(self, message: Message) -> None:
        reader = self._readers.get(message.partition)
        if reader is not None and (reader.delivered is None or message.offset > reader.delivered):
            reader.delivered = message.offset

    def fetch(
        self,
        max_messages: int | None = None,
        *,
        max_bytes: int | None = None,
        timeout: float = 5.0,
    ) -> list[Message]:
        """Takes up to ``max_messages`` messages, or up to ``max_bytes`` bytes
        of values and keys (at least one message), waiting up to ``timeout``
        seconds to fill the batch.

        Like confluent-kafka's ``consume(num_messages, timeout)`` and nats.py's
        ``fetch``. Give one limit at most; none means
        ``max_messages=100``.

        Returns:
            The messages, possibly fewer than asked (the timeout passed or
            every partition reached its stop), possibly none.

        Raises:
            LiftbridgeError: a subscription failed for good and nothing is
                buffered any more (see the class docstring).
            ClientClosedError: the consumer is closed.
            InvalidArgumentError: both limits, or a bad value.
        """
        if max_messages is not None and max_bytes is not None:
            raise InvalidArgumentError("give max_messages or max_bytes, not both")
        count_limit: int | None = None
        byte_limit: int | None = None
        if max_bytes is not None:
            byte_limit = check.positive_int(max_bytes, arg="max_bytes")
        else:
            count_limit = (
                DEFAULT_FETCH_MESSAGES
                if max_messages is None
                else check.positive_int(max_messages, arg="max_messages")
            )
        deadline = time.monotonic() + check.seconds(timeout, arg="timeout", allow_zero=True)
        batch: list[Message] = []
        size = 0
        buffer = self._buffer
        with self._mutex:
            self._check_usable()
            try:
                while True:
                    if buffer:
                        if count_limit is not None and not self._by_bytes:
                            # The common case, in bulk: count limits, count-bounded buffer.
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
                    if self._ended() or self._exhausted():
                        break
                    if self._error is not None:
                        if batch:
                            break
                        raise self._error
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    need = 1 if count_limit is None else count_limit - len(batch)
                    self._wait_for(need, min(left, _WAIT_SLICE))
            finally:
                self._mark_delivered(batch)
        return batch

    def next(self, timeout: float = 5.0) -> Message:
        """Takes one message, waiting up to ``timeout`` seconds.

        Raises:
            PullTimeoutError: no message within the timeout (a
                :class:`DeadlineExceededError`, so also a ``TimeoutError``).
            StopPositionReached: every partition reached its stop.
            LiftbridgeError: a subscription failed for good (see the class).
            ClientClosedError: the consumer is closed.
        """
        batch = self.fetch(1, timeout=timeout)
        if batch:
            return batch[0]
        with self._lock:
            if self._exhausted():
                raise StopPositionReached("every partition reached its stop offset")
            self._check_usable()
        raise PullTimeoutError(f"no message within {timeout:g}s")

    def poll(self, timeout: float = 5.0) -> Message | None:
        """Takes one message like confluent-kafka's ``poll``: None when none
        came within ``timeout`` seconds or every partition reached its stop.

        Raises:
            LiftbridgeError: a subscription failed for good (see the class).
            ClientClosedError: the consumer is closed.
        """
        batch = self.fetch(1, timeout=timeout)
        return batch[0] if batch else None

    def __iter__(self) -> Iterator[Message]:
        """Yields messages as they come; ends when every partition reached
        its stop, or when the consumer is closed. Raises a subscription's
        terminal error (see the class).

        Messages leave the buffer a chunk at a time (up to 64); those of a
        chunk not yielded yet go back to the buffer's front when the loop
        ends early (``break``); ``close()`` drops them unless
        ``discard=False``.
        """
        mutex, readers = self._mutex, self._readers
        chunk: list[Message] = []
        at = 0  # chunk[at:] is not yielded yet
        discards = 0  # self._discards when the chunk was taken
        streaming = False  # a chunk was taken: linger for the next one
        try:
            while True:
                if at == len(chunk):
                    with self._lock:
                        if streaming:
                            self._linger_for_chunk()
                        while not self._buffer:
                            if self._ended() or self._exhausted():
                                return
                            if self._error is not None:
                                raise self._error
                            self._wait_for(1, _WAIT_SLICE)
                        chunk, at = self._take_chunk(), 0
                        discards = self._discards
                        streaming = True
                message = chunk[at]
                at += 1
                with mutex:
                    if self._discards != discards:
                        chunk, at = [], 0  # close() dropped what was buffered
                        continue
                    reader = readers.get(message.partition)
                    if reader is not None and (
                        reader.delivered is None or message.offset > reader.delivered
                    ):
                        reader.delivered = message.offset
                yield message
        finally:
            if at < len(chunk):
                with mutex:
                    if self._discards == discards:
                        self._put_back(chunk[at:])

    def _check_usable(self) -> None:
        if self._ended() and not self._buffer:
            raise ClientClosedError("the pull consumer is closed")
        if self._consuming:
            raise InvalidArgumentError("the consumer is feeding a consume() handler")

    # ------------------------------------------------------------ consume --

    def consume(
        self,
        handler: Callable[[Message], None],
        *,
        on_error: Callable[[BaseException], None] | None = None,
    ) -> ConsumeHandle:
        """Hands every message to ``handler(message)`` on the thread
        ``liftbridge-pull-<stream>``, one at a time, from the pre-fetch
        buffer (bounded by ``max_buffered_messages`` or ``max_buffered_bytes``
        and refilled when it falls to ``refill_threshold``).

        ``position()`` advances once the handler returned. If the handler
        raises, consumption stops (no message is skipped): the handle's
        ``error`` is a :class:`HandlerError` and ``on_error`` is called with
        it; that message stays first in the buffer for whoever reads next.
        ``on_error`` is also called with a subscription's terminal error.
        Both run on ``liftbridge-pull-<stream>``.

        While it runs, ``fetch``/``next``/iteration are refused.

        Returns:
            A :class:`ConsumeHandle`: ``stop()`` discards what is buffered,
            ``drain()`` delivers it first; both then close this consumer.
        """
        if not callable(handler):
            raise ArgumentTypeError("handler must be callable")
        if on_error is not None and not callable(on_error):
            raise ArgumentTypeError("on_error must be callable or None")
        with self._lock:
            self._check_usable()
            self._consuming = True
        return ConsumeHandle(_Feed(self), handler, on_error)

    def _chunk_for_handler(
        self, discard: threading.Event, *, linger: bool
    ) -> list[Message] | BaseException | None:
        """The consume thread's next chunk of messages (``linger``: after
        waiting briefly for a whole one), or the error that ends it, or None
        when consumption is over."""
        with self._lock:
            if linger and not discard.is_set():
                self._linger_for_chunk()
            while True:
                if discard.is_set():
                    self._discard()
                    return None
                if self._buffer:
                    return self._take_chunk()
                if self._ended() or self._exhausted():
                    return None
                if self._error is not None:
                    return self._error
                self._wait_for(1, _WAIT_SLICE)

    # ----------------------------------------------------------- position --

    @property
    def stream(self) -> str:
        """The stream read."""
        return self._stream

    @property
    def partitions(self) -> tuple[int, ...]:
        """The partitions read."""
        return tuple(self._readers)

    @property
    def buffered(self) -> int:
        """Messages in the pre-fetch buffer now."""
        with self._lock:
            return len(self._buffer)

    @property
    def buffered_bytes(self) -> int:
        """Bytes of values and keys in the pre-fetch buffer now."""
        with self._lock:
            return sum(message_size(m) for m in self._buffer)

    def position(self) -> dict[int, int | None]:
        """Partition to the offset of the last message handed out (returned
        by ``fetch``/``next``/iteration, or whose handler returned); None for
        a partition with none yet."""
        with self._lock:
            return {p: r.delivered for p, r in self._readers.items()}

    def brokers(self) -> dict[int, str | None]:
        """Partition to the address of the broker serving its reads (the last
        one, for a partition that reached its stop); None before any."""
        with self._lock:
            return {
                p: None if r.subscription is None else r.subscription.last_broker
                for p, r in self._readers.items()
            }

    def commit(self, cursor_id: str, *, timeout: float | None = None) -> dict[int, int]:
        """Stores :meth:`position` in cursor ``cursor_id`` (partitions with a
        position), so ``Client.pull(..., start=FromCursor(cursor_id))``
        resumes after it.

        Returns:
            Partition to the offset stored.
        """
        check.stream_name(cursor_id, arg="cursor_id")
        stored: dict[int, int] = {}
        for partition, offset in self.position().items():
            if offset is not None:
                self._source.set_cursor(cursor_id, self._stream, partition, offset, timeout=timeout)
                stored[partition] = offset
        return stored

    # ----------------------------------------------------------- liveness --

    def _watch(self) -> None:
        """Thread ``liftbridge-pull-<stream>-watch``."""
        if self._stall_timeout is None:
            self._calls.put(None)
            return
        period = max(0.05, self._stall_timeout / 4)
        next_look = time.monotonic() + period
        try:
            # Short waits, so that the thread ends soon after the client closes.
            while not self._watch_stop.wait(min(period, _WAIT_SLICE)):
                if self._source.closed:
                    return
                if time.monotonic() < next_look:
                    continue
                next_look = time.monotonic() + period
                for reader in list(self._readers.values()):
                    self._look(reader)
        except BaseException:  # never die silently
            _log.exception("the pull watcher of %s failed; stalls are no longer detected", self)
        finally:
            self._calls.put(None)  # the callback thread ends with it

    def _look(self, reader: _Reader) -> None:
        assert self._stall_timeout is not None
        with self._lock:
            if self._closed or reader.finished:
                return
            pending = reader.pending_resume
        if pending is not None:  # the last resubscribe after a stall failed: again
            try:
                self._subscribe(reader, pending)
            except LiftbridgeError as e:
                _log.warning("resubscribing %s/%s failed: %s", self._stream, reader.partition, e)
                return
            with self._lock:
                reader.pending_resume = None
            return
        with self._lock:
            now = time.monotonic()
            if self._full or reader.received != reader.seen_received:
                # Something arrived, or the buffer is full (waiting for room
                # is not a stall): quiet from now on, if at all.
                reader.seen_received = reader.received
                reader.quiet_since = now
                return
            if self._closed or reader.finished or reader.subscription is None:
                return
            if reader.subscription.done:
                return  # failed for good: the error is reported, nothing to resume
            idle = now - reader.quiet_since
            if idle < self._stall_timeout:
                return
            received = reader.received
            previous = reader.watermark
        try:
            watermark = self._source.fetch_partition_metadata(
                self._stream, reader.partition, timeout=self._stall_timeout
            ).high_watermark
        except LiftbridgeError as e:
            _log.debug("stall check of %s/%s failed: %s", self._stream, reader.partition, e)
            return
        with self._lock:
            reader.watermark = watermark
            if received is not None:
                behind = watermark > received
            elif isinstance(reader.start, int):
                behind = watermark >= reader.start
            else:
                behind = previous is not None and watermark > previous
            if not behind or self._closed or reader.received != received:
                return
            old = reader.subscription
            reader.read_replica = False  # the leader answered; read from it now
        resume = reader.start if received is None else received + 1
        _log.warning(
            "%s/%s: nothing arrived for %.1fs while the high watermark is %d (last offset %s); "
            "resubscribing from %s",
            self._stream,
            reader.partition,
            idle,
            watermark,
            received,
            resume,
        )
        if old is not None:
            old.close()
        error: BaseException | None = None
        try:
            self._subscribe(reader, resume)
        except LiftbridgeError as e:
            _log.warning("resubscribing %s/%s failed: %s", self._stream, reader.partition, e)
            error = e
            with self._lock:
                reader.pending_resume = resume
        report = Stall(
            self._stream,
            reader.partition,
            received,
            watermark,
            idle,
            None if error is not None or not isinstance(resume, int) else resume,
            error,
        )
        if self._on_stall is not None:
            callback = self._on_stall
            self._calls.put(lambda: callback(report))

    def _call_loop(self) -> None:
        """Thread ``liftbridge-pull-<stream>-calls``: runs ``on_stall``."""
        while True:
            call = self._calls.get()
            if call is None:
                return
            try:
                call()
            except Exception:
                _log.exception("on_stall raised")

    # ---------------------------------------------------------- lifecycle --

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called (buffered messages may remain)."""
        return self._closed

    def close(self, *, discard: bool = True) -> None:
        """Ends every subscription and the helper threads. Idempotent.

        Args:
            discard: drop buffered messages (default); False keeps them for
                ``fetch``/``next``/iteration.
        """
        self._close_subscriptions(discard=discard)
        self._watch_stop.set()
        self._calls.put(None)
        current = threading.current_thread()
        for thread in (getattr(self, "_watcher", None), getattr(self, "_caller", None)):
            if thread is None or thread is current or not thread.is_alive():
                continue
            thread.join(_JOIN_TIMEOUT)
            if thread.is_alive():
                _log.warning("%s did not stop within %.0fs", thread.name, _JOIN_TIMEOUT)

    def _close_subscriptions(self, *, discard: bool) -> None:
        with self._lock:
            self._closed = True
            self._cap = -1  # late messages take the slow path, which drops them
            if discard:
                self._discard()
            subscriptions = [r.subscription for r in self._readers.values() if r.subscription]
            for reader in self._readers.values():
                reader.generation += 1  # late messages from these are dropped
            self._wake_all()
        for subscription in subscriptions:
            subscription.close()

    def __enter__(self) -> PullConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<PullConsumer {self._stream} partitions={list(self._readers)} {state}>"


class _Feed:
    """A :class:`PullConsumer` as its consume thread sees it (the
    :class:`~liftbridge._consume._pull_consume.Feed` protocol). Only the consume
    thread calls it (``close`` aside)."""

    def __init__(self, consumer: PullConsumer) -> None:
        self._consumer = consumer
        # Taken from the buffer, not handed to the handler yet; only the
        # consume thread touches it.
        self._chunk: collections.deque[Message] = collections.deque()
        self._discards = 0  # the consumer's _discards when the chunk was taken
        self._streaming = False  # a chunk was taken: linger for the next one

    @property
    def stream(self) -> str:
        return self._consumer.stream

    def next(self, discard: threading.Event) -> Message | BaseException | None:
        consumer = self._consumer
        if self._chunk:
            if not discard.is_set() and consumer._discards == self._discards:
                return self._chunk.popleft()
            self._chunk.clear()  # stop() or close() dropped what was buffered
        item = consumer._chunk_for_handler(discard, linger=self._streaming)
        if not isinstance(item, list):
            return item
        self._streaming = True
        self._discards = consumer._discards
        self._chunk.extend(item)
        return self._chunk.popleft()

    def handled(self, message: Message) -> None:
        consumer = self._consumer
        with consumer._mutex:
            consumer._delivered(message)

    def unhandled(self, message: Message) -> None:
        """The message goes back to the buffer's front, the rest of its chunk after it."""
        consumer = self._consumer
        with consumer._mutex:
            if consumer._discards == self._discards:
                consumer._put_back([message, *self._chunk])
            self._chunk.clear()

    def ended(self) -> None:
        consumer = self._consumer
        with consumer._lock:
            if self._chunk and consumer._discards == self._discards:
                consumer._put_back(list(self._chunk))  # e.g. a terminal error came first
            self._chunk.clear()
            consumer._consuming = False

    def close(self, *, discard: bool) -> None:
        self._consumer.close(discard=discard)
