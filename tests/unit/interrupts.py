"""Interrupts raised where a signal's handler would run, for the tests of
Ctrl-C safety (test_interrupted_locks.py, test_interrupted_submit.py).

A handler (KeyboardInterrupt's, say) runs at the start of a Python function
or as a C call returns. A profile function raising on those events
(``call``, ``c_return``) puts an exception exactly there; CPython then drops
the profile function. :func:`sweep` does so at each point of one operation in
turn, with a check after each.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType

import liftbridge

SDK = os.path.dirname(liftbridge.__file__)
"""The package's folder: only frames of files under it are interrupted."""

Point = Callable[[FrameType, str, object], bool]
"""Whether a profile event (its frame, its name, its argument) is a point to interrupt."""


class Interrupted(BaseException):
    """What an interrupt raises: like KeyboardInterrupt, no Exception."""


def in_sdk(frame: FrameType, event: str, arg: object) -> bool:
    """Any point an interrupt's handler may run at, in an SDK frame."""
    return event in ("call", "c_return") and frame.f_code.co_filename.startswith(SDK)


_THREAD_START = threading.Thread.start.__code__


def in_sdk_or_thread_start(frame: FrameType, event: str, arg: object) -> bool:
    """Any point in the SDK's frames, and in Thread.start run on this thread
    (where an SDK call that starts a thread can be interrupted too)."""
    return in_sdk(frame, event, arg) or (
        event in ("call", "c_return") and frame.f_code is _THREAD_START
    )


def acquire_returns(frame: FrameType, event: str, arg: object) -> bool:
    """A lock's ``acquire`` returning to an SDK frame (the lock taken)."""
    return (
        event == "c_return"
        and getattr(arg, "__name__", None) == "acquire"
        and frame.f_code.co_filename.startswith(SDK)
    )


def interrupted_at(
    n: int, action: Callable[[], object], point: Point, *, kept: list[BaseException] | None = None
) -> str | None:
    """Runs ``action`` on this thread, raising :class:`Interrupted` at its
    n-th (from 0) ``point``. Returns the name of the function interrupted, or
    None when ``action`` had fewer points and ran whole. The interrupt goes
    to ``kept`` when given: its traceback keeps the frames it ran through
    alive (with what they made), as a notebook does with the last one."""
    seen = 0
    where: list[str] = []

    def profile(frame: FrameType, event: str, arg: object) -> None:
        nonlocal seen
        if not point(frame, event, arg):
            return
        if seen == n:
            where.append(frame.f_code.co_name)
            raise Interrupted  # CPython unsets the profile function
        seen += 1

    sys.setprofile(profile)
    try:
        action()
    except Interrupted as e:
        assert where, "an Interrupted not raised here"
        if kept is not None:
            kept.append(e)
        return where[0]
    finally:
        sys.setprofile(None)
    return None


def sweep(
    action: Callable[[], object], check: Callable[[], object], point: Point, most: int
) -> set[str]:
    """Interrupts ``action`` at each of its points in turn, ``check`` after
    each; returns the functions interrupted. Fails when ``action`` still had
    points after ``most``."""
    interrupted: set[str] = set()
    for n in range(most):
        where = interrupted_at(n, action, point)
        if where is None:
            return interrupted
        interrupted.add(where)
        check()
    raise AssertionError(f"{action} still had interrupt points after {most}")


def sweep_whole(run: Callable[[int], str | None], whole: int, most: int) -> set[str]:
    """Calls ``run(n)`` for n = 0, 1, ... (``run`` interrupts a fresh
    handle at its n-th point, checks what is left and returns the function
    interrupted, or None when the handle ran whole) until ``whole`` runs in a
    row ran whole: where the count of points varies with the threads' timing,
    one whole run does not prove the sweep is over. Returns the functions
    interrupted; fails when there were still points after ``most``."""
    interrupted: set[str] = set()
    in_a_row = 0
    for n in range(most):
        where = run(n)
        if where is None:
            in_a_row += 1
            if in_a_row == whole:
                return interrupted
        else:
            in_a_row = 0
            interrupted.add(where)
    raise AssertionError(f"still interrupt points after {most}")


def sdk_threads_left(before: set[threading.Thread], bound: float) -> list[str]:
    """The names of the SDK's threads (``liftbridge-*``) started since
    ``before`` that are still running after waiting up to ``bound`` seconds
    for them to end: an interrupted operation must leave none behind."""
    deadline = time.monotonic() + bound
    while True:
        left = [
            t.name for t in set(threading.enumerate()) - before if t.name.startswith("liftbridge-")
        ]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.01)
