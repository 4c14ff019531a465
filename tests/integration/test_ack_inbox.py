"""``ack_inbox`` on publish and publish_async, and ``Ack.partition``, against a
real server. The ack published to the inbox is read straight from the
embedded NATS server with a minimal protocol reader (no client library)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from urllib.parse import urlsplit

import pytest

import liftbridge
from liftbridge.testing import LocalServer
from tests.integration.frozen import frozen

DEADLINE = 10.0  # seconds, for every socket read


class NatsInbox:
    """Subscribes to one NATS subject and returns its messages' payloads."""

    def __init__(self, url: str, subject: str) -> None:
        parts = urlsplit(url)
        assert parts.hostname == "127.0.0.1" and parts.port is not None
        self._sock = socket.create_connection((parts.hostname, parts.port), timeout=DEADLINE)
        self._file = self._sock.makefile("rb")
        assert self._file.readline().startswith(b"INFO ")
        self._sock.sendall(
            b'CONNECT {"verbose":false,"pedantic":false}\r\n'
            + f"SUB {subject} 1\r\n".encode()
            + b"PING\r\n"
        )
        # The PONG answers our PING, so the subscription is in place.
        assert self._file.readline() == b"PONG\r\n"

    def next_payload(self) -> bytes:
        while True:
            line = self._file.readline()
            if line == b"PING\r\n":
                self._sock.sendall(b"PONG\r\n")
                continue
            assert line.startswith(b"MSG "), line
            size = int(line.split()[-1])
            payload = self._file.read(size + 2)
            assert payload.endswith(b"\r\n")
            return payload[:-2]

    def close(self) -> None:
        self._file.close()
        self._sock.close()


def newest_offset_reaching(client: liftbridge.Client, stream: str, offset: int) -> int:
    """The partition's newest offset once it reaches ``offset``, or as it is at
    the deadline. Publishes sharing one ack inbox can be answered before their
    own message is stored: the v1.9.0 server answers each with the first ack it
    reads on that inbox, which can be another publish's."""
    stop = time.monotonic() + DEADLINE
    newest = client.fetch_partition_metadata(stream).newest_offset
    while newest < offset and time.monotonic() < stop:
        time.sleep(0.05)
        newest = client.fetch_partition_metadata(stream).newest_offset
    return newest


@pytest.fixture
def inbox_subject(unique_name: str) -> str:
    return f"acks.{unique_name}"


@pytest.fixture
def inbox(server: LocalServer, inbox_subject: str) -> Iterator[NatsInbox]:
    reader = NatsInbox(server.nats_url, inbox_subject)
    yield reader
    reader.close()


def test_publish_also_sends_the_ack_to_the_inbox(
    client: liftbridge.Client, stream: str, inbox: NatsInbox, inbox_subject: str
) -> None:
    client.publish(stream, b"first")
    ack = client.publish(stream, b"second", key=b"k", ack_inbox=inbox_subject)
    assert ack is not None
    assert (ack.offset, ack.ack_inbox, ack.stream) == (1, inbox_subject, stream)
    from_nats = liftbridge.decode_ack(inbox.next_payload())
    assert from_nats == ack


def test_publish_async_also_sends_the_ack_to_the_inbox(
    client: liftbridge.Client, stream: str, inbox: NatsInbox, inbox_subject: str
) -> None:
    outcomes: list[tuple[liftbridge.Ack | None, BaseException | None, str]] = []
    handled = threading.Event()

    def handler(ack: liftbridge.Ack | None, error: BaseException | None) -> None:
        outcomes.append((ack, error, threading.current_thread().name))
        handled.set()

    future = client.publish_async(
        stream, b"v", handler, ack_inbox=inbox_subject, correlation_id="inbox-1"
    )
    ack = future.result(timeout=DEADLINE)
    assert ack is not None
    assert (ack.offset, ack.correlation_id, ack.ack_inbox) == (0, "inbox-1", inbox_subject)
    assert handled.wait(DEADLINE)
    assert outcomes == [(ack, None, "liftbridge-callbacks")]
    assert liftbridge.decode_ack(inbox.next_payload()) == ack


