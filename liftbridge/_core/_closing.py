"""Closing several things at once against one deadline.

``Client.close`` promises 10 s at most, but each consumer, pull consumer and
attached publisher bounds its own close (up to 30 s for a consumer that
commits and leaves its group): closed one after another, they could add up
to minutes. :func:`close_together` starts every close at once, each on a
short-lived ``liftbridge-close`` thread, and waits for them all until one
deadline; one still running then is logged and left to finish on its own.

Called from one of the SDK's own threads (a handler closing its client), the
closes run one after another on that thread instead: a close that waits for
the very thread it was called from would otherwise wait out the deadline.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

_log = logging.getLogger(__name__)

_SDK_THREAD_PREFIX = "liftbridge-"


def close_together(closers: Sequence[tuple[str, Callable[[], None]]], deadline: float) -> None:
    """Runs every ``close()`` of ``closers`` (named for the log) at once and
    waits for them until ``deadline`` (``time.monotonic()``). A close that
    raises is logged. Never raises."""
    if not closers:
        return
    if threading.current_thread().name.startswith(_SDK_THREAD_PREFIX):
        for name, close in closers:
            _run(name, close)
        return
    threads = [
        threading.Thread(target=_run, args=(name, close), name="liftbridge-close", daemon=True)
        for name, close in closers
    ]
    for thread in threads:
        thread.start()
    for (name, _), thread in zip(closers, threads, strict=True):
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            _log.warning("closing %s did not finish in time; left to finish on its own", name)


def _run(name: str, close: Callable[[], None]) -> None:
    try:
        close()
    except Exception:
        _log.exception("closing %s failed", name)
