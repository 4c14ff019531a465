"""The ``liftbridge-callbacks`` thread: where user callbacks run.

Ack handlers and the done-callbacks of publish futures are user code; run on
the threads that read acks or enforce ack deadlines, one slow or blocking
callback would stall every other publish. So the SDK hands them to one
thread of their own per client (python-pubsub's scheduler does the same),
started on first use. Callbacks run one at a time, in the order they were
handed over; an exception one raises is logged and the next one runs.

A future made by :meth:`CallbackRunner.future` (:class:`~liftbridge._core._futures.CallbackFuture`)
runs its done-callbacks there too, including one added after the future
completed (``Future`` would run it at once on the adding thread).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, InvalidStateError
from typing import Any

from liftbridge._core._futures import CallbackFuture
from liftbridge._locks import start_thread

_log = logging.getLogger(__name__)

_THREAD_NAME = "liftbridge-callbacks"

_Handler = Callable[[Any, BaseException | None], object]
Outcome = tuple[Future[Any] | None, _Handler | None, Any, BaseException | None]
"""What :meth:`CallbackRunner.settle` takes: ``(future, handler, result, error)``."""


class CallbackRunner:
    """Runs callbacks on the ``liftbridge-callbacks`` thread. Thread-safe."""

    def __init__(self) -> None:
        # None is the stop signal; anything else is (function, args).
        self._queue: queue.SimpleQueue[tuple[Callable[..., object], tuple[Any, ...]] | None] = (
            queue.SimpleQueue()
        )
        self._lock = threading.Lock()  # guards _started, _closed and _late_running
        # Made here, started on first use (start_thread: whole or again next time).
        self._thread = threading.Thread(target=self._loop, name=_THREAD_NAME, daemon=True)
        self._started = False
        self._closed = False
        # Callbacks handed over after close(), for a liftbridge-callbacks-late thread.
        self._late: queue.SimpleQueue[tuple[Callable[..., object], tuple[Any, ...]]] = (
            queue.SimpleQueue()
        )
        self._late_running = False
        self._late_thread: threading.Thread | None = None  # the last one started
        # CallbackFuture with this runner: its done-callbacks run here.
        self._future: type[CallbackFuture] = type(
            "CallbackFuture", (CallbackFuture,), {"_lb_runner": self}
        )
        self.future: Callable[[], Future[Any]] = self._future
        """``future()``: a new running Future whose done-callbacks run on the
        callbacks thread; it cannot be cancelled (a :class:`CallbackFuture`:
        cheap to make and resolve, a full ``Future`` once something waits on
        it). The class itself, called directly: no Python frame in between
        on a publish's way."""

    def future_made_on_read(self, raw: type, make: Callable[[Any], Any]) -> type[CallbackFuture]:
        """As :attr:`future`, for futures resolved with a raw result (an
        instance of ``raw``) that read as ``make(raw)``, made on the first
        read (:meth:`CallbackFuture.made_on_read`): the class of those
        futures, called to make one."""
        return self._future.made_on_read(raw, make)

    def settle(
        self,
        future: Future[Any] | None,
        handler: Callable[[Any, BaseException | None], object] | None,
        result: Any,
        error: BaseException | None,
    ) -> None:
        """Gives a publish its outcome: fails or completes ``future`` (unless
        None, or the user cancelled it) and hands ``handler`` (unless None)
        the outcome on the callbacks thread."""
        self.settle_run(((future, handler, result, error),))

    def settle_run(self, outcomes: Iterable[Outcome]) -> None:
        """:meth:`settle` for each ``(future, handler, result, error)`` in
        order, the run's handlers handed to the callbacks thread as one item
        (one queue round and wake-up per run, not per outcome). Each handler
        still runs on its own: one that raises is logged, the next one runs."""
        calls: list[tuple[_Handler, Any, BaseException | None]] = []
        for future, handler, result, error in outcomes:
            if future is not None:
                try:
                    if error is None:
                        future.set_result(result)
                    else:
                        future.set_exception(error)
                except InvalidStateError:  # the user cancelled the future
                    pass
            if handler is not None:
                calls.append((handler, result, error))
        if len(calls) == 1:
            self.submit(*calls[0])
        elif calls:
            self.submit(_run_each, calls)

    def submit(self, fn: Callable[..., object], *args: Any) -> None:
        """Queues ``fn(*args)`` for the callbacks thread (started on first use).

        After :meth:`close` it goes to a ``liftbridge-callbacks-late`` thread
        instead, started when one is needed and ended as soon as it has
        nothing left to run: an outcome delivered while closing still reaches
        its handler, and user code never runs on the SDK thread that
        delivered it.
        """
        if not self._started or self._closed:
            with self._lock:
                if self._closed:
                    self._late.put((fn, args))
                    if not self._late_running:
                        late = threading.Thread(
                            target=self._run_late, name=f"{_THREAD_NAME}-late", daemon=True
                        )
                        self._late_thread = late
                        start_thread(late)
                        self._late_running = True
                    return
                # Flags set after their start, with no call between: an
                # interrupt (Ctrl-C) in a start leaves it done (at worst a
                # second late thread, which ends as the first does) or to do
                # again, never a flag over a thread that will not run.
                if not self._started:
                    start_thread(self._thread)
                    self._started = True
        self._queue.put((fn, args))

    def _run_late(self) -> None:
        """Thread ``liftbridge-callbacks-late``: runs what was handed over
        after :meth:`close`, then ends (a later one starts another)."""
        while True:
            with self._lock:
                try:
                    item = self._late.get_nowait()
                except queue.Empty:
                    self._late_running = False
                    return
            _run(*item)

    def served(self, deadline: float | None) -> bool:
        """Waits until every callback handed over before this call has run
        (``flush()``'s last step: its publishes' handlers and done-callbacks
        have been called and returned), until ``deadline``
        (``time.monotonic()``; None: no bound). A marker queued behind them
        is run: callbacks run one at a time, in order.

        On the callbacks thread itself (a handler that flushes) it returns
        True at once: what is queued behind the running callback cannot run
        before it returns. After :meth:`close` the marker goes to the late
        thread, after the callbacks thread is joined (it runs what was
        queued before the close).

        Returns:
            False when the deadline passed first.
        """
        if not self._started and not self._closed:
            return True  # nothing was ever handed over
        if self.on_callback_thread or threading.current_thread() is self._late_thread:
            return True
        thread = self._thread
        if self._closed and thread.ident is not None:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                return False
        ran = threading.Lock()  # a one-shot signal the callbacks thread lets go of
        ran.acquire()
        self.submit(ran.release)
        if deadline is None:
            return ran.acquire()
        return ran.acquire(True, max(0.0, deadline - time.monotonic()))

    @property
    def on_callback_thread(self) -> bool:
        """True when called from the callbacks thread itself."""
        return threading.current_thread() is self._thread

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
        # Also when not marked started: a start interrupted (Ctrl-C) after it
        # was under way runs a thread that must end too.
        self._queue.put(None)
        if thread is threading.current_thread() or thread.ident is None:
            return  # never started (one whose start is under way meets the None)
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


def _run_each(calls: list[tuple[_Handler, Any, BaseException | None]]) -> None:
    for handler, result, error in calls:
        try:
            handler(result, error)
        except Exception:
            _log.exception("callback %r raised; ignored", handler)
