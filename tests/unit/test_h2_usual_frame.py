"""The HTTP/2 reader's short way for the usual frame (a DATA frame that is
exactly one message, which is what the server sends): every frame that is
almost, but not quite, that shape must still be read as the general loop
reads it, and every check the general loop makes must hold on the short way
too (size limit, compression, receive window, stream id)."""

from __future__ import annotations

import threading

import grpc
import hpack
import pytest

from chaos import fuzz_http2
from liftbridge._transport._http2_reader import FrameReader
from liftbridge._transport._http2_windows import RECEIVE_WINDOW, REOPEN_AT, PeerWindows
from liftbridge._transport._http2_wire import StreamError
from tests.unit.h2_peer import (
    DATA,
    END_HEADERS,
    END_STREAM,
    HEADERS,
    PADDED,
    PRIORITY,
    STREAM,
    WINDOW_UPDATE,
    frame,
    grpc_message,
)


def _reader(max_message: int = 1 << 20, replies: list[bytes] | None = None) -> FrameReader[bytes]:
    """A reader past the server's SETTINGS and headers; a response parses to its bytes."""
    reader: FrameReader[bytes] = FrameReader(
        bytes,
        max_message=max_message,
        windows=PeerWindows(),
        flow=threading.Condition(),
        reply=(lambda _: None) if replies is None else replies.append,
    )
    reader.feed(fuzz_http2.head())
    return reader


def _read(data: bytes, *, max_message: int = 1 << 20, byte_by_byte: bool = False) -> list[bytes]:
    reader = _reader(max_message)
    for piece in [data[i : i + 1] for i in range(len(data))] if byte_by_byte else [data]:
        reader.feed(piece)
    assert not reader.ended
    return list(reader.ready)


_ALMOST = {
    "usual": frame(DATA, 0, STREAM, grpc_message(b"a" * 100)),
    "an unknown flag": frame(DATA, PRIORITY, STREAM, grpc_message(b"a" * 100)),
    "the reserved bit": frame(DATA, 0, STREAM | 1 << 31, grpc_message(b"a" * 100)),
    "two messages": frame(DATA, 0, STREAM, grpc_message(b"a" * 60) + grpc_message(b"b" * 40)),
    "padded": frame(DATA, PADDED, STREAM, bytes((7,)) + grpc_message(b"a" * 100) + bytes(7)),
    "empty": frame(DATA, 0, STREAM, grpc_message(b"")),
    "a message and a half": frame(DATA, 0, STREAM, grpc_message(b"a" * 10) + b"\0\0\0\0\x0a")
    + frame(DATA, 0, STREAM, b"b" * 10),
}
_EXPECTED = {
    "usual": [b"a" * 100],
    "an unknown flag": [b"a" * 100],
    "the reserved bit": [b"a" * 100],
    "two messages": [b"a" * 60, b"b" * 40],
    "padded": [b"a" * 100],
    "empty": [b""],
    "a message and a half": [b"a" * 10, b"b" * 10],
}


@pytest.mark.parametrize("byte_by_byte", [False, True], ids=["whole", "byte by byte"])
@pytest.mark.parametrize("name", sorted(_ALMOST))
def test_frames_near_the_usual_shape_read_as_the_general_loop_reads_them(
    name: str, byte_by_byte: bool
) -> None:
    usual = _ALMOST["usual"]
    data = usual + _ALMOST[name] + usual  # between usual frames, as they would come
    assert _read(data, byte_by_byte=byte_by_byte) == [b"a" * 100, *_EXPECTED[name], b"a" * 100]


def _ending(data: bytes, *, max_message: int = 1 << 20) -> StreamError:
    reader = _reader(max_message)
    with pytest.raises(StreamError) as raised:
        reader.feed(data)
    assert reader.ended
    return raised.value


def test_a_one_message_frame_past_the_size_limit_ends_the_call() -> None:
    ok = frame(DATA, 0, STREAM, grpc_message(b"a" * 10))
    too_large = frame(DATA, 0, STREAM, grpc_message(b"a" * 11))
    assert _read(ok * 3, max_message=10) == [b"a" * 10] * 3
    error = _ending(ok + too_large, max_message=10)
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "11 vs. 10" in error.details()


def test_a_compressed_one_message_frame_ends_the_call() -> None:
    compressed = frame(DATA, 0, STREAM, grpc_message(b"a" * 10, compressed=True))
    error = _ending(frame(DATA, 0, STREAM, grpc_message(b"")) + compressed)
    assert error.code() == grpc.StatusCode.INTERNAL
    assert "compressed" in error.details()


