"""The ``liftbridge-cli`` command line, driven through subprocess against the session server."""

from __future__ import annotations

import base64
import json
import os
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pytest

import liftbridge
from liftbridge.testing._process import free_port

REPO = Path(__file__).resolve().parents[2]
"""This checkout: a child started elsewhere imports the SDK from here."""


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


# Thirteen CLI processes, each starting Python and importing the SDK: on a loaded
# two-core machine that took over the suite's 120 s default.
@pytest.mark.timeout(300)
def test_create_publish_read_streams_delete(cli: Cli, unique_name: str) -> None:
    assert "2 partition(s)" in cli("create", unique_name, "--partitions", "2").out
    published = cli("publish", unique_name, "one", "two", "-p", "1", "--print-offsets")
    assert published.out.splitlines() == [f"{unique_name}/1 offset 0", f"{unique_name}/1 offset 1"]
    assert "2 of 2 message(s) stored" in published.err

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
    assert gone.err.startswith("liftbridge-cli: NoSuchStreamError: ")
    assert "Traceback" not in gone.err


def test_publish_stdin_lines_with_keys_and_headers(cli: Cli, unique_name: str) -> None:
    cli("create", unique_name, "-p", "3")
    lines = "".join(f"customer-{n % 3}:order-{n}\n" for n in range(30))
    run = cli("publish", unique_name, "-K", ":", "-H", "source=cli", "-H", "v=1", stdin=lines)
    assert "30 of 30 message(s) stored" in run.err
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
    unknown = cli("groups", "nobody", "--stream", stream, expect=1)
    assert "consumer group 'nobody' has committed no offset" in unknown.err
    assert "Traceback" not in unknown.err and unknown.out == ""
    assert "consumer group 'nobody'" in cli("groups", "nobody", expect=1).err
    everywhere = _jsonl(cli("groups", "billing", "--json").out)
    assert [(r["stream"], r["committed"]) for r in everywhere] == [(stream, 1)]
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
    assert "must be >= 1" in cli("create", stream, "-p", "0", expect=2).err
    unreachable = subprocess.run(
        [sys.executable, "-m", "liftbridge", "streams", "-a", "127.0.0.1:1,127.0.0.1:2"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert unreachable.returncode == 3, unreachable.stderr
    assert unreachable.stderr.startswith(
        "liftbridge-cli: could not reach a Liftbridge server at 127.0.0.1:1, 127.0.0.1:2"
    )


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
        "dev-server",
    ):
        assert name in text


# ------------------------------------------------------ data kept intact --


def _binary_values(count: int) -> list[bytes]:
    """Values holding every byte value, CRLF, bare CR and LF, leading dashes, empties."""
    special = [b"", b"-", b"--", b"-x", b"--help", b"\r\n", b"a\r\n", b"\r", b"\n", b"\x00"]
    every_byte = bytes(range(256))
    values = [*special, every_byte, every_byte[::-1]]
    n = 0
    while len(values) < count:
        values.append(b"-" * (n % 3) + bytes((n * 7 + i) % 256 for i in range(n % 40)) + b"\r\n")
        n += 1
    return values


def test_round_trips_10000_binary_values_between_streams_exactly(
    cli: Cli, client: liftbridge.Client, unique_name: str
) -> None:
    source, copy = f"{unique_name}-a", f"{unique_name}-b"
    cli("create", source)
    cli("create", copy)
    values = _binary_values(10_000)
    lines = "".join(base64.b64encode(v).decode() + "\n" for v in values)
    stored = cli("publish", source, "--input", "base64", stdin=lines)
    assert "10000 of 10000 message(s) stored" in stored.err
    # read | publish, as a shell pipeline would, through base64 lines.
    exported = cli("read", source, "-f", "base64").out
    cli("publish", copy, "-i", "base64", stdin=exported)
    with client.subscribe(copy, start=0, stop=liftbridge.StopPosition.LATEST) as sub:
        assert [m.value for m in sub] == values
    # JSON lines carry keys and values of any bytes too.
    as_json = cli("read", source, "-f", "json", "-c", "300").out
    cli("publish", copy, "-i", "json", stdin=as_json)
    with client.subscribe(copy, start=10_000, stop=liftbridge.StopPosition.LATEST) as sub:
        assert [m.value for m in sub] == values[:300]


def _run_bytes(cli: Cli, *args: str, stdin: bytes) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        cli.argv(*args), input=stdin, capture_output=True, timeout=60, check=False
    )


def test_raw_lines_store_any_bytes_strip_crlf_and_take_dashes(
    cli: Cli, client: liftbridge.Client, stream: str
) -> None:
    done = _run_bytes(cli, "publish", stream, stdin=b"one\r\n\xff\xfe bad utf-8\n-dash\nlast")
    assert done.returncode == 0, done.stderr
    cli("publish", stream, "--", "-leading", "--dashes")
    with client.subscribe(stream, start=0, stop=liftbridge.StopPosition.LATEST) as sub:
        assert [m.value for m in sub] == [
            b"one",
            b"\xff\xfe bad utf-8",
            b"-dash",
            b"last",
            b"-leading",
            b"--dashes",
        ]
    raw = _run_bytes(cli, "read", stream, "-f", "value", "-c", "2", stdin=b"")
    assert raw.stdout == b"one\n\xff\xfe bad utf-8\n"


