"""The README's Spark option table against the options the connector accepts:
every option in one is in the other, where the table says it applies, and
each row names its Kafka connector equivalent (or says there is none)."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("pyspark", reason="needs the spark extra: pip install -e '.[spark]'")
pytest.importorskip("pyarrow", reason="needs the spark extra: pip install -e '.[spark]'")

from liftbridge.spark import _client_options, _options
from tests.readme_blocks import README

pytestmark = pytest.mark.spark

_HEADER = "| option | applies to | meaning | Kafka connector's equivalent |"
_NAME = re.compile(r"`([^`]+)`")


def _table() -> list[list[str]]:
    """The option table's rows, as cells."""
    lines = README.read_text().splitlines()
    assert _HEADER in lines, "the README has no Spark option table"
    rows = []
    for line in lines[lines.index(_HEADER) + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def _documented() -> tuple[set[str], set[str], set[str]]:
    """Lower-case names the table gives for reads and writes, and the client
    settings its ``liftbridge.<setting>`` row lists."""
    reads: set[str] = set()
    writes: set[str] = set()
    settings: set[str] = set()
    for option, applies, meaning, kafka in _table():
        assert kafka, f"the row of {option} names no Kafka equivalent"
        names = {n.lower() for n in _NAME.findall(option)}
        assert names, f"a table row names no option: {option!r}"
        if names == {"liftbridge.<setting>"}:
            # `connectTimeoutMs`, ... up to "(as", then the second names.
            settings = {n.lower() for n in _NAME.findall(meaning.split("(as")[0])}
            continue
        assert applies in ("all", "read", "batch read", "streaming read", "write"), applies
        if applies != "write":
            reads |= names
        if applies in ("all", "write"):
            writes |= names
    return reads, writes, settings


def test_the_readme_option_table_lists_every_option_where_it_applies() -> None:
    reads, writes, settings = _documented()
    assert reads == set(_options._READ_OPTIONS)
    assert writes == set(_options._WRITE_OPTIONS)
    accepted = {
        n.lower() for n in (*_client_options._CLIENT_TIMES, *_client_options._CLIENT_COUNTS)
    }
    assert settings == accepted
