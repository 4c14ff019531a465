"""Socket calls that never wait (:mod:`liftbridge._transport._nowait`): the
libc calls that keep the GIL (Linux, CPython) and the socket methods used
elsewhere answer alike: what was written or read, nothing when there is
nothing to do now, the peer's close, and an error for a closed socket."""

from __future__ import annotations

import select
import socket
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from liftbridge._transport import _nowait
from liftbridge._transport._nowait import Inbox, send_nowait, send_released


@pytest.fixture(params=["libc", "socket"])
def way(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test runs with libc's calls (where there are) and with the socket's methods."""
    if request.param == "socket":
        monkeypatch.setattr(_nowait, "_LIBC", None)
    elif _nowait._LIBC is None:
        pytest.skip("libc's calls are used on Linux under CPython only")
    return str(request.param)


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """Two ends of a TCP connection on 127.0.0.1, closed after the test."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        accepted, _ = server.accept()
    with client, accepted:
        yield client, accepted


def test_libc_calls_are_used_on_linux() -> None:
    if sys.platform.startswith("linux") and sys.implementation.name == "cpython":
        assert _nowait._LIBC is not None


def test_what_is_sent_is_read(way: str, pair: tuple[socket.socket, socket.socket]) -> None:
    client, server = pair
    inbox = Inbox(1 << 16)
    assert send_nowait(client, b"hello, liftbridge") == 17
    got = b""
    while len(got) < 17:  # it may come in parts: read once readable
        select.select([server], [], [], 10)  # bytes there (bounded wait)
        count = inbox.recv(server)
        assert count is not None and count > 0
        got += inbox.view[:count].tobytes()
    assert got == b"hello, liftbridge"


def test_nothing_to_read_is_none(way: str, pair: tuple[socket.socket, socket.socket]) -> None:
    _, server = pair
    assert Inbox(1024).recv(server) is None


def test_a_closed_connection_reads_zero(
    way: str, pair: tuple[socket.socket, socket.socket]
) -> None:
    client, server = pair
    client.shutdown(socket.SHUT_WR)
    select.select([server], [], [], 10)  # the end is there (bounded wait)
    assert Inbox(1024).recv(server) == 0


def test_a_full_buffer_takes_nothing_more(
    way: str, pair: tuple[socket.socket, socket.socket]
) -> None:
    client, _ = pair
    client.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    chunk = b"x" * 65536
    written = [send_nowait(client, chunk) for _ in range(1000)]  # far past both buffers
    assert written[0] > 0
    assert written[-1] == 0


def test_a_closed_socket_fails(way: str, pair: tuple[socket.socket, socket.socket]) -> None:
    client, server = pair
    client.close()
    server.close()
    with pytest.raises(OSError):
        send_nowait(client, b"late")
    with pytest.raises(OSError):
        Inbox(1024).recv(server)


def test_a_reset_connection_fails(way: str, pair: tuple[socket.socket, socket.socket]) -> None:
    client, server = pair
    server.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    server.close()  # linger 0: RST
    select.select([client], [], [], 10)  # the reset is there (bounded wait)
    with pytest.raises(OSError):
        for _ in range(1000):  # the first write may still go; a later one meets the reset
            send_nowait(client, b"after the reset")


class _Recording(socket.socket):
    """A socket that records the flags of its own ``send`` calls."""

    flags: list[int]

    def send(self, data: Any, flags: int = 0, /) -> int:
        self.flags.append(flags)
        return super().send(data, flags)


def test_a_released_send_is_the_sockets_own_send_that_does_not_wait(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    """send_released goes through the socket's own ``send`` (which lets go of
    the GIL for the system call), with MSG_DONTWAIT where there is one."""
    client, server = pair
    recording = _Recording(fileno=client.detach())
    recording.flags = []
    with recording:
        assert send_released(recording, b"hello, liftbridge") == 17
        assert recording.flags == ([_nowait._FLAGS] if _nowait._FLAGS else [])
        got = b""
        while len(got) < 17:
            select.select([server], [], [], 10)  # bytes there (bounded wait)
            got += server.recv(64)
        assert got == b"hello, liftbridge"


def test_a_released_send_to_a_full_buffer_takes_nothing_more(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    if not _nowait._FLAGS:
        pytest.skip("no MSG_DONTWAIT here: the send waits like sendall")
    client, _ = pair
    client.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    chunk = b"x" * 65536
    written = [send_released(client, chunk) for _ in range(1000)]  # far past both buffers
    assert written[0] > 0
    assert written[-1] == 0


def test_a_released_send_on_a_closed_socket_fails(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    client, _ = pair
    client.close()
    with pytest.raises(OSError):
        send_released(client, b"late")
