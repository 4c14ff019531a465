"""NatsPublisher against a fake pynats2: ack matching, timeouts, close, errors.

No NATS server: the fake client records what is published and answers with
acks built from the envelopes, as a Liftbridge partition leader would.
"""

from __future__ import annotations

import logging
import re
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

import pytest

from liftbridge._core._acks import Ack, AckPolicy
from liftbridge._core._envelope import EnvelopeType, decode_envelope, encode_envelope
from liftbridge._errors import (
    AckTimeoutError,
    ArgumentTypeError,
    ClientClosedError,
    IncorrectOffsetError,
    InvalidArgumentError,
    MessageTooLargeError,
    UnavailableError,
)
from liftbridge._publish import _nats, _pynats
from liftbridge._publish._nats import NatsPublisher
from liftbridge._transport import _nats_info
from liftbridge_api import api_pb2
from tests.unit.hostile_nats import FakeNats

Responder = Callable[[str, api_pb2.Message], "bytes | None"]


class FakeNATSError(Exception):
    pass


class FakeClient:
    """Stands in for pynats2.NATSClient."""

    def __init__(self, url: str, *, name: str, socket_timeout: float) -> None:
        self.url = url
        self.name = name
        self.published: list[tuple[str, bytes]] = []
        self.callback: Callable[[Any], None] | None = None
        self.inbox = ""
        self.responder: Responder | None = None
        self.broken = False
        self.fail_connect = False
        self.closed = False
        self.socket_closed = threading.Event()
        self.close_blocks = False

    def connect(self) -> None:
        if self.fail_connect:
            raise ConnectionRefusedError(111, "Connection refused")

    def subscribe(self, subject: str, *, callback: Callable[[Any], None]) -> None:
        self.inbox = subject
        self.callback = callback

    def publish(self, subject: str, *, payload: bytes = b"") -> None:
        if self.broken:
            raise BrokenPipeError(32, "Broken pipe")
        self.published.append((subject, payload))
        if self.responder is not None:
            reply = self.responder(subject, _sent(payload))
            if reply is not None:
                self.deliver(reply)

    def deliver(self, payload: bytes) -> None:
        assert self.callback is not None
        self.callback(SimpleNamespace(payload=payload, subject=self.inbox))

    def close(self) -> None:
        if self.close_blocks:  # like pynats2 after the connection is lost
            self.socket_closed.wait(10)
        self.closed = True


class FakeBase:
    @staticmethod
    def close(client: FakeClient) -> None:
        client.socket_closed.set()


def _sent(envelope: bytes) -> api_pb2.Message:
    return api_pb2.Message.FromString(decode_envelope(envelope, EnvelopeType.MESSAGE))


def ack_for(message: api_pb2.Message, offset: int, **fields: Any) -> bytes:
    """The ack envelope a partition leader sends for a message."""
    pb = api_pb2.Ack(
        stream="orders",
        partitionSubject="orders",
        msgSubject="orders",
        offset=offset,
        ackInbox=message.ackInbox,
        correlationId=message.correlationId,
        ackPolicy=message.ackPolicy,
        **fields,
    )
    return encode_envelope(EnvelopeType.ACK, pb.SerializeToString())


class Leader:
    """A responder that acks every message at the next offset."""

    def __init__(self) -> None:
        self.next_offset = 0

    def __call__(self, subject: str, message: api_pb2.Message) -> bytes | None:
        if message.ackPolicy == api_pb2.NONE:
            return None
        offset, self.next_offset = self.next_offset, self.next_offset + 1
        return ack_for(message, offset)


@pytest.fixture
def clients(monkeypatch: pytest.MonkeyPatch) -> list[FakeClient]:
    """Makes NatsPublisher use the fake client; lists the clients made."""
    made: list[FakeClient] = []

    def make(url: str, **kwargs: Any) -> FakeClient:
        client = FakeClient(url, **kwargs)
        client.responder = Leader()
        made.append(client)
        return client

    fake = SimpleNamespace(NATSClient=make, NATSError=FakeNATSError, NATSNoSubscribeClient=FakeBase)
    monkeypatch.setattr(_pynats, "import_pynats2", lambda: fake)
    monkeypatch.setattr(_nats, "server_info", lambda host, port, timeout: {"max_payload": 4096})
    return made


