"""The ``liftbridge-ack-timer`` thread: one per client, for every ack deadline.

The shared PublishAsync stream (:mod:`liftbridge._publish._publisher`), the publish
lanes (:mod:`liftbridge._publish._lanes`) and the NATS stream publishers made with the
client (:mod:`liftbridge._publish._nats_stream`) each need "fail this publish if its
ack has not come by then". They share this one thread rather than each
running its own. (:class:`~liftbridge.NatsPublisher`, made without a client,
runs the same scheduler on an :class:`AckTimer` of its own.)

Two ways in, for speed:

- :meth:`AckTimer.ordered` gives an owner an :class:`OrderedDeadlines` queue
  for items whose deadlines never decrease (publishes with the default ack
  timeout: nearly all). Appending is a deque append; the timer only ever
  looks at the queue's left end. Items resolved early stay until the timer
  (or a sweep, once the queue grows) drops them, which is why they carry a
  ``done`` flag. An owner that appends under a lock of its own anyway (to
  keep the deadlines in order) can lend the queue that lock: one lock per
  publish, not two.
- :meth:`AckTimer.watch` gives an owner that keeps its own items in deadline
  order (the NATS stream publisher's table of pending acks, in admission
  order) a look at every turn: its ``poll(now)`` expires what is due and says
  when the next item is; appending costs the owner nothing more.
- :meth:`AckTimer.schedule` takes any deadline and a callback (a heap).

Expiry callbacks run on the timer thread. They are the SDK's own (they fail
the publish, which hands user callbacks to ``liftbridge-callbacks``): they
must decide quickly whether the item is still pending and do nothing if not.
"""

from __future__ import annotations

import collections
import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Generic, Protocol, TypeVar

from liftbridge._locks import start_thread

_log = logging.getLogger(__name__)


class Due(Protocol):
    """An item of an :class:`OrderedDeadlines` queue."""

    deadline: float  # time.monotonic() it expires at
    done: bool  # resolved already: the timer just drops it


T = TypeVar("T", bound=Due)


class OrderedDeadlines(Generic[T]):
    """Items whose deadlines never decrease, expired in order. Thread-safe
    (with a lent lock: :meth:`append` is called holding it)."""

    def __init__(
        self,
        expire: Callable[[T], None],
        wait: float,
        compact_at: int,
        start: Callable[[], None],
        lock: AbstractContextManager[object] | None = None,
    ) -> None:
        self._expire = expire
        self.wait = wait  # the deadline of an item appended now is at least now + wait
        self._compact_at = compact_at
        self._sweep_at = compact_at  # the length that triggers the next sweep (under _lock)
        self._start = start  # starts the timer thread (once; idempotent)
        self._started = False
        self._lent = lock is not None  # append() is called holding _lock
        # guards _items and _sweep_at: our own, or the owner's (see AckTimer.ordered)
        self._lock: AbstractContextManager[object] = threading.Lock() if lock is None else lock
        self._items: collections.deque[T] = collections.deque()

    def append(self, item: T) -> None:
        """Adds an item due at ``item.deadline`` (never earlier than any
        before it). With a lent lock, only while holding it."""
        if self._lent:
            self.append_held(item)
            return
        with self._lock:
            self.append_held(item)

    def append_held(self, item: T) -> None:
        """:meth:`append` for a caller already holding the queue's lock
        (the one it lent): one call per item, for the publisher's every publish."""
        if not self._started:  # set once started: an interrupt (Ctrl-C) in it starts it again
            self._start()
            self._started = True
        items = self._items
        while items and items[0].done:
            items.popleft()
        items.append(item)
        if len(items) > self._sweep_at:
            self._sweep()

    def _sweep(self) -> None:  # the queue's lock held
        self._items = collections.deque(i for i in self._items if not i.done)
        # With more items pending than compact_at (a window that wide),
        # sweeping again at the next append would make every append walk
        # them all: the next sweep waits for twice as many.
        self._sweep_at = max(self._compact_at, 2 * len(self._items))

    def extend_held(self, items: list[T]) -> None:
        """:meth:`append_held` of each of ``items`` (a ``publish_many_async``
        part, all due at once): a call for the first, and the rest queued at
        once (one call per part instead of one per item)."""
        if items:
            self.append_held(items[0])
            self._items.extend(itertools.islice(items, 1, None))
            if len(self._items) > self._sweep_at:
                self._sweep()

    def drop_done_held(self) -> None:
        """Lets go of the resolved items at the front, for a caller holding
        the queue's lock (the one it lent): the thread that resolved them,
        so they are freed there (``liftbridge/_publish/_pending.py`` says why
        that matters); :meth:`append_held` and the timer drop them otherwise."""
        items = self._items
        while items and items[0].done:
            items.popleft()

    def __len__(self) -> int:
        return len(self._items)

    def _take_due(self, now: float) -> tuple[list[T], float | None]:
        """Removes the items due by ``now``; returns them (resolved ones
        dropped) and the next deadline, if any."""
        due: list[T] = []
        with self._lock:
            items = self._items
            while items and (items[0].done or items[0].deadline <= now):
                item = items.popleft()
                if not item.done:
                    due.append(item)
            return due, (items[0].deadline if items else None)


class Watched:
    """An owner's items in deadline order, looked at by the timer: see
    :meth:`AckTimer.watch`."""

    def __init__(self, poll: Callable[[float], float | None], wait: float) -> None:
        self.poll = poll
        self.wait = wait


