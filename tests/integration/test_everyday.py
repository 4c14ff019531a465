"""Everyday use against a real server: notebooks (re-run cells, readable reprs,
HTML tables), pickling and copying values, DataFrames, short tracebacks, and a
subscription that gives up saying why."""

from __future__ import annotations

import copy
import logging
import pickle
import sys
import threading
import time
import traceback
from collections.abc import Callable
from datetime import UTC, datetime

import pytest

import liftbridge
from liftbridge import StartPosition, StopPosition


def _fill(client: liftbridge.Client, stream: str, count: int) -> None:
    for n in range(count):
        client.publish(stream, f"m{n}".encode(), key=b"k", headers={"n": str(n).encode()})


def _ends_within(iterate: Callable[[], object], seconds: float) -> bool:
    """Runs ``iterate`` on a helper thread; True when it returned in time."""
    done = threading.Event()

    def run() -> None:
        iterate()
        done.set()

    thread = threading.Thread(target=run, name="test-iterate", daemon=True)
    thread.start()
    return done.wait(seconds)


def test_iterating_a_finished_subscription_again_ends_at_once(
    client: liftbridge.Client, stream: str
) -> None:
    _fill(client, stream, 3)
    sub = client.subscribe(stream, start=StartPosition.EARLIEST, stop=StopPosition.LATEST)
    assert [m.value for m in sub] == [b"m0", b"m1", b"m2"]
    # The notebook cell `for m in sub: ...` run a second time: it used to block for ever.
    again: list[liftbridge.Message] = []
    assert _ends_within(lambda: again.extend(sub), 10)
    assert again == []

    closed = client.subscribe(stream, start=StartPosition.EARLIEST)
    closed.close()
    assert _ends_within(lambda: list(closed), 10)
    assert _ends_within(lambda: list(closed), 10)


def test_a_failed_subscription_raises_once_then_ends(
    client: liftbridge.Client, stream: str, caplog: pytest.LogCaptureFixture
) -> None:
    sub = client.subscribe(stream)
    with caplog.at_level(logging.WARNING, logger="liftbridge"):
        client.pause_stream(stream)
        with pytest.raises(liftbridge.PartitionPausedError):
            list(sub)
    assert _ends_within(lambda: list(sub), 10)
    warnings = [
        r for r in caplog.records if r.levelno == logging.WARNING and "gave up" in r.message
    ]
    assert len(warnings) == 1
    assert stream in warnings[0].message and "PartitionPausedError" in warnings[0].message


def test_metadata_reads_well_pickles_and_copies(
    client: liftbridge.Client, unique_name: str
) -> None:
    client.create_stream(unique_name, partitions=2)
    metadata = client.fetch_metadata()
    while metadata.partition(unique_name, 1) is None:  # brokers learn of a stream in turn
        time.sleep(0.05)
        metadata = client.fetch_metadata()

    assert pickle.loads(pickle.dumps(metadata)) == metadata
    assert copy.deepcopy(metadata) == metadata
    assert copy.copy(metadata) == metadata
    stream = metadata.streams[unique_name]
    assert pickle.loads(pickle.dumps(stream)) == stream
    with pytest.raises(TypeError):
        metadata.streams[unique_name] = stream  # type: ignore[index]

    text = repr(metadata)
    assert len(text) < 600, text
    assert "__cursors" not in text and "internal" in text
    assert "updated=" in text and str(datetime.now(UTC).year) in text
    assert unique_name in metadata.stream_names()
    assert "__cursors" not in metadata.stream_names()
    assert "__cursors" in metadata.stream_names(internal=True)

    table = metadata.table()
    rows = [row for row in table.rows if row[0] == unique_name]
    assert [row[2] for row in rows] == ["0", "1"]  # one row per partition
    assert all(row[3] == "a" and row[5] == "a" for row in rows)  # leader, ISR
    assert not any(row[0].startswith("__") for row in table.rows)
    assert "internal" in table.note
    assert any(row[0] == "__cursors" for row in metadata.table(internal=True).rows)
    html = metadata._repr_html_()
    assert "<table>" in html and unique_name in html and "__cursors" not in html

    assert stream.creation_timestamp is not None and stream.creation_timestamp.tzinfo is UTC
    assert abs((datetime.now(UTC) - stream.creation_timestamp).total_seconds()) < 3600
    assert repr(stream).startswith(f"<StreamInfo {unique_name!r}")
    assert "<table>" in stream._repr_html_()
    partition = stream.partitions[1]
    assert repr(partition) == f"<PartitionInfo {unique_name}/1 leader=a replicas=[a] isr=[a]>"
    assert f"{unique_name}/1" in partition._repr_html_()

    client.pause_stream(unique_name, partitions=[0])
    paused = client.fetch_metadata().partition(unique_name, 0)
    assert paused is not None and repr(paused).endswith(" paused>")

    received = client.fetch_partition_metadata(unique_name, 1).messages_received
    assert received.first is None and received.latest is None  # nothing published
    assert repr(received) == "EventTimestamps(first=-, latest=-)"
    client.publish(unique_name, b"x", partition=1)
    received = client.fetch_partition_metadata(unique_name, 1).messages_received
    assert received.latest is not None and received.latest.tzinfo is UTC
    assert f"latest={received.latest.isoformat(sep=' ')}" in repr(received)


