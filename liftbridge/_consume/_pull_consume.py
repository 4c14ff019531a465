"""A running :meth:`PullConsumer.consume`: the ``liftbridge-pull-<stream>``
thread that hands buffered messages to the user's handler, and its handle.

The handle sees its consumer only through a :class:`Feed` (what the thread
takes from the buffer and reports back), so the consumer's state stays in
:mod:`liftbridge._consume._pull`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Protocol

from liftbridge._core._messages import Message
from liftbridge._errors import HandlerError

_log = logging.getLogger(__name__)

_JOIN_TIMEOUT = 5.0


class Feed(Protocol):
    """What a consume thread needs from its pull consumer. Thread-safe."""

    @property
    def stream(self) -> str:
        """The stream read (names the thread)."""
        ...

    def next(self, discard: threading.Event) -> Message | BaseException | None:
        """The next buffered message (waiting for one), the error that ends
        consumption, or None when it is over (the buffer is dropped first
        once ``discard`` is set)."""
        ...

    def handled(self, message: Message) -> None:
        """The handler returned: the message counts as delivered."""
        ...

    def unhandled(self, message: Message) -> None:
        """The handler raised: the message goes back to the buffer's front."""
        ...

    def ended(self) -> None:
        """The consume thread is finishing: ``fetch`` and the rest work again."""
        ...

    def close(self, *, discard: bool) -> None:
        """Closes the consumer (``discard``: drop what is buffered)."""
        ...


class ConsumeHandle:
    """A running :meth:`PullConsumer.consume`. Thread-safe.

    ``stop()`` ends it at once, discarding buffered messages; ``drain()``
    stops reading from the server, delivers what is buffered, then ends.
    Either closes the consumer. Context manager: leaving the block stops it.
    """

    def __init__(
        self,
        feed: Feed,
        handler: Callable[[Message], None],
        on_error: Callable[[BaseException], None] | None,
    ) -> None:
        self._feed = feed
        self._handler = handler
        self._on_error = on_error
        self._discard = threading.Event()  # stop(): drop what is buffered
        self._error: BaseException | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"liftbridge-pull-{feed.stream}", daemon=True
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
        self._feed.close(discard=True)
        self._join()

    def drain(self) -> None:
        """Stops reading from the server, lets the handler take every
        buffered message, then ends and closes the consumer. Waits for the
        handler thread (with a bound) unless called from the handler."""
        self._feed.close(discard=False)
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
        feed = self._feed
        try:
            while True:
                item = feed.next(self._discard)
                if item is None:
                    return
                if isinstance(item, BaseException):
                    self._fail(item)
                    return
                try:
                    self._handler(item)
                except Exception as e:
                    _log.exception(
                        "pull handler raised on %s/%s offset %d; consumption stops",
                        item.stream,
                        item.partition,
                        item.offset,
                    )
                    feed.unhandled(item)  # it stays next
                    self._fail(HandlerError(item.offset, e))
                    return
                feed.handled(item)
        except BaseException as e:  # never die silently
            _log.exception("the pull handler thread failed")
            self._error = e
        finally:
            feed.ended()
            self._done.set()

    def _fail(self, error: BaseException) -> None:
        self._error = error
        if self._on_error is not None:
            try:
                self._on_error(error)
            except Exception:
                _log.exception("on_error raised")
