"""The Client's publish methods: their signatures and documentation.

The work is done by :class:`~liftbridge._publish._publishing.Publishing`
(which path a publish takes) over the publisher and the lanes.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import Future
from typing import Literal, Unpack, overload

from liftbridge._core._acks import Ack, AckPolicy
from liftbridge._core._client_api import ClientBase, ClientState
from liftbridge._core._validate import BytesLike
from liftbridge._publish._batch import Batch, BatchMethods
from liftbridge._publish._options import (
    ClientPublishOptions,
    StreamPublishOptions,
    check_ack_handler,
)
from liftbridge._publish._publisher import AckHandler
from liftbridge._publish._publishing import Publishing, check_future

_OPEN = ClientState.OPEN
"""Read from the module: on Python 3.11, whose ``EnumType`` has a ``__getattr__``,
``ClientState.OPEN`` costs ~0.15 us (every look-up on the class goes through
it), more than the rest of the call's checks, on every publish."""


class PublishMethods(BatchMethods, ClientBase):
    """``publish``, ``publish_async``, ``publish_many_async`` and ``publish_to_subject``."""

    _publishing: Publishing

    @overload
    def publish_async(
        self,
        stream: str,
        value: BytesLike,
        ack_handler: AckHandler | None = None,
        *,
        ack_policy: AckPolicy = AckPolicy.LEADER,
        future: Literal[True] = True,
        **options: Unpack[ClientPublishOptions],
    ) -> Future[Ack | None]: ...

    @overload
    def publish_async(
        self,
        stream: str,
        value: BytesLike,
        ack_handler: AckHandler | None = None,
        *,
        ack_policy: AckPolicy = AckPolicy.LEADER,
        future: Literal[False],
        **options: Unpack[ClientPublishOptions],
    ) -> None: ...

    def publish_async(
        self,
        stream: str,
        value: BytesLike,
        ack_handler: AckHandler | None = None,
        *,
        ack_policy: AckPolicy = AckPolicy.LEADER,
        future: bool = True,
        **options: Unpack[ClientPublishOptions],
    ) -> Future[Ack | None] | None:
        """Publishes a message on the client's PublishAsync stream without waiting.

        Blocks when ``max_inflight`` publishes await acks (those with
        an ``ack_inbox``, sent by the unary Publish RPC, count too), until an
        eighth of that window has freed up (or, at ``timeout``, any slot
        has), and, with ``max_inflight`` of 256 or more, a quarter of it
        (256 at most) ahead of a busy sender thread until it takes them (0.1 s
        at most, to hand it the GIL). The SDK never re-sends a publish: on
        :class:`AckTimeoutError` or :class:`ConnectionLostError` the message
        may or may not be stored, so retry only if duplicates are acceptable
        (or use ``expected_offset``). Like any interrupted I/O, a publish
        interrupted by Ctrl-C (``KeyboardInterrupt``) may or may not have been
        sent: if it was, its outcome comes as usual; if not, it is withdrawn
        and its window slot freed (its ``ack_handler`` may then hear a
        :class:`LiftbridgeError` saying so).

        Args:
            stream: the stream.
            value: the payload.
            ack_handler: ``handler(ack, error)``, called once with the outcome
                (not for AckPolicy.NONE). It runs on the client's
                ``liftbridge-callbacks`` thread, one handler at a time, as do
                the done-callbacks of the returned Future; it should not
                block for long (later callbacks wait for it); exceptions it
                raises are logged. It may publish.
            ack_policy: LEADER (default), ALL, or NONE.
            future: False to get no Future: the outcome then goes to
                ``ack_handler`` alone (required unless AckPolicy.NONE).
            **options: the message's :class:`ClientPublishOptions`: ``key``,
                ``headers``, ``partition``, ``partitioner``,
                ``expected_offset``, ``correlation_id``, ``ack_inbox``,
                ``timeout`` (seconds to wait for the ack; None for ``ack_wait``).

        Returns:
            A Future of the :class:`Ack` (None for AckPolicy.NONE, once sent);
            None with ``future=False``. It is a ``concurrent.futures.Future``
            that makes the Future's lock and lists only once something waits
            on it before its outcome is in (``result``, ``exception``,
            ``add_done_callback``, ``concurrent.futures.wait``): one read
            only once done, or dropped, is three attribute writes to make and
            two to resolve. It cannot be cancelled.

        Raises:
            InvalidArgumentError, ArgumentTypeError: bad input or an unknown
                option (nothing sent).
            MessageTooLargeError: larger than ``max_message_size`` (nothing sent).
            NoSuchStreamError: a partitioner needs metadata of a missing stream.
            PublishWindowFullError: the in-flight window stayed full.
            ClientClosedError: the client is closed.
        """
        # The usual calls (no handler and a Future; a handler and future=False;
        # an open client) test without calls but for the handler's.
        if ack_handler is not None:
            check_ack_handler(ack_handler)
        if future is not True and (future is not False or ack_handler is None):
            check_future(future, ack_handler, ack_policy)
        if self._state is not _OPEN:
            self._check_open()
        return self._publishing.publish_async(
            stream, value, ack_policy, options, ack_handler, future
        )

    def _publish_batch(
        self,
        stream: str,
        values: list[bytes],
        ack_policy: AckPolicy,
        options: StreamPublishOptions,
        batch: Batch,
    ) -> None:
        """``publish_many_async`` over the client's PublishAsync stream."""
        self._check_open()
        self._publishing.publish_batch(stream, values, ack_policy, options, batch)

    @overload
    def publish(
        self,
        stream: str,
        value: BytesLike,
        *,
        ack_policy: Literal[AckPolicy.LEADER, AckPolicy.ALL] = AckPolicy.LEADER,
        **options: Unpack[ClientPublishOptions],
    ) -> Ack: ...

    @overload
    def publish(
        self,
        stream: str,
        value: BytesLike,
        *,
        ack_policy: Literal[AckPolicy.NONE],
        **options: Unpack[ClientPublishOptions],
    ) -> None: ...

    @overload
    def publish(
        self,
        stream: str,
        value: BytesLike,
        *,
        ack_policy: AckPolicy,
        **options: Unpack[ClientPublishOptions],
    ) -> Ack | None: ...

    def publish(
        self,
        stream: str,
        value: BytesLike,
        *,
        ack_policy: AckPolicy = AckPolicy.LEADER,
        **options: Unpack[ClientPublishOptions],
    ) -> Ack | None:
        """Publishes a message and waits for its ack (arguments as for
        :meth:`publish_async`).

        Each thread that calls this gets a PublishAsync stream of its own and
        reads its ack itself, which saves a thread hop per publish (up to
        32 threads per client; beyond that, and for AckPolicy.NONE, publishes
        go through the client's shared stream). A stream found broken before
        sending is replaced; the message was not sent on it.

        Ordering: publishes from one thread through ``publish`` are stored in
        the order they were made, and so are that thread's ``publish_async``
        calls among themselves; a ``publish`` and a ``publish_async`` travel
        on different streams, so between the two kinds only an awaited
        outcome orders them (wait for the future before a ``publish`` that
        must come after it).

        Returns:
            The :class:`Ack`; None for AckPolicy.NONE (once sent). Type
            checkers see ``Ack`` unless ``ack_policy`` may be NONE.

        Raises:
            AckTimeoutError: no ack within the timeout (maybe stored).
            ConnectionLostError: the stream broke after sending (maybe stored).
            NoSuchPartitionError, ReadonlyPartitionError, IncorrectOffsetError,
            MessageTooLargeError: the server refused the message.
            InvalidArgumentError, ArgumentTypeError: bad input (nothing sent).
            ClientClosedError: the client is closed.
        """
        self._check_open()
        request = self._publishing.request(stream, value, ack_policy, options, "publish")
        return self._publishing.publish(request, options.get("timeout"))

    def publish_to_subject(
        self,
        subject: str,
        value: BytesLike,
        *,
        key: BytesLike | None = None,
        headers: Mapping[str, BytesLike] | None = None,
        ack_inbox: str | None = None,
        correlation_id: str | None = None,
        ack_policy: AckPolicy = AckPolicy.LEADER,
        timeout: float | None = None,
    ) -> Ack | None:
        """Publishes a message to a NATS subject: every stream attached to it
        stores it. Waits for the first ack. Not retried (it is not idempotent).

        Args:
            subject: a NATS subject without wildcards.
            value: the payload.
            key: message key.
            headers: header name to bytes (carried, unlike the Go client).
            ack_inbox: NATS subject the server also publishes the ack to.
            correlation_id: id set on the ack.
            ack_policy: LEADER (default), ALL, or NONE.
            timeout: seconds to wait for the ack; None for ``ack_wait``.

        Returns:
            The first :class:`Ack`, or None for AckPolicy.NONE.

        Raises:
            AckTimeoutError: no ack within the timeout (maybe stored).
            AckMismatchError: with an ``ack_inbox`` and a ``correlation_id``,
                the server answered with another publish's ack, read on an
                inbox they share (maybe stored).
        """
        self._check_open()
        return self._publishing.publish_to_subject(
            subject,
            value,
            key=key,
            headers=headers,
            ack_inbox=ack_inbox,
            correlation_id=correlation_id,
            ack_policy=ack_policy,
            timeout=timeout,
        )
