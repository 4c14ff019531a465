"""The Future a publish returns: a ``concurrent.futures.Future`` that becomes one when needed.

A ``concurrent.futures.Future`` is eleven objects for the garbage collector
(its Condition with an RLock, bound lock methods and a waiter deque, two
lists) and about 1.6 KB, made on the publishing thread and resolved on the
thread that reads acks: its lock taken, its waiters and callbacks looked at,
on the other core. Per pipelined publish that was about 3.5 µs on one thread
(made, resolved and freed, no network), more across two cores. Yet most of a
pipelined producer's Futures are never waited on before their outcome is in:
they are read once done, or dropped.

:class:`CallbackFuture` is a ``Future`` subclass (``isinstance``, type hints,
``asyncio.wrap_future`` see a Future) that starts as three attributes of its
own, named ``_lb_*`` so they never meet ``Future``'s. Its outcome is two
attribute writes, and ``done``, ``running``, ``result`` and ``exception`` of a
resolved one read them. It runs ``Future.__init__`` (once, under a lock) only
when something needs a Future's machinery: ``result``/``exception`` of one
not resolved yet (they wait), ``add_done_callback`` before the outcome,
``concurrent.futures.wait`` and ``as_completed`` (they lock and read a
Future's own attributes: the class has a stand-in for each attribute a new
``Future`` has, by name, and looking one up runs it). From then on it is an
ordinary ``Future``: the outcome is handed on to ``Future.set_result`` or
``set_exception`` once there is one. It never uses ``Future``'s attributes
itself: it only has ``Future.__init__`` make them for whoever looks.

The hand-over has two sides that may race: the resolving thread writes the
outcome, then hands it on if ``Future.__init__`` has run (``_lb_full``); a
waiting thread runs it, sets ``_lb_full``, then hands on the outcome if there
is one. Each side writes before it reads, so at least one of them hands it on
(under the GIL, one bytecode at a time); when both do, ``Future`` itself
refuses the second (``InvalidStateError``, ignored).

A subclass made by :meth:`CallbackFuture.made_on_read` is resolved with a
raw value (a wire protobuf) and makes its result of it on the first read
(``result``, a done-callback's, a waiter's, ``repr``), once for every thread:
the thread that resolves it makes nothing nobody asks for (most pipelined
publishes' Acks are never read).

Done-callbacks run on the ``liftbridge-callbacks`` thread (the runner's), even
one added after the outcome; the Future reads as running until it is done
and cannot be cancelled (a publish is not taken back once queued).

A publish whose caller waits for it (a blocking ``publish``) needs no
Future: :class:`Waiter` is one lock, held until the outcome is in.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from typing import Any, ClassVar, Protocol


class Submitter(Protocol):
    """Where done-callbacks go (:class:`~liftbridge._core._callbacks.CallbackRunner`)."""

    def submit(self, fn: Callable[..., object], *args: Any) -> None: ...


# A CallbackFuture's value until its outcome is in.
_NOT_YET: Any = object()


# Held while a CallbackFuture runs Future.__init__ (or makes its result of a
# raw one: made_on_read): once for each, whichever
# threads want it at the same time (reentrant: a finalizer the collector runs
# meanwhile may make another one full).
_BECOMING = threading.RLock()


class CallbackFuture(Future[Any]):
    """A running, uncancellable Future whose done-callbacks run on the
    callbacks thread; ``Future``'s own state only once it is needed (see the
    module docstring). Made by :meth:`CallbackRunner.future`; thread-safe:
    resolved once by the SDK, read and waited on by any thread."""

    _lb_runner: ClassVar[Submitter]  # set by each runner's subclass

    # A new one's state is these defaults, read from the class until it is
    # written on the instance; Future.__init__ runs when needed
    # (_lb_become_full). object's __init__, a C slot: a CallbackFuture is
    # made with no Python frame and no attribute written (a Python __init__
    # writing the three cost the publishing thread ~1,000 instructions a
    # publish).
    _lb_error: BaseException | None = None
    _lb_value: Any = _NOT_YET  # written last: the outcome is in
    _lb_full = False  # Future.__init__ has run
    # made_on_read's: a value of class _lb_raw is the raw form of the result
    # _lb_make makes of it (None: no raw form).
    _lb_raw: ClassVar[type | None] = None
    _lb_make: ClassVar[Callable[[Any], Any]]
    __init__ = object.__init__

    @classmethod
    def made_on_read(cls, raw: type, make: Callable[[Any], Any]) -> type[CallbackFuture]:
        """A subclass resolved with a raw result (``set_result`` of a ``raw``
        instance) that reads as ``make(raw)``: made on the first read, under a
        lock, and kept (every reader gets the same object). Any other value
        reads as itself."""
        return type(cls.__name__, (cls,), {"_lb_raw": raw, "_lb_make": staticmethod(make)})

    def done(self) -> bool:
        return self._lb_value is not _NOT_YET

    def running(self) -> bool:
        return self._lb_value is _NOT_YET

    def cancelled(self) -> bool:
        return False

    def cancel(self) -> bool:
        """Refused: a publish is not taken back once queued."""
        return False

    def result(self, timeout: float | None = None) -> Any:
        if self._lb_value is _NOT_YET:
            self._lb_become_full()
            return super().result(timeout)
        error = self._lb_error
        if error is None:
            value = self._lb_value
            return self._lb_made() if value.__class__ is self._lb_raw else value
        try:
            raise error
        finally:
            del self, error  # the traceback's frame would keep the error in a cycle

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if self._lb_value is _NOT_YET:
            self._lb_become_full()
            return super().exception(timeout)
        return self._lb_error

    def add_done_callback(self, fn: Callable[[Future[Any]], object]) -> None:
        """Runs ``fn(future)`` on the callbacks thread once the outcome is in
        (at once there if it is already)."""
        runner = self._lb_runner
        if self._lb_value is _NOT_YET:
            self._lb_become_full()
            super().add_done_callback(lambda future: runner.submit(fn, future))
        else:
            runner.submit(fn, self)

    def set_running_or_notify_cancel(self) -> bool:
        self._lb_become_full()
        return super().set_running_or_notify_cancel()

    def set_result(self, result: Any) -> None:
        """Resolves it (the SDK does, once). :meth:`_lb_settle` written out
        (``_lb_error`` is None until an outcome is in): the acks thread calls
        this once per ack, and saves a Python call each time.

        Raises:
            InvalidStateError: it is done already.
        """
        if self._lb_value is not _NOT_YET:
            raise InvalidStateError(f"{self!r} is done already")
        self._lb_value = result
        if self._lb_full:  # a thread waits, or wait() looked: hand the outcome on
            self._lb_hand_on()

    def set_exception(self, exception: BaseException | None) -> None:
        """Fails it (the SDK does, once).

        Raises:
            InvalidStateError: it is done already.
        """
        self._lb_settle(None, exception)

    def __repr__(self) -> str:
        value, error = self._lb_value, self._lb_error
        if value.__class__ is self._lb_raw:
            value = self._lb_made()
        if value is _NOT_YET:
            state = "running"
        elif error is not None:
            state = f"finished raised {type(error).__name__}"
        else:
            state = f"finished returned {type(value).__name__}"
        return f"<{type(self).__name__} at {id(self):#x} state={state}>"

    def _lb_settle(self, value: Any, error: BaseException | None) -> None:
        if self._lb_value is not _NOT_YET:
            raise InvalidStateError(f"{self!r} is done already")
        self._lb_error = error
        self._lb_value = value
        if self._lb_full:  # a thread waits, or wait() looked: hand the outcome on
            self._lb_hand_on()

    def _lb_made(self) -> Any:
        """The result made of the raw one, once (``made_on_read``)."""
        with _BECOMING:
            value = self._lb_value
            if value.__class__ is self._lb_raw:
                value = self._lb_value = type(self)._lb_make(value)
        return value

    def _lb_become_full(self) -> None:
        """Runs ``Future.__init__`` once, then hands on the outcome if it is in."""
        with _BECOMING:
            if self._lb_full:
                return
            Future.__init__(self)
            self._lb_full = True
        self._lb_hand_on()

    def _lb_hand_on(self) -> None:
        """Gives ``Future``'s own state the outcome, if it is in (the other
        side of the hand-over may have done it first: then Future refuses)."""
        value = self._lb_value
        if value is _NOT_YET:
            return
        if value.__class__ is self._lb_raw:
            value = self._lb_made()
        error = self._lb_error
        try:
            if error is None:
                super().set_result(value)
            else:
                super().set_exception(error)
        except InvalidStateError:
            pass  # handed on by the other side


class _MadeOnFirstLook:
    """On :class:`CallbackFuture`, one of the attributes ``Future.__init__``
    sets: looked up before that ran (``concurrent.futures.wait`` locks and
    reads them), it runs it. Without a ``__set__``, so once ``Future.__init__``
    has set the attribute on the instance, the instance's own is found first
    (and attribute look-ups on CallbackFuture stay as quick as on any object:
    a ``__getattr__`` would slow every one, ~0.5 µs per publish)."""

    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __get__(self, future: CallbackFuture | None, owner: type | None = None) -> Any:
        if future is None:
            return self
        future._lb_become_full()
        return object.__getattribute__(future, self._name)


# The names of the attributes a new Future has (names only: no value is read).
for _name in vars(Future()):
    setattr(CallbackFuture, _name, _MadeOnFirstLook(_name))


class Waiter:
    """The outcome of a publish its own caller waits for (``publish``, not
    ``publish_async``): a lock, held until the outcome is in. A Future its
    caller waits on is a Condition, an RLock, a deque and two lists, made
    and locked again under :data:`_BECOMING` on the publishing thread, then
    locked and notified by the thread that resolves it; this is one lock
    made held and released once. It never reaches user code (``publish``
    returns the outcome or raises it), so it is no Future. Thread-safe:
    resolved once by the SDK (``set_result``/``set_exception``, as a
    Future), waited on once, by the thread that made it."""

    __slots__ = ("_error", "_held", "_value")

    def __init__(self) -> None:
        self._held = threading.Lock()  # released when the outcome is in
        self._held.acquire()
        self._error: BaseException | None = None
        self._value: Any = _NOT_YET  # written before the release: the outcome is in

    def set_result(self, result: Any) -> None:
        """Resolves it (the SDK does, once).

        Raises:
            InvalidStateError: it is resolved already.
        """
        if self._value is not _NOT_YET:
            raise InvalidStateError(f"{self!r} is resolved already")
        self._value = result
        self._held.release()

    def set_exception(self, exception: BaseException | None) -> None:
        """Fails it (the SDK does, once).

        Raises:
            InvalidStateError: it is resolved already.
        """
        if self._value is not _NOT_YET:
            raise InvalidStateError(f"{self!r} is resolved already")
        self._error = exception
        self._value = None
        self._held.release()

    def result(self, timeout: float) -> Any:
        """Waits up to ``timeout`` seconds for the outcome (once); returns
        the result or raises the error.

        Raises:
            TimeoutError: no outcome in time (as ``Future.result`` raises).
        """
        if not self._held.acquire(True, timeout):
            raise TimeoutError
        if self._error is None:
            return self._value
        try:
            raise self._error
        finally:
            del self  # the traceback's frame would keep this and its error in a cycle
