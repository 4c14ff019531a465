"""The quick fuzz run of the HTTP/2 frame reader (a few thousand inputs with
hypothesis): only StreamError comes out, and feeding the bytes whole or one
byte per read makes no difference. ``make chaos`` runs a million more
(chaos/fuzz_http2.py)."""

from __future__ import annotations

import random
import threading
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chaos import fuzz_http2
from chaos.fuzz import Finding
from liftbridge._transport._http2_reader import FrameReader
from liftbridge._transport._http2_windows import RECEIVE_WINDOW, PeerWindows
from liftbridge._transport._http2_wire import FLOW_CONTROL_ERROR, MAX_FRAME_IN, StreamError

QUICK = settings(
    max_examples=500,
    deadline=None,  # a busy machine must not fail a test for being slow
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
SEEDS = fuzz_http2.seeds()


def test_the_seeds_read_as_written() -> None:
    outcomes = [fuzz_http2.check(seed) for seed in SEEDS]
    assert outcomes[0] == fuzz_http2.Outcome((b"first", b"second" * 5), True, "")
    assert outcomes[1].end == "UNAVAILABLE: going away"
    assert outcomes[2].end.startswith("UNAVAILABLE: the server reset the stream")
    assert outcomes[3].end == "INTERNAL: the stream ended without a gRPC status"


def test_a_disagreement_between_cuts_is_a_finding(monkeypatch: pytest.MonkeyPatch) -> None:
    real = fuzz_http2.feed
    monkeypatch.setattr(
        fuzz_http2, "feed", lambda data, step=0: real(data[: len(data) - step], step)
    )
    with pytest.raises(Finding, match="byte by byte"):
        fuzz_http2.check(SEEDS[0])


@QUICK
@given(st.binary(max_size=200))
def test_random_bytes(data: bytes) -> None:
    fuzz_http2.check(fuzz_http2.head() + data)


@QUICK
@given(st.randoms(use_true_random=False))
def test_mutated_seeds(rng: random.Random) -> None:
    fuzz_http2.check(fuzz_http2.fuzz_input(rng, SEEDS))


def test_data_past_the_receive_window_we_granted_is_a_flow_control_error() -> None:
    """The window is reopened only after a read: a server that sends more
    than it was granted in one go is caught before it is kept."""
    reader: FrameReader[bytes] = FrameReader(
        bytes,
        max_message=1 << 30,
        windows=PeerWindows(),
        flow=threading.Condition(),
        reply=lambda frame: None,
    )
    reader.feed(fuzz_http2.head())
    assert not reader.ended
    chunk = 16_000
    frame = chunk.to_bytes(3, "big") + bytes((0, 0)) + (1).to_bytes(4, "big")
    body = b"\0" + (RECEIVE_WINDOW * 2).to_bytes(4, "big") + b"z" * (chunk - 5)
    data = frame + body + (frame + b"z" * chunk) * (RECEIVE_WINDOW // chunk)
    with pytest.raises(StreamError) as caught:
        reader.feed(data)
    assert caught.value.goaway == FLOW_CONTROL_ERROR
    assert "receive window" in caught.value.details()


def _reader() -> FrameReader[bytes]:
    return FrameReader(
        bytes,
        max_message=1 << 20,
        windows=PeerWindows(),
        flow=threading.Condition(),
        reply=lambda frame: None,
    )


def test_a_frame_too_large_is_refused_at_its_ninth_byte_when_read_bytewise() -> None:
    """A read that completes no frame is only kept; the frame's head is still
    checked as soon as its 9 bytes are there, not when the frame is whole."""
    reader = _reader()
    reader.feed(fuzz_http2.head())
    header = (MAX_FRAME_IN + 1).to_bytes(3, "big") + bytes((0, 0)) + (1).to_bytes(4, "big")
    for byte in header[:-1]:
        reader.feed(bytes((byte,)))
    assert not reader.ended
    with pytest.raises(StreamError) as caught:
        reader.feed(header[-1:])
    assert caught.value.goaway is not None and "past our" in caught.value.details()


def test_a_frame_fed_bytewise_gives_its_message_at_its_last_byte() -> None:
    reader = _reader()
    reader.feed(fuzz_http2.head())
    body = b"\0" + (3).to_bytes(4, "big") + b"abc"
    frame = len(body).to_bytes(3, "big") + bytes((0, 0)) + (1).to_bytes(4, "big") + body
    for byte in frame[:-1]:
        reader.feed(bytes((byte,)))
        assert not reader.ready
    reader.feed(frame[-1:])
    assert list(reader.ready) == [b"abc"]


def test_a_largest_data_frame_fed_one_byte_per_read_costs_its_size_not_its_square() -> None:
    """A frame arriving in many tiny reads is kept by appending each read in
    place: the reads before its last allocate a few dozen bytes each (a
    buffer growing geometrically, now and then), where the old reader copied
    everything gathered so far on every read (16 KiB frame: ~135 MB in all)."""
    reader = _reader()
    reader.feed(fuzz_http2.head())
    length = MAX_FRAME_IN - 5  # one gRPC message filling a largest DATA frame
    body = b"\0" + length.to_bytes(4, "big") + b"m" * length
    frame = len(body).to_bytes(3, "big") + bytes((0, 0)) + (1).to_bytes(4, "big") + body
    allocated, large = 0, 0
    tracemalloc.start()
    try:
        for at in range(len(frame) - 1):
            before, _ = tracemalloc.get_traced_memory()
            tracemalloc.reset_peak()
            reader.feed(frame[at : at + 1])
            _, peak = tracemalloc.get_traced_memory()
            allocated += peak - before
            large += peak - before > 1024
    finally:
        tracemalloc.stop()
    assert not reader.ready and not reader.ended
    reader.feed(frame[-1:])
    assert list(reader.ready) == [b"m" * length]
    # Linear: ~60 bytes a read measured (the old reader: ~8,200, half the frame).
    assert allocated < 128 * len(frame), f"{allocated:,} bytes allocated for {len(frame):,}"
    # Only the buffer's growth steps allocate more than 1 KiB (6 measured; old: 15,401).
    assert large <= 64, f"{large} reads allocated over 1 KiB each"
