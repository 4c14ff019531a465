"""The SDK's own NATS connection: its frame parser, and its handshake,
liveness pings and reconnect buffer against a fake server on 127.0.0.1;
senders handing their frames to the I/O thread (``_handover``): one
back to back never gets more than ``HAND_OVER`` frames ahead of a busy I/O
thread, and none waits without a bound for one that does not come."""

from __future__ import annotations

import socket
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from liftbridge import MissingDependencyError, UnavailableError, _handover
from liftbridge._errors import ProtocolError
from liftbridge._handover import HAND_OVER, Handover
from liftbridge._transport import _nats_socket, _nats_writes
from liftbridge._transport._nats_frames import FrameParser
from liftbridge._transport._nats_socket import NatsSocket

INBOX = b"_INBOX.abc"


def _msg(payload: bytes, sid: bytes = b"1", reply: bytes = b"") -> bytes:
    middle = b" " + reply if reply else b""
    return b"MSG %s %s%s %d\r\n%s\r\n" % (INBOX, sid, middle, len(payload), payload)


def test_payloads_of_the_inbox_in_order() -> None:
    parser = FrameParser(b"1", INBOX)
    stream = _msg(b"one") + _msg(b"") + _msg(b"three\r\nwith a CRLF inside")
    assert parser.feed(stream) == [b"one", b"", b"three\r\nwith a CRLF inside"]


def test_a_frame_split_anywhere_is_put_back_together() -> None:
    stream = _msg(b"first") + b"PING\r\n" + _msg(b"second" * 50) + b"+OK\r\n" + _msg(b"third")
    for cut in range(1, len(stream)):
        parser = FrameParser(b"1", INBOX)
        got = parser.feed(stream[:cut]) + parser.feed(stream[cut:])
        assert got == [b"first", b"second" * 50, b"third"], cut
        assert parser.pings == 1


def test_one_byte_at_a_time() -> None:
    parser = FrameParser(b"1", INBOX)
    stream = _msg(b"a") + b"PONG\r\n" + _msg(b"b", reply=b"_INBOX.reply")
    got = [payload for byte in stream for payload in parser.feed(bytes([byte]))]
    assert got == [b"a", b"b"]
    assert parser.pongs == 1


def test_other_subscriptions_are_skipped() -> None:
    parser = FrameParser(b"1", INBOX)
    stream = b"MSG other 7 5\r\nhello\r\n" + _msg(b"mine") + _msg(b"not mine", sid=b"2")
    assert parser.feed(stream) == [b"mine"]


def test_hmsg_gives_the_payload_without_the_headers() -> None:
    parser = FrameParser(b"1", INBOX)
    headers = b"NATS/1.0\r\nX-Key: v\r\n\r\n"
    payload = b"the ack"
    frame = b"HMSG %s 1 %d %d\r\n%s%s\r\n" % (
        INBOX,
        len(headers),
        len(headers) + len(payload),
        headers,
        payload,
    )
    assert parser.feed(frame[:10]) == []
    assert parser.feed(frame[10:] + _msg(b"next")) == [payload, b"next"]


def test_ping_in_the_middle_is_counted_and_messages_go_on() -> None:
    parser = FrameParser(b"1", INBOX)
    assert parser.feed(_msg(b"x") + b"PING\r\nPING\r\n" + _msg(b"y")) == [b"x", b"y"]
    assert parser.pings == 2


def test_err_and_info_are_collected() -> None:
    parser = FrameParser(b"1", INBOX)
    stream = (
        b"-ERR 'Permissions Violation for Publish to \"x\"'\r\n"
        + b'INFO {"max_payload": 2048, "ldm": true}\r\n'
        + _msg(b"z")
    )
    assert parser.feed(stream) == [b"z"]
    assert parser.errors == ['Permissions Violation for Publish to "x"']
    assert parser.infos == [{"max_payload": 2048, "ldm": True}]


@pytest.mark.parametrize(
    "garbage",
    [b"HELLO there\r\n", b"MSG only-two 1\r\n", b"INFO {not json\r\n", b"X" * 70_000],
)
def test_what_is_not_nats_is_a_protocol_error(garbage: bytes) -> None:
    with pytest.raises(ProtocolError):
        FrameParser(b"1", INBOX).feed(garbage)


# ------------------------------------------------- against a fake NATS server --


