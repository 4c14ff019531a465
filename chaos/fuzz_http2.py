"""Fuzzing the SDK's HTTP/2 frame reader
(:class:`liftbridge._transport._http2_reader.FrameReader`): whatever bytes a
server sends, the reader ends in a :class:`StreamError` (which the SDK maps
to a typed error) or reads on; nothing else may come out, and how the bytes
were cut into reads must not matter.

Each input is a seed (a server's side of a whole stream: SETTINGS, response
headers, messages in DATA frames, trailers; some with padding, priority,
CONTINUATION, PING, WINDOW_UPDATE, RST_STREAM, GOAWAY) put through the
mutations of :mod:`chaos.fuzz`. It is fed whole, then again split at every
byte boundary (one byte per read); the two runs must give the same messages
and the same end. The quick run is hypothesis in ``tests/fuzz``; ``make
chaos`` runs a million inputs (:func:`run`).
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass

import hpack

from chaos.fuzz import Finding, FuzzReport, drive_reader, mutate, same_when_cut
from liftbridge._transport._http2_reader import FrameReader
from liftbridge._transport._http2_windows import PeerWindows
from liftbridge._transport._http2_wire import StreamError

DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = (
    0x0,
    0x1,
    0x2,
    0x3,
    0x4,
    0x6,
    0x7,
    0x8,
    0x9,
)
END_STREAM, END_HEADERS, PADDED, PRIORITY_FLAG = 0x1, 0x4, 0x8, 0x20

MAX_REPLIES = 1 << 20
"""Bytes of replies one input may make the reader send (a bound on what it holds)."""


def _frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    header = len(payload).to_bytes(3, "big") + bytes((kind, flags)) + stream.to_bytes(4, "big")
    return header + payload


def _message(body: bytes) -> bytes:
    return b"\0" + len(body).to_bytes(4, "big") + body


def head() -> bytes:
    """A server's SETTINGS and response headers: how every stream opens."""
    opening = _frame(SETTINGS, 0, 0, (4).to_bytes(2, "big") + (1 << 20).to_bytes(4, "big"))
    headers = hpack.Encoder().encode([(":status", "200"), ("content-type", "application/grpc")])
    return opening + _frame(HEADERS, END_HEADERS, 1, headers)


def seeds() -> list[bytes]:
    """Valid (and a few deliberately ending) server streams."""
    # Each block from a fresh encoder: a seed holds any one of them after
    # the headers, and a shared encoder's dynamic table would not match.
    headers = hpack.Encoder().encode([(":status", "200"), ("content-type", "application/grpc")])
    ok = hpack.Encoder().encode([("grpc-status", "0")])
    failed = hpack.Encoder().encode([("grpc-status", "14"), ("grpc-message", "going%20away")])
    opening = _frame(SETTINGS, 0, 0, (4).to_bytes(2, "big") + (1 << 20).to_bytes(4, "big"))
    start = head()
    two = _message(b"first") + _message(b"second" * 5)
    padded = bytes((3,)) + two + b"\0\0\0"
    prioritized = bytes((2,)) + (0).to_bytes(4, "big") + bytes((15,)) + headers + b"\0\0"
    return [
        start + _frame(DATA, 0, 1, two) + _frame(HEADERS, END_HEADERS | END_STREAM, 1, ok),
        opening
        + _frame(HEADERS, END_HEADERS | PADDED | PRIORITY_FLAG, 1, prioritized)
        + _frame(DATA, PADDED, 1, padded)
        + _frame(PING, 0, 0, b"12345678")
        + _frame(WINDOW_UPDATE, 0, 0, (1000).to_bytes(4, "big"))
        + _frame(HEADERS, END_STREAM, 1, failed[:3])
        + _frame(CONTINUATION, END_HEADERS, 1, failed[3:]),
        start
        + _frame(DATA, 0, 1, _message(b"split" * 20)[:40])
        + _frame(DATA, 0, 1, _message(b"split" * 20)[40:])
        + _frame(PRIORITY, 0, 1, bytes(5))
        + _frame(0x20, 0, 0, b"unknown type")
        + _frame(RST_STREAM, 0, 1, (7).to_bytes(4, "big")),
        start
        + _frame(SETTINGS, 1, 0)
        + _frame(WINDOW_UPDATE, 0, 1, (5).to_bytes(4, "big"))
        + _frame(GOAWAY, 0, 0, (1).to_bytes(4, "big") + (0).to_bytes(4, "big"))
        + _frame(DATA, END_STREAM, 1, _message(b"")),
    ]


@dataclass(frozen=True)
class Outcome:
    """What the reader made of one input."""

    messages: tuple[bytes, ...]
    ended: bool
    end: str  # the end's gRPC code and details, or "" while open / on OK

    @property
    def refused(self) -> bool:
        """The reader refused the input (a StreamError, or an end not OK)."""
        return bool(self.end)


def feed(data: bytes, step: int = 0) -> Outcome:
    """Feeds ``data`` to a fresh reader, whole or ``step`` bytes per read.

    Raises:
        Finding: anything but a StreamError came out, or it held too much.
    """
    replies = bytearray()

    def reply(frame: bytes) -> None:
        replies.extend(frame)
        if len(replies) > MAX_REPLIES:
            raise Finding(f"the reader queued {len(replies)} bytes of replies")

    reader: FrameReader[bytes] = FrameReader(
        bytes,
        max_message=1 << 20,
        windows=PeerWindows(),
        flow=threading.Condition(threading.Lock()),
        reply=reply,
    )
    pieces = [data] if not step else [data[at : at + step] for at in range(0, len(data), step)]
    error: StreamError | None = None
    try:
        for piece in pieces:
            reader.feed(piece)
            if reader.ended:
                break
    except StreamError as e:
        error = e
    except Finding:
        raise
    except Exception as e:
        raise Finding(f"feed({data!r}, step={step}) raised {type(e).__name__}: {e}") from e
    end = error if error is not None else reader.end
    described = f"{end.code().name}: {end.details()}" if end is not None else ""
    return Outcome(tuple(reader.ready), reader.ended or error is not None, described)


def check(data: bytes) -> Outcome:
    """Feeds ``data`` whole and one byte per read; both must agree.

    Raises:
        Finding: they disagree, or either raised anything but a StreamError.
    """
    return same_when_cut(feed, data)


def fuzz_input(rng: random.Random, corpus: list[bytes]) -> bytes:
    return mutate(rng.choice(corpus), rng, corpus)


def run(
    inputs: int, *, seed: int = 0, max_findings: int = 20, budget: float | None = None
) -> FuzzReport:
    """Feeds ``inputs`` mutated seeds to the reader, each whole and byte by
    byte (see :func:`chaos.fuzz.drive` for the arguments)."""
    return drive_reader(seeds(), check, inputs, seed=seed, max_findings=max_findings, budget=budget)