def test_publish_stops_at_the_first_failure_unless_keep_going(cli: Cli, unique_name: str) -> None:
    lines = "".join(f"{n}\n" for n in range(100_000))
    stopped = cli("publish", unique_name, stdin=lines, expect=1)
    assert "0 of 1 message(s) stored" in stopped.err and "1 failed" in stopped.err
    assert f"NoSuchStreamError: no such stream: {unique_name!r}" in stopped.err
    going = cli("publish", unique_name, "a", "b", "c", "--keep-going", expect=1)
    assert "0 of 3 message(s) stored" in going.err and "3 failed" in going.err


def test_print_offsets_names_each_message_s_partition(cli: Cli, unique_name: str) -> None:
    cli("create", unique_name, "-p", "4")
    lines = "".join(f"customer-{n}:order-{n}\n" for n in range(40))
    run = cli("publish", unique_name, "-K", ":", "--print-offsets", "--json", stdin=lines)
    printed = _jsonl(run.out)
    stored = _jsonl(cli("read", unique_name, "--json").out)
    assert len(printed) == len(stored) == 40
    where = {(m["partition"], m["offset"]) for m in stored}
    assert {(p["partition"], p["offset"]) for p in printed} == where
    assert len({p["partition"] for p in printed}) > 1


def test_ctrl_c_during_publish_says_how_many_were_stored(
    cli: Cli, client: liftbridge.Client, stream: str
) -> None:
    # A shell's background job starts with SIGINT ignored, and Python keeps an
    # ignored SIGINT ignored: a suite run in the background would then test
    # nothing. The CLI runs here with Python's own SIGINT handler, as in a terminal.
    python, *rest = cli.argv("publish", stream)
    assert rest[:2] == ["-m", "liftbridge"]
    with_handler = (
        "import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
        "sys.argv[0] = 'liftbridge'; runpy.run_module('liftbridge', run_name='__main__')"
    )
    publisher = subprocess.Popen(
        [python, "-c", with_handler, *rest[2:]],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert publisher.stdin is not None
        publisher.stdin.write(b"".join(b"%d\n" % n for n in range(25)))
        publisher.stdin.flush()
        deadline = time.monotonic() + 30
        while client.fetch_partition_metadata(stream, 0).newest_offset < 24:
            assert time.monotonic() < deadline, "the 25 lines were not stored within 30 s"
            time.sleep(0.1)
        publisher.send_signal(signal.SIGINT)
        _out, err = publisher.communicate(timeout=30)
    finally:
        if publisher.poll() is None:
            publisher.kill()
            publisher.communicate(timeout=10)
    assert publisher.returncode == 130, err.decode()
    assert "interrupted: 25 of 25 message(s) stored" in err.decode()


def test_json_output_on_every_command(cli: Cli, unique_name: str) -> None:
    created = _jsonl(cli("create", unique_name, "--json").out)
    assert created == [{"stream": unique_name, "created": True}]
    again = _jsonl(cli("create", unique_name, "--if-missing", "--json").out)
    assert again == [{"stream": unique_name, "created": False}]
    assert "StreamExistsError" in cli("create", unique_name, expect=1).err
    cli("publish", unique_name, "v")
    assert _jsonl(cli("--json", "cursor", "set", "c", unique_name, "0").out)[0]["offset"] == 0
    assert _jsonl(cli("cursor", "get", "c", unique_name, "--json").out)[0]["offset"] == 0
    assert _jsonl(cli("tail", unique_name, "-n", "1", "-c", "1", "--json").out)[0]["value"] == "v"
    assert _jsonl(cli("pause", unique_name, "--json").out)[0]["paused"] is True
    assert _jsonl(cli("readonly", unique_name, "--off", "--json").out)[0]["readonly"] is False
    assert _jsonl(cli("delete", unique_name, "--json").out) == [
        {"stream": unique_name, "deleted": True}
    ]


# ------------------------------------------------------------ dev server --


def test_dev_server_runs_a_server_with_cursors_and_activity(tmp_path: Path) -> None:
    port, nats_port = free_port(), free_port()
    dev = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "liftbridge",
            "dev-server",
            "--json",
            "--port",
            str(port),
            "--nats-port",
            str(nats_port),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert dev.stdout is not None
        (line,) = _read_lines(dev.stdout, 1, 60)
        started = json.loads(line)
        assert started["address"] == f"127.0.0.1:{port}"
        assert started["nats_url"] == f"nats://127.0.0.1:{nats_port}"
        with liftbridge.Client(started["address"]) as client:
            client.create_stream("dev", partitions=2)
            client.set_cursor("reader", "dev", 1, 5)  # the cursors stream is there
            assert client.fetch_cursor("reader", "dev", 1) == 5
            internal = client.fetch_metadata().stream_names(internal=True)
            assert {"__cursors", "__activity"} <= set(internal)
        dev.send_signal(signal.SIGTERM)
        _, err = dev.communicate(timeout=30)
    finally:
        if dev.poll() is None:
            dev.kill()
            dev.communicate(timeout=10)
    assert dev.returncode == 0, err.decode()
    assert psutil_gone(started["pid"])


def psutil_gone(pid: int) -> bool:
    """True when no process has ``pid`` any more (the server was stopped with it)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


def test_dev_server_without_a_binary_says_where_it_looked(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": str(tmp_path), "PYTHONPATH": str(REPO)}
    env.pop("LIFTBRIDGE_SERVER_BIN", None)
    done = subprocess.run(
        [sys.executable, "-m", "liftbridge", "dev-server", "--port", str(free_port())],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
        env=env,
    )
    assert done.returncode == 1
    assert "ServerBinaryNotFoundError" in done.stderr
    assert ".cache/servers/bin/liftbridge" in done.stderr and "Traceback" not in done.stderr
