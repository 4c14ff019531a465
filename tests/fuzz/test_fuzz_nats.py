"""The quick fuzz run of the NATS frame parser (a few thousand inputs with
hypothesis): only ProtocolError comes out, feeding the bytes whole or one
byte per read makes no difference, and valid frames cut anywhere give back
exactly their payloads. ``make chaos`` runs a million more
(chaos/fuzz_nats.py)."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chaos import fuzz_nats
from chaos.fuzz import Finding
from liftbridge._transport._nats_frames import FrameParser

QUICK = settings(
    max_examples=300,
    deadline=None,  # a busy machine must not fail a test for being slow
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
SEEDS = fuzz_nats.seeds()


def test_the_seeds_read_as_written() -> None:
    outcomes = [fuzz_nats.check(seed) for seed in SEEDS]
    assert outcomes[0].payloads == (b"ack one", b"with\r\nCRLF")
    assert outcomes[0].counts == (1, 0, 0, 1, 48)  # a PING, an INFO lowering the limit
    assert outcomes[1].payloads == (b"", b"r")  # another subscription's message skipped
    assert outcomes[2].payloads == (b"acked", b"")  # HMSG headers cut off
    assert outcomes[3].counts[:3] == (0, 1, 1)  # a lower-case pong, an -ERR
    assert outcomes[4] == fuzz_nats.Outcome(True)  # 9 bytes over an INFO's limit of 8


def test_a_disagreement_between_cuts_is_a_finding(monkeypatch: pytest.MonkeyPatch) -> None:
    real = fuzz_nats.feed
    # Byte by byte, the first byte is lost: "NFO ..." is no frame.
    monkeypatch.setattr(fuzz_nats, "feed", lambda data, step=0: real(data[step:], step))
    with pytest.raises(Finding, match="byte by byte"):
        fuzz_nats.check(SEEDS[0])


def test_an_error_other_than_protocol_error_is_a_finding(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: FrameParser, data: bytes) -> list[bytes]:
        raise IndexError("out of range")

    monkeypatch.setattr(FrameParser, "feed", broken)
    with pytest.raises(Finding, match="IndexError"):
        fuzz_nats.check(b"PING\r\n")


@QUICK
@given(st.binary(max_size=200))
def test_random_bytes(data: bytes) -> None:
    fuzz_nats.check(data)


@QUICK
@given(st.randoms(use_true_random=False))
def test_mutated_seeds(rng: random.Random) -> None:
    fuzz_nats.check(fuzz_nats.fuzz_input(rng, SEEDS))


_PAYLOADS = st.binary(max_size=fuzz_nats.MAX_PAYLOAD - 20)


@st.composite
def _frames(draw: st.DrawFn) -> tuple[bytes, list[bytes]]:
    """A valid server stream and the payloads the parser must give back."""
    stream, wanted = b"", []
    for _ in range(draw(st.integers(0, 8))):
        kind = draw(st.sampled_from(["msg", "reply", "other", "hmsg", "ping", "ok", "err"]))
        payload = draw(_PAYLOADS)
        if kind == "msg":
            stream += fuzz_nats.msg(payload)
            wanted.append(payload)
        elif kind == "reply":
            stream += fuzz_nats.msg(payload, reply=b"_INBOX.reply")
            wanted.append(payload)
        elif kind == "other":
            stream += fuzz_nats.msg(payload, sid=b"7", subject=b"elsewhere")
        elif kind == "hmsg":
            stream += fuzz_nats.hmsg(b"NATS/1.0\r\nK: v\r\n\r\n", payload[:10])
            wanted.append(payload[:10])
        elif kind == "ping":
            stream += b"PING\r\n"
        elif kind == "ok":
            stream += b"+OK\r\n"
        else:
            stream += b"-ERR 'Permissions Violation for Publish to \"s\"'\r\n"
    return stream, wanted


@QUICK
@given(_frames(), st.lists(st.integers(min_value=0), max_size=6))
def test_valid_frames_cut_anywhere_give_their_payloads(
    frames: tuple[bytes, list[bytes]], cuts: list[int]
) -> None:
    stream, wanted = frames
    points = sorted({cut % (len(stream) + 1) for cut in cuts} | {0, len(stream)})
    parser = FrameParser(b"1", fuzz_nats.INBOX)
    parser.max_payload = fuzz_nats.MAX_PAYLOAD
    got = [p for a, b in itertools.pairwise(points) for p in parser.feed(stream[a:b])]
    assert got == wanted
    assert parser.buffered == 0