class AckTimer:
    """The ``liftbridge-ack-timer`` thread, started on first use. Thread-safe."""

    def __init__(self) -> None:
        # _lock guards _queues, _watched, _heap, _started and _closed; _wakeup
        # (on it) is notified when the heap gets a new earliest deadline, and on close.
        self._lock = threading.Lock()
        self._wakeup = threading.Condition(self._lock)
        self._queues: list[OrderedDeadlines[Due]] = []
        self._watched: list[Watched] = []
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._thread = threading.Thread(target=self._run, name="liftbridge-ack-timer", daemon=True)
        self._started = False  # _thread's start is under way, or done
        self._closed = False

    def ordered(
        self,
        expire: Callable[[T], None],
        *,
        wait: float,
        compact_at: int = 4096,
        lock: AbstractContextManager[object] | None = None,
    ) -> OrderedDeadlines[T]:
        """A queue for items due ``wait`` seconds after they are appended.

        Args:
            expire: called on the timer thread with each item overdue.
            wait: the delay of every item appended (the timer looks at least
                this often, so it never misses one).
            compact_at: sweep resolved items out once the queue is this long.
            lock: the owner's lock, held whenever it appends; the timer takes
                it to look at the queue (never while it expires an item or
                holds a lock of its own). None: the queue has its own.
        """
        queue: OrderedDeadlines[T] = OrderedDeadlines(
            expire, wait, compact_at, self._start_once, lock
        )
        with self._lock:
            self._queues.append(queue)  # type: ignore[arg-type]
        return queue

    def release(self, queue: OrderedDeadlines[T]) -> None:
        """Stops looking at a queue from :meth:`ordered` (its owner closed);
        what it still holds is dropped. Idempotent."""
        with self._lock:
            if queue in self._queues:
                self._queues.remove(queue)  # type: ignore[arg-type]

    def watch(self, watched: Watched) -> None:
        """Has the timer call ``watched.poll(now)`` on every turn, and again by
        the time it returns (``time.monotonic()``; None: nothing pending),
        until :meth:`unwatch`. The owner makes ``watched`` first, so an
        interrupt (Ctrl-C) anywhere here leaves it something to unwatch.

        ``poll`` runs on the timer thread: it expires the owner's items due by
        ``now`` (quickly, no user code) and returns the next one's deadline.
        Items added while nothing is pending must be due ``watched.wait``
        seconds later at the earliest (the timer looks at least that often).
        The thread starts here.
        """
        with self._lock:
            self._watched.append(watched)
            self._start()

    def unwatch(self, watched: Watched) -> None:
        """Stops calling a poll from :meth:`watch` (its owner closed). Idempotent."""
        with self._lock:
            if watched in self._watched:
                self._watched.remove(watched)

    def schedule(self, deadline: float, expire: Callable[[], None]) -> None:
        """Calls ``expire()`` on the timer thread once ``time.monotonic()``
        reaches ``deadline`` (unless closed first)."""
        with self._lock:
            if self._closed:
                return
            heapq.heappush(self._heap, (deadline, next(self._seq), expire))
            self._start()
            if self._heap[0][0] == deadline:
                self._wakeup.notify()

    def _start_once(self) -> None:
        with self._lock:
            self._start()

    def _start(self) -> None:  # with _lock held
        # Whole or again next time, on a thread an interrupt (Ctrl-C) may cut
        # short: no call between the start under way and its flag.
        if not self._started and not self._closed:
            start_thread(self._thread)
            self._started = True

    def _run(self) -> None:
        while True:
            try:
                if not self._turn():
                    return
            except Exception:  # never die silently: log and keep timing
                _log.exception("the ack timer failed on an expiry; it goes on")

    def _turn(self) -> bool:
        """One look at every deadline; False once closed."""
        now = time.monotonic()
        with self._lock:
            if self._closed:
                return False
            queues = list(self._queues)
            watched = list(self._watched)
        due_items: list[tuple[OrderedDeadlines[Due], list[Due]]] = []
        waits = [q.wait for q in queues] + [w.wait for w in watched]
        next_due = now + min(waits, default=60.0)
        for queue in queues:
            due, upcoming = queue._take_due(now)
            if due:
                due_items.append((queue, due))
            if upcoming is not None:
                next_due = min(next_due, upcoming)
        for owner in watched:
            try:
                upcoming = owner.poll(now)
            except Exception:  # the other owners' deadlines still count
                _log.exception("the ack timer failed on an expiry; it goes on")
                continue
            if upcoming is not None:
                next_due = min(next_due, upcoming)
        calls: list[Callable[[], None]] = []
        with self._lock:
            heap = self._heap
            while heap and heap[0][0] <= now:
                calls.append(heapq.heappop(heap)[2])
            if heap:
                next_due = min(next_due, heap[0][0])
            if not due_items and not calls:
                if not self._closed:
                    self._wakeup.wait(max(0.0, next_due - now))
                return not self._closed
        for queue, items in due_items:
            for item in items:
                queue._expire(item)
        for call in calls:
            call()
        return True

    def close(self, deadline: float) -> None:
        """Stops the thread (waiting until ``deadline``, ``time.monotonic()``,
        at most); what is still scheduled is dropped: its owners resolve it
        as they close. Idempotent; never joins the calling thread."""
        with self._lock:
            self._closed = True
            self._heap.clear()
            thread = self._thread if self._started else None
            self._wakeup.notify_all()
        # Not alive: its start is still under way (it ends at once: closed).
        if thread is None or thread is threading.current_thread() or not thread.is_alive():
            return
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            _log.warning("liftbridge-ack-timer did not stop in time")
