"""The quick fuzz run (a few thousand inputs with hypothesis): the envelope and
activity decoders raise nothing but the SDK's typed errors. ``make chaos``
runs a million more (chaos/fuzz.py)."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import liftbridge
from chaos import fuzz
from liftbridge._core._envelope import EnvelopeType, encode_envelope
from liftbridge_api import api_pb2

QUICK = settings(
    max_examples=1000,
    deadline=None,  # a busy machine must not fail a test for being slow
    database=None,  # no .hypothesis/ directory in the checkout
    suppress_health_check=[HealthCheck.too_slow],
)
CORPUS = fuzz.load_corpus()
INT32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)
INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)


def test_the_corpus_is_the_current_seeds() -> None:
    """The files match what chaos.fuzz.seeds() makes (fuzz.write_corpus() rewrites them)."""
    files = {path.stem: path.read_bytes() for path in fuzz.CORPUS.glob("*.bin")}
    assert files == fuzz.seeds()


@pytest.mark.parametrize(("decoder", "data"), CORPUS)
def test_every_seed_decodes(decoder: str, data: bytes) -> None:
    assert fuzz.check(decoder, data)


def test_a_finding_is_reported_not_swallowed() -> None:
    fuzz.DECODERS["broken"] = lambda data: data.decode("ascii")
    try:
        with pytest.raises(fuzz.Finding, match="UnicodeDecodeError"):
            fuzz.check("broken", b"\xff")
    finally:
        del fuzz.DECODERS["broken"]


@QUICK
@given(st.sampled_from(sorted(fuzz.DECODERS)), st.binary(max_size=128))
def test_random_bytes(decoder: str, data: bytes) -> None:
    fuzz.check(decoder, data)


@QUICK
@given(st.randoms(use_true_random=False))
def test_mutated_seeds(rng: random.Random) -> None:
    decoder, data = fuzz.fuzz_input(rng, CORPUS)
    fuzz.check(decoder, data)


@QUICK
@given(
    policy=INT32,
    error=INT32,
    offset=INT64,
    stamps=st.tuples(INT64, INT64),
    text=st.text(max_size=20),
    crc=st.booleans(),
)
def test_acks_with_any_field_values(
    policy: int, error: int, offset: int, stamps: tuple[int, int], text: str, crc: bool
) -> None:
    pb = api_pb2.Ack(
        stream=text,
        correlationId=text,
        offset=offset,
        ackPolicy=policy,  # type: ignore[arg-type]
        ackError=error,  # type: ignore[arg-type]
        receptionTimestamp=stamps[0],
        commitTimestamp=stamps[1],
    )
    data = encode_envelope(EnvelopeType.ACK, pb.SerializeToString(), crc=crc)
    try:
        ack = liftbridge.decode_ack(data)
    except liftbridge.EnvelopeError:
        assert policy not in (0, 1, 2)  # only an unknown policy may be refused
        return
    assert ack.offset == offset
    assert (ack.error is None) == (error == 0)


@QUICK
@given(
    op=INT32,
    details=st.sampled_from(
        [None, "createStreamOp", "deleteStreamOp", "pauseStreamOp", "joinConsumerGroupOp"]
    ),
    partitions=st.lists(INT32, max_size=4),
)
def test_activity_events_with_any_op(op: int, details: str | None, partitions: list[int]) -> None:
    pb = api_pb2.ActivityStreamEvent(id=1, op=op)  # type: ignore[arg-type]
    if details == "createStreamOp":
        pb.createStreamOp.partitions.extend(partitions)
    elif details == "deleteStreamOp":
        pb.deleteStreamOp.stream = "s"
    elif details == "pauseStreamOp":
        pb.pauseStreamOp.partitions.extend(partitions)
    elif details == "joinConsumerGroupOp":
        pb.joinConsumerGroupOp.groupId = "g"
    fuzz.check("activity", pb.SerializeToString())


def test_a_short_plain_loop_finds_nothing() -> None:
    report = fuzz.run(3000, seed=15)
    assert report.findings == []
    assert report.inputs == 3000
    assert report.decoded > 0  # the mutations do reach the value objects
