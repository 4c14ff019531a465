"""The NATS frame parser against what a hostile server may send: sizes that
are not sizes, sizes over the limits, malformed INFO, lines that never end,
and a large message in many reads (kept without copying it again and again).

tests/unit/test_nats_socket.py has the parser's ordinary cases; the fuzz run
is tests/fuzz/test_fuzz_nats.py and chaos/fuzz_nats.py.
"""

from __future__ import annotations

import tracemalloc

import pytest

from liftbridge import ProtocolError, UnavailableError
from liftbridge._transport._nats_frames import (
    MAX_CONTROL_LINE,
    MAX_HEADERS,
    FrameParser,
    denied_subject,
    fatal,
)
from liftbridge._transport._nats_info import MAX_PAYLOAD_LIMIT, check_info, parse_info

INBOX = b"_INBOX.abc"


def _parser(max_payload: int = 1024) -> FrameParser:
    parser = FrameParser(b"1", INBOX)
    parser.max_payload = max_payload
    return parser


def test_protocol_errors_are_unavailable_errors() -> None:
    # Code catching UnavailableError for a lost NATS connection catches these too.
    assert issubclass(ProtocolError, UnavailableError)


@pytest.mark.parametrize(
    ("line", "match"),
    [
        (b"MSG _INBOX.abc 1 -5\r\n", "negative size"),  # the usual frame's fast path
        (b"MSG _INBOX.abc 1 reply -5\r\n", "negative size"),
        (b"MSG other 9 -1\r\n", "negative size"),
        (b"HMSG _INBOX.abc 1 -3 10\r\n", "negative size"),
        (b"HMSG _INBOX.abc 1 3 -10\r\n", "negative size"),
        (b"MSG _INBOX.abc 1 +5\r\n", "not digits"),
        (b"MSG _INBOX.abc 1 5_0\r\n", "not digits"),
        (b"MSG _INBOX.abc 1 0x10\r\n", "not digits"),
        (b"MSG _INBOX.abc 1 1025\r\n", "1025 bytes, over its max_payload of 1024"),
        (b"MSG _INBOX.abc 1 2147483648\r\n", "2147483648 bytes, over"),
        (b"MSG _INBOX.abc 1 reply 2147483648\r\n", "more than 9 digits"),
        (b"MSG _INBOX.abc 1 " + b"9" * 5000 + b"\r\n", "9 digits|unreadable"),
        (b"HMSG _INBOX.abc 1 20 10\r\n", "20 header bytes in 10"),
        (b"HMSG _INBOX.abc 1 10 2048\r\n", "over its max_payload"),
    ],
)
def test_a_bad_size_is_refused_from_the_control_line(line: bytes, match: str) -> None:
    # Only the line is fed: the size is refused before any payload is kept.
    with pytest.raises(ProtocolError, match=match):
        _parser().feed(line)


def test_headers_over_their_bound_are_refused() -> None:
    parser = _parser(max_payload=MAX_PAYLOAD_LIMIT)
    with pytest.raises(ProtocolError, match=f"at most {MAX_HEADERS}"):
        parser.feed(b"HMSG _INBOX.abc 1 %d %d\r\n" % (MAX_HEADERS + 1, MAX_HEADERS + 10))


def test_a_payload_not_followed_by_crlf_is_refused() -> None:
    # The size says 3 where the payload has 5: the parser does not read on
    # from the middle of a payload as if it were a frame.
    for frame in (b"MSG _INBOX.abc 1 3\r\nhello\r\n", b"MSG other 2 3\r\nhello\r\n"):
        with pytest.raises(ProtocolError, match="not followed by CRLF"):
            _parser().feed(frame)


def test_only_crlf_ends_a_line() -> None:
    parser = _parser()
    assert parser.feed(b"PI") == []
    assert parser.feed(b"NG\nPONG") == []  # a bare LF is part of the line
    assert parser.pings == parser.pongs == 0
    assert parser.feed(b"\r") == []
    assert parser.feed(b"\n") == []  # CRLF across two reads
    assert (parser.pings, parser.pongs, parser.buffered) == (1, 0, 0)