@pytest.fixture
def publisher(clients: list[FakeClient]) -> Iterator[NatsPublisher]:
    with NatsPublisher("nats://127.0.0.1:4333", ack_wait=2.0) as p:
        yield p


# ------------------------------------------------------------- publishing --


def test_publish_returns_the_matching_ack(
    publisher: NatsPublisher, clients: list[FakeClient]
) -> None:
    ack = publisher.publish("orders", b"v", key=b"k", headers={"h": b"1"}, correlation_id="c-1")
    assert isinstance(ack, Ack)
    assert (ack.offset, ack.correlation_id, ack.ack_inbox) == (0, "c-1", publisher.ack_inbox)
    (subject, envelope), *_ = clients[0].published
    sent = _sent(envelope)
    assert subject == "orders"
    assert (sent.value, sent.key, dict(sent.headers)) == (b"v", b"k", {"h": b"1"})
    assert sent.ackInbox == publisher.ack_inbox == clients[0].inbox
    assert sent.correlationId == "c-1"
    assert sent.offset == -1


def test_publish_defaults(publisher: NatsPublisher, clients: list[FakeClient]) -> None:
    first, second = publisher.publish("orders", b"a"), publisher.publish("orders", b"b")
    assert first is not None and second is not None
    assert (first.offset, second.offset) == (0, 1)
    assert first.correlation_id != second.correlation_id
    # A publisher's own prefix, then a count in hex (made in C: no uuid4 a publish).
    prefix, count = first.correlation_id.split("-")
    assert re.fullmatch("[0-9a-f]{12}", prefix) and count == "0x0"
    assert second.correlation_id == f"{prefix}-0x1"
    assert publisher.ack_inbox.startswith("_INBOX.")
    assert publisher.max_payload == 4096
    assert clients[0].url == "nats://127.0.0.1:4333"
    assert clients[0].published[0][1][6] == 0  # no CRC flag


def test_expected_offset_and_crc_reach_the_envelope(clients: list[FakeClient]) -> None:
    with NatsPublisher("nats://127.0.0.1:4333", crc=True, ack_inbox="my.acks") as publisher:
        publisher.publish("orders", b"v", expected_offset=4, ack_policy=AckPolicy.ALL)
    envelope = clients[0].published[0][1]
    assert envelope[5:7] == bytes([12, 1])
    sent = _sent(envelope)
    assert (sent.offset, sent.ackPolicy, sent.ackInbox) == (4, api_pb2.ALL, "my.acks")
    assert clients[0].inbox == "my.acks"


def test_ack_policy_none_waits_for_nothing(
    publisher: NatsPublisher, clients: list[FakeClient]
) -> None:
    assert publisher.publish("orders", b"v", ack_policy=AckPolicy.NONE) is None
    future = publisher.publish_async("orders", b"v", ack_policy=AckPolicy.NONE)
    assert future.result(0) is None
    assert all(_sent(envelope).ackInbox == "" for _, envelope in clients[0].published)


def test_publish_async_resolves_when_the_ack_comes(
    publisher: NatsPublisher, clients: list[FakeClient]
) -> None:
    clients[0].responder = None
    future = publisher.publish_async("orders", b"v", correlation_id="late")
    assert not future.done()
    assert not future.cancel()  # already running: only the ack ends it
    clients[0].deliver(ack_for(_sent(clients[0].published[0][1]), 9))
    ack = future.result(1)
    assert ack is not None and ack.offset == 9


def test_the_servers_refusal_is_raised(publisher: NatsPublisher, clients: list[FakeClient]) -> None:
    clients[0].responder = lambda subject, m: ack_for(m, 0, ackError=api_pb2.Ack.INCORRECT_OFFSET)
    with pytest.raises(IncorrectOffsetError):
        publisher.publish("orders", b"v", expected_offset=3)


# --------------------------------------------------------------- timeouts --


