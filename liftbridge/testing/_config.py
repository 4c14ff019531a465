"""Liftbridge and NATS configuration files for the harness, written without a
YAML library.

Settings are kept as a flat mapping of dotted keys (``"clustering.raft.bootstrap.seed"``),
the names the server's configuration code uses, and rendered as nested YAML. The
server treats an unknown key as fatal and treats the mere presence of some keys
as "on" (``nats.embedded``), so the harness only ever writes the keys it means.

Everything here is a pure function.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import TypeAlias

from liftbridge._errors import ArgumentTypeError, InvalidArgumentError

ConfigValue: TypeAlias = "bool | int | float | str | Sequence[str]"
"""A value the emitter can write: a scalar or a list of strings."""

LOG_LEVELS = ("debug", "info", "warn", "error")

# One dotted key: lower-case segments, as the server's configuration keys are.
_KEY = re.compile(r"[a-z][a-z0-9_]*(?:\.[a-z][a-z0-9_]*)*\Z")
_INDENT = "  "


def go_duration(seconds: float) -> str:
    """Formats seconds as a Go duration string the server parses (``"3s"``, ``"500ms"``).

    Args:
        seconds: a finite, non-negative number of seconds; kept to the millisecond.

    Returns:
        Whole seconds as ``"<n>s"``, anything else as ``"<n>ms"``.

    Raises:
        InvalidArgumentError: when ``seconds`` is negative or not finite.
    """
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise ArgumentTypeError(f"a duration must be a number of seconds, got {seconds!r}")
    if not math.isfinite(seconds) or seconds < 0:
        raise InvalidArgumentError(f"a duration must be finite and >= 0 seconds, got {seconds!r}")
    millis = round(seconds * 1000)
    if millis % 1000 == 0:
        return f"{millis // 1000}s"
    return f"{millis}ms"


def node_settings(
    *,
    server_id: str,
    namespace: str,
    host: str,
    port: int,
    data_dir: str,
    nats_servers: Sequence[str],
    log_level: str,
    consumer_timeout: float,
    coordinator_timeout: float,
) -> dict[str, ConfigValue]:
    """The settings every harness node starts from, single server or cluster member.

    Cursors (two partitions, never auto-paused) and the activity stream are on;
    consumer-group timeouts are short so that tests of expiry and coordinator
    failover finish in seconds.

    Args:
        server_id: ``clustering.server.id``.
        namespace: ``clustering.namespace``, unique per server or cluster.
        host: the address to bind and to advertise.
        port: the client (gRPC) port.
        data_dir: an absolute path for ``data.dir``.
        nats_servers: NATS URLs to connect to.
        log_level: one of :data:`LOG_LEVELS`.
        consumer_timeout: ``groups.consumer.timeout`` in seconds.
        coordinator_timeout: ``groups.coordinator.timeout`` in seconds.

    Returns:
        Settings by dotted key, in a readable order.
    """
    return {
        "host": host,
        "port": port,
        "data.dir": data_dir,
        "logging.level": log_level,
        "nats.servers": list(nats_servers),
        "clustering.server.id": server_id,
        "clustering.namespace": namespace,
        "cursors.stream.partitions": 2,
        "cursors.stream.auto.pause.time": "0s",
        "activity.stream.enabled": True,
        "groups.consumer.timeout": go_duration(consumer_timeout),
        "groups.coordinator.timeout": go_duration(coordinator_timeout),
    }


def internal_streams(settings: Mapping[str, ConfigValue]) -> tuple[str, ...]:
    """The internal streams a server with these settings creates on its own.

    Returns:
        ``"__cursors"`` when ``cursors.stream.partitions`` is above zero and
        ``"__activity"`` when ``activity.stream.enabled`` is true.
    """
    streams: list[str] = []
    partitions = settings.get("cursors.stream.partitions", 0)
    if isinstance(partitions, int | str) and not isinstance(partitions, bool):
        try:
            if int(partitions) > 0:
                streams.append("__cursors")
        except ValueError:
            pass  # the server rejects it and the start fails with its message
    if str(settings.get("activity.stream.enabled", False)).lower() == "true":
        streams.append("__activity")
    return tuple(streams)


def check_log_level(log_level: str) -> str:
    """Validates a server log level.

    Raises:
        InvalidArgumentError: naming the allowed values.
    """
    if log_level not in LOG_LEVELS:
        raise InvalidArgumentError(f"log_level must be one of {LOG_LEVELS}, got {log_level!r}")
    return log_level


def merge_settings(
    base: Mapping[str, ConfigValue],
    overrides: Mapping[str, ConfigValue | None] | None,
) -> dict[str, ConfigValue]:
    """Applies overrides to a copy of ``base``; an override of ``None`` removes the key.

    Args:
        base: the harness's settings, by dotted key.
        overrides: the caller's settings, by dotted key, or ``None``.

    Returns:
        A new mapping; ``base`` and ``overrides`` are not modified.
    """
    merged = dict(base)
    for key, value in (overrides or {}).items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    return merged


class _Branch:
    """A mapping level of the YAML document while it is being built."""

    __slots__ = ("children",)

    def __init__(self) -> None:
        self.children: dict[str, _Branch | ConfigValue] = {}


def render_yaml(settings: Mapping[str, ConfigValue]) -> str:
    """Renders dotted-key settings as a nested YAML document.

    ``{"clustering.raft.bootstrap.peers": ["a", "b"]}`` becomes::

        clustering:
          raft:
            bootstrap:
              peers:
                - "a"
                - "b"

    Strings are always double-quoted (JSON escaping, which YAML accepts), so values
    such as ``"true"`` or ``"0s"`` stay strings. Keys keep their first-seen order.

    Args:
        settings: values by dotted key.

    Returns:
        The YAML text, ending with a newline.

    Raises:
        InvalidArgumentError: a key is not a dotted lower-case name, or one key is
            a prefix of another (``nats.embedded`` next to ``nats.embedded.config``:
            a key cannot be a value and a section at once).
        ArgumentTypeError: a value is not a bool, number, string or list of strings.
    """
    root = _Branch()
    owners: dict[tuple[str, ...], str] = {}  # path of every leaf and branch -> the key that made it
    for key, value in settings.items():
        if not isinstance(key, str) or not _KEY.match(key):
            raise InvalidArgumentError(
                f"config key {key!r} is not a dotted lower-case name "
                "such as 'cursors.stream.partitions'"
            )
        _check_value(key, value)
        parts = tuple(key.split("."))
        branch = root
        for depth in range(1, len(parts)):
            prefix = parts[:depth]
            child = branch.children.get(parts[depth - 1])
            if child is None:
                child = branch.children[parts[depth - 1]] = _Branch()
                owners[prefix] = key
            if not isinstance(child, _Branch):
                raise _conflict(key, owners[prefix])
            branch = child
        if parts in owners:
            raise _conflict(key, owners[parts])
        branch.children[parts[-1]] = value
        owners[parts] = key
    lines: list[str] = []
    _emit(root, 0, lines)
    return "".join(line + "\n" for line in lines)


def render_nats_conf(*, host: str, port: int) -> str:
    """Renders a nats-server configuration file that listens on ``host:port`` only.

    Args:
        host: the interface to bind, e.g. ``"127.0.0.1"``.
        port: the client port.

    Returns:
        The configuration text.
    """
    return f"host: {json.dumps(host)}\nport: {int(port)}\n"


def _check_value(key: str, value: object) -> None:
    if isinstance(value, bool | int | str):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidArgumentError(f"config key {key!r}: {value!r} is not a finite number")
        return
    if isinstance(value, Sequence) and all(isinstance(item, str) for item in value):
        return
    raise ArgumentTypeError(
        f"config key {key!r}: {value!r} is not a bool, number, string or list of strings"
    )


def _conflict(key: str, other: str) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"config keys {other!r} and {key!r} conflict: a key cannot be both a value and "
        "a section (note: the server turns embedded NATS on whenever 'nats.embedded' "
        "is present, even as false; use only 'nats.embedded.config')"
    )


def _emit(branch: _Branch, depth: int, lines: list[str]) -> None:
    indent = _INDENT * depth
    for name, child in branch.children.items():
        if isinstance(child, _Branch):
            lines.append(f"{indent}{name}:")
            _emit(child, depth + 1, lines)
        elif isinstance(child, bool | int | float | str):
            lines.append(f"{indent}{name}: {_scalar(child)}")
        elif not child:
            lines.append(f"{indent}{name}: []")
        else:
            lines.append(f"{indent}{name}:")
            lines.extend(f"{indent}{_INDENT}- {_scalar(item)}" for item in child)


def _scalar(value: bool | int | float | str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(value)
