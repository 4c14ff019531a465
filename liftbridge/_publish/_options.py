"""The per-message publish options, defined once for every publisher.

A publish takes its message options as keyword arguments, checked by mypy
through ``**options: Unpack[...]`` against one of three nested
:class:`~typing.TypedDict` types, so each option has one name, one type and
one description whichever publisher takes it:

- :class:`PublishOptions`: what every publisher takes (``NatsPublisher``,
  which publishes to one partition's NATS subject);
- :class:`StreamPublishOptions`: those plus the partition choice, for the
  publishers addressed by stream (``NatsStreamPublisher``);
- :class:`ClientPublishOptions`: those plus ``ack_inbox``, for
  :meth:`Client.publish` and :meth:`Client.publish_async` (a NATS publisher
  receives its acks on an inbox of its own).

``ack_policy`` stays an explicit keyword of each ``publish`` (its overloads
type the result: an :class:`Ack`, or None for AckPolicy.NONE). At run time
an option no publisher of that kind knows raises
:class:`ArgumentTypeError` (a ``TypeError``), as a misspelt keyword would.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MethodType
from typing import Any, TypedDict

from liftbridge._core import _validate
from liftbridge._core._partitioner import Partitioner
from liftbridge._core._validate import BytesLike
from liftbridge._errors import ArgumentTypeError, InvalidArgumentError


class PublishOptions(TypedDict, total=False):
    """The options of one message, taken by every publisher as keyword
    arguments; each may be left out (or None, its default)."""

    key: BytesLike | None
    """The message key (compaction; alone, it also picks the partition)."""
    headers: Mapping[str, BytesLike] | None
    """Header name to bytes."""
    expected_offset: int | None
    """Optimistic concurrency: the offset the message must get, else
    :class:`IncorrectOffsetError` (streams created with
    ``optimistic_concurrency_control``; needs an ack policy other than NONE).
    None: no check."""
    correlation_id: str | None
    """The id that matches the ack to the message, copied into the
    :class:`Ack`; None for a generated one. Must not be in flight already."""
    timeout: float | None
    """Seconds to wait for the ack (and for a slot of a full in-flight
    window); None for the publisher's default (``ack_wait`` or
    ``ack_timeout``)."""


class StreamPublishOptions(PublishOptions, total=False):
    """:class:`PublishOptions` plus the partition choice, for publishers
    addressed by stream. The partition is ``partition`` when given, else the
    ``partitioner``'s choice, else the key's partition (:class:`PartitionByKey`,
    the Go client's formula) when there is a key, else 0."""

    partition: int | None
    """An explicit partition; wins over ``partitioner``."""
    partitioner: Partitioner | None
    """Picks the partition, e.g. :class:`PartitionByKey`."""


class ClientPublishOptions(StreamPublishOptions, total=False):
    """:class:`StreamPublishOptions` plus ``ack_inbox``, for
    :meth:`Client.publish` and :meth:`Client.publish_async`."""

    ack_inbox: str | None
    """A NATS subject (no wildcards) the server also publishes the ack to, as
    an envelope (:func:`unmarshal_ack` decodes it). Such a publish goes by
    the unary Publish RPC, one at a time (the server ignores ack inboxes on
    PublishAsync streams); for ``publish_async`` on a
    ``liftbridge-inbox-publish`` thread of its own."""


MESSAGE_OPTIONS = frozenset(PublishOptions.__optional_keys__)
STREAM_OPTIONS = frozenset(StreamPublishOptions.__optional_keys__)
CLIENT_OPTIONS = frozenset(ClientPublishOptions.__optional_keys__)


def check_names(options: Mapping[str, object], known: frozenset[str], method: str) -> None:
    """Refuses an option ``method`` does not take, as Python refuses an
    unknown keyword.

    Raises:
        ArgumentTypeError: an unknown option, named.
    """
    if not options.keys() <= known:
        name = sorted(options.keys() - known)[0]
        raise ArgumentTypeError(
            f"{method}() got an unexpected keyword argument {name!r} "
            f"(its options: {', '.join(sorted(known))})"
        )


def check_correlation_id(value: object) -> str:
    """A caller's ``correlation_id`` for a NATS publisher: a non-empty str
    (the ack is matched by it).

    Raises:
        ArgumentTypeError: not a str.
        InvalidArgumentError: empty, or not valid UTF-8.
    """
    if not isinstance(value, str):
        raise ArgumentTypeError(f"correlation_id must be a str or None, got {type(value).__name__}")
    if not value:
        raise InvalidArgumentError("correlation_id must not be empty (None picks one)")
    return _validate.text(value, arg="correlation_id")


class _AckHandlerCheck:
    """Checks an ``ack_handler`` (:func:`_validate.callback`: callable, taking
    ``(ack, error)``) and remembers the last one that passed, so the usual
    loop handing the same handler to every publish pays for reading its
    signature (``inspect.signature``: several microseconds, more than the
    rest of the publish's checks) once, not per message. A bound method is
    remembered by its function (``obj.method`` is a new object on every
    access; its arity is the function's). Holds a reference to that one
    callable until another passes. Thread-safe: the slot is one attribute,
    and a race only costs a second check. Publishers call its bound
    :meth:`check` (an instance's ``__call__`` costs ~0.2 us more a call).
    """

    def __init__(self) -> None:
        self.passed: Any = None
        """The last handler (a bound method's function) that passed: a
        publisher's own loop may skip the call when handed it again."""

    def check(self, handler: Any) -> None:
        if handler is None:
            return
        key = handler.__func__ if type(handler) is MethodType else handler
        if key is self.passed:
            return
        _validate.callback(handler, arg="ack_handler", shape="(ack, error)")
        self.passed = key


ack_handler_checks = _AckHandlerCheck()
check_ack_handler = ack_handler_checks.check
"""The ``ack_handler`` check of every ``publish_async`` (see :class:`_AckHandlerCheck`)."""
