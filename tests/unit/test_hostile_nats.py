"""NatsStreamPublisher against a NATS server that breaks the protocol on cue
(tests/unit/hostile_nats.py), with a whole client (metadata from the fake
broker of tests/unit/hostile_server.py).

Every case holds that:

- the call ends in a typed :class:`liftbridge.LiftbridgeError` saying why,
  within its deadline + ``SLACK``;
- the process grows by less than ``RSS_BOUND`` meanwhile (sampled every
  5 ms: the memory a hostile server can make the client hold is bounded);
- another publisher of the same client, on a connection of its own, keeps
  publishing, and the hostile one works again once the server behaves;
- no SDK thread dies, and none is left after ``close()`` (the autouse
  fixture of tests/conftest.py).

Set ``HOSTILE_NATS_FIGURES=path.json`` to have the figures written out.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest

import liftbridge
from liftbridge import AckPolicy
from liftbridge._transport import _nats_socket
from liftbridge._transport._nats_socket import NatsSocket
from liftbridge_api import api_pb2
from tests.unit.fake_broker import serving
from tests.unit.hostile_nats import Connection, FakeNats, Script, ack
from tests.unit.hostile_server import STREAM, HostileBroker

pytestmark = pytest.mark.timeout(60)

TIMEOUT = 2.0
"""The publish timeout of every case."""
SLACK = 3.0
"""Seconds past its deadline a case's call may end: room for a loaded 2-core
CI machine (was 1 s); a call the hostile server holds up hangs, or waits out
the test's 60 s timeout."""
RSS_BOUND = 16 << 20
"""Bytes the process may grow by during a case: measured at most 2.7 MiB
(the PING flood), the rest is room for a noisy process. The one case with a
large legitimate message adds three times its size: its reads, the frame
joined from them and the payload cut out of that, which the allocator keeps
for a while (measured 48 MiB for 16 MiB)."""
BIG = 16 << 20
"""The size of the large legitimate message, and its server's max_payload."""
FIGURES: dict[str, dict[str, float]] = {}


def rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096


class Case:
    """Measures one case: seconds to its outcome, and the process's RSS
    growth over a baseline, sampled every 5 ms until :meth:`done`."""

    def __init__(self, name: str, bound: int = RSS_BOUND) -> None:
        self.name, self.bound = name, bound
        self.base = self.peak = rss()
        self.seconds = 0.0
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample, name="test-rss", daemon=True)
        self._sampler.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, rss())

    def fails(
        self, error: type[liftbridge.LiftbridgeError], call: Callable[[], object], deadline: float
    ) -> liftbridge.LiftbridgeError:
        """Runs ``call``, which must raise ``error`` within ``deadline`` + SLACK."""
        start = time.monotonic()
        with pytest.raises(error) as caught:
            call()
        self.seconds = time.monotonic() - start
        assert self.seconds < deadline + SLACK, f"{self.name}: {self.seconds:.2f}s"
        return caught.value

    def done(self) -> None:
        self._stop.set()
        self._sampler.join(2)
        self.peak = max(self.peak, rss())
        growth = self.peak - self.base
        FIGURES[self.name] = {"seconds": round(self.seconds, 2), "rss_mib": growth / 2**20}
        assert growth < self.bound, f"{self.name}: grew by {growth / 2**20:.1f} MiB"


@dataclass
class Scene:
    nats: FakeNats
    client: liftbridge.Client
    good: liftbridge.NatsStreamPublisher
    publishers: list[liftbridge.NatsStreamPublisher] = field(default_factory=list)

    def publisher(self, **options: float) -> liftbridge.NatsStreamPublisher:
        """A publisher on a connection of its own to the hostile server."""
        settings: dict[str, float] = {
            "ack_wait": TIMEOUT,
            "connect_timeout": 2.0,
            "reconnect_wait": 0.05,
            **options,
        }
        publisher = liftbridge.NatsStreamPublisher(self.client, self.nats.url, **settings)  # type: ignore[arg-type]
        self.publishers.append(publisher)
        return publisher

    def bystander_works(self) -> None:
        """The good publisher's publishes are all acked in time."""
        futures = [self.good.publish_async(STREAM, b"good-%d" % i) for i in range(20)]
        for future in futures:
            assert isinstance(future.result(TIMEOUT + SLACK), liftbridge.Ack)


