"""Cluster administration against a real server: streams, metadata, errors."""

from __future__ import annotations

import pytest

import liftbridge
from liftbridge.testing import LocalServer


def test_connects_through_any_seed_that_answers(server: LocalServer) -> None:
    with liftbridge.Client(["127.0.0.1:1", server.address], connect_timeout=1.0) as client:
        metadata = client.metadata
        assert [b.address for b in metadata.brokers] == [server.address]
        assert metadata.brokers[0].id == server.server_id


def test_no_seed_answering_is_unavailable() -> None:
    with pytest.raises(liftbridge.UnavailableError, match=r"127\.0\.0\.1:1"):
        liftbridge.Client(["127.0.0.1:1"], connect_timeout=0.5)


def test_create_stream_with_every_option(client: liftbridge.Client, unique_name: str) -> None:
    client.create_stream(
        unique_name,
        subject=f"{unique_name}.subject",
        group="workers",
        replication_factor=1,
        partitions=3,
        retention_max_bytes=1 << 20,
        retention_max_messages=1000,
        retention_max_age=3600.0,
        cleaner_interval=60.0,
        segment_max_bytes=1 << 16,
        segment_max_age=600.0,
        compact_enabled=True,
        compact_max_goroutines=2,
        auto_pause_time=0.0,
        auto_pause_disable_if_subscribers=True,
        min_isr=1,
        optimistic_concurrency_control=False,
        encryption=False,
    )
    metadata = client.fetch_metadata()
    info = metadata.get_stream(unique_name)
    assert info is not None
    assert info.subject == f"{unique_name}.subject"
    assert metadata.partition_count(unique_name) == 3
    assert sorted(info.partitions) == [0, 1, 2]
    assert info.creation_timestamp_ns > 0
    for partition in info.partitions.values():
        assert partition.leader
        assert partition.isr == (partition.leader,)


def test_max_replication_on_one_node(client: liftbridge.Client, unique_name: str) -> None:
    client.create_stream(unique_name, max_replication=True)
    assert client.fetch_metadata().partition(unique_name, 0) is not None


def test_stream_exists(client: liftbridge.Client, stream: str) -> None:
    with pytest.raises(liftbridge.StreamExistsError):
        client.create_stream(stream)


def test_bad_replication_factor_is_rejected_by_server(
    client: liftbridge.Client, unique_name: str
) -> None:
    with pytest.raises(liftbridge.InvalidArgumentError, match="replicationFactor"):
        client.create_stream(unique_name, replication_factor=5)


