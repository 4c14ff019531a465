"""Tables a person can read: plain text in a terminal or a repr, HTML in a notebook.

:class:`Table` is what ``Metadata.table()``, :func:`messages_table` and the
``_repr_html_`` of the value objects render through; it holds strings only,
so it is cheap, immutable and safe to share.
"""

from __future__ import annotations

import codecs
import html
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from liftbridge._core._validate import datetime_of_ns

if TYPE_CHECKING:
    from liftbridge._core._messages import Message

_BYTES_SHOWN = 32
"""Bytes of a key or value a table shows before cutting it short."""


def timestamp_ns_to_datetime(ns: int) -> datetime | None:
    """Unix nanoseconds as an aware UTC datetime (whole microseconds), None for 0 (never)."""
    if ns <= 0:
        return None
    return datetime_of_ns(ns)


def show_datetime(when: datetime | None) -> str:
    """``2026-11-23 10:59:13.123456+00:00``, or ``-`` for never."""
    return "-" if when is None else when.isoformat(sep=" ")


def show_bytes(data: bytes | None) -> str:
    """Bytes as a short Python literal (``b'order-1'``), cut after ``_BYTES_SHOWN``."""
    if data is None:
        return "-"
    if len(data) <= _BYTES_SHOWN:
        return repr(data)
    return f"{data[:_BYTES_SHOWN]!r}… ({len(data)} bytes)"


def text_encoding(decode: object, *, arg: str = "decode") -> str | None:
    """The ``decode=`` option of the message tables and frames: None (keys and
    values stay bytes) or the name of a text codec (``"utf-8"``).

    Raises:
        ArgumentTypeError: not a str or None.
        InvalidArgumentError: no such codec.
    """
    from liftbridge._errors import ArgumentTypeError, InvalidArgumentError

    if decode is None:
        return None
    if not isinstance(decode, str):
        raise ArgumentTypeError(
            f"{arg} must be a codec name like 'utf-8' or None, got {type(decode).__name__}"
        )
    try:
        info = codecs.lookup(decode)
    except LookupError:
        raise InvalidArgumentError(f"{arg}: no text codec named {decode!r}") from None
    if not getattr(info, "_is_text_encoding", True):
        raise InvalidArgumentError(f"{arg}: {decode!r} is not a text encoding")
    return info.name


def as_text(data: bytes | None, encoding: str) -> str | None:
    """Bytes decoded as text; bytes that do not decode are shown as ``\\xNN``."""
    return None if data is None else data.decode(encoding, errors="backslashreplace")


def show_text(data: bytes | None, encoding: str) -> str:
    """Bytes decoded as text, cut after ``_BYTES_SHOWN`` characters; ``-`` for None."""
    text = as_text(data, encoding)
    if text is None:
        return "-"
    if len(text) <= _BYTES_SHOWN:
        return text
    return f"{text[:_BYTES_SHOWN]}… ({len(data or b'')} bytes)"


def fields_table(title: str, fields: Iterable[tuple[str, str]]) -> Table:
    """A value object's fields as a two-column table (its ``_repr_html_``);
    each value string is cut after 200 characters."""
    rows = tuple((name, text if len(text) <= 200 else f"{text[:200]}…") for name, text in fields)
    return Table(title=title, columns=("field", "value"), rows=rows)


@dataclass(frozen=True)
class Table:
    """Rows of strings under column names, with a title. Immutable.

    ``repr()`` (and ``str()``) is an aligned text table; Jupyter and other
    notebooks show ``_repr_html_`` instead.

    Attributes:
        title: one line above the table.
        columns: the column names.
        rows: one tuple of cell strings per row, as many as ``columns``.
        note: a line below the table (e.g. what was left out), or ``""``.
    """

    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    note: str = ""

    def __str__(self) -> str:
        cells = [self.columns, *self.rows]
        widths = [max(len(row[i]) for row in cells) for i in range(len(self.columns))]
        lines = [self.title]
        for n, row in enumerate(cells):
            lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
            if n == 0:
                lines.append("  ".join("-" * w for w in widths))
        if not self.rows:
            lines.append("(none)")
        if self.note:
            lines.append(self.note)
        return "\n".join(lines)

    def __repr__(self) -> str:
        return str(self)

    def _repr_html_(self) -> str:
        """The table as HTML, every cell escaped."""
        head = "".join(f"<th>{html.escape(c)}</th>" for c in self.columns)
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>"
            for row in self.rows
        )
        if not self.rows:
            body = f'<tr><td colspan="{len(self.columns)}">(none)</td></tr>'
        note = f"<p>{html.escape(self.note)}</p>" if self.note else ""
        return (
            f"<div><strong>{html.escape(self.title)}</strong>"
            f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{note}</div>"
        )


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def messages_table(
    messages: Iterable[Message], *, limit: int = 50, decode: str | None = None
) -> Table:
    """A table of messages for a notebook or a terminal: one row per message.

    Args:
        messages: the messages, e.g. a list read from a subscription.
        limit: most rows shown; the note says how many were left out.
        decode: show keys, values and headers as text in this encoding
            (``"utf-8"``) instead of bytes literals; bytes that do not decode
            show as ``\\xNN``. None (default): bytes.

    Returns:
        A :class:`Table` with stream, partition, offset, time, key, value and
        the headers the publisher set (not the server-added ``subject`` and
        ``reply``).

    Raises:
        ArgumentTypeError: ``messages`` holds something that is not a Message.
        InvalidArgumentError: ``limit`` is below 1, or ``decode`` names no
            text codec.
    """
    from liftbridge._core import _validate as check
    from liftbridge._core._messages import checked_messages

    check.positive_int(limit, arg="limit")
    encoding = text_encoding(decode)
    items = checked_messages(messages)

    def show(data: bytes | None) -> str:
        return show_bytes(data) if encoding is None else show_text(data, encoding)

    rows = tuple(
        (
            m.stream,
            str(m.partition),
            str(m.offset),
            show_datetime(m.timestamp),
            show(m.key),
            show(m.value),
            ", ".join(
                f"{name}={show(value)}"
                for name, value in m.headers.items()
                if name not in _SERVER_HEADERS
            ),
        )
        for m in items[:limit]
    )
    left_out = len(items) - len(rows)
    return Table(
        title=_plural(len(items), "message"),
        columns=("stream", "partition", "offset", "time (UTC)", "key", "value", "headers"),
        rows=rows,
        note=f"… and {left_out} more" if left_out > 0 else "",
    )


_SERVER_HEADERS = frozenset({"subject", "reply"})
"""Headers the server adds to every consumed message."""


def join(ids: Sequence[str]) -> str:
    """Broker ids as ``a, b, c``, or ``-`` when there are none."""
    return ", ".join(ids) if ids else "-"
