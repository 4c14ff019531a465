"""The executor-side read and the driver's planning called directly (no
SparkSession): ``read_range`` reads Subscribe streams through a router of its
own and builds Arrow columns from the wire messages. Against the real server
for the rows it yields and the ranges planned; a fake broker for what the real
one cannot do on cue (a stream that breaks mid-range, one that stalls)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator

import grpc
import pytest

pytest.importorskip("pyspark", reason="needs the spark extra: pip install -e '.[spark]'")
pytest.importorskip("pyarrow", reason="needs the spark extra: pip install -e '.[spark]'")

import liftbridge
from liftbridge import DeadlineExceededError, InvalidArgumentError
from liftbridge.spark._client_options import ClientConfig
from liftbridge.spark._clients import client_for, close_clients, router_for
from liftbridge.spark._fetch import FetchSettings, OffsetRange, read_range
from liftbridge.spark._offsets import batch_ranges
from liftbridge.spark._options import Mode, read_options
from liftbridge.testing import LocalServer
from liftbridge_api import api_pb2
from tests.spark.helpers import Row, fill, sdk_rows
from tests.unit.fake_broker import FakeBroker, one_partition_stream, serving

pytestmark = [pytest.mark.spark, pytest.mark.timeout(120)]


@pytest.fixture
def client(server: LocalServer) -> Iterator[liftbridge.Client]:
    with liftbridge.Client(server.address) as c:
        yield c
    close_clients()  # read_range's router is cached per process


def _settings(*, headers: bool = False, rows: int = 8192, timeout: float = 30.0) -> FetchSettings:
    return FetchSettings(
        include_headers=headers,
        read_replica=False,
        fail_on_data_loss=True,
        poll_timeout=timeout,
        rows_per_batch=rows,
    )


def _rows(config: ClientConfig, offsets: OffsetRange, settings: FetchSettings) -> list[Row]:
    rows: list[Row] = []
    for batch in read_range(router_for(config), offsets, settings):
        assert batch.num_rows <= settings.rows_per_batch
        for row in batch.to_pylist():
            stamp = row["timestamp"]
            micros = int(stamp.timestamp()) * 1_000_000 + stamp.microsecond
            found: Row = (
                row["key"],
                row["value"],
                row["stream"],
                row["subject"],
                row["partition"],
                row["offset"],
                micros,
            )
            if settings.include_headers:
                found += (dict(row["headers"]),)
            rows.append(found)
    return rows


def test_read_range_yields_the_sdk_rows_in_batches_of_the_size_asked(
    server: LocalServer, client: liftbridge.Client, unique_name: str
) -> None:
    client.create_stream(unique_name, partitions=2)
    fill(client, unique_name, 30)
    client.publish(unique_name, b"no key", partition=1)  # an empty key reads as null
    config = ClientConfig((server.address,))
    expected = sdk_rows(client, unique_name, headers=True)
    ends = {p: 1 + max(r[5] for r in expected if r[4] == p) for p in (0, 1)}
    got = []
    for partition, end in ends.items():
        got += _rows(
            config,
            OffsetRange(unique_name, partition, 0, end),
            _settings(headers=True, rows=4),
        )
    assert sorted(got, key=lambda r: (r[4], r[5])) == expected
    assert any(r[0] is None for r in got)
    # A range inside the partition: exactly its offsets.
    inner = _rows(config, OffsetRange(unique_name, 0, 2, 5), _settings(rows=2))
    assert [r[5] for r in inner] == [2, 3, 4]


def test_router_for_caches_one_router_per_configuration(server: LocalServer) -> None:
    config = ClientConfig((server.address,))
    try:
        first = router_for(config)
        assert router_for(ClientConfig((server.address,))) is first
        first.close()
        again = router_for(config)
        assert again is not first and not again.closed
    finally:
        close_clients()
    assert again.closed


class _Partitioned(FakeBroker):
    """A broker leading partition 0 of stream ``s``."""

    def FetchMetadata(
        self, request: api_pb2.FetchMetadataRequest, context: grpc.ServicerContext
    ) -> api_pb2.FetchMetadataResponse:
        response = super().FetchMetadata(request, context)
        response.streamMetadata.append(one_partition_stream())
        return response


def _message(offset: int) -> api_pb2.Message:
    return api_pb2.Message(
        offset=offset, value=b"%d" % offset, stream="s", partition=0, timestamp=offset * 1000
    )


class _BreaksOnce(_Partitioned):
    """Serves five messages, then fails the stream (UNAVAILABLE) once; the
    next Subscribe is served to its stop offset."""

    def __init__(self) -> None:
        self.starts: list[int] = []

    def Subscribe(
        self, request: api_pb2.SubscribeRequest, context: grpc.ServicerContext
    ) -> Iterator[api_pb2.Message]:
        self.starts.append(request.startOffset)
        yield api_pb2.Message()  # the handshake
        first = len(self.starts) == 1
        for offset in range(request.startOffset, request.stopOffset + 1):
            if first and offset == request.startOffset + 5:
                context.abort(grpc.StatusCode.UNAVAILABLE, "broker going away")
            yield _message(offset)


def test_a_read_resubscribes_from_the_next_offset_after_its_broker_fails() -> None:
    with serving(_BreaksOnce()) as broker:  # type: ignore[abstract]  # only these RPCs
        config = ClientConfig((f"127.0.0.1:{broker.port}",))
        try:
            rows = _rows(config, OffsetRange("s", 0, 10, 22), _settings(rows=4))
        finally:
            close_clients()
    assert [r[5] for r in rows] == list(range(10, 22))
    assert broker.starts == [10, 15]


class _Stalls(_Partitioned):
    """Serves two messages, then sends nothing until the call is cancelled."""

    def __init__(self) -> None:
        self.cancelled = threading.Event()

    def Subscribe(
        self, request: api_pb2.SubscribeRequest, context: grpc.ServicerContext
    ) -> Iterator[api_pb2.Message]:
        yield api_pb2.Message()
        yield _message(request.startOffset)
        yield _message(request.startOffset + 1)
        give_up = time.monotonic() + 30
        while context.is_active() and time.monotonic() < give_up:
            time.sleep(0.05)
        self.cancelled.set()


def test_a_stalled_read_fails_after_the_poll_timeout_and_cancels_its_stream() -> None:
    with serving(_Stalls()) as broker:  # type: ignore[abstract]  # only these RPCs
        config = ClientConfig((f"127.0.0.1:{broker.port}",))
        try:
            with pytest.raises(DeadlineExceededError, match="pollTimeoutMs"):
                _rows(config, OffsetRange("s", 0, 0, 10), _settings(timeout=0.3))
        finally:
            close_clients()
        assert broker.cancelled.wait(10), "the stalled stream was not cancelled"


def test_planning_resolves_the_partitions_at_once_and_fails_on_the_first_bad_one(
    server: LocalServer, client: liftbridge.Client, unique_name: str
) -> None:
    client.create_stream(unique_name, partitions=3)
    for partition, count in ((0, 3), (2, 5)):
        for i in range(count):
            client.publish(unique_name, b"%d" % i, partition=partition)
    options = read_options({"servers": server.address, "stream": unique_name}, Mode.BATCH)
    config = options.client
    ranges = batch_ranges(client_for(config), router_for(config), options)
    assert [(r.partition, r.start, r.end, r.from_earliest) for r in ranges] == [
        (0, 0, 3, True),
        (2, 0, 5, True),
    ]
    ending = json.dumps({unique_name: {"1": 9, "2": 9}})
    bad = read_options(
        {"servers": server.address, "stream": unique_name, "endingOffsets": ending}, Mode.BATCH
    )
    # Both partitions 1 and 2 end before 9: the error names the first.
    with pytest.raises(InvalidArgumentError, match=f"{unique_name}/1 ends at 0"):
        batch_ranges(client_for(config), router_for(config), bad)