@pytest.fixture
def deaths() -> Iterator[list[threading.ExceptHookArgs]]:
    """Every exception that ended a thread during the test (asserted empty)."""
    died: list[threading.ExceptHookArgs] = []
    previous = threading.excepthook
    threading.excepthook = died.append
    try:
        yield died
    finally:
        threading.excepthook = previous
    assert not died, [f"{d.thread.name if d.thread else '?'}: {d.exc_value!r}" for d in died]


@pytest.fixture
def scene(deaths: list[threading.ExceptHookArgs]) -> Iterator[Scene]:
    broker = HostileBroker()  # type: ignore[abstract]  # the RPCs the SDK uses here
    nats = FakeNats(SCRIPTS)
    try:
        with serving(broker) as served, liftbridge.Client(f"127.0.0.1:{served.port}") as client:
            good = liftbridge.NatsStreamPublisher(client, nats.url, ack_wait=TIMEOUT)
            built = Scene(nats, client, good)
            try:
                built.bystander_works()  # warm: the baseline RSS has the good path's objects
                yield built
                built.bystander_works()
            finally:
                for publisher in [good, *built.publishers]:
                    publisher.close()
                broker.stop.set()
    finally:
        nats.close()


@pytest.fixture(scope="module", autouse=True)
def figures() -> Iterator[None]:
    yield
    path = os.environ.get("HOSTILE_NATS_FIGURES")
    if path:
        with open(path, "w") as out:
            json.dump(FIGURES, out, indent=1, sort_keys=True)


def _inbox(message: api_pb2.Message) -> bytes:
    return message.ackInbox.encode()


# ---------------------------------------------------------------- scripts --


def _negative_msg(c: Connection, m: api_pb2.Message, s: str) -> None:
    c.send(b"MSG %s %s -5\r\nxxxxx\r\n" % (_inbox(m), c.sid))  # the fast path's frame


def _negative_reply(c: Connection, m: api_pb2.Message, s: str) -> None:
    c.send(b"MSG %s %s _INBOX.r -5\r\nxxxxx\r\n" % (_inbox(m), c.sid))


def _negative_hmsg(c: Connection, m: api_pb2.Message, s: str) -> None:
    c.send(b"HMSG %s %s -3 10\r\nxxxxxxxxxx\r\n" % (_inbox(m), c.sid))


def _headers_past_the_end(c: Connection, m: api_pb2.Message, s: str) -> None:
    c.send(b"HMSG %s %s 20 10\r\nxxxxxxxxxx\r\n" % (_inbox(m), c.sid))


def _huge_msg(c: Connection, m: api_pb2.Message, s: str) -> None:
    c.send(b"MSG %s %s %d\r\n" % (_inbox(m), c.sid, 1 << 31))
    c.server.flooded = c.flood(b"x" * (64 << 10), 256 << 20)  # type: ignore[attr-defined]