@pytest.mark.parametrize(
    ("subject", "name", "error", "match"),
    [
        ("a..b", "x", liftbridge.InvalidArgumentError, "empty token"),
        ("ok", "", liftbridge.InvalidArgumentError, "name must not be empty"),
        ("ok", "__cursors", liftbridge.InvalidArgumentError, "reserved"),
        ("ok", 7, liftbridge.ArgumentTypeError, "name must be a str"),
        ("a b", "x", liftbridge.InvalidArgumentError, "whitespace"),
    ],
)
def test_bad_input_fails_before_any_rpc(
    client: liftbridge.Client, subject: object, name: object, error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        client.create_stream(name, subject=subject)  # type: ignore[arg-type]


def test_bad_option_values(client: liftbridge.Client, unique_name: str) -> None:
    with pytest.raises(liftbridge.InvalidArgumentError, match="partitions"):
        client.create_stream(unique_name, partitions=0)
    with pytest.raises(liftbridge.InvalidArgumentError, match="retention_max_age"):
        client.create_stream(unique_name, retention_max_age=-1)
    with pytest.raises(liftbridge.ArgumentTypeError, match="compact_enabled"):
        client.create_stream(unique_name, compact_enabled="yes")  # type: ignore[arg-type]


def test_delete_stream(client: liftbridge.Client, stream: str) -> None:
    client.delete_stream(stream)
    assert client.fetch_metadata().get_stream(stream) is None
    with pytest.raises(liftbridge.NoSuchStreamError):
        client.delete_stream(stream)


def test_pause_and_resume(client: liftbridge.Client, unique_name: str) -> None:
    client.create_stream(unique_name, partitions=2)
    client.pause_stream(unique_name, partitions=[1], resume_all=False)
    assert client.fetch_partition_metadata(unique_name, 1).paused
    assert not client.fetch_partition_metadata(unique_name, 0).paused
    paused = client.fetch_partition_metadata(unique_name, 1)
    assert paused.paused_changed.latest_ns > 0
    # Publishing resumes it. (Server v1.9.0 keeps reporting paused=True after
    # such a resume, so the proof is that the message is stored.)
    ack = client.publish(unique_name, b"wake", partition=1)
    assert ack is not None and ack.offset == 0
    assert client.fetch_partition_metadata(unique_name, 1).newest_offset == 0


def test_pause_all_partitions(client: liftbridge.Client, unique_name: str) -> None:
    client.create_stream(unique_name, partitions=2)
    client.pause_stream(unique_name)
    metadata = client.fetch_metadata()
    assert all(p.paused for p in metadata.get_stream(unique_name).partitions.values())  # type: ignore[union-attr]


def test_pause_missing(client: liftbridge.Client, stream: str) -> None:
    with pytest.raises(liftbridge.NoSuchStreamError):
        client.pause_stream("no-such-stream")
    with pytest.raises(liftbridge.NoSuchPartitionError):
        client.pause_stream(stream, partitions=[5])


def test_set_stream_readonly(client: liftbridge.Client, stream: str) -> None:
    client.set_stream_readonly(stream)
    assert client.fetch_partition_metadata(stream).readonly
    with pytest.raises(liftbridge.ReadonlyPartitionError):
        client.publish(stream, b"refused")
    client.set_stream_readonly(stream, readonly=False)
    assert not client.fetch_partition_metadata(stream).readonly
    assert client.publish(stream, b"accepted") is not None


def test_set_readonly_missing(client: liftbridge.Client, stream: str) -> None:
    with pytest.raises(liftbridge.NoSuchStreamError):
        client.set_stream_readonly("no-such-stream")
    with pytest.raises(liftbridge.NoSuchPartitionError):
        client.set_stream_readonly(stream, partitions=[3])


def test_fetch_partition_metadata(client: liftbridge.Client, stream: str) -> None:
    empty = client.fetch_partition_metadata(stream)
    assert (empty.high_watermark, empty.newest_offset) == (-1, -1)
    for i in range(3):
        # ALL: the server sends it once the high watermark covers the message
        # (a LEADER ack comes as the leader writes it, before the HW moves).
        client.publish(stream, b"m%d" % i, ack_policy=liftbridge.AckPolicy.ALL)
    meta = client.fetch_partition_metadata(stream, 0)
    assert meta.newest_offset == 2
    assert meta.high_watermark == 2
    assert meta.leader == client.metadata.brokers[0].id
    assert meta.messages_received.first_ns > 0
    assert meta.messages_received.latest_ns >= meta.messages_received.first_ns


def test_fetch_partition_metadata_missing(client: liftbridge.Client, stream: str) -> None:
    with pytest.raises(liftbridge.NoSuchPartitionError):
        client.fetch_partition_metadata(stream, 4)
    with pytest.raises(liftbridge.NoSuchStreamError):
        client.fetch_partition_metadata("no-such-stream")


def test_metadata_is_immutable(client: liftbridge.Client, stream: str) -> None:
    metadata = client.fetch_metadata()
    with pytest.raises(AttributeError):
        metadata.brokers = ()  # type: ignore[misc]
    with pytest.raises(TypeError):
        metadata.streams["x"] = metadata.streams[stream]  # type: ignore[index]
    assert metadata.addresses == tuple(b.address for b in metadata.brokers)


def test_close_is_idempotent_and_final(server: LocalServer) -> None:
    client = liftbridge.Client(server.address)
    client.close()
    client.close()
    assert client.state is liftbridge.ClientState.CLOSED
    with pytest.raises(liftbridge.ClientClosedError):
        client.fetch_metadata()
    with pytest.raises(liftbridge.ClientClosedError):
        client.publish_async("x", b"y")


def test_repr_names_state_and_brokers(server: LocalServer) -> None:
    client = liftbridge.Client(server.address)
    assert repr(client) == f"<liftbridge.Client open brokers=[{server.server_id}@{server.address}]>"
    client.close()
    assert repr(client).startswith("<liftbridge.Client closed")
