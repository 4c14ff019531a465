"""Bad input fails before any RPC with a typed error naming the argument."""

from __future__ import annotations

from datetime import UTC
from typing import Any

import pytest

import liftbridge
from liftbridge._core import _validate as check


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


# ------------------------------------------- what the server cannot store --
# Each of these names crashed a v1.9.0 server for good (see _validate's docstring).

CRASHING_NAMES = ["..", ".", "a.", ".a", "a..b", "../x", "a\x00b", "x" * 300]


@pytest.mark.parametrize("name", CRASHING_NAMES)
def test_names_that_crash_the_server_are_refused(name: str) -> None:
    with pytest.raises(liftbridge.InvalidArgumentError, match=r"^name "):
        check.stream_name(name, arg="name")


@pytest.mark.parametrize(
    ("name", "rule"),
    [
        ("", "must not be empty"),
        ("a.", "empty dot-separated token"),
        (".a", "empty dot-separated token"),
        ("a..b", "empty dot-separated token"),
        ("..", "empty dot-separated token"),
        ("a/b", "must not contain '/'"),
        ("/", "must not contain '/'"),
        ("a\x00b", "control characters"),
        ("a\x7fb", "control characters"),
        ("a\x85b", "whitespace"),  # NEL is whitespace to str.isspace()
        ("a\x9fb", "control characters"),
        ("a*", "wildcard"),
        ("a.>", "wildcard"),
        (">.a", "wildcard"),
        ("a\ud800", "valid UTF-8"),
        ("x" * 256, "at most 255 bytes"),
        ("é" * 128, "at most 255 bytes"),  # 256 bytes in UTF-8
    ],
)
def test_stream_name_rules(name: str, rule: str) -> None:
    with pytest.raises(liftbridge.InvalidArgumentError, match=rule):
        check.stream_name(name)


@pytest.mark.parametrize("name", ["x" * 255, "é" * 127, "a.b.c", "_-~!@#$%^&()+=", "Ω"])
def test_stream_names_at_the_limits_pass(name: str) -> None:
    assert check.stream_name(name) == name


@pytest.mark.parametrize(
    ("subject", "rule"),
    [
        ("a\x00b", "control characters"),
        ("a\x0cb", "whitespace"),
        ("a\udfff", "valid UTF-8"),
        ("a." * 512 + "b", "at most 1024 bytes"),
    ],
)
def test_subject_rules(subject: str, rule: str) -> None:
    with pytest.raises(liftbridge.InvalidArgumentError, match=rule):
        check.subject(subject, wildcards=True)


def test_a_subject_of_1024_bytes_passes() -> None:
    assert check.subject("a." * 511 + "bc") == "a." * 511 + "bc"


def test_a_stream_subject_ending_in_full_wildcard_takes_one_partition_only() -> None:
    assert check.stream_subject("a.>", partitions=1) == "a.>"
    assert check.stream_subject("a.*", partitions=3) == "a.*"
    with pytest.raises(liftbridge.InvalidArgumentError, match=r"partition suffix"):
        check.stream_subject("a.>", partitions=2)


@pytest.mark.parametrize(
    ("value", "rule"),
    [
        ("a,b", "must not contain ','"),
        ("", "must not be empty"),
        ("a b", "whitespace"),
        ("a\x01", "control"),
        ("\ud800", "UTF-8"),
        ("x" * 256, "255 bytes"),
    ],
)
def test_identifier_rules(value: str, rule: str) -> None:
    with pytest.raises(liftbridge.InvalidArgumentError, match=rf"^cursor_id .*{rule}|{rule}"):
        check.identifier(value, arg="cursor_id")


def test_identifiers_may_hold_dots_and_colons() -> None:
    assert check.identifier("__group:orders.v2", arg="cursor_id") == "__group:orders.v2"


