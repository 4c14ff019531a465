"""The ``liftbridge-cli`` argument parser: the global options (accepted before or
after the command, as the ``nats`` CLI does), the commands and the exit-code table
``--help`` shows."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import IO

import liftbridge
import liftbridge.cli._admin as _admin
import liftbridge.cli._publish as _publish
import liftbridge.cli._read as _read
import liftbridge.cli._server as _server
from liftbridge.cli._text import FORMATS, INPUTS, PROG

DEFAULT_ADDRESS = "127.0.0.1:9292"
ADDRESS_ENV = "LIFTBRIDGE_ADDRESS"

# The one exit-code table: every command uses these and only these.
EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
EXIT_INTERRUPTED = 130

EXIT_CODES = f"""exit status:
  {EXIT_OK}    done
  {EXIT_ERROR}    the cluster refused or failed a request (one line on stderr: the error's class
       and message); for publish, the first failed message stops the run
  {EXIT_USAGE}    bad usage: unknown options, bad values, unreadable input
  {EXIT_UNREACHABLE}    no server could be reached at the addresses given
  {EXIT_INTERRUPTED}  interrupted (Ctrl-C); publish first says how many messages were stored"""

Command = Callable[[liftbridge.Client, argparse.Namespace, IO[str]], int]


def _nonnegative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _positive_int(text: str) -> int:
    value = _nonnegative(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be >= 1, got 0")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, got {text}")
    return value


def _global_options(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    """The options every command takes. Under a command they default to
    ``SUPPRESS``, so one given before the command is not reset after it."""

    def default(value: object) -> object:
        return argparse.SUPPRESS if suppress else value

    group = parser.add_argument_group("connection and output (before or after the command)")
    group.add_argument(
        "-a",
        "--address",
        action="append",
        metavar="HOST:PORT",
        default=default(None),
        help=f"a broker to connect through (repeat, or commas, for several seeds; default "
        f"${ADDRESS_ENV}, itself a comma list, or {DEFAULT_ADDRESS})",
    )
    group.add_argument(
        "--timeout",
        type=_seconds,
        default=default(10.0),
        help="seconds per RPC and to connect (default 10)",
    )
    group.add_argument(
        "--json",
        action="store_true",
        default=default(False),
        help="print JSON (one object per line) instead of text, whatever the command",
    )
    group.add_argument(
        "--progress",
        choices=("auto", "always", "never"),
        default=default("auto"),
        help="tqdm progress bars on stderr (auto: on a terminal, when tqdm "
        "is installed: pip install 'liftbridge[cli]')",
    )
    tls = parser.add_argument_group("TLS (any of these turns it on; verification is always on)")
    tls.add_argument(
        "--tls", action="store_true", default=default(False), help="TLS with the system's CA roots"
    )
    tls.add_argument(
        "--tls-ca", metavar="PEM", default=default(None), help="CA that signs the server's cert"
    )
    tls.add_argument(
        "--tls-cert", metavar="PEM", default=default(None), help="client certificate (mutual TLS)"
    )
    tls.add_argument(
        "--tls-key", metavar="PEM", default=default(None), help="the client certificate's key"
    )
    tls.add_argument(
        "--tls-server-name",
        metavar="NAME",
        default=default(None),
        help="check the certificate for NAME",
    )


def _partition_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-p",
        "--partition",
        type=_nonnegative,
        action="append",
        help="a partition (repeat; default: all)",
    )


def build_parser() -> argparse.ArgumentParser:
    """The ``liftbridge-cli`` argument parser."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Inspect and use a Liftbridge cluster from the shell "
        "(the server itself is the `liftbridge` executable).",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=liftbridge.__version__)
    _global_options(parser, suppress=False)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, run: Command | None, help: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(
            name,
            help=help,
            description=help,
            epilog=EXIT_CODES,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        _global_options(sub, suppress=True)
        sub.set_defaults(run=run)
        return sub

    dev = command(
        "dev-server",
        None,
        "run a local Liftbridge server for development (embedded NATS, cursors and the "
        "activity stream on) until Ctrl-C, printing the address to use",
    )
    _server.add_arguments(dev)

    streams = command(
        "streams",
        _admin.streams,
        "list streams: partitions, leaders, replicas, ISR, high watermarks",
    )
    streams.add_argument(
        "--internal",
        action="store_true",
        help="also list the server's own __cursors and __activity streams",
    )
    streams.add_argument("--format", choices=("table", "json"), default="table")

    create = command("create", _admin.create, "create a stream")
    create.add_argument("name")
    create.add_argument("--subject", help="NATS subject (default: the name)")
    create.add_argument("-p", "--partitions", type=_positive_int, default=1)
    create.add_argument("-r", "--replication-factor", type=_positive_int)
    create.add_argument("--retention-max-age", type=_seconds, metavar="SECONDS")
    create.add_argument("--retention-max-messages", type=_positive_int)
    create.add_argument("--retention-max-bytes", type=_positive_int)
    create.add_argument(
        "--if-missing", action="store_true", help="succeed when the stream already exists"
    )

    delete = command("delete", _admin.delete, "delete a stream")
    delete.add_argument("name")

    pause = command(
        "pause", _admin.pause, "pause a stream's partitions (publishing to one resumes it)"
    )
    pause.add_argument("name")
    _partition_option(pause)
    pause.add_argument(
        "--resume-all", action="store_true", help="publishing to any partition resumes them all"
    )

    readonly = command("readonly", _admin.readonly, "make a stream's partitions readonly")
    readonly.add_argument("name")
    _partition_option(readonly)
    readonly.add_argument("--off", action="store_true", help="make them writable again")

    publish = command(
        "publish",
        _publish.publish,
        "publish the VALUEs, or each line of stdin when none are given "
        "(put -- before values that start with '-')",
    )
    _publish.add_arguments(publish, _nonnegative, INPUTS)

    def reader(name: str, run: Command, help: str) -> argparse.ArgumentParser:
        sub = command(name, run, help)
        sub.add_argument("stream")
        _partition_option(sub)
        sub.add_argument(
            "-f",
            "--format",
            choices=FORMATS,
            default="text",
            help="text (partition/offset, time, key, value), value (the value's bytes "
            "as they are, one per line), base64 (the value in base64, one per line: "
            "safe for any bytes), json (one object per line; bytes that are not UTF-8 "
            'as {"base64": ...}), hex',
        )
        sub.add_argument("-c", "--count", type=_nonnegative, help="stop after this many messages")
        return sub

    read = reader("read", _read.read, "read messages between two positions, then exit")
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

    tail = reader("tail", _read.tail, "print the last messages, then follow new ones")
    tail.add_argument(
        "-n",
        "--lines",
        type=_nonnegative,
        default=10,
        help="messages to show from each partition before following (default 10)",
    )

    cursor = command("cursor", _admin.cursor, "get or set a cursor (a reader's stored offset)")
    actions = cursor.add_subparsers(dest="action", required=True, metavar="ACTION")
    get = actions.add_parser("get", help="print the cursor's offset, or 'none'")
    set_ = actions.add_parser("set", help="store an offset")
    for sub in (get, set_):
        _global_options(sub, suppress=True)
        sub.add_argument("cursor_id")
        sub.add_argument("stream")
        sub.add_argument("-p", "--partition", type=_nonnegative, default=0)
    set_.add_argument("offset", type=_nonnegative)

    groups = command(
        "groups", _admin.groups, "a consumer group's committed offsets and lag per partition"
    )
    groups.add_argument("group")
    groups.add_argument(
        "--stream", action="append", help="a stream the group reads (repeat; default: every stream)"
    )
    groups.add_argument("--format", choices=("table", "json"), default="table")
    return parser
