"""One name per concept (old go-liftbridge names warn for one release), handler
arity checked when a handler is passed, ``_repr_html_`` on the values a
notebook shows, and ``decode=`` for reading keys and values as text."""

from __future__ import annotations

import warnings
from datetime import UTC, datetime, timedelta

import pytest

import liftbridge
from liftbridge.testing import LocalServer

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def test_old_names_warn_and_still_work() -> None:
    for old, new in (
        ("unmarshal_message", "decode_message"),
        ("unmarshal_ack", "decode_ack"),
        ("new_message", "encode_message"),
        ("StopPositionReached", "StopPositionReachedError"),
    ):
        with pytest.warns(DeprecationWarning, match=f"liftbridge.{old} is deprecated: use"):
            value = getattr(liftbridge, old)
        assert value is getattr(liftbridge, new)
        assert old not in liftbridge.__all__ and new in liftbridge.__all__
    envelope = liftbridge.encode_message(b"v", key=b"k")
    assert liftbridge.decode_message(envelope).value == b"v"


def test_read_replica_and_ack_wait_are_the_names(
    client: liftbridge.Client, server: LocalServer, stream: str
) -> None:
    server_nats_url = server.nats_url
    client.publish(stream, b"one")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new names do not warn
        with client.subscribe(
            stream, start=liftbridge.StartPosition.EARLIEST, stop=0, read_replica=True
        ) as sub:
            assert [m.value for m in sub] == [b"one"]
        with liftbridge.NatsPublisher(server_nats_url, ack_wait=3.0):
            pass
    with pytest.warns(DeprecationWarning, match="read_isr_replica is deprecated: use read_replica"):
        sub = client.subscribe(
            stream, start=liftbridge.StartPosition.EARLIEST, stop=0, read_isr_replica=True
        )
    with sub:
        assert [m.value for m in sub] == [b"one"]
    with pytest.warns(DeprecationWarning, match="ack_timeout is deprecated: use ack_wait"):
        publisher = liftbridge.NatsStreamPublisher(client, server_nats_url, ack_timeout=3.0)
    publisher.close()


def test_a_handler_of_the_wrong_arity_fails_when_passed(
    client: liftbridge.Client, stream: str
) -> None:
    def one(message: liftbridge.Message) -> None:
        pass

    with pytest.raises(
        liftbridge.ArgumentTypeError, match=r"handler must take 2 .*\(message, error\)"
    ):
        client.subscribe(stream, one)  # type: ignore[arg-type]
    with (
        client.pull(stream) as consumer,
        pytest.raises(liftbridge.ArgumentTypeError, match=r"handler must take 1 .*\(message\)"),
    ):
        consumer.consume(lambda message, error: None)  # type: ignore[arg-type,misc]
    with pytest.raises(liftbridge.ArgumentTypeError, match="ack_handler must take 2"):
        client.publish_async(stream, b"v", lambda ack: None)  # type: ignore[arg-type,misc]

    def with_default(message: object, error: object = None) -> None:
        pass

    client.subscribe(stream, with_default).close()  # a default is fine


def test_notebook_html_and_text_decoding(client: liftbridge.Client, stream: str) -> None:
    ack = client.publish(stream, b"caf\xc3\xa9 " + b"x" * 100_000, key=b"\xff<k>")
    message = client.get(stream, ack.offset)
    for value in (message, ack, client.fetch_partition_metadata(stream)):
        page = value._repr_html_()
        assert page.startswith("<div><strong>") and len(page) < 4000, len(page)
    assert "&lt;k&gt;" in message._repr_html_()  # escaped
    assert repr(stream) in client.fetch_partition_metadata(stream)._repr_html_().replace(
        "&#x27;", "'"
    )
    shown = str(liftbridge.messages_table([message], decode="utf-8"))
    assert "café x" in shown and "\\xff<k>" in shown
    frame = liftbridge.messages_to_pandas([message], decode="utf-8")
    assert frame["value"][0].startswith("café x") and frame["key"][0] == "\\xff<k>"
    assert liftbridge.messages_to_pandas([message])["key"][0] == b"\xff<k>"
    with pytest.raises(liftbridge.InvalidArgumentError, match="decode: no text codec"):
        liftbridge.messages_table([message], decode="no-such-codec")


def test_points_in_time_are_utc_datetimes_next_to_exact_ns(
    client: liftbridge.Client, stream: str
) -> None:
    before = datetime.now(UTC)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new names do not warn
        ack = client.publish(stream, b"v", ack_policy=liftbridge.AckPolicy.ALL)
        message = client.get(stream, ack.offset)
        info = client.fetch_metadata().streams[stream]
        metadata = client.fetch_metadata()
        partition = client.fetch_partition_metadata(stream)
    pairs = [
        (message.timestamp, message.timestamp_ns),
        (ack.reception_timestamp, ack.reception_timestamp_ns),
        (ack.commit_timestamp, ack.commit_timestamp_ns),
        (info.creation_timestamp, info.creation_timestamp_ns),
        (partition.messages_received.latest, partition.messages_received.latest_ns),
    ]
    for when, ns in pairs:
        assert isinstance(when, datetime) and when.tzinfo is UTC
        assert ns // 1000 == (when - _EPOCH) // timedelta(microseconds=1)  # cut, never rounded
    assert metadata.updated is not None and metadata.updated.tzinfo is UTC
    assert before - timedelta(seconds=60) < message.timestamp < datetime.now(UTC)
    # A message's datetime given back as a start position finds that message.
    with client.subscribe(stream, start=message.timestamp, stop=ack.offset) as sub:
        assert [m.offset for m in sub][-1] == ack.offset

    with pytest.warns(DeprecationWarning, match="StreamInfo.created is deprecated"):
        assert info.created == info.creation_timestamp
    with pytest.warns(DeprecationWarning, match="Metadata.last_updated is deprecated"):
        assert metadata.last_updated == metadata.updated.timestamp()
    with pytest.warns(DeprecationWarning, match=r"Metadata\(updated=<time.time\(\) float>\)"):
        old = liftbridge.Metadata((), {}, {}, 1_700_000_000.5)  # type: ignore[arg-type]
    assert old.updated == datetime(2023, 11, 14, 22, 13, 20, 500000, tzinfo=UTC)


def test_pin_times_are_datetimes_and_the_float_names_warn() -> None:
    now = datetime.now(UTC)
    state = liftbridge.PinState(True, "m1", "ab", now)
    event = liftbridge.PinEvent(liftbridge.PinEventKind.PINNED, "g", "m1", "ab", None, now)
    assert state.pinned_at is now and event.timestamp is now
    with pytest.warns(
        DeprecationWarning, match="PinState.since is deprecated: use PinState.pinned_at"
    ):
        assert state.since == now.timestamp()
    with pytest.warns(
        DeprecationWarning, match="PinEvent.at is deprecated: use PinEvent.timestamp"
    ):
        assert event.at == now.timestamp()
    with pytest.warns(DeprecationWarning):
        assert liftbridge.PinState(False, "m1").since is None
