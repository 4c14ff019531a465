"""The ``liftbridge-cli`` commands that look at or change the cluster's streams,
cursors and groups (everything but publish and read). Each prints text, or with
``--json`` one JSON object per line."""

from __future__ import annotations

import argparse
import json
from typing import IO, Any

import liftbridge
from liftbridge._core._display import Table, join


def emit(out: IO[str], args: argparse.Namespace, text: str, record: dict[str, Any]) -> None:
    """Prints ``record`` as a JSON line under ``--json``, else ``text``."""
    print(json.dumps(record) if args.json else text, file=out)


def partitions_of(client: liftbridge.Client, stream: str, chosen: list[int] | None) -> list[int]:
    """The partitions asked for, else every partition of ``stream``."""
    if chosen:
        return chosen
    info = client.fetch_metadata().get_stream(stream)
    if info is None:
        raise liftbridge.NoSuchStreamError(f"no such stream: {stream!r}")
    return sorted(info.partitions)


def streams(client: liftbridge.Client, args: argparse.Namespace, out: IO[str]) -> int:
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
    if args.json or args.format == "json":
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


def create(client: liftbridge.Client, args: argparse.Namespace, out: IO[str]) -> int:
    created = True
    try:
        client.create_stream(
            args.name,
            subject=args.subject,
            partitions=args.partitions,
            replication_factor=args.replication_factor,
            retention_max_age=args.retention_max_age,
            retention_max_messages=args.retention_max_messages,
            retention_max_bytes=args.retention_max_bytes,
        )
    except liftbridge.StreamExistsError:
        if not args.if_missing:
            raise
        created = False
    text = (
        f"created stream {args.name!r} with {args.partitions} partition(s)"
        if created
        else f"stream {args.name!r} exists already"
    )
    emit(out, args, text, {"stream": args.name, "created": created})
    return 0


def delete(client: liftbridge.Client, args: argparse.Namespace, out: IO[str]) -> int:
    client.delete_stream(args.name)
    emit(out, args, f"deleted stream {args.name!r}", {"stream": args.name, "deleted": True})
    return 0


def _which(name: str, partitions: list[int] | None) -> str:
    if not partitions:
        return f"every partition of {name!r}"
    return f"partition(s) {', '.join(map(str, partitions))} of {name!r}"


def pause(client: liftbridge.Client, args: argparse.Namespace, out: IO[str]) -> int:
    client.pause_stream(args.name, partitions=args.partition, resume_all=args.resume_all)
    record = {"stream": args.name, "partitions": args.partition, "paused": True}
    emit(out, args, f"paused {_which(args.name, args.partition)}", record)
    return 0


def readonly(client: liftbridge.Client, args: argparse.Namespace, out: IO[str]) -> int:
    client.set_stream_readonly(args.name, partitions=args.partition, readonly=not args.off)
    state = "writable again" if args.off else "readonly"
    record = {"stream": args.name, "partitions": args.partition, "readonly": not args.off}
    emit(out, args, f"made {_which(args.name, args.partition)} {state}", record)
    return 0


def cursor(client: liftbridge.Client, args: argparse.Namespace, out: IO[str]) -> int:
    where = {"cursor": args.cursor_id, "stream": args.stream, "partition": args.partition}
    if args.action == "set":
        client.set_cursor(args.cursor_id, args.stream, args.partition, args.offset)
        text = f"cursor {args.cursor_id!r} of {args.stream}/{args.partition} set to {args.offset}"
        emit(out, args, text, {**where, "offset": args.offset})
        return 0
    offset = client.fetch_cursor(args.cursor_id, args.stream, args.partition)
    emit(out, args, "none" if offset is None else str(offset), {**where, "offset": offset})
    return 0


GROUPS_MISSING = (
    "members, assignments and the coordinator are not shown: Liftbridge v1.9.0 has no RPC "
    "that describes a group to a non-member, and the SDK's fetch_metadata does not ask for "
    "group metadata yet"
)


def groups(client: liftbridge.Client, args: argparse.Namespace, out: IO[str]) -> int:
    metadata = client.fetch_metadata()
    names = args.stream or list(metadata.stream_names())
    cursor_id = f"__group:{args.group}"  # where consumer groups commit (the Go client's format)
    rows: list[tuple[str, ...]] = []
    records: list[dict[str, Any]] = []
    for name in names:
        for partition in partitions_of(client, name, None):
            committed = client.fetch_cursor(cursor_id, name, partition)
            if committed is None and not args.stream:
                continue  # a stream the group never committed on: not one it reads
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
            shown = "-" if committed is None else str(committed)
            rows.append((name, str(partition), shown, str(hw), str(lag)))
    if not any(r["committed"] is not None for r in records):
        where = f"streams {', '.join(map(repr, names))}" if args.stream else "any stream"
        raise liftbridge.NoCursorError(
            f"consumer group {args.group!r} has committed no offset on {where} "
            f"(no {cursor_id!r} cursor): is the group's name right?"
        )
    if args.json or args.format == "json":
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
