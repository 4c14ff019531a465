"""The ``liftbridge-cli`` command line (also ``python -m liftbridge``): quick
inspection and small chores against a cluster, in the spirit of kcat and the nats
CLI, and ``dev-server``, a local server for development.

It is named ``liftbridge-cli`` because ``liftbridge`` is the server's executable
(as ``nats`` and ``nats-server`` are two). It uses the SDK's public API only.
Progress bars come from ``tqdm`` (the ``cli`` extra) and show only on a terminal.
The exit statuses are the table in :data:`liftbridge.cli._parser.EXIT_CODES`.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import liftbridge
from liftbridge.cli._parser import (
    ADDRESS_ENV,
    DEFAULT_ADDRESS,
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    Command,
    build_parser,
)
from liftbridge.cli._server import dev_server
from liftbridge.cli._text import PROG, CliError

_PROBE_TIMEOUT = 2.0
"""Most seconds a TCP connect to one seed may take before it counts as unreachable."""

__all__ = ["build_parser", "main"]


class UnreachableError(Exception):
    """No seed address accepts TCP connections."""


def addresses(args: argparse.Namespace) -> list[str]:
    """The seeds: every ``--address`` (each may be a comma list), else the comma
    list in ``$LIFTBRIDGE_ADDRESS``, else the default."""
    given = args.address or [os.environ.get(ADDRESS_ENV) or DEFAULT_ADDRESS]
    found = [a.strip() for item in given for a in item.split(",") if a.strip()]
    if not found:
        raise CliError(f"no address in {given!r}: use HOST:PORT[,HOST:PORT...]")
    return found


def _reachable(address: str, timeout: float) -> bool:
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        return True  # not host:port: the client's validation says what is wrong
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return True
    except OSError:
        return False


@contextmanager
def _client(args: argparse.Namespace) -> Iterator[liftbridge.Client]:
    seeds = addresses(args)
    probe = min(args.timeout, _PROBE_TIMEOUT)
    if not any(_reachable(seed, probe) for seed in seeds):
        raise UnreachableError(
            f"could not reach a Liftbridge server at {', '.join(seeds)} (nothing accepts "
            f"connections there; start one with `{PROG} dev-server`, or give --address "
            f"or ${ADDRESS_ENV})"
        )
    tls = None
    if args.tls or args.tls_ca or args.tls_cert or args.tls_key or args.tls_server_name:
        tls = liftbridge.TLSConfig(
            ca=args.tls_ca, cert=args.tls_cert, key=args.tls_key, server_name=args.tls_server_name
        )
    try:
        client = liftbridge.Client(
            seeds, tls=tls, connect_timeout=args.timeout, rpc_timeout=args.timeout
        )
    except (liftbridge.UnavailableError, liftbridge.DeadlineExceededError) as e:
        where = ", ".join(seeds)
        raise UnreachableError(f"could not reach a Liftbridge server at {where}: {e}") from e
    try:
        yield client
    finally:
        client.close()


def _run(args: argparse.Namespace) -> int:
    if args.command == "dev-server":
        return dev_server(args, sys.stdout)
    with _client(args) as client:
        run: Command = args.run
        return run(client, args, sys.stdout)


def _fail(message: str, code: int) -> int:
    print(f"{PROG}: {message}", file=sys.stderr)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; returns the exit status (the table in ``--help``)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help, --version, or a usage error (already printed)
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    try:
        return _run(args)
    except CliError as e:
        parser.print_usage(sys.stderr)
        return _fail(f"error: {e}", EXIT_USAGE)
    except UnreachableError as e:
        return _fail(str(e), EXIT_UNREACHABLE)
    except liftbridge.InvalidArgumentError as e:
        return _fail(f"{type(e).__name__}: {e}", EXIT_USAGE)
    except liftbridge.LiftbridgeError as e:
        return _fail(f"{type(e).__name__}: {e}", EXIT_ERROR)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly, as Unix tools do.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
