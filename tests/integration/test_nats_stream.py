"""NatsStreamPublisher against the real server: the publish_async contract over NATS.

Streams are made with a ``liftbridge.Client`` (whose metadata routes the
publishes) and read back with the raw stub, so what is checked is what the
server stored.
"""

from __future__ import annotations

import contextlib
import gc
import socket
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from concurrent.futures import wait as wait_all
from typing import Any

import grpc
import pytest

import liftbridge
from liftbridge import (
    AckPolicy,
    AckTimeoutError,
    ArgumentTypeError,
    ClientClosedError,
    ConnectionLostError,
    IncorrectOffsetError,
    InvalidArgumentError,
    MessageTooLargeError,
    NatsStreamPublisher,
    NoSuchPartitionError,
    NoSuchStreamError,
    PartitionByKey,
    PublishWindowFullError,
    UnavailableError,
)
from liftbridge._core._acks import Ack
from liftbridge._core._messages import Message, message_from_proto
from liftbridge.testing import LocalServer
from liftbridge_api import api_pb2, api_pb2_grpc

DEADLINE = 10.0


@pytest.fixture
def stub(server: LocalServer) -> Iterator[api_pb2_grpc.APIStub]:
    with grpc.insecure_channel(server.address) as channel:
        yield api_pb2_grpc.APIStub(channel)


@pytest.fixture
def publisher(server: LocalServer, client: liftbridge.Client) -> Iterator[NatsStreamPublisher]:
    with NatsStreamPublisher(client, server.nats_url, ack_wait=DEADLINE) as p:
        yield p


def read(stub: api_pb2_grpc.APIStub, name: str, count: int, partition: int = 0) -> list[Message]:
    """The first ``count`` messages of a partition, from the earliest."""
    request = api_pb2.SubscribeRequest(
        stream=name, partition=partition, startPosition=api_pb2.EARLIEST
    )
    call: Any = stub.Subscribe(request, timeout=DEADLINE)
    try:
        assert next(call) == api_pb2.Message()  # the handshake
        return [message_from_proto(next(call)) for _ in range(count)]
    finally:
        call.cancel()


def orphan(server: LocalServer, client: liftbridge.Client, name: str) -> str:
    """A stream ``client``'s metadata still lists but the server deleted: its
    subject has no listener, so nothing published there is ever acked."""
    client.create_stream(name)
    client.fetch_metadata()
    with liftbridge.Client(server.addresses) as other:
        other.delete_stream(name)
    assert client.metadata.get_stream(name) is not None
    return name


# ----------------------------------------------------------------- publish --


def test_acks_match_and_messages_round_trip(
    stub: api_pb2_grpc.APIStub, publisher: NatsStreamPublisher, stream: str
) -> None:
    futures = [
        publisher.publish_async(
            stream,
            b"value-%d" % i,
            key=b"key-%d" % i,
            headers={"index": str(i).encode()},
            partition=0,
        )
        for i in range(50)
    ]
    acks = [future.result(DEADLINE) for future in futures]
    assert [ack.offset for ack in acks if ack is not None] == list(range(50))
    assert len({ack.correlation_id for ack in acks if ack is not None}) == 50
    assert all(ack is not None and ack.ack_inbox == publisher.ack_inbox for ack in acks)
    messages = read(stub, stream, 50)
    assert [m.value for m in messages] == [b"value-%d" % i for i in range(50)]
    assert [m.key for m in messages] == [b"key-%d" % i for i in range(50)]
    assert [m.headers["index"] for m in messages] == [str(i).encode() for i in range(50)]


def test_a_recreated_stream_is_published_to_on_its_new_subject_once_metadata_is_refreshed(
    stub: api_pb2_grpc.APIStub,
    publisher: NatsStreamPublisher,
    client: liftbridge.Client,
    unique_name: str,
) -> None:
    # The partition-0 subject is cached with the metadata it came from: a
    # refresh (here fetch_metadata) must send publishes to the new subject.
    client.create_stream(unique_name, subject=f"{unique_name}-old")
    assert publisher.publish(unique_name, b"before") is not None
    client.delete_stream(unique_name)
    client.create_stream(unique_name, subject=f"{unique_name}-new")
    client.fetch_metadata()
    ack = publisher.publish(unique_name, b"after")
    assert ack is not None and ack.offset == 0
    assert [m.value for m in read(stub, unique_name, 1)] == [b"after"]