def test_queue_groups_may_hold_commas_but_not_whitespace() -> None:
    assert check.queue_group("a,b") == "a,b"
    with pytest.raises(liftbridge.InvalidArgumentError, match=r"^group must not contain"):
        check.queue_group("a b")


# ----------------------------------------------------------- numbers --


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_seconds_are_refused(value: float) -> None:
    with pytest.raises(liftbridge.InvalidArgumentError, match=r"^timeout must be a finite"):
        check.seconds(value, arg="timeout")


def test_seconds_are_bounded() -> None:
    assert check.seconds(check.MAX_SECONDS, arg="timeout") == check.MAX_SECONDS
    with pytest.raises(liftbridge.InvalidArgumentError, match=r"at most"):
        check.seconds(check.MAX_SECONDS + 1, arg="timeout")
    with pytest.raises(liftbridge.ArgumentTypeError, match=r"^timeout must be a number"):
        check.optional_seconds("1")
    assert check.optional_seconds(None) is None


@pytest.mark.parametrize(("kind", "largest"), [(check.int32, 2**31 - 1), (check.int64, 2**63 - 1)])
def test_ints_are_within_the_wire_type(kind: Any, largest: int) -> None:
    assert kind(largest, arg="n") == largest
    with pytest.raises(liftbridge.InvalidArgumentError, match=r"^n must be <= .*signed"):
        kind(largest + 1, arg="n")
    with pytest.raises(liftbridge.InvalidArgumentError, match=r"^n must be >= 0"):
        kind(-1, arg="n")
    with pytest.raises(liftbridge.ArgumentTypeError, match=r"^n must be an int, got float"):
        kind(1.0, arg="n")
    with pytest.raises(liftbridge.ArgumentTypeError, match=r"^n must be an int, got bool"):
        kind(True, arg="n")


def test_timestamps_must_fit_in_64_bits_of_nanoseconds() -> None:
    from datetime import datetime, timedelta

    when = datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=UTC)
    assert check.timestamp_ns(when, arg="start") == 1_704_164_645_000_006_000
    with pytest.raises(liftbridge.InvalidArgumentError, match=r"^start must be between"):
        check.timestamp_ns(datetime(9999, 1, 1, tzinfo=UTC), arg="start")
    with pytest.raises(liftbridge.InvalidArgumentError, match=r"timezone-aware"):
        check.timestamp_ns(datetime(2024, 1, 1), arg="start")
    with pytest.raises(liftbridge.InvalidArgumentError, match=r"^start must reach back"):
        check.time_before_now_ns(timedelta(days=999_999_999), arg="start")


# ------------------------------------------------------ text and types --


def test_header_names_must_be_valid_utf8() -> None:
    with pytest.raises(liftbridge.InvalidArgumentError, match=r"^headers key .*UTF-8"):
        check.headers({"\ud800": b"x"})


def test_correlation_ids_are_non_empty_text() -> None:
    assert check.optional_text(None, arg="correlation_id") is None
    with pytest.raises(liftbridge.ArgumentTypeError, match=r"^correlation_id must be a str"):
        check.optional_text(5, arg="correlation_id")
    with pytest.raises(liftbridge.InvalidArgumentError, match=r"^correlation_id must be a non"):
        check.optional_text("", arg="correlation_id")


@pytest.mark.parametrize(
    ("value", "rule"),
    [
        (liftbridge.PartitionByKey, r"the class PartitionByKey \(write PartitionByKey\(\)\)"),
        ("bykey", "must implement partition"),
        (object(), "must implement partition"),
    ],
)
def test_partitioners_must_be_instances(value: Any, rule: str) -> None:
    with pytest.raises(liftbridge.ArgumentTypeError, match=rule):
        check.partitioner(value)


def test_partitioner_instances_pass() -> None:
    by_key = liftbridge.PartitionByKey()
    assert check.partitioner(by_key) is by_key


