"""``liftbridge-cli publish``: values from the arguments or lines of stdin, as
bytes exactly (raw lines, base64 or JSON), pipelined, stopping at the first
failure unless ``--keep-going``, and saying how many were stored when stopped."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import IO, BinaryIO

import liftbridge
from liftbridge.cli._text import CliError, parse_input, progress, strip_line

_FLUSH_TIMEOUT = 60.0
"""Seconds ``publish`` waits for its last acks."""

_INTERRUPT_FLUSH = 5.0
"""Seconds a Ctrl-C'd publish waits for the acks of what it sent, to count them."""


def add_arguments(
    publish: argparse.ArgumentParser, partition: Callable[[str], int], inputs: tuple[str, ...]
) -> None:
    publish.add_argument("stream")
    publish.add_argument("values", nargs="*", metavar="VALUE")
    publish.add_argument("-k", "--key", help="key of every message (picks its partition)")
    publish.add_argument(
        "-K", "--key-separator", metavar="SEP", help="each raw value is KEY<SEP>VALUE"
    )
    publish.add_argument(
        "-H", "--header", action="append", metavar="NAME=VALUE", help="a header (repeat)"
    )
    publish.add_argument("-p", "--partition", type=partition)
    publish.add_argument("--ack-policy", choices=("leader", "all", "none"), default="leader")
    publish.add_argument(
        "-i",
        "--input",
        choices=inputs,
        default="raw",
        help="how stdin lines are read: raw (each line's bytes, without its \\n or \\r\\n; the "
        "default), base64 (each line is a value in base64), json (objects as `read -f json` "
        'prints them: "value", optional "key" and "headers")',
    )
    publish.add_argument(
        "--keep-going",
        action="store_true",
        help="go on after a failed publish (default: stop at the first failure)",
    )
    publish.add_argument(
        "--print-offsets",
        action="store_true",
        help="print each message's partition and offset",
    )


def _arg_bytes(text: str) -> bytes:
    # Arguments the shell passed as bytes that are not UTF-8 come back as they were.
    return os.fsencode(text)


def _headers(pairs: list[str] | None) -> dict[str, bytes]:
    headers: dict[str, bytes] = {}
    for pair in pairs or ():
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise CliError(f"--header {pair!r}: use NAME=VALUE")
        headers[name] = _arg_bytes(value)
    return headers


def _lines(stream: BinaryIO) -> Iterator[bytes]:
    for line in stream:
        yield strip_line(line)


class _Tally:
    """The outcomes of a run's publishes, read in publish order."""

    def __init__(self, args: argparse.Namespace, out: IO[str]) -> None:
        self.args = args
        self.out = out
        self.sent = 0
        self.stored = 0
        self.failed = 0
        self.first_failure: BaseException | None = None
        self.pending: deque[Future[liftbridge.Ack | None]] = deque()

    def settle(self, future: Future[liftbridge.Ack | None]) -> None:
        error = future.exception()
        if error is not None:
            self.fail(error)
            return
        self.stored += 1
        ack = future.result()
        if self.args.print_offsets and ack is not None:
            record = {"stream": ack.stream, "partition": ack.partition, "offset": ack.offset}
            text = f"{ack.stream}/{ack.partition} offset {ack.offset}"
            print(json.dumps(record) if self.args.json else text, file=self.out)

    def fail(self, error: BaseException) -> None:
        self.failed += 1
        if self.first_failure is None:
            self.first_failure = error

    def settle_done(self) -> None:
        while self.pending and self.pending[0].done():
            self.settle(self.pending.popleft())

    def settle_all(self) -> None:
        while self.pending:
            self.settle(self.pending.popleft())

    def stop_now(self) -> bool:
        return self.first_failure is not None and not self.args.keep_going

    def summary(self, stream: str) -> str:
        unsure = self.sent - self.stored - self.failed
        text = f"{self.stored} of {self.sent} message(s) stored in {stream!r}"
        if self.failed:
            text += f", {self.failed} failed"
        if unsure:
            text += f", {unsure} not acknowledged (may or may not be stored)"
        return text


def publish(client: liftbridge.Client, args: argparse.Namespace, out: IO[str]) -> int:
    headers = _headers(args.header)
    policy = liftbridge.AckPolicy[args.ack_policy.upper()]
    from_stdin = not args.values
    if not from_stdin and args.input != "raw":
        raise CliError(f"--input {args.input} reads stdin: give no VALUE arguments")
    values: Iterator[bytes] = (
        _lines(sys.stdin.buffer) if from_stdin else (_arg_bytes(v) for v in args.values)
    )
    separator = None if args.key_separator is None else _arg_bytes(args.key_separator)
    tally = _Tally(args, out)
    bar = progress(
        args.progress,
        total=None if from_stdin else len(args.values),
        unit="msg",
        terminal=from_stdin,
    )
    try:
        for number, line in enumerate(values, 1):
            value, key, line_headers = parse_input(line, args.input, number)
            if key is None and args.key is not None:
                key = _arg_bytes(args.key)
            if separator is not None:
                key, sep, value = value.partition(separator)
                if not sep:
                    raise CliError(f"line {number} has no key separator {args.key_separator!r}")
            try:
                future = client.publish_async(
                    args.stream,
                    value,
                    key=key,
                    headers={**headers, **(line_headers or {})} or None,
                    partition=args.partition,
                    ack_policy=policy,
                )
            except liftbridge.LiftbridgeError as e:
                tally.sent += 1
                tally.fail(e)
            else:
                tally.sent += 1
                tally.pending.append(future)
                if number == 1:
                    # The first outcome before pipelining: a missing stream or a
                    # refusal stops the run after one message, not a window of them.
                    future.exception()
            bar.update()
            tally.settle_done()
            if tally.stop_now():
                break
        if not client.flush(_FLUSH_TIMEOUT):
            raise CliError(f"acks still missing after {_FLUSH_TIMEOUT:g}s")
        tally.settle_all()
    except KeyboardInterrupt:
        client.flush(_INTERRUPT_FLUSH)
        tally.settle_done()
        print(f"interrupted: {tally.summary(args.stream)}", file=sys.stderr)
        raise
    except CliError:
        client.flush(_INTERRUPT_FLUSH)
        tally.settle_done()
        print(f"stopped: {tally.summary(args.stream)}", file=sys.stderr)
        raise
    finally:
        bar.close()
    print(tally.summary(args.stream), file=sys.stderr)
    if tally.first_failure is not None:
        if not args.keep_going:
            print("stopped at the first failure (--keep-going goes on)", file=sys.stderr)
        raise tally.first_failure
    return 0
