"""Names and subjects that crash a v1.9.0 server are refused by the SDK, and
the server is still serving afterwards.

Each name below made the real server panic (and panic again on every
restart, the stream being in its Raft log) when a client created a stream
with it. Here they go through the SDK's public calls only, so they never
reach the shared session server: the test fails if the SDK ever lets one
through, because the following create/publish would then find the server down.
"""

from __future__ import annotations

import pytest

import liftbridge

CRASHING_NAMES = [
    "..",  # the streams directory's parent
    ".",  # the streams directory itself
    "a.",  # empty NATS token in <namespace>.a..0.replicate
    ".a",
    "a..b",
    "../x",  # outside the data directory
    "a\x00b",  # mkdir: invalid argument
    "x" * 300,  # mkdir: file name too long
    "a.>.b",  # '>' in the middle of the replication subject
    "a\x0cb",  # form feed: NATS refuses the subscription
]


def assert_server_alive(client: liftbridge.Client, name: str) -> None:
    client.create_stream(name)
    ack = client.publish(name, b"still alive", timeout=10.0)
    assert ack is not None
    assert ack.offset == 0
    assert client.fetch_partition_metadata(name).newest_offset == 0


@pytest.mark.parametrize("bad", CRASHING_NAMES)
def test_crashing_stream_names_are_refused_and_the_server_survives(
    client: liftbridge.Client, unique_name: str, bad: str
) -> None:
    with pytest.raises(liftbridge.InvalidArgumentError, match=r"^name\b"):
        client.create_stream(bad, subject=unique_name)
    assert_server_alive(client, unique_name)


@pytest.mark.parametrize("bad", [n for n in CRASHING_NAMES if n != "x" * 300] + ["a " * 600])
def test_crashing_subjects_are_refused_and_the_server_survives(
    client: liftbridge.Client, unique_name: str, bad: str
) -> None:
    with pytest.raises(liftbridge.InvalidArgumentError, match=r"^subject\b"):
        client.create_stream(unique_name, subject=bad)
    assert_server_alive(client, unique_name)


def test_a_full_wildcard_subject_cannot_take_partition_suffixes(
    client: liftbridge.Client, unique_name: str
) -> None:
    with pytest.raises(liftbridge.InvalidArgumentError, match="partition suffix"):
        client.create_stream(unique_name, subject=f"{unique_name}.>", partitions=2)
    client.create_stream(unique_name, subject=f"{unique_name}.>", partitions=1)
    ack = client.publish(unique_name, b"x", timeout=10.0)
    assert ack is not None
    assert ack.offset == 0


@pytest.mark.parametrize(
    ("call", "arg"),
    [
        (lambda c, bad: c.create_stream("ok", subject="ok", group=bad), "group"),
        (lambda c, bad: c.set_cursor(bad, "s", 0, 1), "cursor_id"),
        (lambda c, bad: c.fetch_cursor(bad, "s", 0), "cursor_id"),
        (lambda c, bad: c.create_consumer(bad), "group_id"),
        (lambda c, bad: c.create_consumer("g", consumer_id=bad), "consumer_id"),
        (lambda c, bad: c.publish_to_subject("ok", b"x", ack_inbox=bad), "ack_inbox"),
    ],
)
def test_other_names_are_checked_too(
    client: liftbridge.Client, unique_name: str, call: object, arg: str
) -> None:
    assert callable(call)
    for bad in ("a\x00b", "x" * 1100, "a b", "\ud800"):
        with pytest.raises(liftbridge.InvalidArgumentError, match=rf"^{arg}\b"):
            call(client, bad)
    assert_server_alive(client, unique_name)
