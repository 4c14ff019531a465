"""What a new user meets first: reprs that stay short, and addresses checked at once."""

from __future__ import annotations

import pytest

import liftbridge


def test_a_message_repr_is_bounded_whatever_it_holds() -> None:
    big = liftbridge.Message(
        offset=1,
        value=b"x" * 900_000,
        key=b"k" * 5000,
        headers={"h": b"y" * 10_000},
        stream="s",
        partition=0,
    )
    text = repr(big)
    assert len(text) < 600
    assert "+<899936 more bytes>" in text and "+<9936 more bytes>" in text
    small = liftbridge.Message(offset=1, value=b"v", stream="s", partition=0)
    assert "value=b'v'," in repr(small)  # short values are shown whole


@pytest.mark.parametrize(
    ("addresses", "error", "says"),
    [
        (b"127.0.0.1:9292", liftbridge.ArgumentTypeError, "got bytes b'127.0.0.1:9292'"),
        (bytearray(b"h:1"), liftbridge.ArgumentTypeError, "got bytearray"),
        ("http://127.0.0.1:9292", liftbridge.InvalidArgumentError, "'http://127.0.0.1:9292'"),
        (["h:1", "grpc://h:2"], liftbridge.InvalidArgumentError, "'grpc://h:2' has a scheme"),
    ],
)
def test_bad_addresses_fail_at_once_naming_what_was_given(
    addresses: object, error: type[Exception], says: str
) -> None:
    with pytest.raises(error, match=None) as raised:
        liftbridge.Client(addresses)  # type: ignore[arg-type]
    assert says in str(raised.value)
