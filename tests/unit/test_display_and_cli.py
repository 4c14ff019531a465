"""Tables, frozen mappings and the command line's parsing and formats, without a server."""

from __future__ import annotations

import copy
import json
import pickle
from datetime import UTC, datetime, timedelta

import pytest

import liftbridge
from liftbridge._core._metadata import FrozenMap, Metadata, PartitionInfo, StreamInfo
from liftbridge.cli._main import addresses, build_parser, main
from liftbridge.cli._text import (
    CliError,
    format_message,
    parse_input,
    parse_start,
    parse_stop,
    strip_line,
)

_MESSAGE = liftbridge.Message(
    offset=7,
    value=b"caf\xc3\xa9",
    key=b"k\xff",
    timestamp_ns=1_700_000_000_123_456_789,
    stream="orders",
    partition=2,
    headers={"h": b"v"},
)


def test_start_and_stop_positions() -> None:
    assert parse_start("earliest") is liftbridge.StartPosition.EARLIEST
    assert parse_start("latest") is liftbridge.StartPosition.LATEST
    assert parse_start("new") is liftbridge.StartPosition.NEW_ONLY
    assert parse_start("42") == 42
    assert parse_start("90s") == timedelta(seconds=90)
    assert parse_start("1.5h") == timedelta(minutes=90)
    assert parse_start("2026-01-31T12:00:00Z") == datetime(2026, 1, 31, 12, tzinfo=UTC)
    assert parse_start("2026-01-31T12:00:00") == datetime(2026, 1, 31, 12, tzinfo=UTC)
    assert parse_stop("latest") is liftbridge.StopPosition.LATEST
    assert parse_stop("never") is None
    assert parse_stop("9") == 9
    for bad in ("-1", "soon", "5 minutes"):
        with pytest.raises(CliError, match="--start"):
            parse_start(bad)
    with pytest.raises(CliError, match="--stop"):
        parse_stop("5m")  # a stop is a point, not a duration


def test_message_formats() -> None:
    assert format_message(_MESSAGE, "value") == "café".encode()
    assert format_message(_MESSAGE, "base64") == b"Y2Fmw6k="
    assert format_message(_MESSAGE, "hex") == b"2/7  63 61 66 c3 a9"
    text = format_message(_MESSAGE, "text").decode()
    assert text.startswith("2/7  2023-11-14 22:13:20.123456+00:00  key=k\\xff  café")
    record = json.loads(format_message(_MESSAGE, "json"))
    assert record["value"] == "café" and record["key"] == {"base64": "a/8="}
    assert record["headers"] == {"h": "v"} and record["offset"] == 7
    assert record["timestamp"] == "2023-11-14T22:13:20.123456+00:00"


def test_parser_defaults() -> None:
    args = build_parser().parse_args(["read", "orders"])
    assert (args.start, args.stop, args.format, args.partition) == (
        "earliest",
        "latest",
        "text",
        None,
    )
    args = build_parser().parse_args(["tail", "orders", "-p", "1", "-p", "2"])
    assert args.lines == 10 and args.partition == [1, 2]


def test_global_options_before_or_after_the_command() -> None:
    parser = build_parser()
    before = parser.parse_args(["-a", "h:1", "--json", "--timeout", "3", "streams"])
    after = parser.parse_args(["streams", "-a", "h:1", "--json", "--timeout", "3"])
    for args in (before, after):
        assert (args.address, args.json, args.timeout) == (["h:1"], True, 3.0)
    neither = parser.parse_args(["streams"])
    assert (neither.address, neither.json, neither.timeout) == (None, False, 10.0)
    nested = parser.parse_args(["cursor", "get", "c", "s", "--address", "h:2"])
    assert nested.address == ["h:2"]


def test_address_lists_from_flags_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    parser = build_parser()
    monkeypatch.setenv("LIFTBRIDGE_ADDRESS", "a:1, b:2,,c:3")
    assert addresses(parser.parse_args(["streams"])) == ["a:1", "b:2", "c:3"]
    given = parser.parse_args(["streams", "-a", "x:1,y:2", "-a", "z:3"])
    assert addresses(given) == ["x:1", "y:2", "z:3"]
    monkeypatch.delenv("LIFTBRIDGE_ADDRESS")
    assert addresses(parser.parse_args(["streams"])) == ["127.0.0.1:9292"]


def test_input_lines_are_bytes_exactly() -> None:
    assert strip_line(b"a\r\n") == b"a" and strip_line(b"a\n") == b"a" and strip_line(b"a") == b"a"
    assert strip_line(b"a\r\r\n") == b"a\r"  # only the line ending goes
    assert parse_input(b"\xff-x", "raw", 1) == (b"\xff-x", None, None)
    assert parse_input(b"//4=", "base64", 1) == (b"\xff\xfe", None, None)
    line = b'{"value": {"base64": "//4="}, "key": "k", "headers": {"h": "v"}}'
    assert parse_input(line, "json", 1) == (b"\xff\xfe", b"k", {"h": b"v"})
    with pytest.raises(CliError, match="line 3: not valid base64"):
        parse_input(b"%%%", "base64", 3)
    with pytest.raises(CliError, match="line 4: the JSON object has no 'value'"):
        parse_input(b'{"key": "k"}', "json", 4)
    with pytest.raises(CliError, match="line 5: not JSON"):
        parse_input(b"{", "json", 5)


def test_help_shows_one_exit_code_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    top = capsys.readouterr().out
    assert main(["publish", "--help"]) == 0
    sub = capsys.readouterr().out
    for text in (top, sub):
        assert "exit status:" in text and "3    no server could be reached" in text
    assert "liftbridge-cli" in top and "dev-server" in top
    assert main(["read"]) == 2  # a usage error
    assert "liftbridge-cli read: error" in capsys.readouterr().err


def test_table_text_and_html_escape() -> None:
    table = liftbridge.Table("t", ("a", "long column"), (("<b>", "x"),), note="n")
    assert str(table).splitlines() == ["t", "a    long column", "---  -----------", "<b>  x", "n"]
    assert "&lt;b&gt;" in table._repr_html_() and "<b>" not in table._repr_html_()
    assert "(none)" in str(liftbridge.Table("t", ("a",), ()))


def test_messages_table_limits_and_checks() -> None:
    table = liftbridge.messages_table([_MESSAGE] * 3, limit=1)
    assert len(table.rows) == 1 and table.note == "… and 2 more"
    assert table.rows[0][4] == "b'k\\xff'"
    big = liftbridge.Message(offset=0, value=b"x" * 100)
    assert "(100 bytes)" in liftbridge.messages_table([big]).rows[0][5]
    with pytest.raises(liftbridge.InvalidArgumentError, match="limit"):
        liftbridge.messages_table([], limit=0)


def test_frozen_values_pickle_copy_and_refuse_writes() -> None:
    partition = PartitionInfo("s", 0, "a", ("a",), ("a",))
    stream = StreamInfo("s", "s", {0: partition}, 1)
    metadata = Metadata((), {"s": stream}, {}, datetime(2026, 1, 1, tzinfo=UTC))
    assert isinstance(metadata.streams, FrozenMap)
    assert isinstance(stream.partitions, FrozenMap)
    for value in (metadata, stream):
        assert pickle.loads(pickle.dumps(value)) == value
        assert copy.deepcopy(value) == value
    with pytest.raises(TypeError):
        metadata.streams["t"] = stream  # type: ignore[index]
    assert metadata.streams == {"s": stream}
    assert Metadata((), {}, {}, None).updated is None
    assert repr(Metadata((), {}, {}, None)) == "<Metadata brokers=[] 0 streams [] updated=->"
