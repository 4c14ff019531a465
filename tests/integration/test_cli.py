"""The ``liftbridge`` command line, driven through subprocess against the session server."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import IO

import pytest

import liftbridge


@dataclass(frozen=True)
class Run:
    code: int
    out: str
    err: str


class Cli:
    """Runs ``python -m liftbridge --address <session server> ...``."""

    def __init__(self, address: str) -> None:
        self.address = address

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "liftbridge", "--address", self.address, *args]

    def __call__(self, *args: str, stdin: str | None = None, expect: int = 0) -> Run:
        done = subprocess.run(
            self.argv(*args), input=stdin, capture_output=True, text=True, timeout=60, check=False
        )
        run = Run(done.returncode, done.stdout, done.stderr)
        assert run.code == expect, f"{args} exited {run.code}:\n{run.out}\n{run.err}"
        return run


@pytest.fixture
def cli(server_address: str) -> Cli:
    return Cli(server_address)


def _jsonl(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines()]


def test_create_publish_read_streams_delete(cli: Cli, unique_name: str) -> None:
    assert "2 partition(s)" in cli("create", unique_name, "--partitions", "2").out
    published = cli("publish", unique_name, "one", "two", "-p", "1", "--print-offsets")
    assert published.out.splitlines() == [f"{unique_name}/1 offset 0", f"{unique_name}/1 offset 1"]
    assert "published 2 message(s)" in published.err

    rows = [r for r in _jsonl(cli("streams", "--format", "json").out) if r["stream"] == unique_name]
    assert [(r["partition"], r["high_watermark"], r["newest_offset"]) for r in rows] == [
        (0, -1, -1),
        (1, 1, 1),
    ]
    assert all(r["leader"] == "a" and r["isr"] == ["a"] for r in rows)
    table = cli("streams").out
    assert unique_name in table and "__cursors" not in table
    assert "hw" in table.splitlines()[1]
    assert "__cursors" in cli("streams", "--internal").out

    assert cli("read", unique_name, "--format", "value").out == "one\ntwo\n"
    messages = _jsonl(cli("read", unique_name, "-f", "json", "-p", "1", "--start", "1").out)
    assert [(m["partition"], m["offset"], m["value"]) for m in messages] == [(1, 1, "two")]
    assert cli("read", unique_name, "-f", "hex", "-c", "1").out == "1/0  6f 6e 65\n"
    text = cli("read", unique_name, "--start", "1h").out  # a duration ago
    assert text.count(f"{time.gmtime().tm_year}-") == 2 and text.endswith("  two\n")

    assert "deleted" in cli("delete", unique_name).out
    assert unique_name not in cli("streams").out
    gone = cli("delete", unique_name, expect=1)
    assert gone.err.startswith("liftbridge: NoSuchStreamError: ")
    assert "Traceback" not in gone.err


def test_publish_stdin_lines_with_keys_and_headers(cli: Cli, unique_name: str) -> None:
    cli("create", unique_name, "-p", "3")
    lines = "".join(f"customer-{n % 3}:order-{n}\n" for n in range(30))
    run = cli("publish", unique_name, "-K", ":", "-H", "source=cli", "-H", "v=1", stdin=lines)
    assert "published 30 message(s)" in run.err
    messages = _jsonl(cli("read", unique_name, "-f", "json").out)
    assert len(messages) == 30
    by_key: dict[str, set[object]] = {}
    for m in messages:
        by_key.setdefault(str(m["key"]), set()).add(m["partition"])
        headers = m["headers"]
        assert isinstance(headers, dict) and headers["source"] == "cli" and headers["v"] == "1"
    assert all(len(partitions) == 1 for partitions in by_key.values())  # a key, a partition
    assert sorted(by_key) == ["customer-0", "customer-1", "customer-2"]

    bad = cli("publish", unique_name, "-K", ":", stdin="no separator\n", expect=2)
    assert "no key separator" in bad.err


def test_binary_values_in_json_are_base64(cli: Cli, client: liftbridge.Client, stream: str) -> None:
    client.publish(stream, b"\xff\x00")
    (message,) = _jsonl(cli("read", stream, "-f", "json").out)
    assert message["value"] == {"base64": "/wA="} and message["key"] is None


def test_pause_and_readonly(cli: Cli, unique_name: str) -> None:
    cli("create", unique_name, "-p", "2")
    assert "partition(s) 1 of" in cli("pause", unique_name, "-p", "1").out
    rows = _jsonl(cli("streams", "--format", "json").out)
    assert [r["paused"] for r in rows if r["stream"] == unique_name] == [False, True]

    cli("readonly", unique_name)
    refused = cli("publish", unique_name, "x", "-p", "0", expect=1)
    assert "ReadonlyPartitionError" in refused.err
    cli("readonly", unique_name, "--off")
    cli("publish", unique_name, "x", "-p", "0")
    cli("delete", unique_name)


def _read_lines(pipe: IO[bytes], count: int, timeout: float) -> list[str]:
    """``count`` lines from a child's pipe, failing the test after ``timeout`` seconds.

    Reads the raw file descriptor: a buffered reader could hold a line that
    ``select`` then never reports.
    """
    deadline = time.monotonic() + timeout
    data = b""
    while data.count(b"\n") < count:
        left = deadline - time.monotonic()
        ready, _, _ = select.select([pipe], [], [], max(0.0, left))
        assert ready, f"{count} lines not within {timeout}s, got {data!r}"
        chunk = os.read(pipe.fileno(), 4096)
        assert chunk, f"the pipe closed after {data!r}"
        data += chunk
    return data.decode().splitlines()


def test_tail_shows_the_last_messages_then_follows(
    cli: Cli, client: liftbridge.Client, stream: str
) -> None:
    for n in range(3):
        client.publish(stream, f"m{n}".encode())
    tail = subprocess.Popen(
        cli.argv("tail", stream, "-n", "2", "--count", "3", "-f", "value"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert tail.stdout is not None
        assert _read_lines(tail.stdout, 2, 30) == ["m1", "m2"]
        client.publish(stream, b"m3")  # tail follows: a new message, and --count 3 is reached
        out, err = tail.communicate(timeout=30)
    finally:
        if tail.poll() is None:
            tail.kill()
            tail.communicate(timeout=10)
    assert tail.returncode == 0, err.decode()
    assert out == b"m3\n"


def test_cursors_and_group_lag(cli: Cli, client: liftbridge.Client, stream: str) -> None:
    assert cli("cursor", "get", "reader", stream).out == "none\n"
    cli("cursor", "set", "reader", stream, "5")
    assert cli("cursor", "get", "reader", stream, "-p", "0").out == "5\n"

    for _ in range(4):
        client.publish(stream, b"x")
    client.set_cursor("__group:billing", stream, 0, 1)  # what a group member commits
    (row,) = _jsonl(cli("groups", "billing", "--stream", stream, "--format", "json").out)
    assert (row["committed"], row["high_watermark"], row["lag"]) == (1, 3, 2)
    (fresh,) = _jsonl(cli("groups", "nobody", "--stream", stream, "--format", "json").out)
    assert (fresh["committed"], fresh["lag"]) == (None, 4)
    text = cli("groups", "billing", "--stream", stream).out
    assert "lag" in text and "members, assignments and the coordinator are not shown" in text


def test_progress_bar_only_when_asked_or_on_a_terminal(cli: Cli, stream: str) -> None:
    lines = "".join(f"{n}\n" for n in range(50))
    plain = cli("publish", stream, stdin=lines)  # stderr is a pipe: no bar
    assert "msg/s" not in plain.err and "50msg" not in plain.err
    forced = cli("--progress", "always", "publish", stream, stdin=lines)
    assert "50msg" in forced.err.replace(" ", "")
    read = cli("--progress", "always", "read", stream, "-f", "value")
    assert read.out.count("\n") == 100 and "100/100" in read.err

    # Without tqdm the output is plain, and nothing fails.
    code = (
        "import sys; sys.modules['tqdm'] = None; from liftbridge.cli._main import main; "
        f"sys.exit(main(['--address', {cli.address!r}, '--progress', 'always', "
        f"'read', {stream!r}, '-f', 'value', '-c', '3']))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "0\n1\n2\n" and done.stderr == ""


def test_bad_usage_and_unreachable_servers(cli: Cli, stream: str) -> None:
    assert "--start 'soon'" in cli("read", stream, "--start", "soon", expect=2).err
    assert "NAME=VALUE" in cli("publish", stream, "x", "-H", "nope", expect=2).err
    assert "required" in cli(expect=2).err
    unreachable = subprocess.run(
        [sys.executable, "-m", "liftbridge", "-a", "127.0.0.1:1", "--timeout", "1", "streams"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert unreachable.returncode == 1
    assert unreachable.stderr.startswith("liftbridge: UnavailableError: ")


def test_console_script_help_lists_every_command(cli: Cli) -> None:
    text = cli("--help").out
    for name in (
        "streams",
        "create",
        "delete",
        "pause",
        "readonly",
        "publish",
        "tail",
        "read",
        "cursor",
        "groups",
    ):
        assert name in text