class FakeServer:
    """Accepts connections on 127.0.0.1, greets each with INFO, answers the
    PING that ends the handshake, then reads and never answers again."""

    def __init__(self, answer: bytes = b"PONG\r\n", greet: int = 1000) -> None:
        self._answer = answer
        self._greet = greet  # connections greeted; later ones hear nothing
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port = self._listener.getsockname()[1]
        self.received: list[bytearray] = []  # per connection
        self._lock = threading.Lock()  # guards connections
        self.connections: list[socket.socket] = []
        self.connected = threading.Semaphore(0)
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._accept, name="test-fake-nats")]
        self._threads[0].start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                connection, _ = self._listener.accept()
            except TimeoutError:
                continue
            received = bytearray()
            with self._lock:
                self.connections.append(connection)
            self.received.append(received)
            thread = threading.Thread(
                target=self._serve, args=(connection, received), name="test-fake-nats-conn"
            )
            self._threads.append(thread)
            thread.start()

    def _serve(self, connection: socket.socket, received: bytearray) -> None:
        with connection:
            connection.settimeout(0.2)
            if len(self.received) <= self._greet:
                connection.sendall(b'INFO {"max_payload": 4096}\r\n')
            answered = False
            while not self._stop.is_set():
                try:
                    data = connection.recv(65536)
                except TimeoutError:
                    continue
                except OSError:
                    return
                if not data:
                    return
                received += data
                if not answered and b"PING\r\n" in received:
                    connection.sendall(self._answer)
                    answered = True
                    self.connected.release()

    def close(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(5)
        self._listener.close()


@pytest.fixture
def fake() -> Iterator[FakeServer]:
    server = FakeServer()
    yield server
    server.close()


def test_a_server_that_stops_answering_pings_is_reconnected_to(
    fake: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_nats_socket, "PING_INTERVAL", 0.05)
    closed = threading.Event()
    connection = NatsSocket("fake", "_INBOX.x", lambda item: None, closed.set)
    connection.connect(f"nats://127.0.0.1:{fake.port}", connect_timeout=2.0, reconnect_wait=0.01)
    try:
        assert connection.max_payload == 4096
        assert fake.connected.acquire(timeout=5)
        # No PONG to its PINGs: the connection is dropped and made again.
        assert fake.connected.acquire(timeout=5), "no reconnection to a silent server"
        second = bytes(fake.received[1])
        assert second.startswith(b"CONNECT {")
        assert b'"verbose":false' in second and b'"headers":true' in second
        assert b"\r\nSUB _INBOX.x 1\r\n" in second
        assert b"PING\r\n" in bytes(fake.received[0]).split(b"SUB _INBOX.x 1\r\nPING\r\n", 1)[1]
    finally:
        connection.close()
    assert closed.is_set()


def test_an_error_while_connecting_is_unavailable_and_names_it() -> None:
    server = FakeServer(answer=b"-ERR 'Authorization Violation'\r\n")
    try:
        connection = NatsSocket("fake", "_INBOX.x", lambda item: None, lambda: None)
        with pytest.raises(UnavailableError, match="Authorization Violation"):
            connection.connect(f"nats://u:p@127.0.0.1:{server.port}", connect_timeout=2.0)
        assert b'"user":"u","pass":"p"' in bytes(server.received[0])
    finally:
        server.close()


def test_publishes_queued_while_away_past_the_buffer_fail(
    fake: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Room for one frame of an 8-byte envelope (PUB s 8, CRLF, envelope, CRLF: 19 bytes), not two.
    monkeypatch.setattr(_nats_writes, "RECONNECT_BUFFER", 30)
    refused: list[object] = []
    connection = NatsSocket("fake", "_INBOX.x", refused.append, lambda: None)
    connection.connect(f"nats://127.0.0.1:{fake.port}", connect_timeout=2.0, reconnect_wait=5)
    try:
        assert fake.connected.acquire(timeout=5)
        fake.close()  # the connection drops; reconnects wait 5 s
        deadline = time.monotonic() + 5
        while connection._sock is not None:
            assert time.monotonic() < deadline, "the drop was not noticed"
            time.sleep(0.01)  # polling from a test, not a stoppable loop
        connection.send("s", b"12345678", "kept")
        connection.send("s", b"12345678", "refused")
        deadline = time.monotonic() + 5
        while not refused:
            assert time.monotonic() < deadline, "nothing was refused"
            time.sleep(0.01)  # polling from a test, not a stoppable loop
        assert refused[0][0] == "refused"  # type: ignore[index]
        assert isinstance(refused[0][1], UnavailableError)  # type: ignore[index]
    finally:
        connection.close()
    # Closing fails what was still held.
    assert [item[0] for item in refused] == ["refused", "kept"]  # type: ignore[index]


def test_credentials_without_nkeys_name_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "nkeys", None)  # import nkeys raises ImportError
    connection = NatsSocket("fake", "_INBOX.x", lambda item: None, lambda: None)
    with pytest.raises(MissingDependencyError, match="nkeys"):
        connection.connect("nats://127.0.0.1:1", connect_timeout=1.0, credentials="user.creds")


def test_close_cuts_a_reconnect_short() -> None:
    # The first connection is greeted, the next ones never are: the I/O
    # thread waits in a reconnect for an INFO that would take 60 s.
    server = FakeServer(greet=1)
    connection = NatsSocket("fake", "_INBOX.x", lambda item: None, lambda: None)
    try:
        connection.connect(
            f"nats://127.0.0.1:{server.port}", connect_timeout=60.0, reconnect_wait=0.01
        )
        assert server.connected.acquire(timeout=5)
        with server._lock:
            first = server.connections[0]
        first.shutdown(socket.SHUT_RDWR)  # drops the greeted connection
        deadline = time.monotonic() + 5
        while len(server.received) < 2:
            assert time.monotonic() < deadline, "no reconnect attempt"
            time.sleep(0.01)  # polling from a test, not a stoppable loop
        connection.close()
        assert not connection._thread.is_alive()  # joined within CLOSE_TIMEOUT
    finally:
        connection.close()
        server.close()


def test_a_sender_back_to_back_stays_within_a_hand_over_of_the_io_thread(
    fake: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Without the hand-over the sender keeps the GIL and the I/O thread finds
    # thousands of frames queued at a time (a window's worth, in a publisher).
    monkeypatch.setattr(_handover, "WAIT", 60.0)  # never runs out here
    queued: list[int] = []
    write = NatsSocket._write

    def recording(self: NatsSocket, sock: object) -> None:
        queued.append(len(self._outbox))
        write(self, sock)  # type: ignore[arg-type]

    monkeypatch.setattr(NatsSocket, "_write", recording)
    connection = NatsSocket("fake", "_INBOX.x", lambda item: None, lambda: None)
    connection.connect(f"nats://127.0.0.1:{fake.port}", connect_timeout=5.0)
    count = 20 * HAND_OVER
    try:
        assert fake.connected.acquire(timeout=5)
        for index in range(count):
            connection.send("s", b"%08d" % index, None)
    finally:
        connection.close()  # writes what is queued
    assert max(queued) <= HAND_OVER
    deadline = time.monotonic() + 30
    while bytes(fake.received[0]).count(b"PUB s 8\r\n") < count and time.monotonic() < deadline:
        threading.Event().wait(0.01)  # polling from a test, not a stoppable loop
    received = bytes(fake.received[0])
    assert received.count(b"PUB s 8\r\n") == count
    assert received.index(b"%08d" % 0) < received.index(b"%08d" % (count - 1))


def test_a_wait_that_ran_out_is_not_waited_again_until_the_io_thread_comes() -> None:
    io = threading.Thread(target=lambda: None, name="test-io")
    handover = Handover(2, io, threading.Event())

    def queued() -> int:
        return 2  # nothing taken

    _handover.WAIT, wait = 0.01, _handover.WAIT
    try:
        handover.wait(queued)  # no I/O thread takes: it runs out
        assert handover.waiting
        _handover.WAIT = 3600.0
        handover.wait(queued)  # returns at once: the I/O thread is held up
        handover.release()
        assert not handover.waiting
        released = threading.Thread(target=handover.wait, args=(queued,), name="test-sender")
        released.start()
        while not handover.waiting and released.is_alive():
            threading.Event().wait(0.001)  # polling from a test, not a stoppable loop
        handover.release()  # the I/O thread took the outbox: the sender goes on
        released.join(30)
        assert not released.is_alive()
    finally:
        _handover.WAIT = wait


def test_a_sender_does_not_wait_for_a_take_that_came_before_it_was_in_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The I/O thread took the whole queue (and saw no one waiting) between
    # the sender's look at the queue and its place in line: no release comes.
    # Before, the sender waited out WAIT (0.1 s a publish stall; the test's
    # hour ran until the fake server's connection went stale).
    monkeypatch.setattr(_handover, "WAIT", 3600.0)
    handover = Handover(2, threading.Thread(target=lambda: None), threading.Event())
    sender = threading.Thread(target=handover.wait, args=(lambda: 0,), name="test-sender")
    sender.start()
    sender.join(30)
    assert not sender.is_alive(), "the sender waited for a take that had come"
    assert not handover.waiting  # out of line: the next sender's wait is a real one
    released = threading.Thread(target=handover.wait, args=(lambda: 2,), name="test-sender")
    released.start()
    while not handover.waiting and released.is_alive():
        threading.Event().wait(0.001)  # polling from a test, not a stoppable loop
    assert released.is_alive()  # something queued: it waits for the I/O thread
    handover.release()
    released.join(30)
    assert not released.is_alive()


def test_no_wait_once_the_io_thread_ended_nor_on_the_io_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_handover, "WAIT", 3600.0)
    ended = threading.Event()
    ended.set()
    Handover(1, threading.Thread(target=lambda: None), ended).wait(lambda: 1)
    Handover(1, threading.current_thread(), threading.Event()).wait(lambda: 1)