def test_a_line_that_never_ends_is_refused_past_the_limit() -> None:
    parser = _parser()
    chunk = b"x" * 4096
    with pytest.raises(ProtocolError, match="longer than"):
        for _ in range(MAX_CONTROL_LINE // len(chunk) + 2):
            parser.feed(chunk)
    assert parser.buffered <= MAX_CONTROL_LINE + len(chunk)


def test_info_sets_the_limit_for_the_frames_after_it() -> None:
    parser = _parser(max_payload=MAX_PAYLOAD_LIMIT)
    stream = b'INFO {"max_payload": 4}\r\nMSG _INBOX.abc 1 4\r\nfour\r\nMSG _INBOX.abc 1 5\r\n'
    with pytest.raises(ProtocolError, match="5 bytes, over its max_payload of 4"):
        parser.feed(stream)
    assert parser.max_payload == 4


def test_a_size_read_before_is_checked_against_a_lower_limit_later() -> None:
    # The usual frame's sizes are remembered: one seen under the old limit
    # is still refused once an INFO lowers it.
    parser = _parser(max_payload=MAX_PAYLOAD_LIMIT)
    assert parser.feed(b"MSG _INBOX.abc 1 5\r\nfive!\r\n" * 2) == [b"five!", b"five!"]
    with pytest.raises(ProtocolError, match="5 bytes, over its max_payload of 4"):
        parser.feed(b'INFO {"max_payload": 4}\r\nMSG _INBOX.abc 1 5\r\nfive!\r\n')


def test_sizes_of_the_usual_frame_read_again_and_again() -> None:
    parser = _parser(max_payload=MAX_PAYLOAD_LIMIT)
    payloads = [b"p" * (n % 3000) for n in range(4000)]  # more sizes than are remembered
    data = b"".join(b"MSG _INBOX.abc 1 %d\r\n%s\r\n" % (len(p), p) for p in payloads)
    assert parser.feed(data + data) == payloads + payloads
    assert parser.feed(b"MSG _INBOX.abc 1 005\r\nfive!\r\n" * 2) == [b"five!", b"five!"]
    with pytest.raises(ProtocolError, match="not followed by CRLF"):
        parser.feed(b"MSG _INBOX.abc 1 5\r\nfive!!\r\n")


@pytest.mark.parametrize(
    ("info", "match"),
    [
        (b'{"max_payload": "1MB"}', "max_payload '1MB'"),
        (b'{"max_payload": 1.5}', "max_payload 1.5"),
        (b'{"max_payload": true}', "max_payload True"),
        (b'{"max_payload": -1}', "max_payload -1"),
        (b'{"max_payload": 0}', "max_payload 0"),
        (b'{"max_payload": 67108865}', "from 1 to 67108864"),
        (b'{"tls_required": "yes"}', "tls_required 'yes': not a bool"),
        (b'{"nonce": 7}', "nonce 7: not text"),
        (b"[1, 2]", "not a JSON object"),
        (b"{not json", "not JSON"),
        (b"[" * 50_000, "not JSON"),  # nested past the recursion limit
    ],
)
def test_a_malformed_info_is_a_protocol_error(info: bytes, match: str) -> None:
    with pytest.raises(ProtocolError, match=match):
        parse_info(info, "the server")
    with pytest.raises(ProtocolError, match=match):
        _parser().feed(b"INFO " + info + b"\r\n")


def test_an_info_without_max_payload_takes_the_nats_default() -> None:
    assert check_info({"server_id": "x"}, "s")["max_payload"] == 1024 * 1024


def test_a_large_message_in_many_reads_is_joined_once() -> None:
    """The reads of a payload still on its way are kept as they are: feeding
    one more never copies what came before (the old parser did, making a
    large message cost its size squared)."""
    size, chunk = 8 << 20, 64 << 10
    parser = _parser(max_payload=size)
    payload = b"p" * size
    stream = b"MSG _INBOX.abc 1 %d\r\n%s\r\nPING\r\n" % (size, payload)
    reads = [stream[at : at + chunk] for at in range(0, len(stream), chunk)]
    tracemalloc.start()
    try:
        for index, data in enumerate(reads[:-1]):
            before, _ = tracemalloc.get_traced_memory()
            tracemalloc.reset_peak()
            assert parser.feed(data) == []
            _, peak = tracemalloc.get_traced_memory()
            # One more read kept, not all of them again.
            assert peak - before < 2 * chunk, f"read {index} copied {peak - before} bytes"
        assert parser.buffered == len(stream) - len(reads[-1])
    finally:
        tracemalloc.stop()
    assert parser.feed(reads[-1]) == [payload]
    assert parser.pings == 1
    assert parser.buffered == 0


def test_err_texts_are_told_apart() -> None:
    assert denied_subject('Permissions Violation for Publish to "orders.1"') == "orders.1"
    assert denied_subject("permissions violation for publish to orders") == "orders"
    assert denied_subject('Permissions Violation for Subscription to "x"') is None
    assert not fatal('Permissions Violation for Subscription to "x"')
    assert not fatal("Invalid Subject")
    assert fatal("Maximum Payload Violation")
    assert fatal("Stale Connection")
    assert fatal("something new")
