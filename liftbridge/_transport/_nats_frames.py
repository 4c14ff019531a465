"""The NATS client protocol's frames as the SDK's connection reads them.

:class:`FrameParser` cuts what a NATS server sends (``MSG``/``HMSG``,
``PING``/``PONG``, ``+OK``, ``-ERR``, ``INFO``) out of the bytes read, keeping
a partial frame for the next read; :func:`pub_prefix` starts every ``PUB``
frame written. No I/O here: :mod:`liftbridge._transport._nats_socket` reads
and writes.
"""

from __future__ import annotations

import json
from typing import Any

from liftbridge._errors import LiftbridgeError

_MAX_CONTROL_LINE = 64 * 1024
"""The longest protocol line accepted (INFO included)."""


def pub_prefix(subject: str) -> bytes:
    """``PUB <subject> ``: how every frame to ``subject`` starts (the
    payload's size, CRLF, the payload and CRLF follow)."""
    return b"PUB " + subject.encode() + b" "


class ProtocolError(LiftbridgeError):
    """What the server sent is not the NATS protocol (the connection is then
    treated as lost; users see :class:`UnavailableError`)."""


class FrameParser:
    """Cuts server frames out of the bytes read, keeping a partial one for later.

    Not thread-safe (the I/O thread's alone).

    Args:
        sid: the subscription id whose MSG/HMSG payloads are wanted; other
            subscriptions' messages are skipped.
        subject: the subject subscribed to as ``sid`` (for a fast path on
            the usual frame ``MSG <subject> <sid> <size>``).
    """

    def __init__(self, sid: bytes, subject: bytes = b"") -> None:
        self._sid = sid
        self._usual = b"MSG " + subject + b" " + sid + b" " if subject else b""
        self._rest = b""
        self.pings = 0
        """PINGs read and not answered yet (the owner answers and zeroes it)."""
        self.pongs = 0
        """PONGs read and not accounted for yet (the owner zeroes it)."""
        self.errors: list[str] = []
        """``-ERR`` texts read (the owner empties it)."""
        self.infos: list[dict[str, Any]] = []
        """INFO objects read (the owner empties it)."""

    def feed(self, data: bytes) -> list[bytes]:
        """Parses ``data`` after what was left over; returns the payloads of
        the wanted subscription, in order.

        Raises:
            ProtocolError: a frame the protocol does not have.
        """
        buf = self._rest + data if self._rest else data
        size = len(buf)
        usual, usual_size = self._usual, len(self._usual)
        payloads: list[bytes] = []
        pos = 0
        while pos < size:
            end = buf.find(b"\r\n", pos)
            if end < 0:
                if size - pos > _MAX_CONTROL_LINE:
                    raise ProtocolError(f"a protocol line longer than {_MAX_CONTROL_LINE} bytes")
                break
            if usual and buf.startswith(usual, pos):
                count = buf[pos + usual_size : end]
                if count.isdigit():  # else a reply subject: the general case below
                    stop = end + 2 + int(count)
                    if stop + 2 > size:
                        break  # the payload is still on its way
                    payloads.append(buf[end + 2 : stop])
                    pos = stop + 2
                    continue
            head = buf[pos : pos + 4].upper()
            if head == b"MSG ":
                fields = buf[pos + 4 : end].split()
                if len(fields) not in (3, 4):
                    raise ProtocolError(f"a bad MSG line: {buf[pos:end][:80]!r}")
                stop = end + 2 + int(fields[-1])
                if stop + 2 > size:
                    break
                if fields[1] == self._sid:
                    payloads.append(buf[end + 2 : stop])
                pos = stop + 2
            elif head == b"HMSG":
                fields = buf[pos + 5 : end].split()
                if len(fields) not in (4, 5):
                    raise ProtocolError(f"a bad HMSG line: {buf[pos:end][:80]!r}")
                headers, total = int(fields[-2]), int(fields[-1])
                stop = end + 2 + total
                if stop + 2 > size:
                    break
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
                try:
                    info = json.loads(buf[pos + 5 : end])
                except ValueError as e:
                    raise ProtocolError(f"a bad INFO line: {e}") from e
                self.infos.append(info if isinstance(info, dict) else {})
                pos = end + 2
            else:
                raise ProtocolError(f"an unknown frame: {buf[pos:end][:80]!r}")
        self._rest = buf[pos:]
        return payloads
