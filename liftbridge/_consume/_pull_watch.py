"""Liveness of a :class:`~liftbridge._consume._pull.PullConsumer`'s reads.

Liftbridge sends no heartbeats, so a read that silently hangs (a broker
frozen with its TCP connection open) is only visible from outside. The thread
``liftbridge-pull-<stream>-watch`` looks at each partition every quarter of
``stall_timeout``; when nothing arrived for ``stall_timeout`` seconds while
the buffer had room, it asks the partition's leader for its high watermark.
When the watermark is past what arrived (or moved since the last look), or
when the leader does not answer within ``stall_timeout`` (a frozen leader
answers nothing), the partition is resubscribed at the last offset + 1 from
the leader a fresh metadata look names, and ``on_stall`` is told on the
thread ``liftbridge-pull-<stream>-calls``.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable

from liftbridge._consume._pull_buffer import PullBuffer, Reader
from liftbridge._consume._pull_options import PullSource, Stall, StallCallback, Start
from liftbridge._errors import LiftbridgeError

_log = logging.getLogger(__name__)

_JOIN_TIMEOUT = 5.0
_WAIT_SLICE = 0.5


class StallWatcher:
    """Watches the readers of ``buffer``; ``resubscribe(reader, start)``
    reopens one (raising a :class:`LiftbridgeError` when it cannot)."""

    def __init__(
        self,
        buffer: PullBuffer,
        source: PullSource,
        stream: str,
        *,
        stall_timeout: float | None,
        on_stall: StallCallback | None,
        resubscribe: Callable[[Reader, Start], None],
    ) -> None:
        self._buffer = buffer
        self._source = source
        self._stream = stream
        self._stall_timeout = stall_timeout
        self._on_stall = on_stall
        self._resubscribe = resubscribe
        self._stop = threading.Event()
        self._calls: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._watcher = threading.Thread(
            target=self._watch, name=f"liftbridge-pull-{stream}-watch", daemon=True
        )
        self._caller = threading.Thread(
            target=self._call_loop, name=f"liftbridge-pull-{stream}-calls", daemon=True
        )

    def start(self) -> None:
        self._caller.start()
        self._watcher.start()

    def stop(self) -> None:
        """Ends both threads (joins with a bound, never the current thread)."""
        self._stop.set()
        self._calls.put(None)
        current = threading.current_thread()
        for thread in (self._watcher, self._caller):
            if thread is current or not thread.is_alive():
                continue
            thread.join(_JOIN_TIMEOUT)
            if thread.is_alive():
                _log.warning("%s did not stop within %.0fs", thread.name, _JOIN_TIMEOUT)

    def _watch(self) -> None:
        """Thread ``liftbridge-pull-<stream>-watch``."""
        if self._stall_timeout is None:
            self._calls.put(None)
            return
        period = max(0.05, self._stall_timeout / 4)
        next_look = time.monotonic() + period
        try:
            # Short waits, so that the thread ends soon after the client closes.
            while not self._stop.wait(min(period, _WAIT_SLICE)):
                if self._source.closed:
                    return
                if time.monotonic() < next_look:
                    continue
                next_look = time.monotonic() + period
                for reader in list(self._buffer.readers.values()):
                    self._look(reader)
        except BaseException:  # never die silently
            _log.exception("the pull watcher of %s failed; stalls are no longer detected", self)
        finally:
            self._calls.put(None)  # the callback thread ends with it

    def _look(self, reader: Reader) -> None:
        assert self._stall_timeout is not None
        buffer = self._buffer
        with buffer.lock:
            if buffer.closed or reader.finished:
                return
            pending = reader.pending_resume
        if pending is not None:  # the last resubscribe after a stall failed: again
            try:
                self._resubscribe(reader, pending)
            except LiftbridgeError as e:
                _log.warning("resubscribing %s/%s failed: %s", self._stream, reader.partition, e)
                return
            with buffer.lock:
                reader.pending_resume = None
            return
        with buffer.lock:
            now = time.monotonic()
            if buffer.full or reader.received != reader.seen_received:
                # Something arrived, or the buffer is full (waiting for room
                # is not a stall): quiet from now on, if at all.
                reader.seen_received = reader.received
                reader.quiet_since = now
                return
            if buffer.closed or reader.finished or reader.subscription is None:
                return
            if reader.subscription.done:
                return  # failed for good: the error is reported, nothing to resume
            idle = now - reader.quiet_since
            if idle < self._stall_timeout:
                return
            received = reader.received
            previous = reader.watermark
        watermark = self._watermark(reader)
        with buffer.lock:
            if watermark is None:
                # The leader did not answer: a frozen broker answers nothing,
                # so do not wait on it; resubscribe where the metadata says.
                behind = True
            elif received is not None:
                behind = watermark > received
            elif isinstance(reader.start, int):
                behind = watermark >= reader.start
            else:
                behind = previous is not None and watermark > previous
            if watermark is not None:
                reader.watermark = watermark
            if not behind or buffer.closed or reader.received != received:
                return
            old = reader.subscription
            reader.read_replica = False  # read from the leader now
        resume = reader.start if received is None else received + 1
        _log.warning(
            "%s/%s: nothing arrived for %.1fs while the high watermark is %s (last offset %s); "
            "resubscribing from %s",
            self._stream,
            reader.partition,
            idle,
            "unknown (no answer)" if watermark is None else watermark,
            received,
            resume,
        )
        if old is not None:
            old.close()
        error: BaseException | None = None
        try:
            self._resubscribe(reader, resume)
        except LiftbridgeError as e:
            _log.warning("resubscribing %s/%s failed: %s", self._stream, reader.partition, e)
            error = e
            with buffer.lock:
                reader.pending_resume = resume
        with buffer.lock:
            reader.quiet_since = time.monotonic()
        report = Stall(
            self._stream,
            reader.partition,
            received,
            -1 if watermark is None else watermark,
            idle,
            None if error is not None or not isinstance(resume, int) else resume,
            error,
        )
        if self._on_stall is not None:
            callback = self._on_stall
            self._calls.put(lambda: callback(report))

    def _watermark(self, reader: Reader) -> int | None:
        """The partition's high watermark from its leader; None when it did
        not answer within half of ``stall_timeout`` (then the cluster's
        metadata is looked at again, so the resubscribe finds a new leader)."""
        assert self._stall_timeout is not None
        half = self._stall_timeout / 2
        try:
            return self._source.fetch_partition_metadata(
                self._stream, reader.partition, timeout=half
            ).high_watermark
        except LiftbridgeError as e:
            _log.debug("stall check of %s/%s failed: %s", self._stream, reader.partition, e)
        try:
            self._source.fetch_metadata(timeout=half)
        except LiftbridgeError as e:
            _log.debug("metadata look for %s failed: %s", self._stream, e)
        return None

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
