"""A running :meth:`PullConsumer.consume`: the ``liftbridge-pull-<stream>``
thread that hands buffered messages to the user's handler, and its handle.

The thread takes chunks from the consumer's
:class:`~liftbridge._consume._pull_buffer.PullBuffer` and settles each message
as it hands it to the handler; the partition's position moves once the
handler returned; the consumer itself is only closed through the callable it gives.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable

from liftbridge._consume._handoff import Chunk
from liftbridge._consume._pull_buffer import PullBuffer
from liftbridge._core._messages import Message
from liftbridge._errors import HandlerError

_log = logging.getLogger(__name__)

_JOIN_TIMEOUT = 5.0


class ConsumeHandle:
    """A running :meth:`PullConsumer.consume`. Thread-safe.

    ``stop()`` ends it at once, discarding buffered messages; ``drain()``
    stops reading from the server, delivers what is buffered, then ends.
    Either closes the consumer. Context manager: leaving the block stops it.
    """

    def __init__(
        self,
        buffer: PullBuffer,
        stream: str,
        close: Callable[[bool], None],
        handler: Callable[[Message], None],
        on_error: Callable[[BaseException], None] | None,
    ) -> None:
        self._buffer = buffer
        self._close = close  # closes the consumer; the argument: discard what is buffered
        self._handler = handler
        self._on_error = on_error
        self._discard = threading.Event()  # stop(): drop what is buffered
        self._error: BaseException | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"liftbridge-pull-{stream}", daemon=True
        )
        self._thread.start()

    @property
    def error(self) -> BaseException | None:
        """Why consumption ended early (a HandlerError or a subscription's
        terminal error); None while running or after stop/drain/exhaustion."""
        return self._error

    @property
    def done(self) -> bool:
        """True once the handler thread finished."""
        return self._done.is_set()

    def stop(self) -> None:
        """Ends consumption now, discarding buffered messages, and closes the
        consumer. The handler call in progress (if any) completes. Safe from
        the handler itself (then it does not wait)."""
        self._discard.set()
        self._close(True)
        self._join()

    def drain(self) -> None:
        """Stops reading from the server, lets the handler take every
        buffered message, then ends and closes the consumer. Waits for the
        handler thread (with a bound) unless called from the handler."""
        self._close(False)
        self._join()

    def wait(self, timeout: float | None = None) -> bool:
        """Blocks until consumption ended. Returns False on timeout."""
        return self._done.wait(timeout)

    def _join(self) -> None:
        if self._thread is threading.current_thread():
            return
        self._thread.join(_JOIN_TIMEOUT)
        if self._thread.is_alive():
            _log.warning("%s did not stop within %.0fs", self._thread.name, _JOIN_TIMEOUT)

    def __enter__(self) -> ConsumeHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        """Thread ``liftbridge-pull-<stream>``: runs the user's handler."""
        buffer = self._buffer
        chunk: Chunk[Message] = Chunk(deque(), 0)
        linger = False
        try:
            while True:
                if not chunk.items or self._discard.is_set():
                    chunk.items.clear()  # stop() dropped what was buffered
                    item = buffer.next_chunk(chunk, linger=linger, stop=self._discard)
                    if item is None:
                        return
                    if isinstance(item, BaseException):
                        self._fail(item)
                        return
                    linger = True
                message = chunk.items.popleft()
                if not buffer.hand_out(chunk, message, move_position=False):
                    continue  # stop() dropped the chunk
                try:
                    self._handler(message)
                except Exception as e:
                    _log.exception(
                        "pull handler raised on %s/%s offset %d; consumption stops",
                        message.stream,
                        message.partition,
                        message.offset,
                    )
                    buffer.put_back(chunk, first=message)  # it stays next
                    self._fail(HandlerError(message.offset, e))
                    return
                buffer.delivered(message)
        except BaseException as e:  # never die silently
            _log.exception("the pull handler thread failed")
            self._error = e
        finally:
            buffer.put_back(chunk)  # e.g. a terminal error came first
            with buffer.lock:
                buffer.consuming = False
            self._done.set()

    def _fail(self, error: BaseException) -> None:
        self._error = error
        if self._on_error is not None:
            try:
                self._on_error(error)
            except Exception:
                _log.exception("on_error raised")
