"""Retry policies. The only module that imports tenacity.

A :class:`RetryPolicy` is a frozen value; :func:`call` runs a function under
it. Callers decide what is worth retrying (``retry_if``) and what to do
between attempts (``before_retry``, e.g. refresh metadata, pick another
broker). Publishes are never run through here: re-sending one could store it
twice.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import TypeVar

import tenacity

from liftbridge._core import _validate as check

_log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently a resilient call is retried.

    The wait before attempt ``n + 1`` is ``initial_backoff * multiplier**(n-1)``
    capped at ``max_backoff``, plus a random ``0..jitter`` seconds. Retrying
    stops after ``max_attempts`` attempts or once ``total_timeout`` seconds
    have passed since the first, whichever comes first; the last error is
    then raised.

    Attributes:
        max_attempts: attempts in all, including the first; at least 1.
        initial_backoff: seconds to wait after the first failure.
        max_backoff: upper bound of one wait, in seconds.
        multiplier: growth factor of the wait, at least 1.
        jitter: up to this many seconds are added to each wait at random.
        total_timeout: give up once this many seconds have passed, or
            ``None`` for no bound beyond ``max_attempts``.
    """

    max_attempts: int = 10
    initial_backoff: float = 0.05
    max_backoff: float = 2.0
    multiplier: float = 2.0
    jitter: float = 0.05
    total_timeout: float | None = 30.0

    def __post_init__(self) -> None:
        check.int32(self.max_attempts, arg="RetryPolicy.max_attempts", minimum=1)
        for name in ("initial_backoff", "max_backoff", "jitter"):
            check.seconds(getattr(self, name), arg=f"RetryPolicy.{name}", allow_zero=True)
        check.number(self.multiplier, arg="RetryPolicy.multiplier", minimum=1, maximum=1e6)
        if self.total_timeout is not None:
            check.seconds(self.total_timeout, arg="RetryPolicy.total_timeout")

    def backoff(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based), jitter included."""
        try:
            base = self.initial_backoff * self.multiplier ** max(0, attempt - 1)
        except OverflowError:  # a float power past 1.8e308
            base = self.max_backoff
        return min(base, self.max_backoff) + random.uniform(0, self.jitter)


DEFAULT_RETRY_POLICY = RetryPolicy()
"""What the client uses when no ``retry_policy`` is given."""


def call(
    policy: RetryPolicy,
    fn: Callable[[], T],
    *,
    retry_if: Callable[[BaseException], bool],
    before_retry: Callable[[BaseException], None] | None = None,
    describe: str = "call",
    deadline: float | None = None,
) -> T:
    """Runs ``fn`` until it returns, retrying the failures ``retry_if`` accepts.

    Args:
        policy: attempts, backoff and time bound.
        fn: the work; called once per attempt on the calling thread.
        retry_if: True for an exception worth another attempt.
        before_retry: called with the failure before each wait (for example to
            refresh metadata). Exceptions from it end the retrying.
        describe: what is being retried, for the debug log.
        deadline: a ``time.monotonic()`` after which no attempt starts; the
            wait before an attempt never runs past it. It replaces the
            policy's ``total_timeout``.

    Returns:
        What ``fn`` returned.

    Raises:
        The last exception ``fn`` raised, once retrying stops or as soon as
        ``retry_if`` rejects it; its traceback goes from here straight into
        ``fn``, without tenacity's and concurrent.futures' frames (and a gRPC
        error it was raised from keeps its status, not grpc's frames).
    """

    def _before_sleep(state: tenacity.RetryCallState) -> None:
        outcome = state.outcome
        error = outcome.exception() if outcome is not None else None
        _log.debug("retrying %s after attempt %d failed: %r", describe, state.attempt_number, error)
        if before_retry is not None and error is not None:
            before_retry(error)

    stop: tenacity.stop.stop_base = tenacity.stop_after_attempt(policy.max_attempts)
    if deadline is not None:
        stop = stop | _StopAt(deadline)
    elif policy.total_timeout is not None:
        stop = stop | tenacity.stop_after_delay(policy.total_timeout)

    def wait(state: tenacity.RetryCallState) -> float:
        pause = policy.backoff(state.attempt_number)
        if deadline is not None:
            pause = max(0.0, min(pause, deadline - time.monotonic()))
        return pause

    retrying = tenacity.Retrying(
        stop=stop,
        wait=wait,
        retry=tenacity.retry_if_exception(retry_if),
        before_sleep=_before_sleep,
        reraise=True,
    )
    try:
        return retrying(fn)
    except BaseException as error:
        # The first entry is this frame, which the raise below adds back.
        below = error.__traceback__.tb_next if error.__traceback__ is not None else None
        cause = error.__cause__
        if cause is not None and type(cause).__module__.startswith("grpc"):
            # The gRPC error behind an SDK error: its status and details are
            # worth printing, grpc's own frames are not.
            cause.with_traceback(_without_frames(cause.__traceback__, ("grpc",)))
        raise error.with_traceback(_without_frames(below, _MACHINERY)) from cause


_MACHINERY = ("tenacity", "concurrent.futures")
"""Modules whose frames a user's traceback does not need: how the retry ran."""


def _without_frames(tb: TracebackType | None, modules: tuple[str, ...]) -> TracebackType | None:
    """The traceback without the frames of these modules, the rest in order."""
    kept: list[TracebackType] = []
    while tb is not None:
        module = tb.tb_frame.f_globals.get("__name__", "")
        if not module.startswith(modules):
            kept.append(tb)
        tb = tb.tb_next
    rebuilt: TracebackType | None = None
    for entry in reversed(kept):
        rebuilt = TracebackType(rebuilt, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return rebuilt


class _StopAt(tenacity.stop.stop_base):
    """Stops retrying once ``time.monotonic()`` reaches a deadline (less a
    few milliseconds: an attempt that cannot run is not worth starting)."""

    def __init__(self, deadline: float) -> None:
        self._deadline = deadline

    def __call__(self, retry_state: tenacity.RetryCallState) -> bool:
        return time.monotonic() >= self._deadline - 0.005