def test_one_message_frames_past_the_receive_window_end_the_call() -> None:
    body = b"a" * (16_384 - 5)
    full = frame(DATA, 0, STREAM, grpc_message(body))
    count = RECEIVE_WINDOW // 16_384  # exactly the window, in one read (none reopened)
    assert _read(full * count) == [body] * count
    error = _ending(full * count + frame(DATA, 0, STREAM, grpc_message(b"")))
    assert error.goaway is not None  # FLOW_CONTROL_ERROR, a connection error
    assert "receive window" in error.details()


def test_a_one_message_frame_on_another_stream_is_a_connection_error() -> None:
    error = _ending(frame(DATA, 0, 3, grpc_message(b"a")))
    assert error.goaway is not None
    assert "stream 3" in error.details()


def test_a_one_message_frame_ending_the_stream_ends_it_after_its_message() -> None:
    reader = _reader()
    reader.feed(frame(DATA, END_STREAM, STREAM, grpc_message(b"last")))
    assert list(reader.ready) == [b"last"]
    assert reader.ended and reader.end is not None
    assert "without a gRPC status" in reader.end.details()


# A paced stream reads one frame at a time (at 1,000 msgs/s end to end, 94 %
# of the subscription's reads): a read that is exactly one usual frame must be
# checked as the loop checks it, whatever way it is read.


def _one_a_read(frames: list[bytes], *, max_message: int = 1 << 20) -> StreamError:
    """Feeds each frame as a read of its own; the error the last one ends the call with."""
    reader = _reader(max_message)
    for one in frames[:-1]:
        reader.feed(one)
    with pytest.raises(StreamError) as raised:
        reader.feed(frames[-1])
    assert reader.ended
    assert list(reader.ready) == [b"a" * 10] * (len(frames) - 1)
    return raised.value


def test_reads_of_one_message_frame_each_check_size_compression_and_stream() -> None:
    ok = frame(DATA, 0, STREAM, grpc_message(b"a" * 10))
    error = _one_a_read([ok, ok, frame(DATA, 0, STREAM, grpc_message(b"a" * 11))], max_message=10)
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    compressed = frame(DATA, 0, STREAM, grpc_message(b"a" * 10, compressed=True))
    assert "compressed" in _one_a_read([ok, compressed]).details()
    error = _one_a_read([ok, frame(DATA, 0, 3, grpc_message(b"a" * 10))])
    assert error.goaway is not None
    assert "stream 3" in error.details()


def test_a_read_of_one_frame_that_does_not_parse_ends_the_call_with_internal() -> None:
    def strict(body: bytes) -> bytes:
        if body == b"bad":
            raise ValueError("not a protobuf")
        return body

    reader: FrameReader[bytes] = FrameReader(
        strict,
        max_message=1 << 20,
        windows=PeerWindows(),
        flow=threading.Condition(),
        reply=lambda _: None,
    )
    reader.feed(fuzz_http2.head())
    reader.feed(frame(DATA, 0, STREAM, grpc_message(b"good")))
    with pytest.raises(StreamError) as raised:
        reader.feed(frame(DATA, 0, STREAM, grpc_message(b"bad")))
    assert raised.value.code() == grpc.StatusCode.INTERNAL
    assert "unreadable response: not a protobuf" in raised.value.details()
    assert reader.ended and reader.end is raised.value
    assert list(reader.ready) == [b"good"]


def test_reads_of_one_frame_each_reopen_the_windows_by_exactly_what_came() -> None:
    replies: list[bytes] = []
    reader = _reader(replies=replies)
    replies.clear()  # the SETTINGS ack
    one = frame(DATA, 0, STREAM, grpc_message(b"w" * 16_000))
    sent = 0
    while sent < REOPEN_AT:
        assert not replies
        reader.feed(one)
        sent += len(one) - 9
    increment = sent.to_bytes(4, "big")
    assert replies == [
        frame(WINDOW_UPDATE, 0, 0, increment) + frame(WINDOW_UPDATE, 0, STREAM, increment)
    ]
    assert list(reader.ready) == [b"w" * 16_000] * (sent // 16_005)


def test_a_read_of_one_frame_after_the_trailers_is_not_read() -> None:
    reader = _reader()
    reader.feed(frame(DATA, 0, STREAM, grpc_message(b"a")))
    trailers = hpack.Encoder().encode([("grpc-status", "0")])
    reader.feed(frame(HEADERS, END_HEADERS | END_STREAM, STREAM, trailers))
    assert reader.ended and reader.end is None
    reader.feed(frame(DATA, 0, STREAM, grpc_message(b"b")))
    assert list(reader.ready) == [b"a"]
