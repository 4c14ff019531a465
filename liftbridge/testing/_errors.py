"""Errors raised by the test harness, part of the SDK's one exception tree."""

from __future__ import annotations

from liftbridge._errors import LiftbridgeError


class ServerStartError(LiftbridgeError):
    """A server the harness manages could not be started or never became ready.

    The message says what was waited for; when the server wrote a log, its last
    lines are appended to the message and kept in :attr:`log_tail`.

    Attributes:
        log_tail: the last lines of the server's log, or ``""`` when there is none.
    """

    def __init__(self, message: str, *, log_tail: str = "") -> None:
        if log_tail:
            message = f"{message}\n--- last lines of the server log ---\n{log_tail}"
        super().__init__(message)
        self.log_tail = log_tail


class ServerBinaryNotFoundError(ServerStartError, FileNotFoundError):
    """The ``liftbridge`` or ``nats-server`` executable could not be found."""


class DockerUnavailableError(ServerStartError):
    """No Docker engine answers, or the ``testcontainers`` package is missing."""
