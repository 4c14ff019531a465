"""``publish_many_async``: a batch of publishes, one Future for all of it.

A Future per message is a dozen objects the garbage collector walks while
the message is in flight; with a window of a thousand publishes in flight,
those walks cost about as much client CPU as the rest of a pipelined
publish (``bench/README_PERFORMANCE.md``). A batch publishes every message
the way ``publish_async(..., ack_handler, future=False)`` does, with one
handler of its own (:meth:`Batch.settle`) gathering the outcomes, and one
Future for the caller, resolved when the last outcome is in.

Shared by :class:`~liftbridge.Client` (gRPC) and
:class:`~liftbridge.NatsStreamPublisher` (NATS): both have the same
``publish_async``, which is all a batch needs.
"""

from __future__ import annotations

import itertools
import threading
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from typing import Any, Unpack

from liftbridge._core import _validate
from liftbridge._core._callbacks import CallbackRunner
from liftbridge._core._messages import Ack, AckPolicy
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

    Its :meth:`settle` is the ack handler of every message of the batch, so
    it runs on the publisher's ``liftbridge-callbacks`` thread. The Future
    is the runner's (:meth:`CallbackRunner.future`): running, so it cannot be
    cancelled, and its done-callbacks run on that thread too.
    """

    __slots__ = ("_acks", "_error", "_left", "_lock", "_slots", "future")

    def __init__(self, future: Future[list[Ack]], correlation_ids: list[str]) -> None:
        self.future = future
        self._slots = {cid: i for i, cid in enumerate(correlation_ids)}
        # _lock guards _acks, _left and _error.
        self._lock = threading.Lock()
        self._acks: list[Any] = [None] * len(correlation_ids)
        self._left = len(correlation_ids)
        self._error: BaseException | None = None
        if not correlation_ids:
            self.future.set_result([])

    def settle(self, ack: Ack | None, error: BaseException | None) -> None:
        """One message's outcome; the last one resolves the Future: the acks
        in the order of the values, or the first error that came."""
        with self._lock:
            if error is not None:
                if self._error is None:
                    self._error = error
            elif ack is not None:
                self._acks[self._slots[ack.correlation_id]] = ack
            self._left -= 1
            if self._left:
                return
        if self._error is not None:
            self.future.set_exception(self._error)
        else:
            self.future.set_result(self._acks)


def _payloads(values: object) -> list[BytesLike]:
    if isinstance(values, (bytes, bytearray, memoryview, str)) or not isinstance(values, Iterable):
        raise ArgumentTypeError(
            f"values must be an iterable of bytes payloads, got {type(values).__name__}"
        )
    return [
        v if type(v) is bytes else _validate.data(v, arg=f"values[{i}]")
        for i, v in enumerate(values)
    ]


class BatchMethods:
    """``publish_many_async``, over the host's ``publish_async``."""

    publish_async: Callable[..., Future[Ack | None] | None]
    _callbacks: CallbackRunner

    def publish_many_async(
        self,
        stream: str,
        values: Iterable[BytesLike],
        *,
        ack_policy: AckPolicy = AckPolicy.LEADER,
        **options: Unpack[StreamPublishOptions],
    ) -> Future[list[Ack]]:
        """Publishes a batch of messages without waiting: one Future for all.

        Every message goes out as :meth:`publish_async` would send it, in
        the order of ``values`` (sharing the options), through the same
        in-flight window. Costs less client CPU per message than a Future
        per message (one Future, one handler per batch), at the price of
        one outcome for the whole batch.

        Args:
            stream: the stream.
            values: the payloads, in order.
            ack_policy: LEADER (default) or ALL (NONE has no acks to gather:
                use :meth:`publish_async`).
            **options: shared by every message: ``key``, ``headers``,
                ``partition``, ``partitioner``, ``expected_offset``,
                ``timeout`` (as for :meth:`publish_async`; no
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
            MessageTooLargeError, PublishWindowFullError, ClientClosedError:
                as :meth:`publish_async` raises them, for the message whose
                turn it was; the messages before it were sent (their
                outcomes are not reported).
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
        prefix = f"{uuid.uuid4().hex[:12]}-{next(_batch_ids)}-"
        ids = [f"{prefix}{i}" for i in range(len(payloads))]
        batch = Batch(self._callbacks.future(), ids)
        settle = batch.settle
        publish = self.publish_async
        for value, correlation_id in zip(payloads, ids, strict=True):
            publish(
                stream,
                value,
                settle,
                ack_policy=ack_policy,
                future=False,
                correlation_id=correlation_id,
                **options,
            )
        return batch.future
