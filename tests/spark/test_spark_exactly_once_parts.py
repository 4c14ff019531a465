"""The exactly-once sink's task and driver steps called directly (no
SparkSession) against the real server: a retried task, a re-run write, a
micro-batch re-run after its commit, and two attempts of one task racing a
foreign writer on a stream with optimistic concurrency control."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

pytest.importorskip("pyspark", reason="needs the spark extra: pip install -e '.[spark]'")
pytest.importorskip("pyarrow", reason="needs the spark extra: pip install -e '.[spark]'")

import pyarrow as pa

import liftbridge
from liftbridge import DEFAULT_RETRY_POLICY, InvalidArgumentError, StartPosition, StopPosition
from liftbridge._core._router import Router
from liftbridge.spark._clients import close_clients
from liftbridge.spark._exactly_once import (
    ROW_HEADER,
    ExactlyOncePlan,
    plan_bounds,
    record_batch_end,
    write_exactly_once,
)
from liftbridge.spark._options import write_options
from liftbridge.spark._writer import LiftbridgeStreamWriter, LiftbridgeWriter
from liftbridge.testing import LocalServer

pytestmark = pytest.mark.spark


@pytest.fixture
def client(server: LocalServer) -> Iterator[liftbridge.Client]:
    with liftbridge.Client(server.address) as c:
        yield c
    close_clients()  # the parts under test cache clients per process


def _messages(client: liftbridge.Client, stream: str) -> list[liftbridge.Message]:
    found: list[liftbridge.Message] = []
    info = client.fetch_metadata().get_stream(stream)
    assert info is not None
    for p in sorted(info.partitions):
        if client.fetch_partition_metadata(stream, p).high_watermark < 0:
            continue
        with client.subscribe(
            stream, partition=p, start=StartPosition.EARLIEST, stop=StopPosition.LATEST
        ) as subscription:
            found.extend(subscription)
    return found


def _rows(count: int, tag: str = "") -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {
            "value": [f"{tag}v{i}".encode() for i in range(count)],
            "key": [f"k{i}".encode() for i in range(count)],
        }
    )


def _router(server: LocalServer) -> Router:
    router = Router(
        (server.address,), tls=None, rpc_timeout=10.0, retry_policy=DEFAULT_RETRY_POLICY
    )
    router.connect(5.0)
    return router


def _options(server: LocalServer, stream: str, **more: str) -> dict[str, str]:
    return {"servers": server.address, "stream": stream, "exactlyOnce": "true", **more}


def test_a_retried_task_and_a_rerun_write_store_nothing_twice(
    server: LocalServer, client: liftbridge.Client, unique_name: str
) -> None:
    client.create_stream(unique_name, partitions=3, optimistic_concurrency_control=True)
    client.publish(unique_name, b"before", partition=1)
    options = write_options(_options(server, unique_name, writeId="rerun"))
    first = LiftbridgeWriter(options)
    # The first attempt stores only part of its rows (it "dies" after 30).
    assert first.write(iter([_rows(30)])).skipped == 0
    message = first.write(iter([_rows(100)]))  # the retry, same task
    assert (message.rows, message.skipped) == (100, 30)
    assert sum(p.rows for p in message.partitions) == 70
    # A new driver with the same writeId (the job run again) stores nothing.
    again = LiftbridgeWriter(options).write(iter([_rows(100)]))
    assert (again.rows, again.skipped) == (100, 100)
    stored = _messages(client, unique_name)
    values = sorted(m.value for m in stored if m.value != b"before")
    assert values == sorted(f"v{i}".encode() for i in range(100))
    # The key picks the partition, as without exactlyOnce; the row's identity is a header.
    by_key = liftbridge.PartitionByKey()
    metadata = client.fetch_metadata()
    for m in stored:
        if m.value != b"before":
            assert m.partition == by_key.partition(unique_name, m.key, b"", metadata)
            row = int(m.value[1:])
            assert m.headers[ROW_HEADER] == f"rerun/0/0/{row}".encode()


def test_a_retried_task_racing_a_foreign_writer_stores_each_row_once(
    server: LocalServer, client: liftbridge.Client, unique_name: str
) -> None:
    client.create_stream(unique_name, optimistic_concurrency_control=True)
    options = write_options(_options(server, unique_name, writeId="race"))
    plan = ExactlyOncePlan("race", plan_bounds(client, unique_name, "race"))
    stop = threading.Event()
    failures: list[BaseException] = []

    def foreign() -> None:
        while not stop.wait(0.002):
            try:
                client.publish(unique_name, b"foreign")
            except liftbridge.LiftbridgeError as e:  # a slow machine: the ack timed out
                failures.append(e)
                return

    # The first attempt stored a third of the rows before it died.
    first = _router(server)
    try:
        write_exactly_once(client, first, options, plan, [_rows(1000)], -1, 0)
    finally:
        first.close()

    def attempt() -> None:
        # The retry runs in a process of its own, with its own client.
        with liftbridge.Client(server.address) as own:
            router = _router(server)
            try:
                write_exactly_once(own, router, options, plan, [_rows(3000)], -1, 0)
            except BaseException as e:
                failures.append(e)
            finally:
                router.close()

    writer = threading.Thread(target=foreign)
    attempts = [threading.Thread(target=attempt)]
    writer.start()
    for t in attempts:
        t.start()
    for t in attempts:
        t.join(90)
    stop.set()
    writer.join(10)
    # A task that keeps meeting the foreign writer must still finish: before
    # the task read its tail after the read-back, it met the writer on every
    # try and ran past the test's timeout.
    assert [t.name for t in attempts if t.is_alive()] == []
    assert failures == []
    values = [m.value for m in _messages(client, unique_name)]
    mine = [v for v in values if v != b"foreign"]
    assert sorted(mine) == sorted(f"v{i}".encode() for i in range(3000))
    assert len(values) > len(mine)  # the foreign writer did get in between


def test_a_micro_batch_reads_back_from_the_previous_batch_end_unless_it_committed_itself(
    server: LocalServer, client: liftbridge.Client, unique_name: str
) -> None:
    client.create_stream(unique_name)
    options = write_options(_options(server, unique_name))
    writer = LiftbridgeStreamWriter(options, "query-1")
    plan = ExactlyOncePlan("query-1", plan_bounds(client, unique_name, "query-1"))
    router = _router(server)
    try:
        _, _, ends = write_exactly_once(client, router, options, plan, [_rows(20, "a")], 0, 0)
        record_batch_end(client, unique_name, "query-1", 0, {0: ends[0][1]})
        # Batch 1 re-run after its commit (the driver died before Spark logged it).
        _, _, ends = write_exactly_once(client, router, options, plan, [_rows(20, "b")], 1, 0)
        writer.commit([], 1)
        record_batch_end(client, unique_name, "query-1", 1, {0: ends[0][1]})
        _, skipped, _ = write_exactly_once(client, router, options, plan, [_rows(20, "b")], 1, 0)
        assert skipped == 20
    finally:
        router.close()
    assert len(_messages(client, unique_name)) == 40


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"exactlyOnce": "yes"}, "option exactlyOnce must be true or false"),
        ({"exactlyOnce": "true", "ackPolicy": "none"}, "needs acks"),
        ({"writeId": "w"}, "option writeId needs option exactlyOnce=true"),
        ({"exactlyOnce": "true", "writeId": "a/b"}, "option writeId must be"),
    ],
)
def test_bad_exactly_once_options_name_the_option(options: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        write_options({"servers": "127.0.0.1:9292", "stream": "s", **options})
    with pytest.raises(InvalidArgumentError, match="needs the stream option"):
        write_options({"servers": "127.0.0.1:9292", "exactlyOnce": "true"})


def test_client_options_reach_the_client_config_and_bad_ones_name_themselves() -> None:
    options = write_options(
        {
            "servers": "127.0.0.1:9292",
            "stream": "s",
            "liftbridge.rpcTimeoutMs": "2500",
            "liftbridge.ackWaitMs": "700",
            "liftbridge.maxInflight": "64",
            "liftbridge.tls.serverName": "broker",
        }
    )
    config = options.client
    assert (config.rpc_timeout, config.ack_wait, config.max_inflight) == (2.5, 0.7, 64)
    assert config.tls_server_name == "broker"
    with pytest.raises(
        InvalidArgumentError, match=r"tls\.servername and liftbridge\.tls\.servername"
    ):
        write_options(
            {
                "servers": "127.0.0.1:9292",
                "stream": "s",
                "tls.serverName": "a",
                "liftbridge.tls.serverName": "b",
            }
        )
    with pytest.raises(InvalidArgumentError, match=r"option liftbridge\.maxInflight must be >= 1"):
        write_options({"servers": "127.0.0.1:9292", "stream": "s", "liftbridge.maxInflight": "0"})