@pytest.mark.parametrize(
    ("address", "rule"),
    [
        ("127.0.0.1:70000", "port must be from 1 to 65535"),
        ("127.0.0.1:0", "port must be from 1 to 65535"),
        ("127.0.0.1:\u0661\u0662", "host:port"),  # Arabic-Indic digits
        ("bad host:9292", "whitespace"),
    ],
)
def test_bad_addresses(address: str, rule: str) -> None:
    with pytest.raises(liftbridge.InvalidArgumentError, match=rule):
        liftbridge.Client(address)


def test_addresses_with_ipv6_hosts_pass() -> None:
    assert check.address("[::1]:9292") == "[::1]:9292"


def test_group_ids_leave_room_for_their_cursor_prefix() -> None:
    from liftbridge._groups._values import GROUP_CURSOR_PREFIX

    room = check.MAX_NAME_BYTES - len(GROUP_CURSOR_PREFIX)
    assert check.identifier("g" * room, arg="group_id", max_bytes=room) == "g" * room
    with pytest.raises(liftbridge.InvalidArgumentError, match=rf"^group_id must be at most {room}"):
        check.identifier("g" * (room + 1), arg="group_id", max_bytes=room)


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (float("nan"), liftbridge.InvalidArgumentError),
        (float("inf"), liftbridge.InvalidArgumentError),
        (10**400, liftbridge.InvalidArgumentError),
        (0.5, liftbridge.InvalidArgumentError),
        ("2", liftbridge.ArgumentTypeError),
        (True, liftbridge.ArgumentTypeError),
    ],
)
def test_bounded_numbers(value: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match=r"^RetryPolicy\.multiplier must be a number"):
        check.number(value, arg="RetryPolicy.multiplier", minimum=1, maximum=1e6)


def test_retry_policy_refuses_non_finite_backoffs_and_survives_a_huge_multiplier() -> None:
    with pytest.raises(liftbridge.InvalidArgumentError, match="initial_backoff"):
        liftbridge.RetryPolicy(initial_backoff=float("nan"))
    with pytest.raises(liftbridge.InvalidArgumentError, match="total_timeout"):
        liftbridge.RetryPolicy(total_timeout=float("inf"))
    policy = liftbridge.RetryPolicy(multiplier=1e6, max_backoff=1.0, jitter=0)
    assert policy.backoff(100) == 1.0  # 1e6 ** 99 overflows a float


def test_partition_counts_are_capped() -> None:
    assert check.partition_count(check.MAX_PARTITIONS) == check.MAX_PARTITIONS
    with pytest.raises(liftbridge.InvalidArgumentError, match=r"^partitions must be <= 10000"):
        check.partition_count(2**31 - 1)
    with pytest.raises(liftbridge.InvalidArgumentError, match=r"^partitions must be >= 1"):
        check.partition_count(0)


def test_message_size_counts_the_request_and_the_envelope() -> None:
    from liftbridge_api import api_pb2

    request = api_pb2.PublishRequest(stream="s", value=b"v" * 100)
    limit = request.ByteSize() + check.ENVELOPE_ALLOWANCE
    check.message_size(request, limit=limit)
    with pytest.raises(liftbridge.MessageTooLargeError, match=f"max_message_size of {limit - 1}"):
        check.message_size(request, limit=limit - 1)
    with pytest.raises(liftbridge.InvalidArgumentError, match=r"^max_message_size must be <="):
        check.message_size_limit(4 * 1024 * 1024 + 1)


def test_messages_must_be_an_iterable_of_messages() -> None:
    from liftbridge._core._messages import checked_messages

    message = liftbridge.Message(offset=0, value=b"v")
    assert checked_messages(iter([message])) == [message]
    for bad in (None, "abc", {"a": 1}, 5):
        with pytest.raises(liftbridge.ArgumentTypeError, match=r"^messages must be an iterable"):
            checked_messages(bad)
    with pytest.raises(liftbridge.ArgumentTypeError, match=r"^messages must hold Message"):
        checked_messages([message, b"v"])
