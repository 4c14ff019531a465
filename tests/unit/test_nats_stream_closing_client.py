"""A ``NatsStreamPublisher`` made while its client closes, on another
thread: made, it is then closed by the client's close, or its making raises
:class:`~liftbridge.ClientClosedError`; either way nothing of it is left
running (no thread, listener, ack window on the client's timer) and it is
never half open. The client's close used to close it in the middle of its
making (it registers with the client before it connects): the making then
went on and connected, starting its threads on a publisher already closed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

import liftbridge
from bench.publish_cg import STREAM, AckingBroker
from liftbridge._publish._nats_events import State
from liftbridge._publish._nats_window import AckWindow
from liftbridge._transport._nats_socket import NatsSocket
from tests.unit.fake_broker import serving
from tests.unit.hostile_nats import FakeNats
from tests.unit.test_interrupted_making import NATS_THREADS, _ended

BOUND = 10.0  # seconds any wait here may take


@pytest.fixture
def broker() -> Iterator[AckingBroker]:
    with serving(AckingBroker()) as served:  # type: ignore[abstract, type-var]
        yield served


@pytest.mark.parametrize("held", ["watch", "connect", "start"])
def test_a_publisher_made_while_its_client_closes_is_made_whole_or_not_at_all(
    broker: AckingBroker, held: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    nats = FakeNats()
    try:
        client = liftbridge.Client(f"127.0.0.1:{broker.port}")
        # Its first one: the client's metadata and ack timer, made once.
        with liftbridge.NatsStreamPublisher(client, nats.url, ack_wait=BOUND) as first:
            assert isinstance(first.publish(STREAM, b"v"), liftbridge.Ack)
        before = set(threading.enumerate())
        making, go_on = threading.Event(), threading.Event()
        if held == "connect":  # registered with the client, not connected yet
            connect = NatsSocket.connect

            def held_connect(socket: NatsSocket, *args: object, **kwargs: object) -> None:
                making.set()
                go_on.wait(BOUND)
                connect(socket, *args, **kwargs)  # type: ignore[arg-type]

            monkeypatch.setattr(NatsSocket, "connect", held_connect)
        elif held == "watch":  # registered with the client, its ack window not watched yet
            watch = AckWindow.watch

            def held_watch(window: AckWindow) -> None:
                making.set()
                go_on.wait(BOUND)
                watch(window)

            monkeypatch.setattr(AckWindow, "watch", held_watch)
        else:  # connected, its acks thread not started yet
            set_max_payload = liftbridge.NatsStreamPublisher._set_max_payload

            def held_set(publisher: liftbridge.NatsStreamPublisher, size: int) -> None:
                making.set()
                go_on.wait(BOUND)
                set_max_payload(publisher, size)

            monkeypatch.setattr(liftbridge.NatsStreamPublisher, "_set_max_payload", held_set)
        made: list[liftbridge.NatsStreamPublisher] = []
        raised: list[BaseException] = []

        def make() -> None:
            try:
                made.append(liftbridge.NatsStreamPublisher(client, nats.url))
            except BaseException as e:
                raised.append(e)

        maker = threading.Thread(target=make, name="test-maker")
        maker.start()
        assert making.wait(BOUND)
        closer = threading.Thread(target=client.close, name="test-closer")
        closer.start()
        time.sleep(0.2)  # the client's close reaches the publisher (or waits for it)
        go_on.set()
        maker.join(BOUND)
        closer.join(BOUND)
        assert not maker.is_alive() and not closer.is_alive()
        assert [type(e) for e in raised] in ([], [liftbridge.ClientClosedError]), raised
        for publisher in made:  # made, then closed by the client's close
            assert publisher._state is State.CLOSED
            with pytest.raises(liftbridge.ClientClosedError):
                publisher.publish(STREAM, b"v")
        _ended(before, NATS_THREADS, held)
        _ended(set(), {"test-nats-conn"}, held)
        left = [
            listener
            for listener in client._router._watch._listeners
            if isinstance(getattr(listener, "__self__", None), liftbridge.NatsStreamPublisher)
        ]
        assert not left, f"a publisher's broker-down listener left ({held})"
        assert not client._timer._watched
    finally:
        go_on.set()
        nats.close()
