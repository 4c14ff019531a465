"""Messages as DataFrames: pandas (the ``pandas`` extra) and Arrow (the ``arrow`` extra).

pandas and pyarrow are imported only when these functions are called, so the
SDK imports without them; a missing one raises :class:`MissingDependencyError`
naming the extra to install.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from liftbridge._core._display import as_text, text_encoding
from liftbridge._core._messages import Message, checked_messages
from liftbridge._errors import MissingDependencyError

if TYPE_CHECKING:
    import pandas
    import pyarrow

COLUMNS = (
    "stream",
    "partition",
    "offset",
    "timestamp",
    "key",
    "value",
    "headers",
    "subject",
    "reply_subject",
)
"""The columns of both frames, in order. ``timestamp`` is UTC with nanoseconds."""


def _text(data: bytes | None, encoding: str | None) -> bytes | str | None:
    return data if encoding is None else as_text(data, encoding)


def _checked(messages: Iterable[Message]) -> list[Message]:
    return checked_messages(messages)


def messages_to_arrow(messages: Iterable[Message], *, decode: str | None = None) -> pyarrow.Table:
    """The messages as a ``pyarrow.Table``, one row each, columns :data:`COLUMNS`.

    Types: ``partition`` int32, ``offset`` int64, ``timestamp``
    ``timestamp[ns, tz=UTC]`` (exact), ``key`` and ``value`` binary (key null
    when absent), ``headers`` ``map<string, binary>``, the rest strings.
    With ``decode="utf-8"`` (any text codec) ``key``, ``value`` and the
    header values are strings instead (bytes that do not decode as ``\\xNN``).

    Raises:
        MissingDependencyError: pyarrow is not installed
            (``pip install 'liftbridge[arrow]'``).
        ArgumentTypeError: ``messages`` holds something that is not a Message.
    """
    try:
        import pyarrow as pa
    except ImportError as e:
        raise MissingDependencyError(
            "messages_to_arrow needs pyarrow: pip install 'liftbridge[arrow]'"
        ) from e
    encoding = text_encoding(decode)
    items = _checked(messages)
    data = pa.binary() if encoding is None else pa.string()
    schema = pa.schema(
        [
            ("stream", pa.string()),
            ("partition", pa.int32()),
            ("offset", pa.int64()),
            ("timestamp", pa.timestamp("ns", tz="UTC")),
            ("key", data),
            ("value", data),
            ("headers", pa.map_(pa.string(), data)),
            ("subject", pa.string()),
            ("reply_subject", pa.string()),
        ]
    )
    columns = [
        [m.stream for m in items],
        [m.partition for m in items],
        [m.offset for m in items],
        [m.timestamp_ns for m in items],
        [_text(m.key, encoding) for m in items],
        [_text(m.value, encoding) for m in items],
        [[(k, _text(v, encoding)) for k, v in m.headers.items()] for m in items],
        [m.subject for m in items],
        [m.reply_subject for m in items],
    ]
    return pa.Table.from_arrays(
        [pa.array(column, type=field.type) for column, field in zip(columns, schema, strict=True)],
        schema=schema,
    )


def messages_to_pandas(
    messages: Iterable[Message], *, decode: str | None = None
) -> pandas.DataFrame:
    """The messages as a ``pandas.DataFrame``, one row each, columns :data:`COLUMNS`.

    ``timestamp`` is ``datetime64[ns, UTC]`` (exact); ``key`` and ``value``
    hold ``bytes`` (key ``None`` when absent); ``headers`` holds dicts. With
    ``decode="utf-8"`` (any text codec) keys, values and header values are
    ``str`` instead (bytes that do not decode as ``\\xNN``).

    Raises:
        MissingDependencyError: pandas is not installed
            (``pip install 'liftbridge[pandas]'``).
        ArgumentTypeError: ``messages`` holds something that is not a Message.
    """
    try:
        import pandas as pd
    except ImportError as e:
        raise MissingDependencyError(
            "messages_to_pandas needs pandas: pip install 'liftbridge[pandas]'"
        ) from e
    encoding = text_encoding(decode)
    items = _checked(messages)
    frame = pd.DataFrame(
        {
            "stream": pd.Series([m.stream for m in items], dtype=object),
            "partition": pd.Series([m.partition for m in items], dtype="int32"),
            "offset": pd.Series([m.offset for m in items], dtype="int64"),
            "timestamp": pd.to_datetime(
                pd.Series([m.timestamp_ns for m in items], dtype="int64"), unit="ns", utc=True
            ),
            "key": pd.Series([_text(m.key, encoding) for m in items], dtype=object),
            "value": pd.Series([_text(m.value, encoding) for m in items], dtype=object),
            "headers": pd.Series(
                [{k: _text(v, encoding) for k, v in m.headers.items()} for m in items],
                dtype=object,
            ),
            "subject": pd.Series([m.subject for m in items], dtype=object),
            "reply_subject": pd.Series([m.reply_subject for m in items], dtype=object),
        },
        columns=list(COLUMNS),
    )
    return frame
