"""The NATS client protocol's frames as the SDK's connection reads them.

:class:`FrameParser` cuts what a NATS server sends (``MSG``/``HMSG``,
``PING``/``PONG``, ``+OK``, ``-ERR``, ``INFO``) out of the bytes read, keeping
a partial frame for the next read; :func:`pub_prefix` starts every ``PUB``
frame written. No I/O here: :mod:`liftbridge._transport._nats_socket` reads
and writes.

Bytes from the server are hostile until checked: every size is digits (no
sign), at most the ``max_payload`` of the server's latest ``INFO`` (header
sizes at most :data:`MAX_HEADERS` and never past the message's end), and is
checked from the control line, before a byte of its payload is kept. A
payload still on its way is kept as the reads it came in and joined once,
when whole: reading a large message costs time and memory in proportion to
its size, never to its size squared.
"""

from __future__ import annotations

import re
from typing import Any

from liftbridge._errors import ProtocolError
from liftbridge._transport._nats_info import MAX_INFO_LINE, MAX_PAYLOAD_LIMIT, parse_info

MAX_CONTROL_LINE = MAX_INFO_LINE
"""The longest protocol line accepted (INFO included)."""

MAX_HEADERS = 64 * 1024
"""The most header bytes one ``HMSG`` may declare (ack payloads carry none;
the server's own headers are a few dozen bytes)."""

_MAX_DIGITS = 9
"""Digits of a size at most: every size allowed (64 MiB) has 8."""

_KNOWN_SIZES = 1024
"""Distinct control lines of the usual frame whose size a parser remembers."""

_PUBLISH_DENIED = re.compile(r'Permissions Violation for Publish to "?([^"]+)"?', re.IGNORECASE)


def pub_prefix(subject: str) -> bytes:
    """``PUB <subject> ``: how every frame to ``subject`` starts (the
    payload's size, CRLF, the payload and CRLF follow)."""
    return b"PUB " + subject.encode() + b" "


def denied_subject(error: str) -> str | None:
    """The subject a ``-ERR`` text says publishes to are not permitted, if
    it says that (``Permissions Violation for Publish to "subject"``)."""
    found = _PUBLISH_DENIED.fullmatch(error.strip())
    return found.group(1) if found else None


def fatal(error: str) -> bool:
    """Whether the server closes the connection after this ``-ERR``: all
    but an invalid subject and permissions violations (the NATS client
    protocol's list of errors that keep the connection)."""
    text = error.strip().lower()
    return not (text.startswith("permissions violation") or text == "invalid subject")


