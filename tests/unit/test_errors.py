"""The gRPC status mapping: one function, server texts of Liftbridge v1.9.0."""

from __future__ import annotations

import grpc
import pytest

import liftbridge
from liftbridge._errors import from_async_error
from liftbridge._transport._status import from_rpc_error


class FakeRpcError(grpc.RpcError, grpc.Call):  # type: ignore[misc]
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


C = grpc.StatusCode


@pytest.mark.parametrize(
    ("code", "details", "expected"),
    [
        (C.ALREADY_EXISTS, "stream already exists", liftbridge.StreamExistsError),
        (C.NOT_FOUND, "stream not found", liftbridge.NoSuchStreamError),
        (C.NOT_FOUND, "No such stream: foo", liftbridge.NoSuchStreamError),
        (C.NOT_FOUND, "No such partition", liftbridge.NoSuchPartitionError),
        (C.NOT_FOUND, "commit log deleted", liftbridge.StreamDeletedError),
        (C.FAILED_PRECONDITION, "Server not partition leader", liftbridge.NotLeaderError),
        (C.FAILED_PRECONDITION, "Server not cursor partition leader", liftbridge.NotLeaderError),
        (C.FAILED_PRECONDITION, "commit log was closed", liftbridge.PartitionPausedError),
        (C.FAILED_PRECONDITION, "partition is readonly", liftbridge.ReadonlyPartitionError),
        (
            C.FAILED_PRECONDITION,
            "Consumer is not currently assigned this partition",
            liftbridge.ConsumerGroupError,
        ),
        (C.RESOURCE_EXHAUSTED, "End of readonly partition", liftbridge.ReadonlyPartitionError),
        (C.RESOURCE_EXHAUSTED, "Stop offset reached", liftbridge.StopPositionReachedError),
        (C.INVALID_ARGUMENT, "Subject is invalid", liftbridge.InvalidArgumentError),
        (C.UNAVAILABLE, "connection refused", liftbridge.UnavailableError),
        (C.DEADLINE_EXCEEDED, "", liftbridge.DeadlineExceededError),
        (C.UNKNOWN, "incorrect expected offset", liftbridge.IncorrectOffsetError),
        (C.UNKNOWN, "The client is not authorized to call X", liftbridge.PermissionDeniedError),
        (C.INTERNAL, "boom", liftbridge.ServerError),
        (C.INTERNAL, "nats: no responders available for request", liftbridge.UnavailableError),
        (C.INTERNAL, "no known metadata leader", liftbridge.UnavailableError),
        (C.INTERNAL, "segment has been closed", liftbridge.PartitionPausedError),
    ],
)
def test_status_mapping(code: grpc.StatusCode, details: str, expected: type[Exception]) -> None:
    error = from_rpc_error(FakeRpcError(code, details))
    assert type(error) is expected
    assert details in str(error)


def test_retriable_flags() -> None:
    assert liftbridge.UnavailableError.retriable
    assert liftbridge.NotLeaderError.retriable
    assert liftbridge.DeadlineExceededError.retriable
    assert not liftbridge.StreamExistsError.retriable
    assert not liftbridge.InvalidArgumentError.retriable


@pytest.mark.parametrize(
    "cls",
    [
        liftbridge.AckTimeoutError,
        liftbridge.AckMismatchError,
        liftbridge.ConnectionLostError,
        liftbridge.LeaderLostError,
    ],
)
def test_a_lost_answer_may_have_been_applied_and_is_not_safe_to_retry(
    cls: type[liftbridge.LiftbridgeError],
) -> None:
    assert cls.maybe_applied
    assert not cls.retriable


@pytest.mark.parametrize(
    "cls",
    [liftbridge.UnavailableError, liftbridge.NotLeaderError, liftbridge.StreamExistsError],
)
def test_other_failures_were_not_applied(cls: type[liftbridge.LiftbridgeError]) -> None:
    assert not cls.maybe_applied


def test_builtin_bases() -> None:
    assert issubclass(liftbridge.AckTimeoutError, TimeoutError)
    assert issubclass(liftbridge.InvalidArgumentError, ValueError)
    assert issubclass(liftbridge.ArgumentTypeError, TypeError)
    assert issubclass(liftbridge.UnavailableError, ConnectionError)


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("NOT_FOUND", liftbridge.NoSuchPartitionError),
        ("READONLY", liftbridge.ReadonlyPartitionError),
        ("INCORRECT_OFFSET", liftbridge.IncorrectOffsetError),
        ("TOO_LARGE", liftbridge.MessageTooLargeError),
        ("ENCRYPTION_FAILED", liftbridge.EncryptionError),
        ("PERMISSION_DENIED", liftbridge.PermissionDeniedError),
        ("INTERNAL", liftbridge.ServerError),
    ],
)
def test_async_error_mapping(code: str, expected: type[Exception]) -> None:
    assert type(from_async_error(code, "text")) is expected
