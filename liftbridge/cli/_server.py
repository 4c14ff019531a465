"""``liftbridge-cli dev-server``: a local Liftbridge server for development, run
from the executable found (``--binary``, ``$LIFTBRIDGE_SERVER_BIN``, ``liftbridge``
on PATH, then the ``.cache/servers/bin`` that ``make server`` fills in this
directory or a parent), with what the SDK's features need: embedded NATS, the
cursors stream and the activity stream. It is :class:`liftbridge.testing.LocalServer`
on fixed ports, kept running until Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import IO

from liftbridge.testing import LocalServer, ServerBinaryNotFoundError

CACHE = Path(".cache") / "servers" / "bin" / "liftbridge"
"""Where ``make server`` in a checkout of the SDK puts the server."""

_CHECK_EVERY = 1.0
"""Seconds between checks that the server is still running."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--port", type=int, default=9292, help="the client (gRPC) port (default 9292)"
    )
    parser.add_argument(
        "--nats-port", type=int, default=4222, help="the embedded NATS port (default 4222)"
    )
    parser.add_argument(
        "--binary",
        metavar="PATH",
        help="the liftbridge server executable (default: $LIFTBRIDGE_SERVER_BIN, "
        "liftbridge on PATH, then .cache/servers/bin/liftbridge here or in a parent)",
    )
    parser.add_argument("--log-level", choices=("debug", "info", "warn", "error"), default="info")


def _cached_binary(start: Path) -> Path | None:
    for directory in (start, *start.parents):
        candidate = directory / CACHE
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def make_server(args: argparse.Namespace) -> LocalServer:
    """The server the arguments describe, its executable found; not started.

    Raises:
        ServerBinaryNotFoundError: no executable anywhere it looks.
    """

    def server(binary: str | Path | None) -> LocalServer:
        return LocalServer(
            binary=binary, port=args.port, nats_port=args.nats_port, log_level=args.log_level
        )

    try:
        return server(args.binary)
    except ServerBinaryNotFoundError as e:
        cached = None if args.binary else _cached_binary(Path.cwd())
        if cached is None:
            raise ServerBinaryNotFoundError(
                f"{e}. Also looked for {CACHE} in {Path.cwd()} and its parents"
            ) from None
        return server(cached)


def _stop_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def dev_server(args: argparse.Namespace, out: IO[str]) -> int:
    """Starts the server, prints where it is, and waits until it is stopped.

    Returns:
        0 after Ctrl-C or SIGTERM; 1 when the server exited on its own.
    """
    server = make_server(args)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _stop_on_sigterm)
    with server:
        record = {
            "address": server.address,
            "nats_url": server.nats_url,
            "pid": server.pid,
            "log": str(server.log_path),
        }
        if args.json:
            print(json.dumps(record), file=out, flush=True)
        else:
            print(
                f"Liftbridge dev server at {server.address} (NATS {server.nats_url}), "
                f"pid {server.pid}\n"
                f"  python: liftbridge.Client([{server.address!r}])\n"
                f"  shell:  export LIFTBRIDGE_ADDRESS={server.address}\n"
                f"  log:    {server.log_path}\n"
                "Data is kept in a temporary directory, removed on exit. Ctrl-C stops it.",
                file=out,
                flush=True,
            )
        stopped = threading.Event()  # never set: the wait is only a bounded sleep
        try:
            while server.running:
                stopped.wait(_CHECK_EVERY)
        except KeyboardInterrupt:
            print("stopping the dev server", file=sys.stderr)
            return 0
        print(f"the server exited; its log ends:\n{server.log_tail(20)}", file=sys.stderr)
        return 1
