"""The admin operations: streams (create, delete, pause, readonly) and
metadata (the cluster's, a partition's), as requests built from checked
arguments and RPCs made through the router.

Creating and deleting are retried when a broker is unavailable, and when an
attempt outlives the client's ``rpc_timeout`` while the call's own deadline
has time left (the server may still be working on it: on a loaded CI machine
one CreateStream went unanswered for over 10 s). An earlier attempt may then
have been applied although its answer was lost, so "the stream already
exists" after a retried create (or "no such stream" after a retried delete)
counts as success.
"""

from __future__ import annotations

import logging

from liftbridge._core import _retry
from liftbridge._core import _validate as check
from liftbridge._core._metadata import (
    Metadata,
    PartitionMetadata,
    partition_metadata_from_proto,
)
from liftbridge._core._router import Deadline, Leader, Router
from liftbridge._errors import (
    ArgumentTypeError,
    DeadlineExceededError,
    LiftbridgeError,
    NoSuchStreamError,
    NotLeaderError,
    StreamExistsError,
    UnavailableError,
    naming,
)
from liftbridge_api import api_pb2

_log = logging.getLogger(__name__)


def _ms(value: float | None, arg: str) -> api_pb2.NullableInt64 | None:
    if value is None:
        return None
    return api_pb2.NullableInt64(value=round(check.seconds(value, arg=arg, allow_zero=True) * 1000))


def _int64(value: int | None, arg: str) -> api_pb2.NullableInt64 | None:
    if value is None:
        return None
    return api_pb2.NullableInt64(value=check.int64(value, arg=arg, minimum=0))


def _int32(value: int | None, arg: str) -> api_pb2.NullableInt32 | None:
    if value is None:
        return None
    return api_pb2.NullableInt32(value=check.int32(value, arg=arg, minimum=1))


def _bool(value: bool | None, arg: str) -> api_pb2.NullableBool | None:
    if value is None:
        return None
    if not isinstance(value, bool):
        raise ArgumentTypeError(f"{arg} must be a bool or None, got {type(value).__name__}")
    return api_pb2.NullableBool(value=value)


def create_stream_request(
    name: str,
    *,
    subject: str | None,
    group: str | None,
    replication_factor: int | None,
    max_replication: bool,
    partitions: int,
    retention_max_bytes: int | None,
    retention_max_messages: int | None,
    retention_max_age: float | None,
    cleaner_interval: float | None,
    segment_max_bytes: int | None,
    segment_max_age: float | None,
    compact_enabled: bool | None,
    compact_max_goroutines: int | None,
    auto_pause_time: float | None,
    auto_pause_disable_if_subscribers: bool | None,
    min_isr: int | None,
    optimistic_concurrency_control: bool | None,
    encryption: bool | None,
) -> api_pb2.CreateStreamRequest:
    """A CreateStreamRequest from ``Client.create_stream``'s arguments, each checked.

    Raises:
        InvalidArgumentError, ArgumentTypeError: naming the bad argument.
    """
    check.stream_name(name, arg="name", allow_reserved=False)
    if subject is None:
        subject = name
    check.stream_subject(subject, partitions=partitions)
    check.partition_count(partitions)
    if not isinstance(max_replication, bool):
        raise ArgumentTypeError("max_replication must be a bool")
    if group is not None:
        check.queue_group(group)
    if max_replication or replication_factor == -1:
        rf = -1
    elif replication_factor is None:
        rf = 1
    else:
        rf = check.int32(replication_factor, arg="replication_factor", minimum=1)
    return api_pb2.CreateStreamRequest(
        subject=subject,
        name=name,
        group=group or "",
        replicationFactor=rf,
        partitions=partitions,
        retentionMaxBytes=_int64(retention_max_bytes, "retention_max_bytes"),
        retentionMaxMessages=_int64(retention_max_messages, "retention_max_messages"),
        retentionMaxAge=_ms(retention_max_age, "retention_max_age"),
        cleanerInterval=_ms(cleaner_interval, "cleaner_interval"),
        segmentMaxBytes=_int64(segment_max_bytes, "segment_max_bytes"),
        segmentMaxAge=_ms(segment_max_age, "segment_max_age"),
        compactMaxGoroutines=_int32(compact_max_goroutines, "compact_max_goroutines"),
        compactEnabled=_bool(compact_enabled, "compact_enabled"),
        autoPauseTime=_ms(auto_pause_time, "auto_pause_time"),
        autoPauseDisableIfSubscribers=_bool(
            auto_pause_disable_if_subscribers, "auto_pause_disable_if_subscribers"
        ),
        minIsr=_int32(min_isr, "min_isr"),
        optimisticConcurrencyControl=_bool(
            optimistic_concurrency_control, "optimistic_concurrency_control"
        ),
        encryption=_bool(encryption, "encryption"),
    )


