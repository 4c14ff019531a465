"""What Message and Ack share: a protobuf-backed value object that behaves like
a frozen dataclass, with a repr bounded whatever it holds."""

from __future__ import annotations

import html
from dataclasses import FrozenInstanceError
from typing import Self

REPR_BYTES = 64
"""Bytes of a value, key or header a repr shows before it says how many more there are."""


def _bounded(value: object) -> str:
    """``repr(value)``, with bytes longer than :data:`REPR_BYTES` cut (and headers'
    values likewise), so that a repr stays short whatever a message holds."""
    if isinstance(value, bytes) and len(value) > REPR_BYTES:
        return f"{value[:REPR_BYTES]!r}+<{len(value) - REPR_BYTES} more bytes>"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {_bounded(v)}" for k, v in value.items()) + "}"
    return repr(value)


def _cut(text: str, limit: int = 400) -> str:
    """A cell of the HTML table, at most ``limit`` characters."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} characters)"


class WireValue:
    """What Message and Ack share: a protobuf-backed value that behaves like a
    frozen dataclass. Subclasses list their fields in ``_fields``, in
    constructor order; repr and pickling follow from it."""

    __slots__ = ()

    def _fields(self) -> dict[str, object]:
        raise NotImplementedError

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={_bounded(value)}" for name, value in self._fields().items())
        return f"{type(self).__name__}({fields})"

    def _repr_html_(self) -> str:
        """The fields as an HTML table for notebooks, escaped and bounded like the repr."""
        rows = "".join(
            f"<tr><th>{html.escape(name)}</th><td>{html.escape(_cut(_bounded(value)))}</td></tr>"
            for name, value in self._fields().items()
        )
        return f"<div><strong>{type(self).__name__}</strong><table>{rows}</table></div>"

    def __reduce__(self) -> tuple[type[Self], tuple[object, ...]]:
        return type(self), tuple(self._fields().values())

    def __setattr__(self, name: str, value: object) -> None:
        raise FrozenInstanceError(
            f"cannot assign to field {name!r}: {type(self).__name__} objects are immutable"
        )

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(
            f"cannot delete field {name!r}: {type(self).__name__} objects are immutable"
        )