def test_publish_times_out(clients: list[FakeClient]) -> None:
    with NatsPublisher("nats://127.0.0.1:4333", ack_wait=30.0) as publisher:
        clients[0].responder = None
        started = time.monotonic()
        with pytest.raises(AckTimeoutError, match=r"^no ack within 0\.05s .* 'orders' .*'c-9'"):
            publisher.publish("orders", b"v", correlation_id="c-9", timeout=0.05)
        # The call's 0.05 s, not ack_wait's 30 s (3 s of room for a loaded CI machine).
        assert time.monotonic() - started < 3.0
        # A late ack is dropped, and the id is free again.
        clients[0].deliver(ack_for(_sent(clients[0].published[0][1]), 0))
        clients[0].responder = Leader()
        ack = publisher.publish("orders", b"v", correlation_id="c-9")
        assert ack is not None and ack.correlation_id == "c-9"


def test_publish_async_times_out_on_the_timer_thread(clients: list[FakeClient]) -> None:
    # The deadlines far apart and ack_wait past both: fast must fail within
    # 1.95 s of its deadline (room for a loaded CI machine), and this thread
    # then has the 2 s left before slow's deadline to see slow still waiting.
    with NatsPublisher("nats://127.0.0.1:4333", ack_wait=30.0) as publisher:
        clients[0].responder = None
        slow = publisher.publish_async("orders", b"v", timeout=4.0)
        fast = publisher.publish_async("orders", b"v", timeout=0.05)
        with pytest.raises(AckTimeoutError):
            fast.result(2.0)  # well before the slower deadline: the timer woke for it
        assert not slow.done()
        with pytest.raises(AckTimeoutError):
            slow.result(10)


def test_done_callbacks_run_on_the_callbacks_thread(
    publisher: NatsPublisher, clients: list[FakeClient]
) -> None:
    clients[0].responder = None
    ran_on: list[str] = []
    ran = threading.Event()

    def on_done(future: Future[Ack | None]) -> None:
        ran_on.append(threading.current_thread().name)
        ran.set()

    lost = publisher.publish_async("orders", b"v", timeout=0.05)
    lost.add_done_callback(on_done)  # resolved by the ack timer, never run there
    assert ran.wait(5)
    clients[0].responder = Leader()
    ran.clear()
    publisher.publish_async("orders", b"v").add_done_callback(on_done)
    assert ran.wait(5)
    assert ran_on == ["liftbridge-callbacks", "liftbridge-callbacks"]


def test_ack_timeout_error_is_a_timeout_error() -> None:
    assert issubclass(AckTimeoutError, TimeoutError)


# ------------------------------------------------------------------ batch --


def test_publish_many_returns_acks_in_order(publisher: NatsPublisher) -> None:
    acks = publisher.publish_many("orders", [b"%d" % i for i in range(50)])
    assert [ack.offset for ack in acks] == list(range(50))
    assert len({ack.correlation_id for ack in acks}) == 50


def test_publish_many_raises_the_first_failure_after_all_settle(
    publisher: NatsPublisher, clients: list[FakeClient]
) -> None:
    leader = Leader()

    def refuse_second(subject: str, message: api_pb2.Message) -> bytes | None:
        if message.value == b"1":
            return ack_for(message, 0, ackError=api_pb2.Ack.TOO_LARGE)
        return leader(subject, message)

    clients[0].responder = refuse_second
    with pytest.raises(MessageTooLargeError):
        publisher.publish_many("orders", [b"0", b"1", b"2"])
    assert leader.next_offset == 2


def test_publish_many_rejects(publisher: NatsPublisher) -> None:
    one_payload: Any = b"one payload"
    with pytest.raises(InvalidArgumentError, match="ack_policy NONE has none"):
        publisher.publish_many("orders", [b"v"], ack_policy=AckPolicy.NONE)
    with pytest.raises(ArgumentTypeError, match=r"^values must be an iterable of bytes payloads"):
        publisher.publish_many("orders", one_payload)


# ---------------------------------------------------------- bad arguments --


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"subject": "orders.*"}, InvalidArgumentError, "subject 'orders.*' must not contain"),
        ({"subject": ""}, InvalidArgumentError, "subject must not be empty"),
        ({"value": "text"}, ArgumentTypeError, "value must be bytes"),
        ({"correlation_id": ""}, InvalidArgumentError, "correlation_id must not be empty"),
        ({"correlation_id": 3}, ArgumentTypeError, "correlation_id must be a str or None"),
        ({"timeout": 0}, InvalidArgumentError, "timeout must be > 0 seconds"),
        ({"ack_policy": "ALL"}, ArgumentTypeError, "ack_policy must be an AckPolicy"),
    ],
)
def test_publish_rejects(
    publisher: NatsPublisher,
    clients: list[FakeClient],
    kwargs: dict[str, Any],
    error: type[Exception],
    message: str,
) -> None:
    subject = kwargs.pop("subject", "orders")
    value = kwargs.pop("value", b"v")
    with pytest.raises(error, match="^" + message):
        publisher.publish(subject, value, **kwargs)
    assert clients[0].published == []


