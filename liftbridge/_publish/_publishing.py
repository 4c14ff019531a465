"""From a publish call to the path that carries it.

:class:`Publishing` checks a publish's arguments, picks its partition (an
explicit one, a partitioner's choice, the key's partition by the Go client's
formula, else 0), builds the request, and hands it to the path that carries
it: the calling thread's own stream (:mod:`liftbridge._publish._lanes`) for
``publish``, the shared PublishAsync stream (:mod:`liftbridge._publish._publisher`)
for ``publish_async`` and when no lane is free, the unary Publish RPC for a
publish naming an ack inbox (:mod:`liftbridge._publish._inbox`), and the
unary PublishToSubject RPC for ``publish_to_subject``. Nothing here is
retried: a publish is not idempotent.

Thread-safe: it holds no state of its own beyond its settings.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeoutError
from typing import cast

from liftbridge._core import _validate as check
from liftbridge._core._acks import Ack, AckPolicy, ack_outcome
from liftbridge._core._callbacks import CallbackRunner
from liftbridge._core._metadata import Metadata
from liftbridge._core._partitioner import choose_partition
from liftbridge._core._router import ANY, Router
from liftbridge._core._validate import BytesLike
from liftbridge._errors import (
    AckTimeoutError,
    ArgumentTypeError,
    DeadlineExceededError,
    InvalidArgumentError,
    NoSuchPartitionError,
    naming,
)
from liftbridge._publish import _inbox
from liftbridge._publish._batch import Batch, correlation_ids
from liftbridge._publish._bytes import WIRE_POLICIES
from liftbridge._publish._lanes import Lanes
from liftbridge._publish._options import (
    CLIENT_OPTIONS,
    ClientPublishOptions,
    StreamPublishOptions,
    check_names,
)
from liftbridge._publish._publisher import AckHandler, Publisher
from liftbridge._publish._request_bytes import (
    PublishBytes,
    Request,
    plain_publish_bytes,
    publish_bytes,
    publish_bytes_like,
    stream_field,
)
from liftbridge_api import api_pb2

_RESULT_MARGIN = 10.0
"""Seconds a blocking publish waits past its ack timeout for the outcome: the
ack timer resolves it by its deadline; the margin only bounds this wait
should that thread be starved."""


def _check_ack_policy(ack_policy: object) -> AckPolicy:
    if not isinstance(ack_policy, AckPolicy):
        raise ArgumentTypeError(f"ack_policy must be an AckPolicy, got {type(ack_policy).__name__}")
    return ack_policy


_CHECKED_STREAMS = 4096
"""At most this many stream names are remembered as checked."""
_PublishRequest = api_pb2.PublishRequest


def check_future(future: object, ack_handler: object, ack_policy: object) -> None:
    """``publish_async``'s ``future`` argument.

    Raises:
        ArgumentTypeError: ``future`` is not a bool.
        InvalidArgumentError: ``future`` is False with no ack handler to hear
            the outcome (unless AckPolicy.NONE).
    """
    if future is True:
        return
    if future is not False:
        raise ArgumentTypeError(f"future must be a bool, got {type(future).__name__}")
    if ack_handler is None and ack_policy is not AckPolicy.NONE:
        raise InvalidArgumentError(
            "future=False needs an ack_handler (unless ack_policy is AckPolicy.NONE): "
            "the publish's outcome would reach no one"
        )


class Publishing:
    """The publish operations of one client, over its router and publish paths.

    Args:
        router: the client's router.
        publisher: the shared PublishAsync stream.
        lanes: the per-thread streams of ``publish``.
        callbacks: the client's ``liftbridge-callbacks`` runner.
        ack_wait: default seconds a publish waits for its ack.
        max_message_size: the server's limit on one message, in bytes.
    """

    def __init__(
        self,
        router: Router,
        publisher: Publisher,
        lanes: Lanes,
        callbacks: CallbackRunner,
        *,
        ack_wait: float,
        max_message_size: int,
    ) -> None:
        self._router = router
        self._inbox = _inbox.InboxPool(self._invoke_publish, callbacks, publisher)
        self._publisher = publisher
        self._next_correlation_id = publisher.next_correlation_id
        self._lanes = lanes
        self._callbacks = callbacks
        self._ack_wait = ack_wait
        self._max_message_size = max_message_size
        # Stream names publishes have used that passed check.stream_name, and
        # the field their requests carry (see _request_bytes.stream_field).
        self._stream_fields: dict[str, bytes] = {}
        # The largest request (serialized) the server stores, with its envelope.
        self._wire_limit = max_message_size - check.ENVELOPE_ALLOWANCE

    def _stream_metadata(self, stream: str) -> Metadata:
        """Metadata that knows the stream (refreshed if the cache does not).

        Raises:
            NoSuchStreamError: the stream is unknown even after refreshing.
        """
        self._router.partition_info(stream, 0, self._router.deadline(None))
        return self._router.metadata

    def request(
        self,
        stream: str,
        value: BytesLike,
        ack_policy: AckPolicy,
        options: ClientPublishOptions,
        method: str,
    ) -> Request:
        """The request for ``publish`` and ``publish_async`` (``method``, named
        in errors), every argument checked: written byte by byte
        (:mod:`liftbridge._publish._request_bytes`) unless it has headers or
        an ack inbox.

        Raises:
            InvalidArgumentError, ArgumentTypeError: bad input.
            MessageTooLargeError: over ``max_message_size``.
            NoSuchStreamError: a partitioner or key needs a missing stream's metadata.
        """
        if options:
            check_names(options, CLIENT_OPTIONS, method)
            key = options.get("key")
            headers = options.get("headers")
            expected_offset = options.get("expected_offset")
            correlation_id = options.get("correlation_id")
            ack_inbox = options.get("ack_inbox")
            partition = options.get("partition")
            partitioner = options.get("partitioner")
            timeout = options.get("timeout")
            if timeout is not None:
                check.seconds(timeout, arg="timeout")
        else:  # the commonest publish: no options (eight lookups the less)
            key = headers = expected_offset = correlation_id = ack_inbox = None
            partition = partitioner = None
        field = self._stream_fields.get(stream) if type(stream) is str else None
        if field is None:
            check.stream_name(stream)
            if len(self._stream_fields) >= _CHECKED_STREAMS:
                self._stream_fields.clear()
            field = self._stream_fields[stream] = stream_field(stream)
        # The common case (bytes, no key, an AckPolicy) without a call per check.
        if type(value) is not bytes:
            value = check.data(value)
        if key is not None:
            key = check.data(key, arg="key")
        header_map = check.headers(headers) if headers is not None else None
        if type(ack_policy) is not AckPolicy:
            _check_ack_policy(ack_policy)
        if expected_offset is not None:
            check.int64(expected_offset, arg="expected_offset")
            if ack_policy is AckPolicy.NONE:
                raise InvalidArgumentError(
                    "expected_offset needs an ack (ack_policy LEADER or ALL): the server refuses "
                    "optimistic-concurrency publishes with AckPolicy.NONE"
                )
        if correlation_id is None:
            correlation_id = self._next_correlation_id()
        else:
            check.optional_text(correlation_id, arg="correlation_id")
        if partition is not None or partitioner is not None or key:
            partition = choose_partition(
                stream,
                key,
                value,
                partition=partition,
                partitioner=partitioner,
                metadata=lambda: self._stream_metadata(stream),
            )
        if header_map or ack_inbox is not None:
            return self._generated(
                stream,
                value,
                correlation_id,
                key,
                partition,
                ack_policy,
                expected_offset,
                header_map,
                ack_inbox,
            )
        request = publish_bytes(
            stream,
            field,
            value,
            correlation_id,
            key,
            partition or 0,
            WIRE_POLICIES[ack_policy],
            -1 if expected_offset is None else expected_offset,
        )
        if len(request.wire) > self._wire_limit:
            check.message_size(request, limit=self._max_message_size)
        return request

    def _generated(
        self,
        stream: str,
        value: bytes,
        correlation_id: str,
        key: bytes | None,
        partition: int | None,
        ack_policy: AckPolicy,
        expected_offset: int | None,
        header_map: dict[str, bytes] | None,
        ack_inbox: str | None,
    ) -> api_pb2.PublishRequest:
        """The request of a publish with headers or an ack inbox, as the
        generated class (see _request_bytes), its size checked."""
        # Field by field, the zeros (partition 0, AckPolicy.LEADER) left unset:
        # about half the time keyword arguments take, the same bytes on the wire.
        request = _PublishRequest()
        request.stream = stream
        request.value = value
        request.correlationId = correlation_id
        request.expectedOffset = -1 if expected_offset is None else expected_offset
        if partition:  # none of the three: 0, as choose_partition says
            request.partition = partition
        if ack_policy is not AckPolicy.LEADER:
            request.ackPolicy = api_pb2.AckPolicy.ValueType(ack_policy.value)
        # Set only when present: filling an empty map field is surprisingly slow.
        if key:
            request.key = key
        if header_map:
            request.headers.update(header_map)
        if ack_inbox is not None:
            request.ackInbox = check.subject(ack_inbox, arg="ack_inbox")
        check.message_size(request, limit=self._max_message_size)
        return request

    def publish_async(
        self,
        stream: str,
        value: BytesLike,
        ack_policy: AckPolicy,
        options: ClientPublishOptions,
        ack_handler: AckHandler | None,
        future: bool,
    ) -> Future[Ack | None] | None:
        """Checks a publish (as :meth:`request`; ``ack_handler`` and ``future``
        checked by the caller, see :func:`check_future`) and sends it without
        waiting for its ack; returns its Future, or None when ``future`` is
        False.

        ``publish_async(stream, value)`` to a stream published to before,
        nearly every call, takes a short way to the same request: nothing
        else to check, no key, partition or offset to place
        (:func:`plain_publish_bytes`).

        Raises:
            as :meth:`request`, and as :meth:`Publisher.submit`.
        """
        if not options:
            field = self._stream_fields.get(stream) if type(stream) is str else None
            if field is not None and type(value) is bytes and type(ack_policy) is AckPolicy:
                plain = plain_publish_bytes(
                    stream, field, value, self._next_correlation_id(), WIRE_POLICIES[ack_policy]
                )
                if len(plain.wire) > self._wire_limit:
                    check.message_size(plain, limit=self._max_message_size)
                return self._publisher.submit(plain, ack_handler, None, future)
        request = self.request(stream, value, ack_policy, options, "publish_async")
        timeout = options.get("timeout")
        if isinstance(request, _PublishRequest) and request.ackInbox:
            wait = self._ack_wait if timeout is None else timeout
            outcome = self._inbox.publish_async(request, wait, ack_handler)
            return outcome if future else None
        return self._publisher.submit(request, ack_handler, timeout, future)

    def publish_batch(
        self,
        stream: str,
        values: list[bytes],
        ack_policy: AckPolicy,
        options: StreamPublishOptions,
        batch: Batch,
    ) -> None:
        """A ``publish_many_async`` batch (``values`` non-empty bytes
        payloads): the first message's request is built and checked as
        :meth:`request` does, every other one made like it with its own value
        and correlation id (and, with a partitioner, its own partition),
        measured only when it may be over the limit; nothing is sent before
        all are built. Then the publisher admits them (:meth:`Publisher.submit_many`)."""
        method = "publish_many_async"
        ids = correlation_ids(len(values))
        # The batch's options (a subset of a client publish's) and the first id.
        first_options = cast(ClientPublishOptions, {**options, "correlation_id": ids[0]})
        first = self.request(stream, values[0], ack_policy, first_options, method)
        partitioner = options.get("partitioner")
        each = partitioner is not None and options.get("partition") is None
        partition = first.partition

        def partition_of(value: bytes) -> int:
            if not each:
                return partition
            return choose_partition(
                stream,
                first.key or None,
                value,
                partition=None,
                partitioner=partitioner,
                metadata=lambda: self._stream_metadata(stream),
            )

        requests: list[Request] = [first]
        if isinstance(first, PublishBytes) and not each:
            rest = publish_bytes_like(first, stream_field(stream), values[1:], ids[1:])
            limit = self._wire_limit
            for request in rest:
                if len(request.wire) > limit:
                    check.message_size(request, limit=self._max_message_size)
            requests += rest
        elif isinstance(first, PublishBytes):
            field = stream_field(stream)
            for value, correlation_id in zip(values[1:], ids[1:], strict=True):
                request = publish_bytes(
                    stream,
                    field,
                    value,
                    correlation_id,
                    first.key,
                    partition_of(value),
                    first.ackPolicy,
                    first.expectedOffset,
                )
                if len(request.wire) > self._wire_limit:
                    check.message_size(request, limit=self._max_message_size)
                requests.append(request)
        else:  # with headers: the generated class, field by field as the first
            for value, correlation_id in zip(values[1:], ids[1:], strict=True):
                generated = api_pb2.PublishRequest()
                generated.CopyFrom(first)
                generated.value = value
                generated.correlationId = correlation_id
                generated.partition = partition_of(value)
                check.message_size(generated, limit=self._max_message_size)
                requests.append(generated)
        self._publisher.submit_many(requests, batch, options.get("timeout"), one_partition=not each)

    def close(self) -> None:
        """Takes no more ack-inbox publishes (see :class:`_inbox.InboxPool`)."""
        self._inbox.close()

    def join(self, deadline: float) -> None:
        """Waits for the ack-inbox pool's threads until ``deadline`` at most."""
        self._inbox.join(deadline)

    def publish(self, request: Request, timeout: float | None) -> Ack | None:
        """Sends a checked request and waits for its outcome.

        Raises:
            AckTimeoutError: no outcome within the timeout (maybe stored).
        """
        try:
            return self._publish(request, timeout)
        except NoSuchPartitionError as e:
            named = naming(e, request.stream, request.partition)
            if named is e:
                raise
            raise named from e

    def _publish(self, request: Request, timeout: float | None) -> Ack | None:
        wait = self._ack_wait if timeout is None else timeout
        if isinstance(request, _PublishRequest) and request.ackInbox:
            return _inbox.publish(self._invoke_publish, request, wait)
        if request.ackPolicy != AckPolicy.NONE.value:
            ack = self._lanes.publish(request, timeout)
            if ack is not None:
                return ack
        future = self._publisher.submit(request, None, timeout)
        try:
            return future.result(wait + _RESULT_MARGIN)
        except FutureTimeoutError:
            raise AckTimeoutError(
                f"no outcome for the publish to {request.stream!r} within {wait:g}s; "
                "the message may or may not have been stored"
            ) from None

    def _invoke_publish(
        self, request: api_pb2.PublishRequest, wait: float
    ) -> api_pb2.PublishResponse:
        """One unary Publish (for publishes naming an ack inbox); not retried."""
        deadline = self._router.deadline(wait)
        response: api_pb2.PublishResponse = self._router.call(
            "Publish", request, target=ANY, deadline=deadline, retry=False
        )
        return response

    def publish_to_subject(
        self,
        subject: str,
        value: BytesLike,
        *,
        key: BytesLike | None,
        headers: Mapping[str, BytesLike] | None,
        ack_inbox: str | None,
        correlation_id: str | None,
        ack_policy: AckPolicy,
        timeout: float | None,
    ) -> Ack | None:
        """One PublishToSubject RPC, its first ack awaited (arguments as for
        :meth:`Client.publish_to_subject`)."""
        check.subject(subject)
        _check_ack_policy(ack_policy)
        if ack_inbox is not None:
            check.subject(ack_inbox, arg="ack_inbox")
        request = api_pb2.PublishToSubjectRequest(
            subject=subject,
            key=check.optional_bytes(key, arg="key") or b"",
            value=check.data(value),
            headers=check.headers(headers),
            ackInbox=ack_inbox or "",
            correlationId=check.optional_text(correlation_id, arg="correlation_id") or "",
            ackPolicy=ack_policy.value,
        )
        check.message_size(request, limit=self._max_message_size)
        wait = self._ack_wait if timeout is None else check.seconds(timeout, arg="timeout")
        deadline = self._router.deadline(wait)
        try:
            # Not retried: a publish is not idempotent.
            response = self._router.call(
                "PublishToSubject", request, target=ANY, deadline=deadline, retry=False
            )
        except DeadlineExceededError as e:
            raise AckTimeoutError(
                f"no ack for the publish to {subject!r} within {wait:g}s; "
                "the message may or may not have been stored"
            ) from e
        if ack_policy is AckPolicy.NONE or not response.HasField("ack"):
            return None
        if (
            ack_inbox
            and request.correlationId
            and request.correlationId != response.ack.correlationId
        ):
            raise _inbox.mismatch(request.correlationId, subject, ack_inbox, response.ack)
        ack, error = ack_outcome(response.ack)
        if error is not None:
            raise error
        return ack
