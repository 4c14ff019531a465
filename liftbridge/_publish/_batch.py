"""``publish_many_async``: a batch of publishes, one Future for all of it.

A Future per message is one object more per message in flight, made on
the publishing thread and resolved on another (and a full
``concurrent.futures.Future``, a dozen objects, once something waits on
it: :mod:`liftbridge._core._futures`). A batch is checked and routed
once, its messages are built in one loop and admitted into the in-flight
window a part at a time (as much as the window has room for, under one
round of its lock), and their outcomes are gathered by one :class:`Batch`
on the thread that settles them (the acks, timer or connection thread: SDK
code, quick, no user code), not by a handler call per message on the
callbacks thread. The caller gets one Future, resolved when the last outcome
is in.

Shared by :class:`~liftbridge.Client` (gRPC) and
:class:`~liftbridge.NatsStreamPublisher` (NATS): this module checks what
both take alike; each host sends the batch its own way
(``_publish_batch``).
"""

from __future__ import annotations

import itertools
import threading
import uuid
from collections.abc import Iterable, Sequence
from concurrent.futures import Future
from typing import Any, Protocol, Unpack

from liftbridge._core import _validate
from liftbridge._core._acks import Ack, AckPolicy
from liftbridge._core._callbacks import CallbackRunner
from liftbridge._core._validate import BytesLike
from liftbridge._errors import ArgumentTypeError, InvalidArgumentError
from liftbridge._publish._options import (
    STREAM_OPTIONS,
    StreamPublishOptions,
    check_names,
)

BATCH_OPTIONS = STREAM_OPTIONS - {"correlation_id"}
"""What every message of a batch shares: a correlation id is one message's."""

_batch_ids = itertools.count()


class Batch:
    """The outcomes of one batch, gathered into its Future. Thread-safe.

    Each message of the batch is settled exactly once (by the publisher
    that admitted it), with its index in the batch; the last outcome
    resolves the Future. The Future is the runner's
    (:meth:`CallbackRunner.future`): running, so it cannot be cancelled, and
    its done-callbacks run on ``liftbridge-callbacks``, so resolving it here
    runs no user code on the settling thread.
    """

    __slots__ = ("_acks", "_error", "_left", "_lock", "future")

    def __init__(self, future: Future[list[Ack]], size: int) -> None:
        self.future = future
        # _lock guards _acks, _left and _error.
        self._lock = threading.Lock()
        self._acks: list[Any] = [None] * size
        self._left = size
        self._error: BaseException | None = None
        if not size:
            future.set_result([])

    def settle(self, outcomes: Iterable[tuple[int, Ack | None, BaseException | None]]) -> None:
        """Messages' outcomes, ``(index, ack, error)``, in one round of the
        lock; the last one resolves the Future: the acks in the order of the
        values, or the first error that came."""
        with self._lock:
            acks = self._acks
            left = self._left
            for index, ack, error in outcomes:
                left -= 1
                if error is not None:
                    if self._error is None:
                        self._error = error
                else:
                    acks[index] = ack
            if left == self._left or left:  # none given (resolved already?) or some to come
                self._left = left
                return
            self._left = left
        self._resolve()

    def settle_run(
        self, outcomes: Sequence[tuple[Member, Ack | None, BaseException | None]], start: int
    ) -> int:
        """:meth:`settle` for members' outcomes ``(member, ack, error)`` from
        ``outcomes[start]`` (this batch's) up to the first of another batch,
        read in place (no outcome made per message); returns the index after
        the last one settled."""
        end = start
        with self._lock:
            acks = self._acks
            for member, ack, error in itertools.islice(outcomes, start, None):
                if member.batch is not self:
                    break
                end += 1
                if error is None:
                    acks[member.index] = ack
                elif self._error is None:
                    self._error = error
            left = self._left = self._left - (end - start)
            if left:
                return end
        self._resolve()
        return end

    def _resolve(self) -> None:  # every outcome is in: no thread writes them now
        if self._error is not None:
            self.future.set_exception(self._error)
        else:
            self.future.set_result(self._acks)

    def fail_rest(self, start: int, error: BaseException) -> None:
        """Settles the messages from ``start`` on, which never entered the
        window, with ``error`` (the batch's admission raised it): the Future
        still resolves once the messages admitted have their outcomes."""
        self.settle([(index, None, error) for index in range(start, len(self._acks))])


class Member(Protocol):
    """A publisher's pending publish as a batch sees it."""

    batch: Batch | None  # None: not part of a batch
    index: int  # its place in the batch


