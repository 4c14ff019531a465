"""The connector's options: parsed and checked once, at planning time, into
frozen values that pickle to executors.

Spark hands a data source its options as case-insensitive strings; every
check here names the option it refuses, so a typo fails before any task runs.
"""

from __future__ import annotations

import enum
import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass

from liftbridge import AckPolicy, InvalidArgumentError
from liftbridge.spark._client_options import (
    CLIENT_PREFIX,
    TLS_OPTIONS,
    ClientConfig,
    bool_option,
    client_config,
    client_passthrough,
    int_option,
    lower,
)

_log = logging.getLogger(__name__)

EARLIEST = -2
"""An offset in ``startingOffsets`` JSON meaning the partition's oldest message."""
LATEST = -1
"""An offset in offsets JSON meaning the partition's end (after its newest committed message)."""

_READ_OPTIONS = frozenset(
    {
        "servers",
        "stream",
        "assign",
        "streampattern",
        "startingoffsets",
        "endingoffsets",
        "startingtimestamp",
        "startingoffsetsbytimestamp",
        "endingoffsetsbytimestamp",
        "endingtimestamp",
        "maxoffsetspertrigger",
        "minoffsetspertrigger",
        "maxtriggerdelay",
        "minpartitions",
        "failondataloss",
        "includeheaders",
        "headersformat",
        "readreplica",
        "polltimeoutms",
        *TLS_OPTIONS,
    }
)
_WRITE_OPTIONS = frozenset(
    {"servers", "stream", "ackpolicy", "acktimeoutms", "exactlyonce", "writeid", *TLS_OPTIONS}
)
# Options Spark itself reads from the same map (they reach the source too).
_SPARK_OPTIONS = frozenset({"path", "checkpointlocation", "queryname"})


class Mode(enum.Enum):
    """Which kind of query the options are for."""

    BATCH = "batch"
    STREAMING = "streaming"


def _warn_unknown(options: Mapping[str, str], known: frozenset[str], what: str) -> None:
    for name in sorted(set(options) - known - _SPARK_OPTIONS):
        if name.startswith(CLIENT_PREFIX):
            continue  # checked by _client_passthrough
        _log.warning("liftbridge %s ignores the unknown option %r", what, name)


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def _duration(options: Mapping[str, str], name: str, default: float) -> float:
    raw = options.get(name.lower())
    if raw is None:
        return default
    match = _DURATION.match(raw.lower())
    if match is None:
        raise InvalidArgumentError(
            f"option {name} must be a duration such as 500ms, 30s, 15m or 1h, got {raw!r}"
        )
    return float(match.group(1)) * _UNIT_SECONDS[match.group(2)]


def _stream_name(value: str, option: str) -> str:
    if not value or value.split() != [value]:
        raise InvalidArgumentError(
            f"option {option}: {value!r} is not a stream name (empty or has whitespace)"
        )
    return value


# ----------------------------------------------------------------- reading --

OffsetSpec = int | dict[str, dict[int, int]]
"""EARLIEST, LATEST, or per stream and partition an offset (or EARLIEST/LATEST)."""


@dataclass(frozen=True)
class ReadOptions:
    """A read's options, checked.

    Attributes:
        client: servers and TLS.
        streams: the streams read, in the order given (empty with ``pattern``).
        assign: per stream the partitions read; None reads every partition.
        starting: where reading starts (an :data:`OffsetSpec`).
        ending: where a batch read ends (an :data:`OffsetSpec`).
        starting_timestamp_ms: start at the first message at or after this
            time (unix milliseconds) instead of ``starting``.
        max_offsets_per_trigger: most offsets a micro-batch covers.
        min_offsets_per_trigger: fewest new offsets that start a micro-batch.
        max_trigger_delay: seconds after which a micro-batch starts anyway.
        min_partitions: fewest Spark partitions a read is split into.
        fail_on_data_loss: fail when offsets a read needs are gone.
        include_headers: add the ``headers`` column.
        headers_array: make it Kafka's ``array<struct<key,value>>`` instead of a map.
        read_replica: read from a random in-sync replica instead of the leader.
        poll_timeout: seconds an executor waits for the next message of its range.
    """

    client: ClientConfig
    streams: tuple[str, ...]
    assign: Mapping[str, tuple[int, ...]] | None
    starting: OffsetSpec
    ending: OffsetSpec
    starting_timestamp_ms: int | None
    max_offsets_per_trigger: int | None
    min_offsets_per_trigger: int | None
    max_trigger_delay: float
    min_partitions: int | None
    fail_on_data_loss: bool
    include_headers: bool
    read_replica: bool
    poll_timeout: float
    headers_array: bool = False
    pattern: str | None = None
    starting_timestamps: Mapping[str, Mapping[int, int]] | None = None
    ending_timestamps: Mapping[str, Mapping[int, int]] | None = None
    ending_timestamp_ms: int | None = None

    def start_time(self, stream: str, partition: int) -> int | None:
        """The time (unix ms) a partition's read starts at, if one is set."""
        if self.starting_timestamps is not None:
            return self.starting_timestamps.get(stream, {}).get(partition)
        return self.starting_timestamp_ms

    def end_time(self, stream: str, partition: int) -> int | None:
        """The time (unix ms) a partition's batch read ends before, if one is set."""
        if self.ending_timestamps is not None:
            return self.ending_timestamps.get(stream, {}).get(partition)
        return self.ending_timestamp_ms

    def reads(self, stream: str) -> bool:
        """Whether ``stream`` is one of the streams read."""
        if self.pattern is not None:
            return not stream.startswith("__") and re.fullmatch(self.pattern, stream) is not None
        return stream in self.streams


