"""The ``liftbridge`` command line (also ``python -m liftbridge``): quick inspection and
small chores against a cluster, in the spirit of kcat and the nats CLI.

It uses the SDK's public API only. Progress bars come from ``tqdm`` (the ``cli``
extra) and show only on a terminal; without tqdm, or when told ``--progress
never``, the output is plain. Exit status: 0 done, 1 an SDK error (printed as one
line), 2 bad usage, 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import sys
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import IO, Any

import liftbridge
from liftbridge._core._display import Table, join
from liftbridge.cli._text import (
    FORMATS,
    CliError,
    format_message,
    parse_start,
    parse_stop,
    progress,
)

DEFAULT_ADDRESS = "127.0.0.1:9292"
ADDRESS_ENV = "LIFTBRIDGE_ADDRESS"

_POLL = 0.2
"""Seconds the reading loop waits for a message before checking its subscriptions."""

_FLUSH_TIMEOUT = 60.0
"""Seconds ``publish`` waits for its last acks."""

# ------------------------------------------------------------ commands --


def _cmd_streams(client: liftbridge.Client, args: argparse.Namespace, out: IO[str]) -> int:
    metadata = client.fetch_metadata()
    rows: list[tuple[str, ...]] = []
    records: list[dict[str, Any]] = []
    for name in metadata.stream_names(internal=args.internal):
        info = metadata.streams[name]
        for pid, part in sorted(info.partitions.items()):
            try:
                state = client.fetch_partition_metadata(name, pid)
                hw: int | None = state.high_watermark
                newest: int | None = state.newest_offset
            except liftbridge.LiftbridgeError:
                hw = newest = None  # e.g. a partition without a leader right now
            flags = [f for f, on in (("paused", part.paused), ("readonly", part.readonly)) if on]
            records.append(
                {
                    "stream": name,
                    "subject": info.subject,
                    "partition": pid,
                    "leader": part.leader,
                    "replicas": list(part.replicas),
                    "isr": list(part.isr),
                    "high_watermark": hw,
                    "newest_offset": newest,
                    "paused": part.paused,
                    "readonly": part.readonly,
                }
            )
            rows.append(
                (
                    name,
                    str(pid),
                    part.leader or "-",
                    join(part.replicas),
                    join(part.isr),
                    "-" if hw is None else str(hw),
                    "-" if newest is None else str(newest),
                    " ".join(flags) or "-",
                )
            )
    if args.format == "json":
        for record in records:
            print(json.dumps(record), file=out)
        return 0
    brokers = ", ".join(f"{b.id} ({b.address})" for b in metadata.brokers)
    table = Table(
        f"brokers: {brokers}",
        ("stream", "partition", "leader", "replicas", "isr", "hw", "newest", "flags"),
        tuple(rows),
    )
    print(table, file=out)
    return 0


def _cmd_create(client: liftbridge.Client, args: argparse.Namespace, out: IO[str]) -> int:
    client.create_stream(
        args.name,
        subject=args.subject,
        partitions=args.partitions,
        replication_factor=args.replication_factor,
        retention_max_age=args.retention_max_age,
        retention_max_messages=args.retention_max_messages,
        retention_max_bytes=args.retention_max_bytes,
    )
    print(f"created stream {args.name!r} with {args.partitions} partition(s)", file=out)
    return 0


def _cmd_delete(client: liftbridge.Client, args: argparse.Namespace, out: IO[str]) -> int:
    client.delete_stream(args.name)
    print(f"deleted stream {args.name!r}", file=out)
    return 0


def _cmd_pause(client: liftbridge.Client, args: argparse.Namespace, out: IO[str]) -> int:
    client.pause_stream(args.name, partitions=args.partition, resume_all=args.resume_all)
    print(f"paused {_which(args.name, args.partition)}", file=out)
    return 0


def _cmd_readonly(client: liftbridge.Client, args: argparse.Namespace, out: IO[str]) -> int:
    client.set_stream_readonly(args.name, partitions=args.partition, readonly=not args.off)
    state = "writable again" if args.off else "readonly"
    print(f"made {_which(args.name, args.partition)} {state}", file=out)
    return 0


def _which(name: str, partitions: list[int] | None) -> str:
    if not partitions:
        return f"every partition of {name!r}"
    return f"partition(s) {', '.join(map(str, partitions))} of {name!r}"


def _headers(pairs: list[str] | None) -> dict[str, bytes]:
    headers: dict[str, bytes] = {}
    for pair in pairs or ():
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise CliError(f"--header {pair!r}: use NAME=VALUE")
        headers[name] = value.encode()
    return headers


def _lines(stream: IO[str]) -> Iterator[str]:
    for line in stream:
        yield line[:-1] if line.endswith("\n") else line


def _cmd_publish(client: liftbridge.Client, args: argparse.Namespace, out: IO[str]) -> int:
    headers = _headers(args.header)
    policy = liftbridge.AckPolicy[args.ack_policy.upper()]
    from_stdin = not args.values
    values: Iterator[str] = _lines(sys.stdin) if from_stdin else iter(args.values)
    where = args.stream if args.partition is None else f"{args.stream}/{args.partition}"
    # Outcomes are read in publish order as they complete, so memory stays bounded
    # by the client's in-flight window however long stdin is.
    pending: deque[Future[liftbridge.Ack | None]] = deque()
    failures: list[BaseException] = []

    def settle(future: Future[liftbridge.Ack | None]) -> None:
        error = future.exception()
        if error is not None:
            failures.append(error)
            return
        ack = future.result()
        if args.print_offsets and ack is not None:
            # The ack does not say the partition; it is known when -p chose it.
            print(f"{where} offset {ack.offset}", file=out)

    bar = progress(
        args.progress,
        total=None if from_stdin else len(args.values),
        unit="msg",
        terminal=from_stdin,
    )
    sent = 0
    try:
        for text in values:
            key = args.key
            if args.key_separator is not None:
                key, sep, text = text.partition(args.key_separator)
                if not sep:
                    raise CliError(f"line {sent + 1} has no key separator {args.key_separator!r}")
            pending.append(
                client.publish_async(
                    args.stream,
                    text.encode(),
                    key=key.encode() if key is not None else None,
                    headers=headers or None,
                    partition=args.partition,
                    ack_policy=policy,
                )
            )
            sent += 1
            bar.update()
            while pending and pending[0].done():
                settle(pending.popleft())
        if not client.flush(_FLUSH_TIMEOUT):
            raise CliError(f"acks still missing after {_FLUSH_TIMEOUT:g}s")
        while pending:
            settle(pending.popleft())
    finally:
        bar.close()
    if failures:
        if len(failures) > 1:
            print(f"liftbridge: {len(failures)} of {sent} publishes failed", file=sys.stderr)
        raise failures[0]
    print(f"published {sent} message(s) to {args.stream!r}", file=sys.stderr)
    return 0


def _partitions(client: liftbridge.Client, stream: str, chosen: list[int] | None) -> list[int]:
    if chosen:
        return chosen
    metadata = client.fetch_metadata()
    info = metadata.get_stream(stream)
    if info is None:
        raise liftbridge.NoSuchStreamError(f"no such stream: {stream!r}")
    return sorted(info.partitions)


def _read(
    client: liftbridge.Client,
    args: argparse.Namespace,
    out: IO[str],
    starts: dict[int, liftbridge.StartPosition | int | datetime | timedelta],
    stop: liftbridge.StopPosition | int | datetime | None,
    total: int | None,
) -> int:
    """Subscribes to each partition and prints what arrives until every
    subscription ends, ``--count`` messages were printed, or Ctrl-C."""
    inbox: queue.SimpleQueue[tuple[liftbridge.Message | None, BaseException | None]] = (
        queue.SimpleQueue()
    )

    def handler(message: liftbridge.Message | None, error: BaseException | None) -> None:
        inbox.put((message, error))  # runs on the subscription's thread: hand over, never block

    bar = progress(args.progress, total=total, unit="msg", terminal=not out.isatty())
    subscriptions = []
    printed = 0
    try:
        for partition, start in starts.items():
            subscriptions.append(
                client.subscribe(args.stream, handler, partition=partition, start=start, stop=stop)
            )
        while args.count is None or printed < args.count:
            try:
                message, error = inbox.get(timeout=_POLL)
            except queue.Empty:
                if all(s.done for s in subscriptions) and inbox.empty():
                    break
                continue
            if error is not None:
                raise error
            assert message is not None
            print(format_message(message, args.format), file=out, flush=args.follow)
            printed += 1
            bar.update()
    finally:
        bar.close()
        for subscription in subscriptions:
            subscription.close()
    return 0


def _cmd_read(client: liftbridge.Client, args: argparse.Namespace, out: IO[str]) -> int:
    start = parse_start(args.start)
    stop = parse_stop(args.stop)
    partitions = _partitions(client, args.stream, args.partition)
    total: int | None = None
    if stop is liftbridge.StopPosition.LATEST and (
        start is liftbridge.StartPosition.EARLIEST or isinstance(start, int)
    ):
        first = 0 if start is liftbridge.StartPosition.EARLIEST else int(start)
        total = sum(
            max(0, client.fetch_partition_metadata(args.stream, p).newest_offset + 1 - first)
            for p in partitions
        )
        if args.count is not None:
            total = min(total, args.count)
    args.follow = stop is None
    return _read(client, args, out, dict.fromkeys(partitions, start), stop, total)


def _cmd_tail(client: liftbridge.Client, args: argparse.Namespace, out: IO[str]) -> int:
    partitions = _partitions(client, args.stream, args.partition)
    starts: dict[int, liftbridge.StartPosition | int | datetime | timedelta] = {}
    for partition in partitions:
        if args.lines == 0:
            starts[partition] = liftbridge.StartPosition.NEW_ONLY
        else:
            newest = client.fetch_partition_metadata(args.stream, partition).newest_offset
            starts[partition] = max(0, newest + 1 - args.lines)
    args.follow = True
    return _read(client, args, out, starts, None, None)


def _cmd_cursor(client: liftbridge.Client, args: argparse.Namespace, out: IO[str]) -> int:
    if args.action == "set":
        client.set_cursor(args.cursor_id, args.stream, args.partition, args.offset)
        print(
            f"cursor {args.cursor_id!r} of {args.stream}/{args.partition} set to {args.offset}",
            file=out,
        )
        return 0
    offset = client.fetch_cursor(args.cursor_id, args.stream, args.partition)
    print("none" if offset is None else offset, file=out)
    return 0


GROUPS_MISSING = (
    "members, assignments and the coordinator are not shown: Liftbridge v1.9.0 has no RPC "
    "that describes a group to a non-member, and the SDK's fetch_metadata does not ask for "
    "group metadata yet"
)


def _cmd_groups(client: liftbridge.Client, args: argparse.Namespace, out: IO[str]) -> int:
    metadata = client.fetch_metadata()
    streams = args.stream or list(metadata.stream_names())
    cursor_id = f"__group:{args.group}"  # where consumer groups commit (the Go client's format)
    rows: list[tuple[str, ...]] = []
    records: list[dict[str, Any]] = []
    for name in streams:
        for partition in _partitions(client, name, None):
            committed = client.fetch_cursor(cursor_id, name, partition)
            hw = client.fetch_partition_metadata(name, partition).high_watermark
            lag = hw - committed if committed is not None else hw + 1
            records.append(
                {
                    "group": args.group,
                    "stream": name,
                    "partition": partition,
                    "committed": committed,
                    "high_watermark": hw,
                    "lag": lag,
                }
            )
            rows.append(
                (
                    name,
                    str(partition),
                    "-" if committed is None else str(committed),
                    str(hw),
                    str(lag),
                )
            )
    if args.format == "json":
        for record in records:
            print(json.dumps(record), file=out)
        return 0
    title = f"group {args.group!r}: committed offsets (cursor {cursor_id!r}) and lag"
    print(
        Table(
            title,
            ("stream", "partition", "committed", "hw", "lag"),
            tuple(rows),
            note=GROUPS_MISSING,
        ),
        file=out,
    )
    return 0


# -------------------------------------------------------------- parser --


def _nonnegative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _seconds(text: str) -> float:
    value = float(text)
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, got {text}")
    return value


Command = Callable[[liftbridge.Client, argparse.Namespace, IO[str]], int]


def build_parser() -> argparse.ArgumentParser:
    """The ``liftbridge`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="liftbridge",
        description="Inspect and use a Liftbridge cluster from the shell.",
        epilog=f"The server address comes from --address, else ${ADDRESS_ENV}, "
        f"else {DEFAULT_ADDRESS}.",
    )
    parser.add_argument("--version", action="version", version=liftbridge.__version__)
    parser.add_argument(
        "-a",
        "--address",
        action="append",
        metavar="HOST:PORT",
        help=f"a broker to connect through (repeat for several seeds; default ${ADDRESS_ENV} "
        f"or {DEFAULT_ADDRESS})",
    )
    parser.add_argument(
        "--timeout", type=_seconds, default=10.0, help="seconds per RPC and to connect (default 10)"
    )
    tls = parser.add_argument_group("TLS (any of these turns it on; verification is always on)")
    tls.add_argument("--tls", action="store_true", help="TLS with the system's CA roots")
    tls.add_argument("--tls-ca", metavar="PEM", help="CA certificates that sign the server's")
    tls.add_argument("--tls-cert", metavar="PEM", help="client certificate (mutual TLS)")
    tls.add_argument("--tls-key", metavar="PEM", help="the client certificate's key")
    tls.add_argument("--tls-server-name", metavar="NAME", help="check the certificate for NAME")
    parser.add_argument(
        "--progress",
        choices=("auto", "always", "never"),
        default="auto",
        help="tqdm progress bars on stderr (auto: on a terminal, when tqdm "
        "is installed: pip install 'liftbridge[cli]')",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, run: Command, help: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help, description=help)
        sub.set_defaults(run=run)
        return sub

    streams = command(
        "streams", _cmd_streams, "list streams: partitions, leaders, replicas, ISR, high watermarks"
    )
    streams.add_argument(
        "--internal",
        action="store_true",
        help="also list the server's own __cursors and __activity streams",
    )
    streams.add_argument("--format", choices=("table", "json"), default="table")

    create = command("create", _cmd_create, "create a stream")
    create.add_argument("name")
    create.add_argument("--subject", help="NATS subject (default: the name)")
    create.add_argument("-p", "--partitions", type=int, default=1)
    create.add_argument("-r", "--replication-factor", type=int)
    create.add_argument("--retention-max-age", type=float, metavar="SECONDS")
    create.add_argument("--retention-max-messages", type=int)
    create.add_argument("--retention-max-bytes", type=int)

    delete = command("delete", _cmd_delete, "delete a stream")
    delete.add_argument("name")

    pause = command(
        "pause", _cmd_pause, "pause a stream's partitions (publishing to one resumes it)"
    )
    pause.add_argument("name")
    pause.add_argument(
        "-p",
        "--partition",
        type=_nonnegative,
        action="append",
        help="a partition (repeat; default: all)",
    )
    pause.add_argument(
        "--resume-all", action="store_true", help="publishing to any partition resumes them all"
    )

    readonly = command("readonly", _cmd_readonly, "make a stream's partitions readonly")
    readonly.add_argument("name")
    readonly.add_argument(
        "-p",
        "--partition",
        type=_nonnegative,
        action="append",
        help="a partition (repeat; default: all)",
    )
    readonly.add_argument("--off", action="store_true", help="make them writable again")

    publish = command(
        "publish", _cmd_publish, "publish the VALUEs, or each line of stdin when none are given"
    )
    publish.add_argument("stream")
    publish.add_argument("values", nargs="*", metavar="VALUE")
    publish.add_argument("-k", "--key", help="key of every message (picks its partition)")
    publish.add_argument("-K", "--key-separator", metavar="SEP", help="each value is KEY<SEP>VALUE")
    publish.add_argument(
        "-H", "--header", action="append", metavar="NAME=VALUE", help="a header (repeat)"
    )
    publish.add_argument("-p", "--partition", type=_nonnegative)
    publish.add_argument("--ack-policy", choices=("leader", "all", "none"), default="leader")
    publish.add_argument(
        "--print-offsets",
        action="store_true",
        help="print each message's partition subject and offset",
    )

    def reader(name: str, run: Command, help: str) -> argparse.ArgumentParser:
        sub = command(name, run, help)
        sub.add_argument("stream")
        sub.add_argument(
            "-p",
            "--partition",
            type=_nonnegative,
            action="append",
            help="a partition (repeat; default: all)",
        )
        sub.add_argument(
            "-f",
            "--format",
            choices=FORMATS,
            default="text",
            help="text (partition/offset, time, key, value), value (the value "
            "only), json (one object per line), hex",
        )
        sub.add_argument("-c", "--count", type=_nonnegative, help="stop after this many messages")
        return sub

    read = reader("read", _cmd_read, "read messages between two positions, then exit")
    read.add_argument(
        "-s",
        "--start",
        default="earliest",
        help="earliest (default), latest, new, an offset, an ISO time (UTC unless it has "
        "an offset), or a duration ago (30s, 5m, 2h, 1d)",
    )
    read.add_argument(
        "-e",
        "--stop",
        default="latest",
        help="latest (default: the newest message now), never, an offset, an ISO time",
    )

    tail = reader("tail", _cmd_tail, "print the last messages, then follow new ones")
    tail.add_argument(
        "-n",
        "--lines",
        type=_nonnegative,
        default=10,
        help="messages to show from each partition before following (default 10)",
    )

    cursor = command("cursor", _cmd_cursor, "get or set a cursor (a reader's stored offset)")
    actions = cursor.add_subparsers(dest="action", required=True, metavar="ACTION")
    get = actions.add_parser("get", help="print the cursor's offset, or 'none'")
    set_ = actions.add_parser("set", help="store an offset")
    for sub in (get, set_):
        sub.add_argument("cursor_id")
        sub.add_argument("stream")
        sub.add_argument("-p", "--partition", type=_nonnegative, default=0)
    set_.add_argument("offset", type=_nonnegative)

    groups = command(
        "groups", _cmd_groups, "a consumer group's committed offsets and lag per partition"
    )
    groups.add_argument("group")
    groups.add_argument(
        "--stream", action="append", help="a stream the group reads (repeat; default: every stream)"
    )
    groups.add_argument("--format", choices=("table", "json"), default="table")
    return parser


@contextmanager
def _client(args: argparse.Namespace) -> Iterator[liftbridge.Client]:
    addresses = args.address or [os.environ.get(ADDRESS_ENV) or DEFAULT_ADDRESS]
    tls = None
    if args.tls or args.tls_ca or args.tls_cert or args.tls_key or args.tls_server_name:
        tls = liftbridge.TLSConfig(
            ca=args.tls_ca, cert=args.tls_cert, key=args.tls_key, server_name=args.tls_server_name
        )
    client = liftbridge.Client(
        addresses, tls=tls, connect_timeout=args.timeout, rpc_timeout=args.timeout
    )
    try:
        yield client
    finally:
        client.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        with _client(args) as client:
            run: Command = args.run
            return run(client, args, sys.stdout)
    except CliError as e:
        parser.error(str(e))
    except liftbridge.LiftbridgeError as e:
        print(f"liftbridge: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly, as Unix tools do.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    return 0  # parser.error exits; this line only satisfies the type checker