def test_too_large_is_refused_before_sending(
    publisher: NatsPublisher, clients: list[FakeClient]
) -> None:
    with pytest.raises(MessageTooLargeError, match="over the NATS server's max_payload of 4096"):
        publisher.publish("orders", bytes(5000))
    assert clients[0].published == []


def test_a_correlation_id_in_flight_is_refused(
    publisher: NatsPublisher, clients: list[FakeClient]
) -> None:
    clients[0].responder = None
    publisher.publish_async("orders", b"v", correlation_id="dup")
    with pytest.raises(InvalidArgumentError, match=r"^correlation_id 'dup' is already waiting"):
        publisher.publish_async("orders", b"v", correlation_id="dup")


def test_garbage_on_the_inbox_is_logged_and_dropped(
    publisher: NatsPublisher, clients: list[FakeClient], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="liftbridge._publish._nats"):
        clients[0].deliver(b"not an envelope")
    assert "is not an ack: not a Liftbridge envelope" in caplog.text
    assert publisher.publish("orders", b"v") is not None


@pytest.mark.parametrize(
    ("url", "error", "message"),
    [
        (None, ArgumentTypeError, "url must be a str, got NoneType"),
        ("http://127.0.0.1:80", InvalidArgumentError, "url must look like nats://host:port"),
        ("tls://127.0.0.1:4222", InvalidArgumentError, r"url must look like .*scheme 'tls'"),
        ("nats://", InvalidArgumentError, "url must look like nats://host:port"),
        ("nats://127.0.0.1:99999", InvalidArgumentError, "url is not a valid URL"),
    ],
)
def test_bad_urls(
    clients: list[FakeClient], url: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match="^" + message):
        NatsPublisher(url)
    assert clients == []


def test_url_port_defaults_to_4222(clients: list[FakeClient]) -> None:
    with NatsPublisher("nats://user:secret@127.0.0.1") as publisher:
        assert clients[0].url == "nats://user:secret@127.0.0.1:4222"
        assert "secret" not in repr(publisher)


# -------------------------------------------------------------- lifecycle --


def test_close_fails_pending_publishes_and_is_idempotent(clients: list[FakeClient]) -> None:
    publisher = NatsPublisher("nats://127.0.0.1:4333")
    clients[0].responder = None
    future: Future[Ack | None] = publisher.publish_async("orders", b"v", correlation_id="p")
    publisher.close()
    with pytest.raises(ClientClosedError, match="before the ack for correlation id 'p'"):
        future.result(0)
    assert clients[0].closed
    publisher.close()
    assert "closed" in repr(publisher)
    with pytest.raises(ClientClosedError):
        publisher.publish("orders", b"v")


def test_close_wakes_a_blocked_publish(clients: list[FakeClient]) -> None:
    publisher = NatsPublisher("nats://127.0.0.1:4333")
    clients[0].responder = None
    errors: list[BaseException] = []

    def publish() -> None:
        try:
            publisher.publish("orders", b"v", timeout=30)
        except BaseException as e:
            errors.append(e)

    waiter = threading.Thread(target=publish, name="test-blocked-publish")
    waiter.start()
    while not clients[0].published:
        time.sleep(0.01)
    publisher.close()
    waiter.join(5)
    assert [type(e) for e in errors] == [ClientClosedError]


def test_lost_connection(clients: list[FakeClient]) -> None:
    publisher = NatsPublisher("nats://127.0.0.1:4333")
    clients[0].broken = True
    clients[0].close_blocks = True
    with pytest.raises(UnavailableError, match=r"^NATS connection to 127\.0\.0\.1:4333 lost"):
        publisher.publish("orders", b"v")
    started = time.monotonic()
    publisher.close()  # closes the socket first, so pynats2's close returns
    # Not CLOSE_TIMEOUT (5 s) waiting on the blocked close first (3 s of room
    # for a loaded CI machine).
    assert time.monotonic() - started < 3.0
    assert clients[0].socket_closed.is_set() and clients[0].closed