def test_many_inbox_publishes_share_a_bounded_pool(
    client: liftbridge.Client, stream: str, inbox_subject: str
) -> None:
    """200 at once: every one acked, on at most WORKERS threads (it was one
    thread per publish, uncapped)."""
    from liftbridge._publish._inbox import WORKERS

    futures = [client.publish_async(stream, b"%d" % i, ack_inbox=inbox_subject) for i in range(200)]
    threads = {t.name for t in threading.enumerate() if t.name.startswith("liftbridge-inbox")}
    for future in futures:  # each its own Ack, or AckMismatchError (see the next test)
        assert future.exception(timeout=DEADLINE) is None or isinstance(
            future.exception(), liftbridge.AckMismatchError
        )
    # All 200 stored within the deadline, not at once (a publish can be
    # answered with another's ack before its own message is stored).
    assert newest_offset_reaching(client, stream, 199) == 199
    assert 1 <= len(threads) <= WORKERS


def _own_ack_or_mismatch(outcome: Future[liftbridge.Ack | None], correlation_id: str) -> bool:
    """Whether a publish sharing an ack inbox got its own Ack (True) or
    AckMismatchError (False); anything else fails the test."""
    error = outcome.exception(timeout=DEADLINE)
    if error is None:
        ack = outcome.result()
        assert ack is not None and ack.correlation_id == correlation_id, (ack, correlation_id)
        return True
    assert isinstance(error, liftbridge.AckMismatchError), error
    assert error.other_correlation_id != correlation_id
    return False