def settle_members(outcomes: Sequence[tuple[Member, Ack | None, BaseException | None]]) -> None:
    """Settles batch members' outcomes ``(member, ack, error)``, one round of
    a batch's lock per run of the same batch (acks come in order, so a run
    is usually a whole window's worth)."""
    start, count = 0, len(outcomes)
    while start < count:
        batch = outcomes[start][0].batch
        assert batch is not None  # a member's
        start = batch.settle_run(outcomes, start)


def _payloads(values: object) -> list[bytes]:
    if isinstance(values, (bytes, bytearray, memoryview, str)) or not isinstance(values, Iterable):
        raise ArgumentTypeError(
            f"values must be an iterable of bytes payloads, got {type(values).__name__}"
        )
    return [
        v if type(v) is bytes else _validate.data(v, arg=f"values[{i}]")
        for i, v in enumerate(values)
    ]


def correlation_ids(count: int) -> list[str]:
    """Ids for a batch's messages: a random prefix of the batch's, then the index."""
    prefix = f"{uuid.uuid4().hex[:12]}-{next(_batch_ids)}-"
    return [f"{prefix}{i}" for i in range(count)]


class BatchMethods:
    """``publish_many_async``, over the host's ``_publish_batch``."""

    _callbacks: CallbackRunner

    def _publish_batch(
        self,
        stream: str,
        values: list[bytes],
        ack_policy: AckPolicy,
        options: StreamPublishOptions,
        batch: Batch,
    ) -> None:
        """Sends a batch (values checked as bytes, ``ack_policy`` LEADER or
        ALL, option names checked): the host checks the options once,
        routes and builds every message, then admits and sends them in
        order, each message settling ``batch`` with its index. Raises as
        :meth:`publish_many_async` documents."""
        raise NotImplementedError

    def publish_many_async(
        self,
        stream: str,
        values: Iterable[BytesLike],
        *,
        ack_policy: AckPolicy = AckPolicy.LEADER,
        **options: Unpack[StreamPublishOptions],
    ) -> Future[list[Ack]]:
        """Publishes a batch of messages without waiting: one Future for all.

        The messages go out in the order of ``values``, sharing the
        options, through the same in-flight window as :meth:`publish_async`:
        as many at a time as the window has room for (a batch larger than
        the free window waits, as a publish does, for room for its next
        part; the window is never exceeded; over gRPC, with ``max_inflight``
        of 256 or more, a part is at most a quarter of the window, 256 at
        most, and a batch waits, as :meth:`publish_async` does, for a busy
        sender thread to take that many, 0.1 s at most). The options are
        checked and the partition chosen once per batch (per message only
        with a ``partitioner``, which sees each value). Costs less client CPU per
        message than ``publish_async`` with an ack handler: one Future and
        one gathering of outcomes per batch, at the price of one outcome for
        the whole batch.

        Args:
            stream: the stream.
            values: the payloads, in order.
            ack_policy: LEADER (default) or ALL (NONE has no acks to gather:
                use :meth:`publish_async`).
            **options: shared by every message: ``key``, ``headers``,
                ``partition``, ``partitioner``, ``expected_offset``,
                ``timeout`` (as for :meth:`publish_async`: each message's
                ack timeout, counted from when that message entered the
                window, and the longest wait for room in a full window; no
                ``correlation_id``: each message gets its own).

        Returns:
            A Future resolving, once every message has its outcome, to the
            list of :class:`Ack` in the order of ``values``; if any message
            failed, it fails instead with the first error that came (the
            other messages may be stored: use :meth:`publish_async` for an
            outcome per message). It cannot be cancelled; its done-callbacks
            run on the ``liftbridge-callbacks`` thread. An empty batch gives
            a Future already resolved to ``[]``.

        Raises:
            ArgumentTypeError, InvalidArgumentError: bad input (nothing sent).
                A bad value is named (``values[3]``).
            MessageTooLargeError: a message over the limit (nothing sent).
            NoSuchStreamError, NoSuchPartitionError: not in the metadata
                (nothing sent).
            PublishWindowFullError, ClientClosedError: the window stayed
                full for ``timeout`` (or, on ``liftbridge-callbacks``, was
                full at once), or the publisher closed, before the whole
                batch was in; the messages already in the window were sent
                (their outcomes are not reported).
        """
        method = "publish_many_async"
        check_names(options, BATCH_OPTIONS, method)
        if not isinstance(ack_policy, AckPolicy):
            raise ArgumentTypeError(
                f"ack_policy must be an AckPolicy, got {type(ack_policy).__name__}"
            )
        if ack_policy is AckPolicy.NONE:
            raise InvalidArgumentError(
                f"{method} gathers acks, and ack_policy NONE has none: use publish_async"
            )
        payloads = _payloads(values)
        batch = Batch(self._callbacks.future(), len(payloads))
        if payloads:
            self._publish_batch(stream, payloads, ack_policy, options, batch)
        return batch.future
