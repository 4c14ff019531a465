"""The ``liftbridge-callbacks`` thread: where user callbacks run.

Ack handlers and the done-callbacks of publish futures are user code; run on
the threads that read acks or enforce ack deadlines, one slow or blocking
callback would stall every other publish. So the SDK hands them to one
thread of their own per client (python-pubsub's scheduler does the same),
started on first use. Callbacks run one at a time, in the order they were
handed over; an exception one raises is logged and the next one runs.

A future made by :meth:`CallbackRunner.future` runs its done-callbacks there
too, including one added after the future completed (``Future`` would run it
at once on the adding thread). It is a :class:`LeanFuture`: a publish future
lives while its publish awaits its ack, and with a thousand in flight a plain
``Future``'s eleven garbage-collected objects each made the collector's full
passes a large part of a pipelined publish's cost.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from typing import Any

_log = logging.getLogger(__name__)

_THREAD_NAME = "liftbridge-callbacks"

# What Future.__init__ sets that LeanFuture makes on first use: a Condition
# (with its lock, wait queue and five bound methods) and two lists.
_LAZY: dict[str, Callable[[], object]] = {
    "_condition": threading.Condition,
    "_waiters": list,
    "_done_callbacks": list,
}
# Guards the making of any LeanFuture's lazy attributes, and its resolving
# while it has none (held for a few instructions; never around user code).
_MAKING = threading.Lock()


def _future_states() -> tuple[str, str] | None:
    """A new Future's state and a finished one's; None when this Python's
    Future does not hold just what LeanFuture expects (then a LeanFuture is
    a plain Future)."""
    plain: Future[Any] = Future()
    if set(vars(plain)) != {*_LAZY, "_state", "_result", "_exception"}:
        return None
    pending = plain._state
    plain.set_result(None)
    return pending, plain._state


_STATES = _future_states()
_PENDING, _FINISHED = _STATES or ("", "")


class LeanFuture(Future[Any]):
    """A ``concurrent.futures.Future`` that makes its condition and lists
    only when something waits on it or adds a callback.

    Most publish futures are resolved by the SDK and then read once, or
    never: they are one garbage-collected object instead of eleven for as
    long as their publish awaits its ack (with a thousand in flight, the
    collector's full passes over them were a large part of a pipelined
    publish's cost), and resolving or reading one is setting or reading
    attributes.
    Waiting and callbacks work as on any Future: the first of them makes the
    condition under ``_MAKING``, and resolving checks for it under the same
    lock, so neither misses the other; ``concurrent.futures.wait`` and
    ``as_completed`` work too.
    """

    _lean = False  # True until the lazy attributes are made (under _MAKING)

    def __init__(self) -> None:
        if _STATES is None:  # a Future this cannot slim down
            super().__init__()
            return
        self._state = _PENDING
        self._result = None
        self._exception = None
        self._lean = True

    def __getattr__(self, name: str) -> Any:
        make = _LAZY.get(name)
        if make is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        with _MAKING:
            if self._lean:
                for lazy, made in _LAZY.items():
                    setattr(self, lazy, made())
                self._lean = False
        return getattr(self, name)

    def set_result(self, result: Any) -> None:
        with _MAKING:
            lean = self._lean  # nothing waits on it nor has a callback on it
            if lean and self._state == _PENDING:
                self._result = result
                self._state = _FINISHED
                return
        if lean:
            raise InvalidStateError("the future already has its outcome")
        super().set_result(result)

    def set_exception(self, exception: BaseException | None) -> None:
        with _MAKING:
            lean = self._lean
            if lean and self._state == _PENDING:
                self._exception = exception
                self._state = _FINISHED
                return
        if lean:
            raise InvalidStateError("the future already has its outcome")
        super().set_exception(exception)

    def result(self, timeout: float | None = None) -> Any:
        # Finished is final, and the outcome was set before the state.
        if self._state == _FINISHED and self._lean:
            if self._exception is not None:
                raise self._exception
            return self._result
        return super().result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if self._state == _FINISHED and self._lean:
            return self._exception
        return super().exception(timeout)

    def done(self) -> bool:
        return self._state == _FINISHED or super().done()


class CallbackRunner:
    """Runs callbacks on the ``liftbridge-callbacks`` thread. Thread-safe."""

    def __init__(self) -> None:
        # None is the stop signal; anything else is (function, args).
        self._queue: queue.SimpleQueue[tuple[Callable[..., object], tuple[Any, ...]] | None] = (
            queue.SimpleQueue()
        )
        self._lock = threading.Lock()  # guards _thread and _closed
        self._thread: threading.Thread | None = None
        self._closed = False
        runner = self

        class _CallbackFuture(LeanFuture):
            """A Future whose done-callbacks run on the callbacks thread, and
            which cannot be cancelled: it reads as running until it is done.
            (Rather than ``set_running_or_notify_cancel``, a round of its
            lock per publish, for the same answers.)"""

            def add_done_callback(self, fn: Callable[[Future[Any]], object]) -> None:
                super().add_done_callback(lambda future: runner.submit(fn, future))

            def cancel(self) -> bool:
                return False

            def running(self) -> bool:
                return not self.done()

        self._future_class = _CallbackFuture

    def future(self) -> Future[Any]:
        """A new running Future whose done-callbacks run on the callbacks
        thread; it cannot be cancelled."""
        return self._future_class()

    def submit(self, fn: Callable[..., object], *args: Any) -> None:
        """Queues ``fn(*args)`` for the callbacks thread (started on first use).

        After :meth:`close` the callback runs on the calling thread instead, so
        an outcome delivered while closing still reaches its handler.
        """
        if self._thread is None or self._closed:
            with self._lock:
                if self._closed:
                    _run(fn, args)
                    return
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._loop, name=_THREAD_NAME, daemon=True
                    )
                    self._thread.start()
        self._queue.put((fn, args))

    @property
    def on_callback_thread(self) -> bool:
        """True when called from the callbacks thread itself."""
        return self._thread is not None and threading.current_thread() is self._thread

    def _loop(self) -> None:
        get = self._queue.get
        while True:
            item = get()
            if item is None:
                return
            _run(*item)

    def close(self, deadline: float) -> None:
        """Runs what is queued, then stops the thread; waits until
        ``deadline`` (``time.monotonic()``) at most. Idempotent; never joins
        the calling thread."""
        with self._lock:
            self._closed = True
            thread = self._thread
        if thread is None:
            return
        self._queue.put(None)
        if thread is threading.current_thread():
            return
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            _log.warning(
                "%s did not finish its queued callbacks in time (a callback blocks?)", _THREAD_NAME
            )


def _run(fn: Callable[..., object], args: tuple[Any, ...]) -> None:
    try:
        fn(*args)
    except Exception:
        _log.exception("callback %r raised; ignored", fn)
