"""A stand-in for :class:`liftbridge._core._router.Router`, for unit tests of the
features that stand on it (cursors, admin, subscriptions, groups) without a
network. It answers from scripts and records what it was asked."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, cast

import grpc

from liftbridge._core._metadata import BrokerInfo, Metadata, PartitionInfo, StreamInfo
from liftbridge._core._retry import RetryPolicy
from liftbridge._core._router import ANY, Deadline, Router, Target
from liftbridge._errors import LiftbridgeError
from liftbridge._transport._status import from_rpc_error
from liftbridge_api import api_pb2


class FakeRpcError(grpc.RpcError, grpc.Call):
    """What a failed gRPC call raises: a status code and details."""

    def __init__(self, code: grpc.StatusCode, details: str = "") -> None:
        super().__init__(details)
        self._code = code
        self._details = details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def initial_metadata(self) -> Any:
        return ()

    def trailing_metadata(self) -> Any:
        return ()

    def is_active(self) -> bool:
        return False

    def time_remaining(self) -> Any:
        return None

    def cancel(self) -> bool:
        return False

    def add_callback(self, callback: Any) -> bool:
        return False


class FakeStream:
    """A server-streaming call behind the SDK's stream interface: yields its
    items (raising the exceptions among them, a gRPC error as the SDK's error
    for it, like every stream); after them it blocks until cancelled, like a
    live stream, unless ``end`` is set."""

    def __init__(self, items: Iterable[object], *, end: bool = False) -> None:
        self._items: deque[object] = deque(items)
        self._end = end
        self._cancelled = threading.Event()

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        try:
            return self._next()
        except grpc.RpcError as e:
            raise from_rpc_error(e) from e

    def _next(self) -> Any:
        if self._cancelled.is_set():
            raise FakeRpcError(grpc.StatusCode.CANCELLED, "cancelled")
        if self._items:
            item = self._items.popleft()
            if isinstance(item, BaseException):
                raise item
            return item
        if self._end:
            raise StopIteration
        self._cancelled.wait(10)
        raise FakeRpcError(grpc.StatusCode.CANCELLED, "cancelled")

    def write_now(self, request: Any) -> bool:
        return False

    def take_ready(self, run: list[Any], limit: int) -> None:
        pass

    def cancel(self) -> bool:
        self._cancelled.set()
        return True

    def done(self) -> bool:
        return self._cancelled.is_set()


def metadata_with(streams: dict[str, int], brokers: Iterable[str] = ("a",)) -> Metadata:
    """Metadata listing ``streams`` (name -> partition count), every
    partition led by the first broker."""
    broker_ids = list(brokers)
    infos = {
        name: StreamInfo(
            name,
            name,
            MappingProxyType(
                {
                    p: PartitionInfo(name, p, broker_ids[0], tuple(broker_ids), tuple(broker_ids))
                    for p in range(count)
                }
            ),
        )
        for name, count in streams.items()
    }
    return Metadata(
        tuple(BrokerInfo(b, "127.0.0.1", 1000 + i) for i, b in enumerate(broker_ids)),
        MappingProxyType(infos),
        MappingProxyType({}),
        None,
    )


@dataclass
class FakeRouter:
    """Answers ``call`` from ``answers`` (method -> queue of responses or
    exceptions; a callable is called with the request) and ``open_stream``
    from ``streams``; records every call in ``calls``."""

    metadata: Metadata = field(default_factory=lambda: metadata_with({}))
    answers: dict[str, deque[object]] = field(default_factory=dict)
    streams: deque[FakeStream] = field(default_factory=deque)
    calls: list[tuple[str, object, Target]] = field(default_factory=list)
    single_attempts: list[str] = field(default_factory=list)  # methods called with retry=False
    refreshes: int = 0
    rpc_timeout: float = 1.0
    retry_policy: RetryPolicy = field(default_factory=lambda: RetryPolicy(max_attempts=1))
    closed: bool = False
    retrying: bool = True

    def answer(self, method: str, *responses: object) -> None:
        self.answers.setdefault(method, deque()).extend(responses)

    def as_router(self) -> Router:
        """This fake, typed as the router it stands in for."""
        return cast(Router, self)

    def deadline(self, timeout: float | None) -> Deadline:
        return Deadline(10.0 if timeout is None else timeout)

    def refresh(self, deadline: Deadline | None = None) -> Metadata:
        self.refreshes += 1
        return self.metadata

    def refresh_quietly(self, deadline: Deadline | None = None) -> None:
        self.refresh(deadline)

    def partition_info(self, stream: str, partition: int, deadline: Deadline) -> PartitionInfo:
        from liftbridge._errors import NoSuchPartitionError

        info = self.metadata.partition(stream, partition)
        if info is None:
            raise NoSuchPartitionError(f"no partition {stream}/{partition}")
        return info

    def is_paused(self, stream: str, partition: int) -> bool:
        info = self.metadata.partition(stream, partition)
        return info is not None and info.paused

    def next_broker(self, error: BaseException) -> None:
        pass

    def broker_failed(self, error: BaseException, deadline: Deadline | None = None) -> None:
        pass

    def call(
        self,
        method: str,
        request: Any,
        *,
        deadline: Deadline,
        target: Target = ANY,
        idempotent: bool = False,
        retry: bool = True,
        retry_if: Callable[[LiftbridgeError], bool] | None = None,
        on_retry: Callable[[BaseException], None] | None = None,
    ) -> Any:
        if not retry:
            self.single_attempts.append(method)
        while True:
            self.calls.append((method, request, target))
            queued = self.answers.get(method)
            if not queued:
                raise AssertionError(f"no answer scripted for {method}")
            answer = queued.popleft()
            if callable(answer):
                answer = answer(request)
            if isinstance(answer, BaseException):
                if retry and queued and isinstance(answer, LiftbridgeError) and answer.retriable:
                    if on_retry is not None:
                        on_retry(answer)
                    continue
                raise answer
            return answer

    def open_stream(
        self, method: str, request: Any, *, target: Target, deadline: Deadline
    ) -> tuple[str, FakeStream]:
        self.calls.append((method, request, target))
        if not self.streams:
            raise AssertionError(f"no stream scripted for {method}")
        opened = self.streams.popleft()
        return "127.0.0.1:1000", opened


def handshake() -> api_pb2.Message:
    """The empty message a Subscribe stream starts with."""
    return api_pb2.Message()


def message(stream: str, offset: int, partition: int = 0) -> api_pb2.Message:
    return api_pb2.Message(stream=stream, partition=partition, offset=offset, value=b"%d" % offset)