class FrameParser:
    """Cuts server frames out of the bytes read, keeping a partial one for later.

    Not thread-safe (the I/O thread's alone).

    Args:
        sid: the subscription id whose MSG/HMSG payloads are wanted; other
            subscriptions' messages are skipped.
        subject: the subject subscribed to as ``sid`` (for a fast path on
            the usual frame ``MSG <subject> <sid> <size>``).
        where: the server, for error messages.
    """

    def __init__(self, sid: bytes, subject: bytes = b"", where: str = "the NATS server") -> None:
        self._sid = sid
        self._usual = b"MSG " + subject + b" " + sid + b" " if subject else b""
        self._where = where
        # Control lines of the usual frame read so far (their size digits
        # only, at most the max_payload then), with that size as an int.
        self._lines: dict[bytes, int] = {}
        # What is left of the last read: a partial line or frame, as reads.
        self._parts: list[bytes] = []
        self._have = 0  # bytes in _parts
        self._need = 0  # bytes the partial frame needs in all (0: its line's end)
        self.max_payload = MAX_PAYLOAD_LIMIT
        """The largest payload accepted: the latest INFO's ``max_payload``."""
        self.pings = 0
        """PINGs read and not answered yet (the owner answers and zeroes it)."""
        self.pongs = 0
        """PONGs read and not accounted for yet (the owner zeroes it)."""
        self.errors: list[str] = []
        """``-ERR`` texts read (the owner empties it)."""
        self.infos: list[dict[str, Any]] = []
        """INFO objects read, checked (the owner empties it)."""

    @property
    def buffered(self) -> int:
        """Bytes held for a frame not read whole yet."""
        return self._have

    def feed(self, data: bytes) -> list[bytes]:
        """Parses ``data`` after what was left over; returns the payloads of
        the wanted subscription, in order.

        Raises:
            ProtocolError: a frame the protocol does not have, a size that
                is not one or is over the limits, a malformed INFO.
        """
        parts = self._parts
        if parts:
            parts.append(data)
            self._have += len(data)
            if self._need:
                if self._have < self._need:
                    return []  # the payload is still on its way: no copy yet
            elif b"\r\n" not in data and not (data[:1] == b"\n" and parts[-2][-1:] == b"\r"):
                if self._have > MAX_CONTROL_LINE:
                    raise ProtocolError(
                        f"{self._where} sent a line longer than {MAX_CONTROL_LINE} bytes"
                    )
                return []  # the line is still on its way
            buf = b"".join(parts)
            parts.clear()
            self._have = self._need = 0
        else:
            buf = data
        try:
            payloads, pos, need = self._parse(buf)
        except ValueError as e:  # int() of thousands of digits: not a size either
            raise ProtocolError(f"{self._where} sent an unreadable frame: {e}") from e
        if pos < len(buf):
            parts.append(buf[pos:])
            self._have = len(buf) - pos
            self._need = need
        return payloads

    def _parse(self, buf: bytes) -> tuple[list[bytes], int, int]:
        """The wanted payloads in ``buf``, where the first partial frame
        starts, and how many bytes from there it needs (0: its line's end)."""
        size = len(buf)
        usual, usual_size = self._usual, len(self._usual)
        lines = self._lines
        limit = self.max_payload
        payloads: list[bytes] = []
        pos = 0
        while pos < size:
            end = buf.find(b"\r\n", pos)
            if end < 0:  # a line still on its way (a bare LF does not end one)
                if size - pos > MAX_CONTROL_LINE:
                    raise ProtocolError(
                        f"{self._where} sent a line longer than {MAX_CONTROL_LINE} bytes"
                    )
                return payloads, pos, 0
            # A usual frame's line read before (so checked): one look-up, no int() again.
            length = lines.get(buf[pos:end])
            if length is None and usual and buf.startswith(usual, pos):
                count = buf[pos + usual_size : end]
                if count.isdigit():  # else a reply subject, a sign: below
                    length = int(count)
                    if length <= limit and len(lines) < _KNOWN_SIZES:
                        lines[buf[pos:end]] = length
            if length is not None:
                if length > limit:
                    raise self._too_large("MSG", length)
                stop = end + 2 + length
                if stop + 2 > size:
                    return payloads, pos, stop + 2 - pos
                if buf[stop] != 13 or buf[stop + 1] != 10:  # CRLF, by byte: the cheapest check
                    raise self._unended("MSG")
                payloads.append(buf[end + 2 : stop])
                pos = stop + 2
                continue
            head = buf[pos : pos + 4].upper()
            if head == b"MSG ":
                fields = buf[pos + 4 : end].split()
                if len(fields) not in (3, 4):
                    raise ProtocolError(f"{self._where} sent a bad MSG line: {buf[pos:end][:80]!r}")
                stop = end + 2 + self._size(fields[-1], "MSG")
                if stop + 2 > size:
                    return payloads, pos, stop + 2 - pos
                if buf[stop] != 13 or buf[stop + 1] != 10:  # CRLF, by byte: the cheapest check
                    raise self._unended("MSG")
                if fields[1] == self._sid:
                    payloads.append(buf[end + 2 : stop])
                pos = stop + 2
            elif head == b"HMSG":
                fields = buf[pos + 4 : end].split()
                if len(fields) not in (4, 5):
                    raise ProtocolError(
                        f"{self._where} sent a bad HMSG line: {buf[pos:end][:80]!r}"
                    )
                headers = self._size(fields[-2], "HMSG header")
                total = self._size(fields[-1], "HMSG")
                if headers > total or headers > MAX_HEADERS:
                    raise ProtocolError(
                        f"{self._where} sent an HMSG with {headers} header bytes in {total} "
                        f"(at most {MAX_HEADERS}, and never more than the message)"
                    )
                stop = end + 2 + total
                if stop + 2 > size:
                    return payloads, pos, stop + 2 - pos
                if buf[stop] != 13 or buf[stop + 1] != 10:  # CRLF, by byte: the cheapest check
                    raise self._unended("HMSG")
                if fields[1] == self._sid:
                    payloads.append(buf[end + 2 + headers : stop])
                pos = stop + 2
            elif head == b"PING":
                self.pings += 1
                pos = end + 2
            elif head == b"PONG":
                self.pongs += 1
                pos = end + 2
            elif head[:3] == b"+OK":
                pos = end + 2
            elif head == b"-ERR":
                self.errors.append(buf[pos + 4 : end].strip().strip(b"'").decode(errors="replace"))
                pos = end + 2
            elif head == b"INFO":
                info = parse_info(buf[pos + 4 : end], self._where)
                self.max_payload = limit = info["max_payload"]
                self.infos.append(info)
                pos = end + 2
            else:
                raise ProtocolError(f"{self._where} sent an unknown frame: {buf[pos:end][:80]!r}")
        return payloads, pos, 0

    def _size(self, field: bytes, kind: str) -> int:
        """A size field read from a control line, checked before it sizes anything."""
        if not field.isdigit():
            what = "a negative size" if field.startswith(b"-") else "a size that is not digits"
            raise ProtocolError(f"{self._where} sent a {kind} with {what}: {field[:20]!r}")
        if len(field) > _MAX_DIGITS:
            raise self._too_large(kind, None)
        length = int(field)
        if length > self.max_payload:
            raise self._too_large(kind, length)
        return length

    def _too_large(self, kind: str, length: int | None) -> ProtocolError:
        told = "a size of more than 9 digits" if length is None else f"{length} bytes"
        return ProtocolError(
            f"{self._where} sent a {kind} of {told}, over its max_payload of "
            f"{self.max_payload} bytes"
        )

    def _unended(self, kind: str) -> ProtocolError:
        return ProtocolError(
            f"{self._where} sent a {kind} whose payload is not followed by CRLF "
            "(its size is not the payload's)"
        )