def test_publish_waits_and_policy_none_is_stored_without_an_ack(
    stub: api_pb2_grpc.APIStub, publisher: NatsStreamPublisher, stream: str
) -> None:
    ack = publisher.publish(stream, b"first", ack_policy=AckPolicy.ALL)
    assert ack is not None and ack.offset == 0 and ack.ack_policy is AckPolicy.ALL
    assert publisher.publish(stream, b"quiet", ack_policy=AckPolicy.NONE) is None
    assert publisher.flush(DEADLINE)
    assert [m.value for m in read(stub, stream, 2)] == [b"first", b"quiet"]


def test_handlers_and_done_callbacks_run_on_the_callbacks_thread(
    publisher: NatsStreamPublisher, stream: str
) -> None:
    threads: dict[str, str] = {}
    outcome: list[tuple[Ack | None, BaseException | None]] = []
    gate, done = threading.Event(), threading.Event()

    def held(ack: Ack | None, error: BaseException | None) -> None:
        threads["handler"] = threading.current_thread().name
        outcome.append((ack, error))
        gate.wait(DEADLINE)  # holds the callbacks thread: nothing else resolves meanwhile

    def on_done(future: Future[Ack | None]) -> None:
        threads["done-callback"] = threading.current_thread().name
        done.set()

    first = publisher.publish_async(stream, b"v", held)
    first.result(DEADLINE)
    second = publisher.publish_async(stream, b"w")
    second.add_done_callback(on_done)  # cannot have resolved yet: the thread is held
    gate.set()
    assert done.wait(DEADLINE)
    assert threads == {"handler": "liftbridge-callbacks", "done-callback": "liftbridge-callbacks"}
    assert outcome == [(first.result(), None)]