def test_publishes_sharing_an_inbox_never_get_another_publishes_ack(
    client: liftbridge.Client, stream: str, inbox_subject: str
) -> None:
    """Publishes in flight on one ack inbox: the v1.9.0 server answers each
    with the first ack it reads there, often another's (a Future resolved
    to an Ack with another correlation id and offset). Each one now gets
    its own Ack or fails with AckMismatchError (maybe stored), blocking
    publishes and publish_to_subject (one thread each) and publish_async
    alike; every message is stored."""
    ids = [f"shared-{i}" for i in range(100)]
    futures = [
        client.publish_async(stream, b"v", ack_inbox=inbox_subject, correlation_id=cid)
        for cid in ids
    ]
    blocking: list[Future[liftbridge.Ack | None]] = [Future() for _ in range(24)]

    def publish(n: int) -> None:  # 16 publish, 8 publish_to_subject (the stream's subject)
        send = client.publish if n < 16 else client.publish_to_subject
        try:
            blocking[n].set_result(
                send(stream, b"b", ack_inbox=inbox_subject, correlation_id=f"blocking-{n}")
            )
        except BaseException as e:
            blocking[n].set_exception(e)

    threads = [threading.Thread(target=publish, args=(n,)) for n in range(len(blocking))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(DEADLINE)
    own = [_own_ack_or_mismatch(f, cid) for f, cid in zip(futures, ids, strict=True)]
    own += [_own_ack_or_mismatch(f, f"blocking-{n}") for n, f in enumerate(blocking)]
    assert any(own)
    assert newest_offset_reaching(client, stream, 123) == 123


def test_inbox_publishes_share_the_clients_publish_window(
    unique_name: str, inbox_subject: str
) -> None:
    """One max_inflight window for every publish_async: with one publish of
    each kind awaiting its ack (the server is stopped), a window of 2 is full
    for both kinds. (Inbox publishes had a window of their own: each kind then
    saw a window of 2 with 1 used, and went on.)"""
    with LocalServer() as own, liftbridge.Client(own.address, max_inflight=2) as c:
        c.create_stream(unique_name)
        c.publish_async(unique_name, b"warm", ack_inbox=inbox_subject).result(timeout=DEADLINE)
        c.publish_async(unique_name, b"warm").result(timeout=DEADLINE)
        with frozen(own.pid):
            held = [
                c.publish_async(unique_name, b"a", timeout=DEADLINE),
                c.publish_async(unique_name, b"b", ack_inbox=inbox_subject, timeout=DEADLINE),
            ]
            with pytest.raises(liftbridge.PublishWindowFullError, match="2 publishes"):
                c.publish_async(unique_name, b"no room", timeout=0.3)
            with pytest.raises(liftbridge.PublishWindowFullError, match="2 publishes"):
                c.publish_async(unique_name, b"no room", ack_inbox=inbox_subject, timeout=0.3)
            # A caller with time to wait blocks until a slot frees up.
            waited: list[Future[liftbridge.Ack | None]] = []
            waiter = threading.Thread(
                target=lambda: waited.append(
                    c.publish_async(unique_name, b"c", ack_inbox=inbox_subject, timeout=DEADLINE)
                )
            )
            waiter.start()
            waiter.join(0.5)
            assert waiter.is_alive(), "an inbox publish went past a full window"
        waiter.join(DEADLINE)
        assert [f.result(timeout=DEADLINE) is not None for f in held + waited] == [True] * 3
        # b and c share the inbox: c can be answered with b's ack before c is stored.
        assert newest_offset_reaching(c, unique_name, 4) == 4


def test_close_ends_inbox_publishes_and_their_threads(unique_name: str, inbox_subject: str) -> None:
    """An inbox publish awaiting its ack (the server is stopped) when the
    client closes: its Future fails with ClientClosedError, its handler runs
    off the pool, and no pool thread outlives close() (one did)."""
    heard: list[tuple[str, type[BaseException] | None]] = []
    handled = threading.Event()

    def handler(ack: liftbridge.Ack | None, error: BaseException | None) -> None:
        heard.append((threading.current_thread().name, type(error) if error else None))
        handled.set()

    with LocalServer() as own:
        c = liftbridge.Client(own.address)
        c.create_stream(unique_name)
        c.publish_async(unique_name, b"warm", ack_inbox=inbox_subject).result(timeout=DEADLINE)
        with frozen(own.pid):
            future = c.publish_async(
                unique_name, b"v", handler, ack_inbox=inbox_subject, timeout=DEADLINE
            )
            c.close()
            alive = [t.name for t in threading.enumerate() if t.name.startswith("liftbridge-inbox")]
    assert alive == []
    assert isinstance(future.exception(timeout=DEADLINE), liftbridge.ClientClosedError)
    assert handled.wait(DEADLINE)
    assert heard == [("liftbridge-callbacks-late", liftbridge.ClientClosedError)]


def test_publish_with_an_inbox_raises_the_servers_refusal(
    client: liftbridge.Client, unique_name: str, inbox_subject: str
) -> None:
    client.create_stream(unique_name, optimistic_concurrency_control=True)
    with pytest.raises(liftbridge.IncorrectOffsetError):
        client.publish(unique_name, b"v", expected_offset=5, ack_inbox=inbox_subject)
    future = client.publish_async(unique_name, b"v", expected_offset=7, ack_inbox=inbox_subject)
    with pytest.raises(liftbridge.IncorrectOffsetError):
        future.result(timeout=DEADLINE)
    with pytest.raises(liftbridge.NoSuchStreamError):
        client.publish("no-such-stream-" + unique_name, b"v", ack_inbox=inbox_subject)


@pytest.mark.parametrize("bad", ["acks.*", "acks.>", "a..b", "a b", "", "a\x00"])
def test_bad_inboxes_are_refused(client: liftbridge.Client, stream: str, bad: str) -> None:
    with pytest.raises(liftbridge.InvalidArgumentError, match=r"^ack_inbox\b"):
        client.publish(stream, b"v", ack_inbox=bad)
    with pytest.raises(liftbridge.InvalidArgumentError, match=r"^ack_inbox\b"):
        client.publish_async(stream, b"v", ack_inbox=bad)


def test_acks_carry_the_partition(
    client: liftbridge.Client, unique_name: str, inbox_subject: str
) -> None:
    client.create_stream(unique_name, partitions=3)
    for partition in (0, 1, 2):
        ack: liftbridge.Ack | None = client.publish(unique_name, b"v", partition=partition)
        assert ack is not None and ack.partition == partition
        future = client.publish_async(unique_name, b"v", partition=partition)
        ack = future.result(timeout=DEADLINE)
        assert ack is not None and ack.partition == partition
        ack = client.publish(unique_name, b"v", partition=partition, ack_inbox=inbox_subject)
        assert ack is not None and ack.partition == partition
    key = b"some key"
    ack = client.publish(unique_name, b"v", key=key)
    expected = liftbridge.PartitionByKey().partition(unique_name, key, b"v", client.metadata)
    assert ack is not None and ack.partition == expected


def test_acks_of_a_wildcard_stream_carry_the_partition(
    client: liftbridge.Client, unique_name: str
) -> None:
    client.create_stream(unique_name, subject=f"{unique_name}.*", partitions=2)
    ack = client.publish_to_subject(f"{unique_name}.7", b"v")
    assert ack is not None and (ack.stream, ack.partition) == (unique_name, 0)
    ack = client.publish_to_subject(f"{unique_name}.x.1", b"v")
    assert ack is not None and (ack.stream, ack.partition) == (unique_name, 1)


def test_publish_to_subject_with_an_inbox_and_no_correlation_id_gets_its_ack(
    client: liftbridge.Client, stream: str, inbox_subject: str
) -> None:
    """Nothing to match an ack by: it is returned as the server gives it."""
    ack = client.publish_to_subject(stream, b"v", ack_inbox=inbox_subject)
    assert ack is not None and (ack.offset, ack.ack_inbox) == (0, inbox_subject)