def _big_trickled(c: Connection, m: api_pb2.Message, s: str) -> None:
    """A legitimate message of BIG bytes in 16 KiB writes (not an ack: dropped), then the ack."""
    c.send(b"MSG %s %s %d\r\n" % (_inbox(m), c.sid, BIG))
    chunk = b"t" * (16 << 10)
    for _ in range(BIG // len(chunk)):
        c.send(chunk)
    c.send(b"\r\n")
    ack(c, m, s)


def _bad_info(c: Connection, m: api_pb2.Message, s: str) -> None:
    c.send(b'INFO {"max_payload": "lots"}\r\n')


def _drop_for_good(c: Connection, m: api_pb2.Message, s: str) -> None:
    c.server.info = b'INFO {"max_payload": "lots"}\r\n'  # every reconnect meets this
    c.sock.shutdown(socket.SHUT_RDWR)


def _drop_then_recover(c: Connection, m: api_pb2.Message, s: str) -> None:
    c.server.next_infos = [b"INFO [1, 2]\r\n", b'INFO {"max_payload": -1}\r\n']
    c.sock.shutdown(socket.SHUT_RDWR)


def _denied(c: Connection, m: api_pb2.Message, s: str) -> None:
    c.send(b"-ERR 'Permissions Violation for Publish to \"%s\"'\r\n" % s.encode())


def _fatal_error(c: Connection, m: api_pb2.Message, s: str) -> None:
    c.send(b"-ERR 'Unknown Protocol Operation'\r\n")  # and keeps the connection open


def _lower_max_payload(c: Connection, m: api_pb2.Message, s: str) -> None:
    """A new INFO, then the ack, in one write: read together, as a busy
    client reads them; the INFO must be in force when the ack resolves."""
    ack(c, m, s, before=b'INFO {"max_payload": 1024}\r\n')


def _stall(c: Connection, m: api_pb2.Message, s: str) -> None:
    c.reading = False  # the client's writes fill the socket buffers, then block


def _stale(c: Connection, m: api_pb2.Message, s: str) -> None:
    """PINGs the client every 20 ms; never answers its PINGs."""
    c.answer_pings = False

    def ping() -> None:
        while not c.server.stop.wait(0.02):
            try:
                c.sock.sendall(b"PING\r\n")
            except OSError:
                return

    c.server.start(ping, "test-nats-pinger")


def _ping_flood(c: Connection, m: api_pb2.Message, s: str) -> None:
    c.reading = False  # the client's PONGs are never read
    c.flood(b"PING\r\n" * 10_000, 64 << 20)


SCRIPTS: dict[bytes, Script] = {
    b"negative-msg": _negative_msg,
    b"negative-reply": _negative_reply,
    b"negative-hmsg": _negative_hmsg,
    b"headers-past-the-end": _headers_past_the_end,
    b"huge-msg": _huge_msg,
    b"big-trickled": _big_trickled,
    b"bad-info": _bad_info,
    b"drop-for-good": _drop_for_good,
    b"drop-then-recover": _drop_then_recover,
    b"denied": _denied,
    b"fatal-error": _fatal_error,
    b"lower-max-payload": _lower_max_payload,
    b"stall": _stall,
    b"stale": _stale,
    b"ping-flood": _ping_flood,
}


# ------------------------------------------------------------------ cases --


def _works_again(publisher: liftbridge.NatsStreamPublisher) -> None:
    """The publisher reconnected and publishes again (its I/O thread lives)."""
    assert isinstance(publisher.publish(STREAM, b"after", timeout=5.0), liftbridge.Ack)


@pytest.mark.parametrize(
    "value", [b"negative-msg", b"negative-reply", b"negative-hmsg", b"headers-past-the-end"]
)
def test_a_bad_size_costs_the_connection_not_the_thread(scene: Scene, value: bytes) -> None:
    publisher = scene.publisher()
    case = Case(value.decode())
    case.fails(
        liftbridge.AckTimeoutError,
        lambda: publisher.publish(STREAM, value, timeout=TIMEOUT),
        TIMEOUT,
    )
    scene.bystander_works()
    case.done()
    assert scene.nats.connected() >= 3  # the good one, the hostile one, its reconnect
    _works_again(publisher)


def test_a_huge_msg_is_refused_from_its_line_not_buffered(scene: Scene) -> None:
    publisher = scene.publisher()
    case = Case("huge MSG (2^31 declared, 256 MiB sent)")
    case.fails(
        liftbridge.AckTimeoutError,
        lambda: publisher.publish(STREAM, b"huge-msg", timeout=TIMEOUT),
        TIMEOUT,
    )
    scene.bystander_works()
    case.done()
    _works_again(publisher)
    # The client hung up long before the server got all 256 MiB out.
    assert scene.nats.flooded < 256 << 20  # type: ignore[attr-defined]


def test_a_large_message_in_small_writes_costs_its_size_once(scene: Scene) -> None:
    """A legitimate 16 MiB message (under this server's max_payload), 16 KiB
    per write: read in linear time and held once, then the ack arrives in time."""
    scene.nats.info = b'INFO {"max_payload": %d}\r\n' % BIG
    publisher = scene.publisher()
    case = Case("16 MiB MSG in 16 KiB writes", bound=RSS_BOUND + 3 * BIG)
    start = time.monotonic()
    assert isinstance(publisher.publish(STREAM, b"big-trickled", timeout=TIMEOUT), liftbridge.Ack)
    case.seconds = time.monotonic() - start
    scene.bystander_works()
    case.done()


@pytest.mark.parametrize(
    "info",
    [
        b'INFO {"max_payload": "1MB"}\r\n',
        b'INFO {"max_payload": 68719476736}\r\n',
        b"INFO " + b"[" * 10_000 + b"\r\n",
        b"INFO {garbage\r\n",
        b'INFO {"tls_required": "no"}\r\n',
    ],
)
def test_a_malformed_info_fails_the_constructor_typed(scene: Scene, info: bytes) -> None:
    scene.nats.info = info
    case = Case(f"malformed INFO at connect: {info[:30]!r}")
    error = case.fails(liftbridge.ProtocolError, lambda: scene.publisher(connect_timeout=2.0), 2.0)
    assert "cannot connect to the NATS server" in str(error)
    scene.bystander_works()
    case.done()


def test_a_malformed_info_on_a_live_connection_costs_the_connection(scene: Scene) -> None:
    publisher = scene.publisher()
    case = Case("malformed INFO on a live connection")
    case.fails(
        liftbridge.AckTimeoutError,
        lambda: publisher.publish(STREAM, b"bad-info", timeout=TIMEOUT),
        TIMEOUT,
    )
    scene.bystander_works()
    case.done()
    _works_again(publisher)


def test_malformed_infos_on_reconnect_fail_attempts_until_a_good_one(scene: Scene) -> None:
    publisher = scene.publisher(max_reconnect_attempts=5)
    case = Case("malformed INFO on reconnect, then a good one")
    case.fails(
        liftbridge.AckTimeoutError,
        lambda: publisher.publish(STREAM, b"drop-then-recover", timeout=TIMEOUT),
        TIMEOUT,
    )
    scene.bystander_works()
    case.done()
    _works_again(publisher)  # two attempts refused, the third connected


def test_a_server_whose_info_stays_malformed_is_given_up_on_typed(scene: Scene) -> None:
    publisher = scene.publisher(max_reconnect_attempts=2)
    case = Case("malformed INFO on every reconnect")
    error = case.fails(
        liftbridge.ConnectionLostError,
        lambda: publisher.publish(STREAM, b"drop-for-good", timeout=TIMEOUT),
        TIMEOUT,
    )
    assert "lost before the ack" in str(error)
    with pytest.raises(liftbridge.ConnectionLostError, match="is lost"):
        publisher.publish(STREAM, b"later", timeout=TIMEOUT)
    scene.bystander_works()
    case.done()


def test_a_permissions_violation_fails_the_publish_at_once(scene: Scene) -> None:
    publisher = scene.publisher()
    case = Case("-ERR permissions violation for the publish")
    error = case.fails(
        liftbridge.PermissionDeniedError,
        lambda: publisher.publish(STREAM, b"denied", timeout=TIMEOUT),
        TIMEOUT,
    )
    assert "Permissions Violation for Publish to" in str(error)
    # The connection stays: the next publish on it is acked.
    assert isinstance(publisher.publish(STREAM, b"fine", timeout=TIMEOUT), liftbridge.Ack)
    assert scene.nats.connected() == 2
    scene.bystander_works()
    case.done()


def test_an_error_the_server_would_close_on_drops_the_connection(scene: Scene) -> None:
    publisher = scene.publisher()
    case = Case("-ERR the server keeps the connection after")
    case.fails(
        liftbridge.AckTimeoutError,
        lambda: publisher.publish(STREAM, b"fatal-error", timeout=TIMEOUT),
        TIMEOUT,
    )
    scene.bystander_works()
    case.done()
    assert scene.nats.connected() >= 3  # the client dropped it and reconnected
    _works_again(publisher)


def test_a_lower_max_payload_from_a_later_info_is_honoured(scene: Scene) -> None:
    publisher = scene.publisher()
    assert publisher.max_payload == 1 << 20
    case = Case("a later INFO lowers max_payload")
    assert isinstance(publisher.publish(STREAM, b"lower-max-payload"), liftbridge.Ack)
    assert publisher.max_payload == 1024
    error = case.fails(
        liftbridge.MessageTooLargeError,
        lambda: publisher.publish(STREAM, b"v" * 2048, timeout=TIMEOUT),
        TIMEOUT,
    )
    assert "max_payload of 1024" in str(error)
    assert isinstance(publisher.publish(STREAM, b"small"), liftbridge.Ack)
    scene.bystander_works()
    case.done()


def test_a_frame_over_a_lowered_max_payload_is_refused_not_written(scene: Scene) -> None:
    """The I/O thread checks too: a frame made before the limit came down
    is refused, not written (the server would close the connection)."""
    scene.nats.info = b'INFO {"max_payload": 1024}\r\n'
    refused: list[tuple[object, object]] = []
    got = threading.Event()

    def deliver(item: object) -> None:
        if isinstance(item, tuple):
            refused.append((item[0], item[1]))
            got.set()

    connection = NatsSocket("hostile", "_INBOX.x", deliver, lambda: None)
    connection.connect(scene.nats.url, connect_timeout=2.0)
    try:
        case = Case("a frame over max_payload at write time")
        connection.send(STREAM, b"x" * 2000, "entry")
        assert got.wait(TIMEOUT)
        case.done()
        [(entry, error)] = refused
        assert entry == "entry"
        assert isinstance(error, liftbridge.MessageTooLargeError)
    finally:
        connection.close()
    assert scene.nats.connected() == 2  # never dropped: the frame never went out


def test_unacked_publishes_wait_for_the_window_when_writes_stall(scene: Scene) -> None:
    """AckPolicy.NONE publishes hold a window slot until written: a server
    that stops reading fills the window, not the process's memory."""
    publisher = scene.publisher(max_inflight=16, connect_timeout=5.0)
    publisher.publish_async(STREAM, b"stall", ack_policy=AckPolicy.NONE)
    value = b"n" * (64 << 10)
    case = Case("AckPolicy.NONE publishes to a server that stopped reading")
    sent = 0

    def until_full() -> None:
        nonlocal sent
        for _ in range(4096):  # 256 MiB, if nothing held them back
            publisher.publish_async(STREAM, value, ack_policy=AckPolicy.NONE, timeout=1.0)
            sent += 1

    # The kernel takes a few MiB first; then each publish waits for a slot,
    # and one waits its whole timeout.
    start = time.monotonic()
    with pytest.raises(liftbridge.PublishWindowFullError):
        until_full()
    case.seconds = time.monotonic() - start
    assert sent < 1024, sent
    scene.bystander_works()
    case.done()


def test_a_server_that_pings_but_never_pongs_is_found_stale(
    scene: Scene, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Staleness is judged by PONGs to our PINGs: a server sending PINGs (any
    bytes) all the time but never answering is dropped, and a flush(None)
    waiting on it ends."""
    monkeypatch.setattr(_nats_socket, "PING_INTERVAL", 0.2)
    publisher = scene.publisher()
    case = Case("a server that PINGs every 20 ms and never PONGs")
    publisher.publish_async(STREAM, b"stale", ack_policy=AckPolicy.NONE)
    flushed = threading.Event()

    def flush() -> None:
        publisher.flush(None)
        flushed.set()

    start = time.monotonic()
    waiter = threading.Thread(target=flush, name="test-flush", daemon=True)
    waiter.start()
    # Stale after MAX_PINGS_OUT unanswered PINGs, one interval apart.
    deadline = (_nats_socket.MAX_PINGS_OUT + 1) * 0.2
    assert flushed.wait(deadline + SLACK), "flush(None) still waits on a stale connection"
    case.seconds = time.monotonic() - start
    waiter.join(1)
    scene.bystander_works()
    case.done()
    _works_again(publisher)
    assert scene.nats.connected() >= 3  # dropped as stale, and made again


def test_a_ping_flood_with_no_reading_ends_in_time(scene: Scene) -> None:
    publisher = scene.publisher(connect_timeout=1.0)
    case = Case("a PING flood, our PONGs never read")
    case.fails(
        liftbridge.AckTimeoutError,
        lambda: publisher.publish(STREAM, b"ping-flood", timeout=TIMEOUT),
        TIMEOUT,
    )
    scene.bystander_works()
    case.done()


def test_a_defect_in_handling_what_was_read_costs_the_connection_not_the_thread(
    scene: Scene, caplog: pytest.LogCaptureFixture
) -> None:
    """Whatever goes wrong on the I/O thread, it lives on and reconnects."""
    from liftbridge._transport._nats_socket import MaxPayload

    def deliver(item: object) -> None:
        if isinstance(item, MaxPayload):
            raise RuntimeError("a defect")

    connection = NatsSocket("hostile", "_INBOX.defect", deliver, lambda: None)
    connection.connect(scene.nats.url, connect_timeout=2.0, reconnect_wait=0.05)
    try:
        envelope = liftbridge.encode_message(
            b"lower-max-payload", ack_inbox="_INBOX.defect", correlation_id="c"
        )
        connection.send(STREAM, envelope, "entry")  # the server answers with a new INFO
        deadline = time.monotonic() + TIMEOUT + SLACK
        while scene.nats.connected() < 3:
            assert time.monotonic() < deadline, "no reconnection after the defect"
            time.sleep(0.01)  # polling from a test, not a stoppable loop
        assert connection._thread.is_alive()
    finally:
        connection.close()
    assert "failed; reconnecting" in caplog.text