def test_messages_as_dicts_tables_and_frames(client: liftbridge.Client, stream: str) -> None:
    _fill(client, stream, 3)
    with client.subscribe(stream, start=0, stop=StopPosition.LATEST) as sub:
        messages = list(sub)

    first = messages[0].to_dict()
    assert first["offset"] == 0 and first["value"] == b"m0" and first["key"] == b"k"
    assert first["stream"] == stream and first["partition"] == 0
    assert first["timestamp"] == messages[0].timestamp
    assert isinstance(first["headers"], dict) and first["headers"]["n"] == b"0"

    table = liftbridge.messages_table(messages)
    assert table.title == "3 messages"
    assert [row[2] for row in table.rows] == ["0", "1", "2"]
    assert table.rows[0][5] == "b'm0'" and table.rows[0][6] == "n=b'0'"  # no server headers
    assert "m2" in table._repr_html_()
    short = liftbridge.messages_table(messages, limit=2)
    assert len(short.rows) == 2 and "1 more" in short.note
    with pytest.raises(liftbridge.ArgumentTypeError, match="messages"):
        liftbridge.messages_table([b"not a message"])  # type: ignore[list-item]

    frame = liftbridge.messages_to_pandas(messages)
    assert list(frame["offset"]) == [0, 1, 2]
    assert list(frame["value"]) == [b"m0", b"m1", b"m2"]
    assert str(frame["timestamp"].dtype) == "datetime64[ns, UTC]"
    assert frame["timestamp"].iloc[0].value == messages[0].timestamp_ns  # exact, to the ns

    arrow = liftbridge.messages_to_arrow(messages)
    assert arrow.num_rows == 3
    assert arrow.column("offset").to_pylist() == [0, 1, 2]
    assert arrow.column("key").to_pylist() == [b"k", b"k", b"k"]
    assert str(arrow.schema.field("timestamp").type) == "timestamp[ns, tz=UTC]"
    assert dict(arrow.column("headers").to_pylist()[2])["n"] == b"2"


def test_frames_without_their_package_name_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pandas", None)  # makes `import pandas` fail
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(liftbridge.MissingDependencyError, match=r"liftbridge\[pandas\]"):
        liftbridge.messages_to_pandas([])
    with pytest.raises(liftbridge.MissingDependencyError, match=r"liftbridge\[arrow\]"):
        liftbridge.messages_to_arrow([])


def test_errors_from_retried_calls_have_short_tracebacks(
    client: liftbridge.Client, unique_name: str
) -> None:
    for call in (
        lambda: client.delete_stream(unique_name),
        lambda: client.fetch_partition_metadata(unique_name),
    ):
        with pytest.raises(liftbridge.NoSuchStreamError) as caught:
            call()
        printed = "".join(traceback.format_exception(caught.value))
        assert "tenacity" not in printed and "concurrent/futures" not in printed, printed
        assert "grpc/_channel.py" not in printed, printed
        # The frames that explain the error are still there (the Client's method).
        assert "_core/_client_api.py" in printed


def test_a_consumer_shows_its_assignment(client: liftbridge.Client, stream: str) -> None:
    with client.create_consumer("repr-" + stream) as consumer:
        consumer.subscribe(stream, lambda message, error: None)
        deadline = time.monotonic() + 10
        while not consumer.assignment and time.monotonic() < deadline:
            time.sleep(0.02)
        assert consumer.assignment
        html = consumer._repr_html_()
        assert "<table>" in html and f"<td>{stream}</td><td>0</td>" in html
        assert consumer.group_id in html
