"""How a consumer-group member reaches user code: its messages go to the
handler (or, for a pulling member, into its pull buffer), reading failures
that need attention to the handler as errors (once per partition until it
reads again), and assignment changes to ``on_assigned``/``on_revoked``. Any
exception user code raises is logged, never let out.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from liftbridge._consume._subscription import Handler
from liftbridge._core._messages import Message
from liftbridge._groups._options import AssignmentCallback
from liftbridge._groups._partitions import Assigned, transient
from liftbridge._groups._pull import PullBuffer
from liftbridge._groups._values import StreamPartition

_log = logging.getLogger(__name__)


class Delivery:
    """One member's way to its user code. Thread-safe: partitions' threads
    deliver, the group thread reports and calls back."""

    def __init__(
        self,
        group_id: str,
        handler: Handler,
        pull: PullBuffer | None,
        wake: threading.Event,
        held: Callable[[StreamPartition], Assigned | None],
    ) -> None:
        self._group_id = group_id
        self._handler = handler
        self._pull = pull
        self._wake = wake  # set when a reading failed: the group thread restarts it
        self._held = held  # the entry held for a partition now, if any
        self._lock = threading.Lock()  # guards Assigned.reported
        self._in_handler = threading.local()

    def in_handler(self) -> bool:
        """True on a thread running the handler now."""
        return getattr(self._in_handler, "depth", 0) > 0

    def deliverer(self, entry: Assigned) -> Handler:
        """The handler of ``entry``'s subscription (runs on its thread)."""
        handler, local, tp, pull = self._handler, self._in_handler, entry.tp, self._pull

        def deliver(message: Message | None, error: BaseException | None) -> None:
            if message is None:
                self._reading_failed(tp, error)
                return
            entry.delivered = message.offset
            if pull is not None:
                pull.offer(entry, message)
                return
            entry.handling_since = time.monotonic()
            local.depth = getattr(local, "depth", 0) + 1
            try:
                handler(message, None)
            finally:
                local.depth -= 1
                entry.handling_since = None

        return deliver

    def _reading_failed(self, tp: StreamPartition, error: BaseException | None) -> None:
        """On a partition's thread: its reading failed. The group thread starts
        it again; the handler hears only of failures that need attention."""
        self._wake.set()
        if transient(error) or error is None:
            _log.debug("reading %s failed: %s", tp, error)
            return
        entry = self._held(tp)
        if entry is not None:
            self.report(entry, error)

    def reading(self, entry: Assigned) -> None:
        """``entry`` reads again: its next failure is reported."""
        with self._lock:
            entry.reported = False

    def report(self, entry: Assigned, error: BaseException) -> None:
        """Tells the handler of ``error`` unless ``entry``'s failure was told already."""
        with self._lock:
            if entry.reported:
                return
            entry.reported = True
        self.notify(error)

    def notify(self, error: BaseException) -> None:
        """Tells the handler of ``error``."""
        try:
            self._handler(None, error)
        except Exception:
            _log.exception("handler of group %s raised on an error", self._group_id)

    def callback(
        self,
        name: str,
        callback: AssignmentCallback | None,
        partitions: tuple[StreamPartition, ...],
    ) -> None:
        """Calls ``on_assigned``/``on_revoked`` (``name``) if given."""
        if callback is None:
            return
        try:
            callback(partitions)
        except Exception:
            _log.exception("%s callback of group %s raised", name, self._group_id)