def _attempt_timed_out(error: LiftbridgeError) -> bool:
    """An attempt that passed its deadline (the router stops retrying at the
    call's): the server may have been slow rather than the request lost."""
    return isinstance(error, DeadlineExceededError)


def _only(partitions: list[int]) -> int | None:
    """The partition a call was about, when it named exactly one."""
    return partitions[0] if len(partitions) == 1 else None


class Admin:
    """The admin RPCs over a router. Thread-safe (it holds nothing but the router)."""

    def __init__(self, router: Router) -> None:
        self._router = router

    def _applied_once(
        self,
        method: str,
        request: object,
        deadline: Deadline,
        already: type[LiftbridgeError],
    ) -> None:
        """A create/delete retried on unavailable brokers and on attempts that
        passed their deadline within the call's; ``already`` after a retry
        means an earlier attempt was applied, so it is success."""
        retried: list[BaseException] = []
        try:
            self._router.call(
                method,
                request,
                deadline=deadline,
                retry_if=_attempt_timed_out,
                on_retry=retried.append,
            )
        except LiftbridgeError as e:
            if not (retried and isinstance(e, already)):
                raise
            _log.info(
                "%s after a retry answered %s: an earlier attempt (which failed with %r) "
                "was applied",
                method,
                type(e).__name__,
                retried[-1],
            )

    def create_stream(self, request: api_pb2.CreateStreamRequest, deadline: Deadline) -> None:
        """CreateStream (any broker)."""
        self._applied_once("CreateStream", request, deadline, StreamExistsError)

    def delete_stream(self, name: str, deadline: Deadline) -> None:
        """DeleteStream (any broker)."""
        request = api_pb2.DeleteStreamRequest(name=name)
        try:
            self._applied_once("DeleteStream", request, deadline, NoSuchStreamError)
        except LiftbridgeError as e:
            named = naming(e, name)
            if named is e:
                raise
            raise named from e

    def pause_stream(
        self, name: str, partitions: list[int], resume_all: bool, deadline: Deadline
    ) -> None:
        """PauseStream (any broker); pausing twice is harmless, so it is idempotent."""
        request = api_pb2.PauseStreamRequest(name=name, partitions=partitions, resumeAll=resume_all)
        try:
            self._router.call("PauseStream", request, deadline=deadline, idempotent=True)
        except LiftbridgeError as e:
            named = naming(e, name, _only(partitions))
            if named is e:
                raise
            raise named from e

    def set_stream_readonly(
        self, name: str, partitions: list[int], readonly: bool, deadline: Deadline
    ) -> None:
        """SetStreamReadonly (any broker); idempotent."""
        request = api_pb2.SetStreamReadonlyRequest(
            name=name, partitions=partitions, readonly=readonly
        )
        try:
            self._router.call("SetStreamReadonly", request, deadline=deadline, idempotent=True)
        except LiftbridgeError as e:
            named = naming(e, name, _only(partitions))
            if named is e:
                raise
            raise named from e

    def fetch_metadata(self, deadline: Deadline) -> Metadata:
        """The cluster's metadata, fetched now (the cache is refreshed with it).

        A pass over the brokers that none answered is made again (after the
        retry policy's wait) while the deadline lasts: during a failover the
        live brokers of server v1.9.0 answer FetchMetadata only at the
        request's deadline (their survey of the cluster waits for the dead
        peer), and at once the next time (they cached what they heard).
        """
        router = self._router

        def worth_retrying(error: BaseException) -> bool:
            return router.retrying and isinstance(error, (UnavailableError, DeadlineExceededError))

        return _retry.call(
            router.retry_policy,
            lambda: router.refresh(deadline),
            retry_if=worth_retrying,
            describe="FetchMetadata",
            deadline=deadline.expires,
        )

    def fetch_partition_metadata(
        self, stream: str, partition: int, deadline: Deadline
    ) -> PartitionMetadata:
        """FetchPartitionMetadata on the partition's leader; for a paused
        partition (whose leader refuses it) the cluster metadata's view."""
        request = api_pb2.FetchPartitionMetadataRequest(stream=stream, partition=partition)
        try:
            response = self._router.call(
                "FetchPartitionMetadata",
                request,
                target=Leader(stream, partition),
                deadline=deadline,
                idempotent=True,
            )
        except NotLeaderError:
            # A paused partition's leader refuses this RPC; the cluster
            # metadata still describes it (offsets, paused flag, timestamps).
            cluster = self._router.call(
                "FetchMetadata",
                api_pb2.FetchMetadataRequest(streams=[stream]),
                deadline=deadline,
                idempotent=True,
            )
            for s in cluster.streamMetadata:
                if (
                    s.name == stream
                    and partition in s.partitions
                    and s.partitions[partition].paused
                ):
                    return partition_metadata_from_proto(stream, s.partitions[partition])
            raise
        return partition_metadata_from_proto(stream, response.metadata)