def test_a_failing_handler_is_logged_and_the_next_publish_still_acks(
    publisher: NatsStreamPublisher, stream: str, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(ack: Ack | None, error: BaseException | None) -> None:
        raise RuntimeError("handler bug")

    later = threading.Event()
    publisher.publish_async(stream, b"a", broken).result(DEADLINE)
    ack = publisher.publish_async(stream, b"b", lambda a, e: later.set()).result(DEADLINE)
    assert ack is not None and ack.offset == 1
    assert later.wait(DEADLINE)  # handlers run in order: the broken one has run
    assert "raised; ignored" in caplog.text


# ----------------------------------------------------------------- routing --


def test_key_partition_and_partitioner_routing(
    stub: api_pb2_grpc.APIStub,
    client: liftbridge.Client,
    publisher: NatsStreamPublisher,
    unique_name: str,
) -> None:
    client.create_stream(unique_name, subject=f"{unique_name}-subject", partitions=3)
    by_key = PartitionByKey().partition(unique_name, b"k-7", b"", client.fetch_metadata())
    keyed = publisher.publish(unique_name, b"keyed", key=b"k-7")
    explicit = publisher.publish(unique_name, b"explicit", partition=2)
    chosen = publisher.publish(unique_name, b"chosen", key=b"k-7", partitioner=PartitionByKey())
    assert keyed is not None and explicit is not None and chosen is not None
    expected = f"{unique_name}-subject" + ("" if by_key == 0 else f".{by_key}")
    # The server's ack names the subject the message came on (its partitionSubject
    # is the stream's subject whatever the partition).
    assert keyed.message_subject == chosen.message_subject == expected
    assert explicit.message_subject == f"{unique_name}-subject.2"
    assert read(stub, unique_name, 1, partition=2)[0].value == (
        b"keyed" if by_key == 2 else b"explicit"
    )
    stored = [m.value for m in read(stub, unique_name, 2, partition=by_key)]
    assert stored[:2] == ([b"keyed", b"explicit"] if by_key == 2 else [b"keyed", b"chosen"])


def test_crc_envelopes_are_accepted(
    server: LocalServer, client: liftbridge.Client, stub: api_pb2_grpc.APIStub, stream: str
) -> None:
    with NatsStreamPublisher(client, server.nats_url, crc=True) as publisher:
        ack = publisher.publish(stream, b"checked", key=b"k", headers={"h": b"\x00"})
    assert ack is not None and ack.offset == 0
    (message,) = read(stub, stream, 1)
    assert (message.key, message.value, message.headers["h"]) == (b"k", b"checked", b"\x00")


def test_expected_offset(
    client: liftbridge.Client, publisher: NatsStreamPublisher, unique_name: str
) -> None:
    client.create_stream(unique_name, optimistic_concurrency_control=True)
    first = publisher.publish(unique_name, b"a", expected_offset=0)
    assert first is not None and first.offset == 0
    errors: list[BaseException | None] = []
    handled = threading.Event()

    def handler(ack: Ack | None, error: BaseException | None) -> None:
        errors.append(error)
        handled.set()

    future = publisher.publish_async(unique_name, b"b", handler, expected_offset=0)
    with pytest.raises(IncorrectOffsetError):
        future.result(DEADLINE)
    assert handled.wait(DEADLINE)
    assert [type(e) for e in errors] == [IncorrectOffsetError]
    second = publisher.publish(unique_name, b"c", expected_offset=1)
    assert second is not None and second.offset == 1


# ------------------------------------------------- timeouts and the window --


def test_no_ack_times_out(
    server: LocalServer,
    client: liftbridge.Client,
    publisher: NatsStreamPublisher,
    unique_name: str,
) -> None:
    name = orphan(server, client, unique_name)
    errors: list[BaseException | None] = []
    handled = threading.Event()

    def handler(ack: Ack | None, error: BaseException | None) -> None:
        errors.append(error)
        handled.set()

    future = publisher.publish_async(name, b"lost", handler, timeout=0.3)
    with pytest.raises(AckTimeoutError, match="may or may not have been stored"):
        future.result(DEADLINE)
    assert handled.wait(DEADLINE)
    assert [type(e) for e in errors] == [AckTimeoutError]
    with pytest.raises(AckTimeoutError):
        publisher.publish(name, b"lost too", timeout=0.2)


def test_default_ack_timeouts_expire_in_order_on_the_clients_timer(
    server: LocalServer, client: liftbridge.Client, unique_name: str, stream: str
) -> None:
    # Publishes with the publisher's ack_timeout go on the client's ack
    # timer's in-order queue; one with a timeout of its own on its heap.
    # Seconds of ack_wait: the stored publish waits under it too, and a loaded
    # machine can take longer than a fraction of a second to ack it.
    name = orphan(server, client, unique_name + "-orphan")
    with NatsStreamPublisher(client, server.nats_url, ack_wait=2.0) as publisher:
        lost = [publisher.publish_async(name, b"lost %d" % i) for i in range(3)]
        later = publisher.publish_async(name, b"lost later", timeout=4.0)
        acked = publisher.publish_async(stream, b"stored")
        for future in [*lost, later]:
            with pytest.raises(AckTimeoutError, match="no ack within"):
                future.result(DEADLINE)
        assert acked.result(DEADLINE) is not None


def test_without_a_future_outcomes_reach_the_handler_alone(
    server: LocalServer,
    client: liftbridge.Client,
    stub: api_pb2_grpc.APIStub,
    unique_name: str,
    stream: str,
) -> None:
    # future=False: acks, a refusal by the server, a default and an own
    # timeout and a close all reach the handler once each, on liftbridge-callbacks.
    checked = unique_name + "-occ"
    client.create_stream(checked, optimistic_concurrency_control=True)
    name = orphan(server, client, unique_name + "-orphan")
    outcomes: dict[bytes, tuple[Ack | None, BaseException | None, str]] = {}
    lock = threading.Lock()
    all_in = threading.Event()

    def handler_for(value: bytes) -> Callable[[Ack | None, BaseException | None], None]:
        def handler(ack: Ack | None, error: BaseException | None) -> None:
            with lock:
                assert value not in outcomes  # once each
                outcomes[value] = (ack, error, threading.current_thread().name)
                if len(outcomes) == 24:
                    all_in.set()

        return handler

    # ack_wait is the stored publishes' bound too: seconds, for a loaded machine.
    with NatsStreamPublisher(client, server.nats_url, ack_wait=2.0) as publisher:
        for i in range(20):
            value = b"stored %d" % i
            assert publisher.publish_async(stream, value, handler_for(value), future=False) is None
        wrong = b"wrong offset"
        publisher.publish_async(checked, wrong, handler_for(wrong), expected_offset=9, future=False)
        lost, lost_own = b"lost", b"lost, own timeout"
        publisher.publish_async(name, lost, handler_for(lost), future=False)
        publisher.publish_async(name, lost_own, handler_for(lost_own), timeout=0.2, future=False)
        assert publisher.flush(DEADLINE)
        late = b"closed before its ack"
        slow = NatsStreamPublisher(client, server.nats_url, ack_wait=30.0)
        slow.publish_async(name, late, handler_for(late), future=False)
        slow.close()
    assert all_in.wait(DEADLINE)  # handlers run on liftbridge-callbacks, maybe after flush()
    assert len(outcomes) == 24
    stored = [outcomes[b"stored %d" % i] for i in range(20)]
    assert [ack.offset for ack, _, _ in stored if ack is not None] == list(range(20))
    assert all(error is None and thread == "liftbridge-callbacks" for _, error, thread in stored)
    for value, error_type in (
        (wrong, IncorrectOffsetError),
        (lost, AckTimeoutError),
        (lost_own, AckTimeoutError),
        (late, ClientClosedError),
    ):
        ack, error, _ = outcomes[value]
        assert ack is None and isinstance(error, error_type), (value, error)
    assert [m.value for m in read(stub, stream, 20)] == [b"stored %d" % i for i in range(20)]


def test_closing_the_client_closes_its_nats_publishers(
    server: LocalServer, unique_name: str
) -> None:
    own = liftbridge.Client(server.addresses)
    name = orphan(server, own, unique_name + "-orphan")
    publisher = NatsStreamPublisher(own, server.nats_url, ack_wait=30.0)
    pending = publisher.publish_async(name, b"never acked")
    own.close()  # its ack timer stops: the publisher must not outlive it
    with pytest.raises(ClientClosedError, match="stream publisher closed"):
        pending.result(0)
    assert "closed" in repr(publisher)
    with pytest.raises(ClientClosedError):
        publisher.publish_async(name, b"after")
    publisher.close()  # idempotent
    with pytest.raises(ClientClosedError):
        NatsStreamPublisher(own, server.nats_url)


def test_a_full_window_blocks_then_raises(
    server: LocalServer, client: liftbridge.Client, unique_name: str, stream: str
) -> None:
    name = orphan(server, client, unique_name + "-orphan")
    with NatsStreamPublisher(client, server.nats_url, max_inflight=4) as publisher:
        stuck = [publisher.publish_async(name, b"x", timeout=DEADLINE) for _ in range(4)]
        with pytest.raises(PublishWindowFullError, match="all 4 window slots"):
            publisher.publish_async(stream, b"no room", timeout=0.3)
        assert not publisher.flush(0.1)
        assert not any(f.done() for f in stuck)
    assert all(isinstance(f.exception(0), ClientClosedError) for f in stuck)


def test_a_handler_never_waits_on_a_full_window(
    server: LocalServer, client: liftbridge.Client, unique_name: str, stream: str
) -> None:
    name = orphan(server, client, unique_name + "-orphan")
    outcome: list[BaseException] = []
    gate, ran = threading.Event(), threading.Event()
    with NatsStreamPublisher(client, server.nats_url, max_inflight=1) as publisher:

        def hold(ack: Ack | None, error: BaseException | None) -> None:
            gate.wait(DEADLINE)  # keeps the next handler queued behind this one

        def publish_again(ack: Ack | None, error: BaseException | None) -> None:
            try:
                publisher.publish_async(stream, b"from handler", timeout=DEADLINE)
            except PublishWindowFullError as e:
                outcome.append(e)
            finally:
                ran.set()

        assert publisher.publish_async(stream, b"one", hold).result(DEADLINE)
        assert publisher.publish_async(stream, b"two", publish_again).result(DEADLINE)
        stuck = publisher.publish_async(name, b"fills the window", timeout=DEADLINE)
        gate.set()  # publish_again now runs, with the only slot taken
        assert ran.wait(DEADLINE)
        assert not stuck.done()
    assert [type(e) for e in outcome] == [PublishWindowFullError]
    assert "liftbridge-callbacks does not wait" in str(outcome[0])


def test_a_small_window_turns_over(
    server: LocalServer, client: liftbridge.Client, stream: str
) -> None:
    with NatsStreamPublisher(client, server.nats_url, max_inflight=8) as publisher:
        futures = [publisher.publish_async(stream, b"%d" % i) for i in range(3000)]
        assert publisher.flush(DEADLINE * 3)
    acks = [f.result(0) for f in futures]
    assert [ack.offset for ack in acks if ack is not None] == list(range(3000))


def test_resolved_futures_are_let_go_of_by_later_publishes_and_flush(
    publisher: NatsStreamPublisher, stream: str
) -> None:
    # Settled futures wait for the publishing thread to free them (GC
    # accounting, see _nats_window): never more than the window, and none
    # after flush().
    first = publisher.publish_async(stream, b"first")
    ack = first.result(DEADLINE)
    assert ack is not None and ack.offset == 0
    gone = weakref.ref(first)
    del first, ack
    more = [publisher.publish_async(stream, b"%d" % i) for i in range(3)]
    acks = [f.result(DEADLINE) for f in more]
    assert [a.offset for a in acks if a is not None] == [1, 2, 3]
    gc.collect()
    assert gone() is None  # the next publish let go of it
    refs = [weakref.ref(f) for f in more]
    del more
    assert publisher.flush(DEADLINE)
    gc.collect()
    assert [r() for r in refs] == [None, None, None]


# ---------------------------------------------------------------- lifecycle --


def test_close_with_publishes_in_flight_resolves_every_future(
    server: LocalServer, client: liftbridge.Client, unique_name: str, stream: str
) -> None:
    name = orphan(server, client, unique_name + "-orphan")
    publisher = NatsStreamPublisher(client, server.nats_url, ack_wait=30.0)
    futures = []
    for i in range(2000):
        futures.append(publisher.publish_async(stream, b"%d" % i))
        if i % 100 == 0:
            futures.append(publisher.publish_async(name, b"never acked"))
    publisher.close()
    done, not_done = wait_all(futures, timeout=0)
    assert not not_done
    outcomes = {type(f.exception()) for f in done}
    assert ClientClosedError in outcomes  # at least the orphaned ones
    assert outcomes <= {ClientClosedError, type(None)}
    publisher.close()  # idempotent
    assert "closed" in repr(publisher)
    with pytest.raises(ClientClosedError):
        publisher.publish_async(stream, b"after close")


def test_close_from_an_ack_handler(
    server: LocalServer, client: liftbridge.Client, stream: str
) -> None:
    publisher = NatsStreamPublisher(client, server.nats_url)
    closed = threading.Event()

    def close_it(ack: Ack | None, error: BaseException | None) -> None:
        publisher.close()
        closed.set()

    publisher.publish_async(stream, b"v", close_it)
    assert closed.wait(DEADLINE)
    with pytest.raises(ClientClosedError):
        publisher.publish(stream, b"after")


def test_one_hundred_thousand_publishes_are_all_acked_and_stored(
    server: LocalServer, client: liftbridge.Client, stream: str
) -> None:
    count = 100_000
    acked = 0
    failures: list[BaseException] = []
    lock = threading.Lock()

    def handler(ack: Ack | None, error: BaseException | None) -> None:
        nonlocal acked
        with lock:
            if error is not None:
                failures.append(error)
            else:
                acked += 1

    with NatsStreamPublisher(client, server.nats_url, ack_wait=60.0) as publisher:
        for i in range(count):
            publisher.publish_async(stream, b"m-%d" % i, handler)
        assert publisher.flush(120.0)
    assert failures == []
    assert acked == count
    assert client.fetch_partition_metadata(stream).newest_offset == count - 1


# ------------------------------------------------------------- bad input --


def test_bad_input_is_refused_before_sending(
    publisher: NatsStreamPublisher, stream: str, unique_name: str
) -> None:
    not_bytes: Any = "text"
    with pytest.raises(ArgumentTypeError, match="value"):
        publisher.publish_async(stream, not_bytes)
    with pytest.raises(NoSuchStreamError, match=unique_name + "-missing"):
        publisher.publish_async(unique_name + "-missing", b"v")
    with pytest.raises(NoSuchPartitionError, match="has no partition 5"):
        publisher.publish_async(stream, b"v", partition=5)
    with pytest.raises(InvalidArgumentError, match="timeout"):
        publisher.publish_async(stream, b"v", timeout=0)
    with pytest.raises(InvalidArgumentError, match="expected_offset needs an ack"):
        publisher.publish_async(stream, b"v", ack_policy=AckPolicy.NONE, expected_offset=0)
    with pytest.raises(ArgumentTypeError, match="ack_handler"):
        publisher.publish_async(stream, b"v", "not callable")  # type: ignore[call-overload]
    with pytest.raises(InvalidArgumentError, match="future=False needs an ack_handler"):
        publisher.publish_async(stream, b"v", future=False)
    with pytest.raises(ArgumentTypeError, match="future must be a bool"):
        publisher.publish_async(stream, b"v", lambda ack, error: None, future=1)  # type: ignore[call-overload]
    # A handler that passed is not checked again; another one, and the future flag, still are.
    heard = threading.Event()
    publisher.publish_async(stream, b"v", lambda ack, error: heard.set(), future=False)
    assert heard.wait(10)
    with pytest.raises(ArgumentTypeError, match="ack_handler"):
        publisher.publish_async(stream, b"v", lambda ack: None, future=False)  # type: ignore[call-overload]
    with pytest.raises(ArgumentTypeError, match="future must be a bool"):
        publisher.publish_async(stream, b"v", lambda ack, error: None, future=0)  # type: ignore[call-overload]
    # Nothing to hand over without an ack: no handler needed.
    assert publisher.publish_async(stream, b"v", ack_policy=AckPolicy.NONE, future=False) is None
    with pytest.raises(MessageTooLargeError, match="max_payload"):
        publisher.publish_async(stream, bytes(publisher.max_payload))
    assert publisher.publish(stream, b"still fine") is not None


def test_bad_construction(server: LocalServer, client: liftbridge.Client) -> None:
    not_a_client: Any = object()
    with pytest.raises(ArgumentTypeError, match=r"client must be a liftbridge\.Client"):
        NatsStreamPublisher(not_a_client, server.nats_url)
    with pytest.raises(InvalidArgumentError, match="url must look like"):
        NatsStreamPublisher(client, "http://127.0.0.1:1")
    with pytest.raises(InvalidArgumentError, match="max_inflight"):
        NatsStreamPublisher(client, server.nats_url, max_inflight=0)


def test_nothing_listening_is_unavailable(client: liftbridge.Client) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
    with pytest.raises(UnavailableError, match=f"127.0.0.1:{port}"):
        NatsStreamPublisher(
            client, f"nats://127.0.0.1:{port}", connect_timeout=0.5, max_reconnect_attempts=0
        )


# ------------------------------------------------------------- reconnects --


class Proxy:
    """A TCP relay on 127.0.0.1 in front of the NATS server, whose connections
    the test can cut (the server stays up), or stop relaying altogether (its
    port then refuses connections, as a NATS server that went away)."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self._upstream = upstream
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self._port = self._listener.getsockname()[1]
        self._lock = threading.Lock()  # guards _sockets
        self._sockets: list[socket.socket] = []
        self._stopped = threading.Event()
        self.refusing = threading.Event()  # set: connections are accepted and closed at once
        self.accepted = 0  # connections accepted (guarded by _lock)
        self._threads = [threading.Thread(target=self._accept, name="test-proxy", daemon=True)]
        self._threads[0].start()

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self._port}"

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                downstream, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                self.accepted += 1
            if self.refusing.is_set():
                downstream.close()
                continue
            upstream = socket.create_connection(self._upstream, timeout=5)
            with self._lock:
                self._sockets += [downstream, upstream]
            for source, sink in ((downstream, upstream), (upstream, downstream)):
                pump = threading.Thread(
                    target=self._pump, args=(source, sink), name="test-proxy-pump", daemon=True
                )
                self._threads.append(pump)
                pump.start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        source.settimeout(None)
        try:
            while chunk := source.recv(65536):
                sink.sendall(chunk)
        except OSError:
            pass
        for end in (source, sink):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        """Drops every relayed connection; new ones are still relayed."""
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def close(self) -> None:
        """Stops listening (the port refuses connections) and drops every connection."""
        self._stopped.set()
        self._threads[0].join(5)
        self._listener.close()
        self.cut()
        for thread in self._threads[1:]:
            thread.join(5)


@pytest.fixture
def proxy(server: LocalServer) -> Iterator[Proxy]:
    host, port = server.nats_url.removeprefix("nats://").rsplit(":", 1)
    relay = Proxy((host, int(port)))
    yield relay
    relay.close()


def test_reconnects_after_the_connection_drops(
    client: liftbridge.Client, stub: api_pb2_grpc.APIStub, stream: str, proxy: Proxy
) -> None:
    with NatsStreamPublisher(client, proxy.url, ack_wait=DEADLINE, reconnect_wait=0.1) as publisher:
        assert publisher.publish(stream, b"before") is not None
        proxy.cut()
        during = publisher.publish_async(stream, b"during")  # held, or lost with the connection
        after = None
        for _ in range(20):  # each waits for its ack: bounded by 20 x 2 s
            with contextlib.suppress(AckTimeoutError):
                after = publisher.publish(stream, b"after", timeout=2.0)
                break
        assert after is not None
        # The one published while away either made it or timed out: it never hangs.
        assert during.exception(DEADLINE) is None or isinstance(during.exception(), AckTimeoutError)
    values = [m.value for m in read(stub, stream, after.offset + 1)]
    assert values[0] == b"before" and values[-1] == b"after"


def test_publishes_made_while_nats_is_away_are_sent_after_the_reconnect(
    client: liftbridge.Client, stub: api_pb2_grpc.APIStub, stream: str, proxy: Proxy
) -> None:
    # While every reconnect is refused, publishes are held; once NATS is back
    # the connection subscribes to the ack inbox again, then writes them.
    with NatsStreamPublisher(
        client, proxy.url, ack_wait=DEADLINE * 3, reconnect_wait=0.1
    ) as publisher:
        assert publisher.publish(stream, b"before") is not None
        proxy.refusing.set()
        tried = proxy.accepted
        proxy.cut()
        give_up = time.monotonic() + DEADLINE
        while proxy.accepted < tried + 2:  # the publisher is reconnecting
            assert time.monotonic() < give_up, "the publisher never tried to reconnect"
            time.sleep(0.01)  # polling the proxy from a test, not a stoppable loop
        during = [publisher.publish_async(stream, b"during-%d" % i) for i in range(50)]
        assert not any(f.done() for f in during)
        proxy.refusing.clear()
        acks = [f.result(DEADLINE * 3) for f in during]
    assert [a.offset for a in acks if a is not None] == list(range(1, 51))
    values = [m.value for m in read(stub, stream, 51)]
    assert values == [b"before"] + [b"during-%d" % i for i in range(50)]


def test_when_nats_gives_up_publishes_fail_with_connection_lost(
    server: LocalServer, client: liftbridge.Client, unique_name: str, proxy: Proxy
) -> None:
    name = orphan(server, client, unique_name)
    with NatsStreamPublisher(
        client, proxy.url, ack_wait=30.0, reconnect_wait=0.1, max_reconnect_attempts=1
    ) as publisher:
        pending = publisher.publish_async(name, b"never acked")
        proxy.close()
        with pytest.raises(ConnectionLostError, match="lost"):
            pending.result(DEADLINE)
        with pytest.raises(ConnectionLostError):
            publisher.publish_async(name, b"after giving up")


def test_a_publish_held_when_nats_gives_up_fails_as_never_sent(
    server: LocalServer, client: liftbridge.Client, unique_name: str, stream: str, proxy: Proxy
) -> None:
    # Written before the drop: maybe stored (ConnectionLostError). Held while
    # every reconnect is refused, then NATS gives up: never sent, so not
    # stored, and safe to publish again (UnavailableError, not maybe_applied).
    name = orphan(server, client, f"{unique_name}-orphan")
    with NatsStreamPublisher(
        client, proxy.url, ack_wait=30.0, reconnect_wait=1.0, max_reconnect_attempts=2
    ) as publisher:
        written = publisher.publish_async(name, b"written")
        # Frames go out in order: once a later one is acked, "written" was written.
        assert publisher.publish(stream, b"after it") is not None
        proxy.refusing.set()
        tried = proxy.accepted
        proxy.cut()
        give_up = time.monotonic() + DEADLINE
        while proxy.accepted < tried + 1:  # the first reconnect was refused
            assert time.monotonic() < give_up, "the publisher never tried to reconnect"
            time.sleep(0.01)  # polling the proxy from a test, not a stoppable loop
        held = publisher.publish_async(name, b"held")
        with pytest.raises(UnavailableError, match="never sent") as caught:
            held.result(DEADLINE)
        assert not isinstance(caught.value, ConnectionLostError)
        assert caught.value.retriable and not caught.value.maybe_applied
        with pytest.raises(ConnectionLostError) as lost:
            written.result(DEADLINE)
        assert lost.value.maybe_applied


def test_concurrent_bursts_never_strand_a_publish(
    server: LocalServer, client: liftbridge.Client, stream: str
) -> None:
    # Small bursts from several threads, with very frequent thread switches,
    # keep the writer falling idle and being woken: a lost wake-up would leave
    # a publish unsent and a flush returning False.
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    failed: list[str] = []
    try:
        with NatsStreamPublisher(client, server.nats_url, max_inflight=64) as publisher:

            def burst(worker: int) -> None:
                for round_ in range(40):
                    for i in range(25):
                        publisher.publish_async(stream, b"%d-%d-%d" % (worker, round_, i))
                    if not publisher.flush(DEADLINE):
                        failed.append(f"worker {worker} round {round_}")
                        return

            threads = [
                threading.Thread(target=burst, args=(n,), name=f"test-burst-{n}") for n in range(4)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(DEADLINE * 5)
    finally:
        sys.setswitchinterval(switch)
    assert failed == []
    assert client.fetch_partition_metadata(stream).newest_offset == 4 * 40 * 25 - 1


def test_flush_waits_only_for_what_was_accepted_before_it(
    server: LocalServer, client: liftbridge.Client, unique_name: str, stream: str
) -> None:
    # Another thread keeps publishes that are never acked in flight all along
    # (each times out after 1 s, a new one every 0.2 s): flush must still return
    # once the publishes made before it have their outcome.
    name = orphan(server, client, unique_name + "-orphan")
    stop = threading.Event()
    with NatsStreamPublisher(client, server.nats_url) as publisher:

        def keep_one_pending() -> None:
            publisher.publish_async(name, b"never acked", timeout=1.0)
            while not stop.wait(0.2):
                publisher.publish_async(name, b"never acked", timeout=1.0)

        background = threading.Thread(target=keep_one_pending, name="test-background")
        background.start()
        try:
            mine = [publisher.publish_async(stream, b"mine-%d" % i) for i in range(100)]
            assert publisher.flush(DEADLINE)
            assert all(f.done() and f.exception() is None for f in mine)
        finally:
            stop.set()
            background.join(DEADLINE)
