"""``liftbridge-cli read`` and ``tail``: every partition (or the ones asked for)
subscribed at once, messages printed as they arrive in the ``--format`` asked for,
as bytes (``value`` writes each value exactly)."""

from __future__ import annotations

import argparse
import queue
from datetime import datetime, timedelta
from typing import IO

import liftbridge
from liftbridge.cli._admin import partitions_of
from liftbridge.cli._text import format_message, parse_start, parse_stop, progress

_POLL = 0.2
"""Seconds the reading loop waits for a message before checking its subscriptions."""

Start = liftbridge.StartPosition | int | datetime | timedelta


def _write(out: IO[str], line: bytes, flush: bool) -> None:
    binary = getattr(out, "buffer", None)
    if binary is None:  # a text-only stream (tests): show bytes as text
        out.write(line.decode("utf-8", "backslashreplace") + "\n")
    else:
        out.flush()
        binary.write(line + b"\n")
    if flush:
        (binary or out).flush()


def _subscribe_all(
    client: liftbridge.Client,
    args: argparse.Namespace,
    out: IO[str],
    starts: dict[int, Start],
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

    style = "json" if args.json else args.format
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
            _write(out, format_message(message, style), args.follow)
            printed += 1
            bar.update()
    finally:
        bar.close()
        for subscription in subscriptions:
            subscription.close()
    return 0


def read(client: liftbridge.Client, args: argparse.Namespace, out: IO[str]) -> int:
    start = parse_start(args.start)
    stop = parse_stop(args.stop)
    partitions = partitions_of(client, args.stream, args.partition)
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
    return _subscribe_all(client, args, out, dict.fromkeys(partitions, start), stop, total)


def tail(client: liftbridge.Client, args: argparse.Namespace, out: IO[str]) -> int:
    partitions = partitions_of(client, args.stream, args.partition)
    starts: dict[int, Start] = {}
    for partition in partitions:
        if args.lines == 0:
            starts[partition] = liftbridge.StartPosition.NEW_ONLY
        else:
            newest = client.fetch_partition_metadata(args.stream, partition).newest_offset
            starts[partition] = max(0, newest + 1 - args.lines)
    args.follow = True
    return _subscribe_all(client, args, out, starts, None, None)
