"""Fuzzing the envelope and activity decoders: whatever bytes they are given,
only the SDK's typed errors may come out.

The decoders are :func:`liftbridge.decode_message`,
:func:`liftbridge.decode_ack` and :func:`liftbridge.decode_activity_event`.
A decoded value is also read field by field (``repr``), because a
:class:`~liftbridge.Message` answers its fields lazily from the protobuf.

Inputs are seeds from a small corpus kept in ``tests/fuzz/corpus/`` (valid
envelopes and events, written by :func:`write_corpus`) put through a few
mutations each. The quick run is hypothesis in ``tests/fuzz``; ``make chaos``
runs a plain loop of a million mutations (:func:`run`) and prints inputs/s.
"""

from __future__ import annotations

import random
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypeVar

import liftbridge
from liftbridge._core._envelope import EnvelopeType, encode_envelope
from liftbridge_api import api_pb2

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "fuzz" / "corpus"
"""The seed corpus: one file per seed, named ``<decoder>-<what>.bin``."""

DECODERS: dict[str, Callable[[bytes], object]] = {
    "message": liftbridge.decode_message,
    "ack": liftbridge.decode_ack,
    "activity": liftbridge.decode_activity_event,
}

T = TypeVar("T")


class Outcome(Protocol):
    """What feeding one input to a stream reader came to (compared whole
    against byte by byte)."""

    @property
    def refused(self) -> bool: ...


OutcomeT = TypeVar("OutcomeT", bound=Outcome)

_INTERESTING = (0x00, 0x01, 0x07, 0x08, 0x0C, 0x7F, 0x80, 0xB9, 0xFF)


def seeds() -> dict[str, bytes]:
    """The valid inputs the corpus is made of, by file stem."""
    message = liftbridge.encode_message(
        b"value", key=b"key", headers={"h": b"v"}, ack_inbox="inbox", correlation_id="c1"
    )
    ack = api_pb2.Ack(
        stream="s",
        partitionSubject="s.0",
        msgSubject="s",
        offset=7,
        ackInbox="inbox",
        correlationId="c1",
        ackPolicy=api_pb2.ALL,
        receptionTimestamp=1,
        commitTimestamp=2,
    ).SerializeToString()
    refused = api_pb2.Ack(correlationId="c2", ackError=api_pb2.Ack.INCORRECT_OFFSET)
    create = api_pb2.ActivityStreamEvent(
        id=3,
        op=api_pb2.CREATE_STREAM,
        createStreamOp=api_pb2.CreateStreamOp(stream="s", partitions=[0, 1]),
    )
    join = api_pb2.ActivityStreamEvent(
        id=4,
        op=api_pb2.JOIN_CONSUMER_GROUP,
        joinConsumerGroupOp=api_pb2.JoinConsumerGroupOp(groupId="g", consumerId="c", streams=["s"]),
    )
    return {
        "message-plain": message,
        "message-crc": liftbridge.encode_message(b"v" * 40, crc=True, expected_offset=3),
        "message-empty": liftbridge.encode_message(b""),
        "ack-all": encode_envelope(EnvelopeType.ACK, ack),
        "ack-crc": encode_envelope(EnvelopeType.ACK, ack, crc=True),
        "ack-refused": encode_envelope(EnvelopeType.ACK, refused.SerializeToString()),
        "activity-create": create.SerializeToString(),
        "activity-join": join.SerializeToString(),
    }


