"""Fuzzing the SDK's NATS frame parser
(:class:`liftbridge._transport._nats_frames.FrameParser`): whatever bytes a
NATS server sends, the parser raises :class:`liftbridge.ProtocolError` or
reads on; nothing else may come out, and how the bytes were cut into reads must not matter.

Each input is a seed (a server's side of a connection: INFO, the inbox's MSG
and HMSG frames with CRLFs inside payloads, other subscriptions' messages,
PING, PONG, +OK, -ERR) put through the mutations of :mod:`chaos.fuzz`. It is
fed whole, then again split at every byte boundary (one byte per read); the
two runs must give the same payloads, counts and end. The quick run is
hypothesis in ``tests/fuzz``; ``make chaos`` runs a million inputs
(:func:`run`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from chaos.fuzz import Finding, FuzzReport, drive_reader, mutate, same_when_cut
from liftbridge import ProtocolError
from liftbridge._transport._nats_frames import FrameParser

INBOX = b"_INBOX.fuzz"
"""The subject the parser's wanted subscription (sid 1) listens on."""

MAX_PAYLOAD = 64
"""The ``max_payload`` each parser starts with (seeds' INFOs change it)."""


def msg(payload: bytes, sid: bytes = b"1", subject: bytes = INBOX, reply: bytes = b"") -> bytes:
    middle = b" " + reply if reply else b""
    return b"MSG %s %s%s %d\r\n%s\r\n" % (subject, sid, middle, len(payload), payload)


def hmsg(headers: bytes, payload: bytes, sid: bytes = b"1") -> bytes:
    total = len(headers) + len(payload)
    return b"HMSG %s %s %d %d\r\n%s%s\r\n" % (INBOX, sid, len(headers), total, headers, payload)


def seeds() -> list[bytes]:
    """Valid server streams (a few with a frame the parser refuses at the end)."""
    return [
        b'INFO {"server_id":"x","max_payload":48,"headers":true}\r\n'
        + msg(b"ack one")
        + b"PING\r\n"
        + msg(b"with\r\nCRLF")
        + b"+OK\r\n",
        msg(b"") + msg(b"other", sid=b"2", subject=b"elsewhere") + msg(b"r", reply=b"_INBOX.r"),
        hmsg(b"NATS/1.0\r\nK: v\r\n\r\n", b"acked") + b"PONG\r\n" + hmsg(b"NATS/1.0\r\n\r\n", b""),
        b"-ERR 'Permissions Violation for Publish to \"s.1\"'\r\n" + msg(b"z" * 40) + b"pong\r\n",
        b'INFO {"max_payload":8}\r\n' + msg(b"12345678") + msg(b"123456789"),
    ]


@dataclass(frozen=True)
class Outcome:
    """What the parser made of one input (payloads and counts only when it read
    everything without refusing: a refusal drops the rest of that read)."""

    refused: bool
    payloads: tuple[bytes, ...] = ()
    counts: tuple[int, int, int, int, int] = (0, 0, 0, 0, 0)  # pings, pongs, errors, infos, limit


def feed(data: bytes, step: int = 0) -> Outcome:
    """Feeds ``data`` to a fresh parser, whole or ``step`` bytes per read.

    Raises:
        Finding: anything but a ProtocolError came out, or it held too much.
    """
    parser = FrameParser(b"1", INBOX)
    parser.max_payload = MAX_PAYLOAD
    payloads: list[bytes] = []
    try:
        if not step:
            payloads += parser.feed(data)
        else:
            for at in range(0, len(data), step):
                payloads += parser.feed(data[at : at + step])
        # What it holds is a partial frame of this input, never more.
        if parser.buffered > len(data):
            raise Finding(f"feed({data!r}) holds {parser.buffered} bytes")
    except ProtocolError:
        return Outcome(True)
    except Finding:
        raise
    except Exception as e:
        raise Finding(f"feed({data!r}, step={step}) raised {type(e).__name__}: {e}") from e
    counts = (
        parser.pings,
        parser.pongs,
        len(parser.errors),
        len(parser.infos),
        parser.max_payload,
    )
    return Outcome(False, tuple(payloads), counts)


def check(data: bytes) -> Outcome:
    """Feeds ``data`` whole and one byte per read; both must agree.

    Raises:
        Finding: they disagree, or either raised anything but a ProtocolError.
    """
    return same_when_cut(feed, data)


def fuzz_input(rng: random.Random, corpus: list[bytes]) -> bytes:
    return mutate(rng.choice(corpus), rng, corpus)


def run(
    inputs: int, *, seed: int = 0, max_findings: int = 20, budget: float | None = None
) -> FuzzReport:
    """Feeds ``inputs`` mutated seeds to the parser, each whole and byte by
    byte (see :func:`chaos.fuzz.drive` for the arguments)."""
    return drive_reader(seeds(), check, inputs, seed=seed, max_findings=max_findings, budget=budget)