def _assign(raw: str) -> dict[str, tuple[int, ...]]:
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as e:
        raise InvalidArgumentError(f"option assign is not valid JSON ({e}): {raw!r}") from None
    if not isinstance(value, dict) or not value:
        raise InvalidArgumentError(
            'option assign must be a JSON object of stream to partitions, e.g. {"orders": [0, 1]}'
        )
    assign: dict[str, tuple[int, ...]] = {}
    for stream, partitions in value.items():
        _stream_name(stream, "assign")
        if (
            not isinstance(partitions, list)
            or not partitions
            or not all(
                isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in partitions
            )
        ):
            raise InvalidArgumentError(
                f"option assign: stream {stream!r} needs a non-empty list of partition "
                f"numbers >= 0, got {partitions!r}"
            )
        assign[stream] = tuple(sorted(set(partitions)))
    return assign


def _offsets(
    options: Mapping[str, str],
    name: str,
    streams: tuple[str, ...],
    default: int,
    pattern: str | None = None,
) -> OffsetSpec:
    raw = options.get(name.lower())
    if raw is None:
        return default
    word = raw.strip().lower()
    if word == "earliest":
        return EARLIEST
    if word == "latest":
        return LATEST
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        raise InvalidArgumentError(
            f'option {name} must be earliest, latest or JSON such as {{"orders": {{"0": 42}}}}, '
            f"got {raw!r}"
        ) from None
    if not isinstance(value, dict):
        raise InvalidArgumentError(
            f"option {name} JSON must be an object of stream to {{partition: offset}}"
        )
    spec: dict[str, dict[int, int]] = {}
    for stream, per_partition in value.items():
        if pattern is not None and re.fullmatch(pattern, stream) is None:
            raise InvalidArgumentError(
                f"option {name} names stream {stream!r}, which streamPattern {pattern!r} "
                "does not match"
            )
        if pattern is None and stream not in streams:
            raise InvalidArgumentError(
                f"option {name} names stream {stream!r}, which is not read "
                f"(streams read: {', '.join(streams)})"
            )
        if not isinstance(per_partition, dict):
            raise InvalidArgumentError(
                f"option {name}: stream {stream!r} needs an object of partition to offset"
            )
        offsets: dict[int, int] = {}
        for partition, offset in per_partition.items():
            try:
                number = int(partition)
            except ValueError:
                number = -1
            if number < 0:
                raise InvalidArgumentError(
                    f"option {name}: {partition!r} of stream {stream!r} is not a partition number"
                )
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < EARLIEST:
                raise InvalidArgumentError(
                    f"option {name}: the offset of {stream}/{number} must be an integer >= 0, "
                    f"or -2 (earliest) or -1 (latest), got {offset!r}"
                )
            offsets[number] = offset
        spec[stream] = offsets
    return spec


def _timestamps(
    options: Mapping[str, str], name: str, streams: tuple[str, ...], pattern: str | None
) -> dict[str, dict[int, int]] | None:
    """Kafka's ``{"stream": {"partition": unix_ms}}`` JSON."""
    raw = options.get(name.lower())
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = None
    if not isinstance(value, dict) or not value:
        raise InvalidArgumentError(
            f'option {name} must be JSON such as {{"orders": {{"0": 1700000000000}}}} '
            f"(unix milliseconds per partition), got {raw!r}"
        )
    found: dict[str, dict[int, int]] = {}
    for stream, per_partition in value.items():
        read = (
            re.fullmatch(pattern, stream) is not None if pattern is not None else stream in streams
        )
        if not read:
            raise InvalidArgumentError(f"option {name} names stream {stream!r}, which is not read")
        if not isinstance(per_partition, dict):
            raise InvalidArgumentError(
                f"option {name}: stream {stream!r} needs an object of partition to timestamp"
            )
        times: dict[int, int] = {}
        for partition, when in per_partition.items():
            if not str(partition).isdigit():
                raise InvalidArgumentError(
                    f"option {name}: {partition!r} of stream {stream!r} is not a partition number"
                )
            if isinstance(when, bool) or not isinstance(when, int) or when < 0:
                raise InvalidArgumentError(
                    f"option {name}: the timestamp of {stream}/{partition} must be unix "
                    f"milliseconds >= 0, got {when!r}"
                )
            times[int(partition)] = when
        found[stream] = times
    return found