def test_close_is_bounded_when_pynats2_hangs(
    clients: list[FakeClient], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(_pynats, "CLOSE_TIMEOUT", 0.1)
    publisher = NatsPublisher("nats://127.0.0.1:4333")
    clients[0].close_blocks = True
    with caplog.at_level(logging.WARNING, logger="liftbridge._publish._pynats"):
        publisher.close()
    assert "did not stop within" in caplog.text
    assert clients[0].socket_closed.is_set() and clients[0].closed


def test_connect_failure(clients: list[FakeClient], monkeypatch: pytest.MonkeyPatch) -> None:
    original = FakeClient.connect

    def refuse(self: FakeClient) -> None:
        self.fail_connect = True
        original(self)

    monkeypatch.setattr(FakeClient, "connect", refuse)
    with pytest.raises(UnavailableError, match=r"^cannot connect to the NATS server at 127\."):
        NatsPublisher("nats://127.0.0.1:4333")
    assert clients[0].closed


def test_a_connect_that_hangs_is_given_up_and_stopped(
    clients: list[FakeClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    """pynats2's connect spins for ever on a peer that hangs up without a
    greeting; the constructor gives up after three socket timeouts and close
    ends it (closing the socket under it). Before, it waited for ever."""
    monkeypatch.setattr(_pynats, "CLOSE_TIMEOUT", 0.1)

    def hang(self: FakeClient) -> None:
        self.socket_closed.wait(10)  # until the socket is closed under it
        raise ConnectionResetError(104, "Connection reset by peer")

    monkeypatch.setattr(FakeClient, "connect", hang)
    with pytest.raises(UnavailableError, match=r"did not take the connection within 1s$"):
        NatsPublisher("nats://127.0.0.1:4333", connect_timeout=0.3)
    assert clients[0].socket_closed.is_set() and clients[0].closed


def test_pynats2s_threads_are_daemons() -> None:
    """They start on liftbridge-nats-connect, a daemon thread: a script that
    never closes its publisher still exits. Before, they started on the
    caller's thread (not a daemon) and the interpreter waited for them for
    ever at exit. The real pynats2, against a fake NATS server."""
    before = set(threading.enumerate())
    nats = FakeNats()
    try:
        with NatsPublisher(nats.url) as publisher:
            assert isinstance(publisher.publish("orders", b"v"), Ack)
            theirs = [t for t in set(threading.enumerate()) - before if "test-" not in t.name]
            assert theirs, "pynats2 started no thread"
            assert all(t.daemon for t in theirs), [t.name for t in theirs if not t.daemon]
    finally:
        nats.close()


def test_missing_pynats2_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynats2", None)
    with pytest.raises(ImportError, match=r"pip install 'liftbridge\[pynats2\]'"):
        _pynats.import_pynats2()


# ----------------------------------------------------- the INFO greeting --


def _greeter(greeting: bytes) -> tuple[int, threading.Thread, socket.socket]:
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        connection, _ = listener.accept()
        with connection:
            connection.sendall(greeting)
            connection.recv(1)  # until the client hangs up

    thread = threading.Thread(target=serve, name="test-fake-nats", daemon=True)
    thread.start()
    return listener.getsockname()[1], thread, listener


def test_server_info_reads_the_greeting() -> None:
    port, thread, listener = _greeter(b'INFO {"max_payload": 2048, "server_id": "x"}\r\n')
    with listener:
        info = _nats_info.server_info("127.0.0.1", port, 2.0)
        thread.join(2)
    assert info["max_payload"] == 2048


def test_server_info_refuses_a_non_nats_server() -> None:
    port, thread, listener = _greeter(b"HTTP/1.1 400 Bad Request\r\n\r\n")
    with listener, pytest.raises(UnavailableError, match="is not a NATS server: it greeted with"):
        _nats_info.server_info("127.0.0.1", port, 2.0)
    thread.join(2)


def test_server_info_when_nothing_listens() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
    with pytest.raises(UnavailableError, match=f"^cannot reach a NATS server at 127.0.0.1:{port}"):
        _nats_info.server_info("127.0.0.1", port, 2.0)