def write_corpus(directory: Path = CORPUS) -> None:
    """Writes :func:`seeds` as the corpus files (run when the protocol changes)."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, data in seeds().items():
        (directory / f"{name}.bin").write_bytes(data)


def load_corpus(directory: Path = CORPUS) -> list[tuple[str, bytes]]:
    """Every seed as (decoder name, bytes), in file name order."""
    return [
        (path.stem.split("-", 1)[0], path.read_bytes()) for path in sorted(directory.glob("*.bin"))
    ]


_KINDS = {"message": EnvelopeType.MESSAGE, "ack": EnvelopeType.ACK}


def fuzz_input(rng: random.Random, corpus: Sequence[tuple[str, bytes]]) -> tuple[str, bytes]:
    """One input: a seed for some decoder, mutated. For envelope seeds, half the
    time only the protobuf payload is mutated and wrapped in a valid header
    (with a fresh CRC when the seed had one), so that the protobuf parsing and
    the value objects are reached, not just the header checks; one input in
    eight goes to a decoder the seed was not made for."""
    decoder, data = rng.choice(corpus)
    others = [seed for _, seed in corpus]
    if decoder in _KINDS and rng.random() < 0.5:
        header = data[5]
        payload = mutate(data[header:], rng, [seed[8:] for seed in others])
        data = encode_envelope(_KINDS[decoder], payload, crc=header == 12)
    else:
        data = mutate(data, rng, others)
    if rng.random() < 0.125:
        decoder = rng.choice(list(DECODERS))
    return decoder, data


def mutate(data: bytes, rng: random.Random, corpus: Sequence[bytes], rounds: int = 0) -> bytes:
    """``data`` changed by 1-4 random mutations (``rounds`` > 0 fixes the count):
    bit flips, interesting bytes, inserts, deletes, truncation, duplication and
    splicing with another seed."""
    buf = bytearray(data)
    for _ in range(rounds or rng.randint(1, 4)):
        choice = rng.randrange(8)
        if choice == 0 and buf:
            i = rng.randrange(len(buf))
            buf[i] ^= 1 << rng.randrange(8)
        elif choice == 1 and buf:
            buf[rng.randrange(len(buf))] = rng.choice(_INTERESTING)
        elif choice == 2:
            i = rng.randrange(len(buf) + 1)
            buf[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif choice == 3 and buf:
            i = rng.randrange(len(buf))
            del buf[i : i + rng.randint(1, 8)]
        elif choice == 4 and buf:
            del buf[rng.randrange(len(buf)) :]
        elif choice == 5 and buf:
            i = rng.randrange(len(buf))
            buf[i:i] = buf[i : i + rng.randint(1, 16)]
        elif choice == 6 and corpus:
            other = rng.choice(corpus)
            cut = rng.randrange(len(buf) + 1)
            buf = buf[:cut] + other[rng.randrange(len(other) + 1) :]
        else:  # a random byte anywhere, even past the protobuf: a varint tag
            buf.append(rng.randrange(256))
    return bytes(buf)


class Finding(Exception):
    """A decoder raised something other than a LiftbridgeError."""


def check(decoder: str, data: bytes) -> bool:
    """Feeds ``data`` to one decoder and reads the result.

    Returns:
        True when it decoded, False when it raised a LiftbridgeError.

    Raises:
        Finding: it raised anything else (the cause is chained).
    """
    try:
        value = DECODERS[decoder](data)
        repr(value)  # reads every field, headers included
    except liftbridge.LiftbridgeError:
        return False
    except Exception as e:
        raise Finding(f"{decoder}({data!r}) raised {type(e).__name__}: {e}") from e
    return True


@dataclass
class FuzzReport:
    """What one fuzz pass did (the decoders', the HTTP/2 reader's, the NATS
    parser's: all run by :func:`drive`)."""

    asked: int = 0
    inputs: int = 0
    refused: int = 0  # inputs the code under test refused with its typed error
    seconds: float = 0.0
    findings: list[str] = field(default_factory=list)

    @property
    def per_second(self) -> float:
        return self.inputs / self.seconds if self.seconds else 0.0

    @property
    def decoded(self) -> int:
        """Inputs taken without a refusal."""
        return self.inputs - self.refused

    @property
    def complete(self) -> bool:
        """Every input asked for was fed (no time budget ran out)."""
        return self.inputs >= self.asked

    def as_json(self) -> dict[str, object]:
        return {
            "asked": self.asked,
            "inputs": self.inputs,
            "complete": self.complete,
            "refused": self.refused,
            "seconds": round(self.seconds, 1),
            "inputs_per_second": round(self.per_second),
            "findings": self.findings,
        }

    def line(self, what: str) -> str:
        short = "" if self.complete else f" (stopped at the time budget, of {self.asked:,})"
        return (
            f"fuzz {what}: {self.inputs:,} inputs{short} in {self.seconds:.1f} s "
            f"({self.per_second:,.0f}/s), {self.refused:,} refused, "
            f"{len(self.findings)} finding(s)"
        )


def drive(
    make_input: Callable[[random.Random], T],
    check_one: Callable[[T], bool],
    inputs: int,
    *,
    seed: int = 0,
    max_findings: int = 20,
    budget: float | None = None,
) -> FuzzReport:
    """The one fuzz loop: ``inputs`` inputs from ``make_input``, each given to
    ``check_one`` (True when the code under test refused it with its typed
    error; a :class:`Finding` for anything else).

    Args:
        seed: the random seed; a run is reproducible from it.
        max_findings: stop after this many findings.
        budget: seconds the pass may take; it stops there, short of
            ``inputs`` (the report says so), rather than overrun its caller.
    """
    rng = random.Random(seed)
    report = FuzzReport(asked=inputs)
    start = time.perf_counter()
    stop_at = None if budget is None else start + budget
    for count in range(inputs):
        if stop_at is not None and count % 256 == 0 and time.perf_counter() >= stop_at:
            break
        data = make_input(rng)
        try:
            report.refused += check_one(data)
        except Finding as finding:
            report.findings.append("".join(traceback.format_exception(finding)))
            if len(report.findings) >= max_findings:
                break
        report.inputs += 1
    report.seconds = time.perf_counter() - start
    return report


def same_when_cut(feed: Callable[[bytes, int], OutcomeT], data: bytes) -> OutcomeT:
    """Feeds ``data`` to a stream reader whole (``feed(data, 0)``) and one
    byte per read (``feed(data, 1)``); both must come to the same outcome.

    Raises:
        Finding: they disagree (``feed`` raises one itself for an error
            other than the reader's typed one).
    """
    whole = feed(data, 0)
    bytewise = feed(data, 1)
    if whole != bytewise:
        raise Finding(f"{data!r}: whole {whole} but byte by byte {bytewise}")
    return whole


def drive_reader(
    corpus: list[bytes],
    check_one: Callable[[bytes], Outcome],
    inputs: int,
    *,
    seed: int = 0,
    max_findings: int = 20,
    budget: float | None = None,
) -> FuzzReport:
    """:func:`drive` over mutations of a stream reader's seed streams:
    ``check_one`` (usually :func:`same_when_cut`) says whether the reader
    refused each."""
    return drive(
        lambda rng: mutate(rng.choice(corpus), rng, corpus),
        lambda data: check_one(data).refused,
        inputs,
        seed=seed,
        max_findings=max_findings,
        budget=budget,
    )


def run(
    inputs: int, *, seed: int = 0, max_findings: int = 20, budget: float | None = None
) -> FuzzReport:
    """Feeds ``inputs`` mutated corpus entries to every decoder in turn (each
    input goes to one decoder); see :func:`drive` for the arguments."""
    corpus = load_corpus()
    if not corpus:
        raise RuntimeError(f"no seed corpus in {CORPUS}")
    return drive(
        lambda rng: fuzz_input(rng, corpus),
        lambda entry: not check(*entry),
        inputs,
        seed=seed,
        max_findings=max_findings,
        budget=budget,
    )
