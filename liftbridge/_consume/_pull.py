"""Pull consumption: a consumer over one stream that you ask for messages
(``fetch``, ``next``, iteration) or that feeds a handler from a bounded
pre-fetch buffer (``consume``).

Underneath, each partition read is an ordinary subscription (so leader
failover and broker loss resume from the last offset + 1: no gap, no
duplicate). Its handler puts messages into one buffer shared by the
partitions (:mod:`liftbridge._consume._pull_buffer`: bounded by a message
count or a byte count, at every moment), and a watcher resubscribes a
partition whose read stalls (:mod:`liftbridge._consume._pull_watch`).

Order: within a partition, offset order; across partitions, the order in
which messages arrived (partitions are not interleaved by any rule).

Threads: ``liftbridge-sub-<stream>-<partition>`` (one per partition, SDK
code only), ``liftbridge-pull-<stream>-watch`` (liveness),
``liftbridge-pull-<stream>-calls`` (runs ``on_stall``), and while
``consume`` runs, ``liftbridge-pull-<stream>`` (runs your handler).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from itertools import repeat

from liftbridge._consume._handoff import Chunk
from liftbridge._consume._positions import StartPosition, StopPosition
from liftbridge._consume._pull_buffer import PullBuffer, Reader
from liftbridge._consume._pull_consume import ConsumeHandle
from liftbridge._consume._pull_options import (
    FromCursor,
    PullSource,
    PullStart,
    StallCallback,
    Start,
    check_start,
)
from liftbridge._consume._pull_watch import StallWatcher
from liftbridge._core import _validate as check
from liftbridge._core._messages import Message
from liftbridge._errors import (
    ArgumentTypeError,
    ClientClosedError,
    InvalidArgumentError,
    NoSuchPartitionError,
    PullTimeoutError,
    StopPositionReached,
)

DEFAULT_MAX_BUFFERED_MESSAGES = 512
DEFAULT_FETCH_MESSAGES = 100

_popleft = deque.popleft


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
        check.callback(on_stall, arg="on_stall", shape="(stall)")
        if max_buffered_messages is not None and max_buffered_bytes is not None:
            raise InvalidArgumentError("give max_buffered_messages or max_buffered_bytes, not both")
        if max_buffered_bytes is not None:
            limit = check.positive_int(max_buffered_bytes, arg="max_buffered_bytes")
        else:
            limit = (
                DEFAULT_MAX_BUFFERED_MESSAGES
                if max_buffered_messages is None
                else check.positive_int(max_buffered_messages, arg="max_buffered_messages")
            )
        if refill_threshold is None:
            threshold = limit // 2
        else:
            # Record 002: a threshold may not be higher than its bound; equal
            # to it, reading resumes as soon as anything was handed out.
            threshold = check.positive_int(refill_threshold, arg="refill_threshold", minimum=0)
            if threshold > limit:
                raise InvalidArgumentError(
                    f"refill_threshold must be at most the buffer bound {limit}, got {threshold}"
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
        self._buffer = PullBuffer(
            limit, threshold, by_bytes=max_buffered_bytes is not None, ended=lambda: source.closed
        )
        self._readers = self._buffer.readers
        self._watcher = StallWatcher(
            self._buffer,
            source,
            stream,
            stall_timeout=self._stall_timeout,
            on_stall=on_stall,
            resubscribe=self._subscribe,
        )
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
                raise NoSuchPartitionError(
                    f"stream {stream!r} has {count} partition(s); no partition {partition}"
                )
        try:
            for partition in dict.fromkeys(chosen):
                last = self._pin_stop(partition, stop)
                reader = Reader(partition, self._pin_start(partition, start), last)
                reader.read_replica = read_replica
                self._readers[partition] = reader
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

    def _subscribe(self, reader: Reader, start: Start) -> None:
        """Opens (or reopens) a partition's subscription. Not under the lock:
        it makes RPCs."""
        buffer = self._buffer
        with buffer.lock:
            reader.generation += 1
            generation = reader.generation
            reader.seen_received = reader.received
            reader.quiet_since = time.monotonic()
        # The server's stop offset is exact (a compacted one would never end
        # the subscription), so stops are applied by the buffer, not sent.
        subscription = self._source.subscribe(
            self._stream,
            buffer.handler(reader, generation),
            partition=reader.partition,
            start=start,
            read_replica=reader.read_replica,
        )
        with buffer.lock:
            if buffer.closed or reader.generation != generation:
                stale = True
            else:
                reader.subscription = subscription
                # Its stop may have come before subscribe() returned, when
                # finish() could not close it yet.
                stale = reader.finished
        if stale:
            subscription.close()

    # ------------------------------------------------------------- taking --

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
        with self._buffer.lock:
            self._check_usable()
        return self._buffer.take(count_limit, byte_limit, deadline)

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
        with self._buffer.lock:
            if self._buffer.exhausted():
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
        buffer = self._buffer
        # Ctrl-C (this is often the main thread): a signal's handler runs as
        # a call returns or a function starts. The chunk is this generator's
        # (refilled in place), the message taken from it is bound as it
        # leaves (``held``), and from hand_out's return to the yield nothing
        # is called; so an interrupt leaves each message in the buffer, in
        # the chunk, held or in ``chunk.out``, and give_back returns it.
        chunk: Chunk[Message] = Chunk(deque(), 0)
        taking = map(_popleft, repeat(chunk.items))
        held: Message | None = None
        linger = False
        try:
            while True:
                if not chunk.items:
                    item = buffer.next_chunk(chunk, linger=linger)
                    if item is None:
                        return
                    if isinstance(item, BaseException):
                        raise item
                    linger = True
                for message in taking:  # noqa: B007 (not popleft(): see above)
                    break
                held = message  # no call between: the interrupt points are calls
                if buffer.hand_out(chunk, message):
                    chunk.out = held = None
                    yield message
                else:
                    held = None  # close() dropped the chunk
        finally:
            buffer.give_back(chunk, held)

    def _check_usable(self) -> None:
        """Under the buffer's lock."""
        buffer = self._buffer
        if buffer.ended() and not buffer.has_messages():
            raise ClientClosedError("the pull consumer is closed")
        if buffer.consuming:
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
        check.callback(handler, arg="handler", shape="(message)", optional=False)
        check.callback(on_error, arg="on_error", shape="(error)")
        with self._buffer.lock:
            self._check_usable()
            self._buffer.consuming = True
        return ConsumeHandle(
            self._buffer,
            self._stream,
            lambda discard: self.close(discard=discard),
            handler,
            on_error,
        )

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
        """Messages in the pre-fetch buffer now (not those a taker holds)."""
        return self._buffer.buffered

    @property
    def buffered_bytes(self) -> int:
        """Bytes of values and keys in the pre-fetch buffer now."""
        return self._buffer.buffered_bytes

    def position(self) -> dict[int, int | None]:
        """Partition to the offset of the last message handed out (returned
        by ``fetch``/``next``/iteration, or whose handler returned); None for
        a partition with none yet."""
        with self._buffer.lock:
            return {p: r.delivered for p, r in self._readers.items()}

    def brokers(self) -> dict[int, str | None]:
        """Partition to the address of the broker serving its reads (the last
        one, for a partition that reached its stop); None before any."""
        with self._buffer.lock:
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
        check.identifier(cursor_id, arg="cursor_id")
        check.optional_seconds(timeout, arg="timeout")
        stored: dict[int, int] = {}
        for partition, offset in self.position().items():
            if offset is not None:
                self._source.set_cursor(cursor_id, self._stream, partition, offset, timeout=timeout)
                stored[partition] = offset
        return stored

    # ---------------------------------------------------------- lifecycle --

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called (buffered messages may remain)."""
        return self._buffer.closed

    def close(self, *, discard: bool = True) -> None:
        """Ends every subscription and the helper threads. Idempotent.

        Args:
            discard: drop buffered messages (default); False keeps them for
                ``fetch``/``next``/iteration.
        """
        for subscription in self._buffer.close(discard=discard):
            subscription.close()
        self._watcher.stop()

    def __enter__(self) -> PullConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._buffer.closed else "open"
        return f"<PullConsumer {self._stream} partitions={list(self._readers)} {state}>"