def _uses(spec: OffsetSpec, offset: int) -> bool:
    if isinstance(spec, int):
        return spec == offset
    return any(offset in per_partition.values() for per_partition in spec.values())


def read_options(raw_options: Mapping[str, str], mode: Mode | None) -> ReadOptions:
    """Checks a read's options; with ``mode`` None, only what holds in both modes
    (``load()`` checks that much before it knows the query's kind).

    Raises:
        InvalidArgumentError: an option is missing, malformed, or not allowed
            with another option or in this mode; the message names it.
    """
    options = client_passthrough(lower(raw_options))
    _warn_unknown(options, _READ_OPTIONS, "source")
    client = client_config(options)
    stream_option, assign_option = options.get("stream"), options.get("assign")
    pattern = options.get("streampattern")
    if sum(o is not None for o in (stream_option, assign_option, pattern)) != 1:
        raise InvalidArgumentError(
            "give exactly one of the options stream (one stream or a comma-separated list), "
            'assign (JSON such as {"orders": [0, 1]}) and streamPattern (a regular '
            "expression matching whole stream names)"
        )
    assign: dict[str, tuple[int, ...]] | None = None
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as e:
            raise InvalidArgumentError(
                f"option streamPattern is not a regular expression ({e}): {pattern!r}"
            ) from None
        streams: tuple[str, ...] = ()
    elif stream_option is not None:
        streams = tuple(_stream_name(s.strip(), "stream") for s in stream_option.split(","))
        if len(set(streams)) != len(streams):
            raise InvalidArgumentError(f"option stream names a stream twice: {stream_option!r}")
    else:
        assert assign_option is not None
        assign = _assign(assign_option)
        streams = tuple(assign)
    streaming = mode is Mode.STREAMING
    batch = mode is Mode.BATCH
    starting = _offsets(
        options, "startingOffsets", streams, LATEST if streaming else EARLIEST, pattern
    )
    if "endingoffsets" in options and streaming:
        raise InvalidArgumentError("option endingOffsets is for batch reads only (not readStream)")
    ending = _offsets(options, "endingOffsets", streams, LATEST, pattern)
    if batch and _uses(starting, LATEST):
        raise InvalidArgumentError(
            "option startingOffsets: latest (-1) is not allowed in a batch read, which would "
            "read nothing there; use readStream to read new messages"
        )
    if _uses(ending, EARLIEST):
        raise InvalidArgumentError("option endingOffsets: earliest (-2) is not allowed")
    starting_timestamp = int_option(options, "startingTimestamp", 0)
    if starting_timestamp is not None and "startingoffsets" in options:
        raise InvalidArgumentError(
            "options startingTimestamp and startingOffsets exclude each other: give one"
        )
    starting_timestamps = _timestamps(options, "startingOffsetsByTimestamp", streams, pattern)
    ending_timestamps = _timestamps(options, "endingOffsetsByTimestamp", streams, pattern)
    ending_timestamp = int_option(options, "endingTimestamp", 0)
    starts = [
        n
        for n in ("startingoffsets", "startingtimestamp", "startingoffsetsbytimestamp")
        if n in options
    ]
    if len(starts) > 1:
        raise InvalidArgumentError(
            "options startingOffsets, startingTimestamp and startingOffsetsByTimestamp "
            f"exclude each other: give one (got {', '.join(starts)})"
        )
    ends = [
        n for n in ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp") if n in options
    ]
    if len(ends) > 1:
        raise InvalidArgumentError(
            "options endingOffsets, endingTimestamp and endingOffsetsByTimestamp exclude "
            f"each other: give one (got {', '.join(ends)})"
        )
    if streaming and ends:
        raise InvalidArgumentError(f"option {ends[0]} is for batch reads only (not readStream)")
    max_per_trigger = int_option(options, "maxOffsetsPerTrigger", 1)
    min_per_trigger = int_option(options, "minOffsetsPerTrigger", 1)
    if batch:
        for name, value in (
            ("maxOffsetsPerTrigger", max_per_trigger),
            ("minOffsetsPerTrigger", min_per_trigger),
            ("maxTriggerDelay", options.get("maxtriggerdelay")),
        ):
            if value is not None:
                raise InvalidArgumentError(f"option {name} is for readStream only")
    if (
        max_per_trigger is not None
        and min_per_trigger is not None
        and min_per_trigger > max_per_trigger
    ):
        raise InvalidArgumentError(
            f"option minOffsetsPerTrigger ({min_per_trigger}) is above "
            f"maxOffsetsPerTrigger ({max_per_trigger})"
        )
    poll_timeout_ms = int_option(options, "pollTimeoutMs", 1)
    include_headers = bool_option(options, "includeHeaders", False)
    headers_format = options.get("headersformat", "map").strip().lower()
    if headers_format not in ("map", "array"):
        raise InvalidArgumentError(
            "option headersFormat must be map (map<string,binary>) or array (Kafka's "
            f"array<struct<key:string,value:binary>>), got {options['headersformat']!r}"
        )
    if "headersformat" in options and not include_headers:
        raise InvalidArgumentError("option headersFormat needs option includeHeaders=true")
    return ReadOptions(
        client=client,
        streams=streams,
        assign=assign,
        starting=starting,
        ending=ending,
        starting_timestamp_ms=starting_timestamp,
        max_offsets_per_trigger=max_per_trigger,
        min_offsets_per_trigger=min_per_trigger,
        max_trigger_delay=_duration(options, "maxTriggerDelay", 15 * 60.0),
        min_partitions=int_option(options, "minPartitions", 1),
        fail_on_data_loss=bool_option(options, "failOnDataLoss", True),
        include_headers=include_headers,
        headers_array=headers_format == "array",
        pattern=pattern,
        starting_timestamps=starting_timestamps,
        ending_timestamps=ending_timestamps,
        ending_timestamp_ms=ending_timestamp,
        read_replica=bool_option(options, "readReplica", False),
        poll_timeout=(poll_timeout_ms if poll_timeout_ms is not None else 120_000) / 1000,
    )


