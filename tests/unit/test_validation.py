"""Bad input fails before any RPC with a typed error naming the argument."""

from __future__ import annotations

from typing import Any

import pytest

import liftbridge
from liftbridge import _validate as check


@pytest.mark.parametrize("subject", ["", "a..b", ".a", "a.", "a b", "a.*", "a.>", "a*"])
def test_bad_publish_subjects(subject: str) -> None:
    with pytest.raises(liftbridge.InvalidArgumentError, match="subject"):
        check.subject(subject)


@pytest.mark.parametrize("subject", ["a.*", "a.>", "*.b", ">"])
def test_stream_subjects_may_use_wildcards(subject: str) -> None:
    assert check.subject(subject, wildcards=True) == subject


@pytest.mark.parametrize("subject", ["a.>.b", "a.b*"])
def test_misplaced_wildcards(subject: str) -> None:
    with pytest.raises(liftbridge.InvalidArgumentError, match="whole"):
        check.subject(subject, wildcards=True)


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (-1, liftbridge.InvalidArgumentError),
        (True, liftbridge.ArgumentTypeError),
        ("0", liftbridge.ArgumentTypeError),
        (2**31, liftbridge.InvalidArgumentError),
    ],
)
def test_bad_partitions(value: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match="partition"):
        check.partition(value)


def test_text_values_get_a_hint() -> None:
    with pytest.raises(liftbridge.ArgumentTypeError, match=r"encode\(\)"):
        check.data("text")


def test_bytes_like_values_are_accepted() -> None:
    assert check.data(bytearray(b"ab")) == b"ab"
    assert check.data(memoryview(b"ab")) == b"ab"


@pytest.mark.parametrize("name", ["a b", " a", "a\t", "a\nb", "a\u00a0b", "a\u2028", "a\x1c"])
def test_stream_names_with_any_whitespace_are_refused(name: str) -> None:
    with pytest.raises(liftbridge.InvalidArgumentError, match="must not contain whitespace"):
        check.stream_name(name)


@pytest.mark.parametrize("name", ["orders", "a.b-c_d", "ñandú", "\u200b"])
def test_stream_names_without_whitespace_pass(name: str) -> None:
    assert check.stream_name(name) == name


def test_reserved_names() -> None:
    with pytest.raises(liftbridge.InvalidArgumentError, match="reserved"):
        check.stream_name("__cursors", allow_reserved=False)


def test_headers_must_be_str_to_bytes() -> None:
    with pytest.raises(liftbridge.ArgumentTypeError, match="keys"):
        check.headers({1: b"x"})
    with pytest.raises(liftbridge.ArgumentTypeError, match="headers\\['a'\\]"):
        check.headers({"a": "x"})


def test_retry_policy_validates() -> None:
    with pytest.raises(liftbridge.InvalidArgumentError, match="max_attempts"):
        liftbridge.RetryPolicy(max_attempts=0)
    with pytest.raises(liftbridge.InvalidArgumentError, match="multiplier"):
        liftbridge.RetryPolicy(multiplier=0.5)


def test_retry_backoff_grows_and_is_capped() -> None:
    policy = liftbridge.RetryPolicy(initial_backoff=0.1, multiplier=2, max_backoff=0.3, jitter=0)
    assert [policy.backoff(n) for n in (1, 2, 3, 4)] == [0.1, 0.2, 0.3, 0.3]


def test_client_rejects_bad_addresses() -> None:
    with pytest.raises(liftbridge.InvalidArgumentError, match="host:port"):
        liftbridge.Client("localhost")
    with pytest.raises(liftbridge.InvalidArgumentError, match="addresses"):
        liftbridge.Client([])