# ----------------------------------------------------------------- writing --

_ACK_POLICIES = {"leader": AckPolicy.LEADER, "all": AckPolicy.ALL, "none": AckPolicy.NONE}


@dataclass(frozen=True)
class WriteOptions:
    """A write's options, checked.

    Attributes:
        client: servers and TLS.
        stream: the stream every row goes to; None takes each row's ``stream`` column.
        ack_policy: which acks a publish waits for.
        ack_timeout: seconds each publish waits for its ack.
        exactly_once: store each row once however often Spark retries.
        write_id: names the write for ``exactly_once`` (stable across re-runs).
    """

    client: ClientConfig
    stream: str | None
    ack_policy: AckPolicy
    ack_timeout: float
    exactly_once: bool = False
    write_id: str | None = None


_WRITE_ID = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")


def write_options(raw_options: Mapping[str, str]) -> WriteOptions:
    """Checks a write's options.

    Raises:
        InvalidArgumentError: an option is missing or malformed; the message names it.
    """
    options = client_passthrough(lower(raw_options))
    _warn_unknown(options, _WRITE_OPTIONS, "sink")
    stream = options.get("stream")
    if stream is not None:
        _stream_name(stream.strip(), "stream")
        stream = stream.strip()
    policy = options.get("ackpolicy", "leader").strip().lower()
    if policy not in _ACK_POLICIES:
        raise InvalidArgumentError(
            f"option ackPolicy must be leader, all or none, got {options['ackpolicy']!r}"
        )
    ack_timeout_ms = int_option(options, "ackTimeoutMs", 1)
    exactly_once = bool_option(options, "exactlyOnce", False)
    write_id = options.get("writeid")
    if write_id is not None:
        write_id = write_id.strip()
        if not _WRITE_ID.match(write_id):
            raise InvalidArgumentError(
                "option writeId must be 1-100 letters, digits, '_', '.' or '-', "
                f"got {options['writeid']!r}"
            )
        if not exactly_once:
            raise InvalidArgumentError("option writeId needs option exactlyOnce=true")
    if exactly_once:
        if stream is None:
            raise InvalidArgumentError(
                "option exactlyOnce needs the stream option (one target stream, "
                "not a stream column)"
            )
        if policy == "none":
            raise InvalidArgumentError(
                "option exactlyOnce needs acks: use ackPolicy leader or all, not none"
            )
    return WriteOptions(
        client=client_config(options),
        stream=stream,
        ack_policy=_ACK_POLICIES[policy],
        ack_timeout=(ack_timeout_ms if ack_timeout_ms is not None else 30_000) / 1000,
        exactly_once=exactly_once,
        write_id=write_id,
    )
