"""Results: the table printed at the end of a run and the JSON file written for it."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.stats import Spread

SDK = "sdk"
BARE = "bare"
GO = "go"
"""The official Go client (go-liftbridge), driven by ``bench/go``: the target."""

THROUGHPUT = ("msgs_per_s", "mb_per_s")
"""Metrics where more is better; the table gives them an SDK/bare ratio."""

COMPARED = (*THROUGHPUT, "cpu_us_per_msg")
"""Metrics the JSON file compares; for CPU per message, less is better."""

_LABELS = {
    "msgs_per_s": "msgs/s",
    "mb_per_s": "MB/s",
    "cpu_us_per_msg": "CPU us/msg",
    "p50_ms": "p50 ms",
    "p99_ms": "p99 ms",
    "p999_ms": "p99.9 ms",
    "max_ms": "max ms",
    "server_cpu_us_per_msg": "server CPU us/msg",
    "bound_msgs_per_s": "machine bound msgs/s",
    "of_bound": "of the bound",
}

LATENCY = ("p50_ms", "p99_ms", "p999_ms", "max_ms")
"""Metrics where less is better; the table gives them an SDK/Go ratio too."""


@dataclass(frozen=True)
class Result:
    """One driver's figures for one workload, size and setting.

    Attributes:
        workload: e.g. ``"publish"``, ``"publish_async"``.
        setting: what else distinguishes it, e.g. ``"window=1024"``.
        value_size: bytes per value.
        variant: ``"sdk"``, ``"bare"`` (the floor) or ``"go"`` (the Go client).
        count: messages per repetition.
        metrics: metric name to its spread over the repetitions.
        shown: the metrics the table prints, in order.
    """

    workload: str
    setting: str
    value_size: int
    variant: str
    count: int
    metrics: dict[str, Spread]
    shown: tuple[str, ...]

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.workload, self.setting, self.value_size)

    def as_json(self) -> dict[str, object]:
        return {
            "workload": self.workload,
            "setting": self.setting,
            "value_size": self.value_size,
            "variant": self.variant,
            "count": self.count,
            "reps": len(next(iter(self.metrics.values())).values) if self.metrics else 0,
            "metrics": {name: spread.as_json() for name, spread in self.metrics.items()},
        }


def comparisons(results: Sequence[Result]) -> list[dict[str, object]]:
    """SDK/bare and SDK/Go ratios of the compared metrics, one per workload,
    setting and size that has the SDK and at least one of the two.

    ``ratio`` is SDK/bare and ``ratio_go`` SDK/Go; either is ``None`` when
    that driver did not run the workload.
    """
    by_key: dict[tuple[str, str, int], dict[str, Result]] = {}
    for result in results:
        by_key.setdefault(result.key, {})[result.variant] = result
    rows: list[dict[str, object]] = []
    for (workload, setting, size), variants in by_key.items():
        sdk = variants.get(SDK)
        others = {v: variants.get(v) for v in (BARE, GO)}
        if sdk is None or not any(others.values()):
            continue
        for metric in COMPARED:
            if metric not in sdk.shown or metric not in sdk.metrics:
                continue
            mine = sdk.metrics[metric].median
            theirs = {
                v: r.metrics[metric].median if r is not None and metric in r.metrics else None
                for v, r in others.items()
            }
            if all(value is None for value in theirs.values()):
                continue
            floor, go = theirs[BARE], theirs[GO]
            rows.append(
                {
                    "workload": workload,
                    "setting": setting,
                    "value_size": size,
                    "metric": metric,
                    "sdk": mine,
                    "bare": floor,
                    "go": go,
                    "ratio": mine / floor if floor else None,
                    "ratio_go": mine / go if go else None,
                    "higher_is_better": metric in THROUGHPUT,
                }
            )
    return rows


def target_row(mine: Result, theirs: Result, *, goal: float, against: str) -> dict[str, object]:
    """One SDK path measured against another SDK path of the same run (the
    pull row: ``fetch`` against the handler ``subscribe``), with the goal
    the msgs/s ratio has to reach. CPU per message is kept too: on a shared
    machine it is steadier than the rate."""
    rate = mine.metrics["msgs_per_s"].median
    other = theirs.metrics["msgs_per_s"].median
    cpu = mine.metrics.get("cpu_us_per_msg")
    other_cpu = theirs.metrics.get("cpu_us_per_msg")
    return {
        "workload": mine.workload,
        "setting": mine.setting,
        "value_size": mine.value_size,
        "against": against,
        "msgs_per_s": rate,
        "against_msgs_per_s": other,
        "ratio": rate / other if other else None,
        "goal": goal,
        "cpu_us_per_msg": None if cpu is None else cpu.median,
        "against_cpu_us_per_msg": None if other_cpu is None else other_cpu.median,
    }


def target_table(targets: Sequence[Mapping[str, object]]) -> str:
    """The rows of :func:`target_row` as a fixed-width table: msgs/s and CPU
    per message of both paths, their msgs/s ratio and whether it meets the goal."""
    header = ("workload", "setting", "size", "against", "msgs/s", "theirs", "ratio", "goal")
    rows: list[tuple[str, ...]] = [header]

    def figure(rate: object, cpu: object) -> str:
        text = f"{rate:,.0f}" if isinstance(rate, int | float) else "-"
        return f"{text} ({cpu:.2f} us)" if isinstance(cpu, int | float) else text

    for target in targets:
        ratio, goal, size = target["ratio"], target["goal"], target["value_size"]
        met = isinstance(ratio, float) and isinstance(goal, float) and ratio >= goal
        rows.append(
            (
                str(target["workload"]),
                str(target["setting"]),
                _size(size) if isinstance(size, int) else "-",
                str(target["against"]),
                figure(target["msgs_per_s"], target["cpu_us_per_msg"]),
                figure(target["against_msgs_per_s"], target["against_cpu_us_per_msg"]),
                f"{ratio:.2f}" if isinstance(ratio, float) else "-",
                f">= {goal:g} {'met' if met else 'NOT met'}",
            )
        )
    return _layout(rows, left=4)


def latency_row(mine: Result, go: Result, *, goal: float) -> dict[str, object]:
    """The SDK's end-to-end latency against Go's at one offered rate: the
    percentiles of both (milliseconds, medians over the repetitions, with
    the lowest and highest p99) and the p99 ratio the goal bounds from above."""
    row: dict[str, object] = {
        "workload": mine.workload,
        "setting": mine.setting,
        "value_size": mine.value_size,
        "goal": goal,
    }
    for metric in LATENCY:
        for who, result in (("sdk", mine), ("go", go)):
            spread = result.metrics.get(metric)
            row[f"{who}_{metric}"] = None if spread is None else spread.median
    for who, result in (("sdk", mine), ("go", go)):
        spread = result.metrics.get("p99_ms")
        row[f"{who}_p99_ms_range"] = None if spread is None else [spread.low, spread.high]
    sdk_p99, go_p99 = row["sdk_p99_ms"], row["go_p99_ms"]
    ratio = (
        sdk_p99 / go_p99
        if isinstance(sdk_p99, float) and isinstance(go_p99, float) and go_p99
        else None
    )
    row["p99_ratio"] = ratio
    row["met"] = ratio is not None and ratio <= goal
    return row


def latency_table(rows: Sequence[Mapping[str, object]]) -> str:
    """The rows of :func:`latency_row`: p50/p99/p99.9/max of the SDK and of
    Go in milliseconds, the p99 ratio and whether it meets the goal."""
    header = ("setting", "size", "SDK p50/p99/p99.9/max", "Go p50/p99/p99.9/max", "p99", "goal")
    lines: list[tuple[str, ...]] = [header]

    def four(row: Mapping[str, object], who: str) -> str:
        values = [row.get(f"{who}_{metric}") for metric in LATENCY]
        return " / ".join(f"{v:.2f}" if isinstance(v, float) else "-" for v in values)

    for row in rows:
        ratio, goal, size = row["p99_ratio"], row["goal"], row["value_size"]
        lines.append(
            (
                str(row["setting"]),
                _size(size) if isinstance(size, int) else "-",
                four(row, "sdk"),
                four(row, "go"),
                f"{ratio:.2f}" if isinstance(ratio, float) else "-",
                f"<= {goal:g} {'met' if row['met'] else 'NOT met'}",
            )
        )
    return _layout(lines, left=2)


def ceiling_rows(results: Sequence[Result], *, goal: float) -> list[dict[str, object]]:
    """The SDK's pipelined publish rows (``publish_async``, over gRPC or
    NATS) as fractions of the machine's bound, each with the goal and, for
    reference, the Go client's share in the same setting (``go_of_bound``,
    None when Go did not run it): what the same server lets the official
    client reach."""
    go_share = {
        r.key: r.metrics["of_bound"].median
        for r in results
        if r.variant == GO and "of_bound" in r.metrics
    }
    rows: list[dict[str, object]] = []
    for result in results:
        share = result.metrics.get("of_bound")
        if result.variant != SDK or "publish_async" not in result.workload or share is None:
            continue
        bound = result.metrics["bound_msgs_per_s"]
        rows.append(
            {
                "workload": result.workload,
                "setting": result.setting,
                "value_size": result.value_size,
                "msgs_per_s": result.metrics["msgs_per_s"].median,
                "cpu_us_per_msg": result.metrics["cpu_us_per_msg"].median,
                "server_cpu_us_per_msg": result.metrics["server_cpu_us_per_msg"].median,
                "bound_msgs_per_s": bound.median,
                "of_bound": share.median,
                "of_bound_range": [share.low, share.high],
                "go_of_bound": go_share.get(result.key),
                "goal": goal,
                "met": share.median >= goal,
            }
        )
    return rows


def ceiling_table(rows: Sequence[Mapping[str, object]]) -> str:
    """The rows of :func:`ceiling_rows` as a fixed-width table."""
    header = (
        "workload",
        "setting",
        "size",
        "msgs/s",
        "client+server us",
        "bound",
        "share",
        "Go's share",
        "goal",
    )
    lines: list[tuple[str, ...]] = [header]
    for row in rows:
        size, share, goal = row["value_size"], row["of_bound"], row["goal"]
        client, server = row["cpu_us_per_msg"], row["server_cpu_us_per_msg"]
        rate, bound = row["msgs_per_s"], row["bound_msgs_per_s"]
        assert isinstance(share, float) and isinstance(client, float)
        assert isinstance(server, float) and isinstance(rate, float)
        assert isinstance(bound, float)
        go = row.get("go_of_bound")
        lines.append(
            (
                str(row["workload"]),
                str(row["setting"]),
                _size(size) if isinstance(size, int) else "-",
                f"{rate:,.0f}",
                f"{client:.1f} + {server:.1f}",
                f"{bound:,.0f}",
                f"{share:.2f}",
                f"{go:.2f}" if isinstance(go, float) else "-",
                f">= {goal:g} {'met' if row['met'] else 'NOT met'}",
            )
        )
    return _layout(lines, left=3)


def _figure(spread: Spread | None) -> str:
    if spread is None:
        return "-"
    value = spread.median
    text = f"{value:,.0f}" if value >= 100 else f"{value:,.2f}"
    return f"{text} ±{spread.relative * 100:.0f}%"


def _size(size: int) -> str:
    return f"{size // 1024} KiB" if size >= 1024 and size % 1024 == 0 else f"{size} B"


def _layout(rows: Sequence[tuple[str, ...]], *, left: int) -> str:
    """Fixed-width columns under a ruled header row; the first ``left``
    columns are left-aligned, the rest right-aligned."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for n, row in enumerate(rows):
        cells = [
            cell.ljust(width) if i < left else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
        if n == 0:
            lines.append("  ".join("-" * width for width in widths))
    return "\n".join(lines)


def table(results: Sequence[Result]) -> str:
    """The results as a fixed-width text table: median ±half-range over the
    repetitions, the SDK next to its floor and to the Go client, and the
    ratios for throughput and latency."""
    header = ("workload", "setting", "size", "metric", "SDK", "bare", "Go", "SDK/bare", "SDK/Go")
    rows: list[tuple[str, ...]] = [header]
    groups: dict[tuple[str, str, int], dict[str, Result]] = {}
    for result in results:
        groups.setdefault(result.key, {})[result.variant] = result
    for (workload, setting, size), variants in groups.items():
        sdk, bare, go = variants.get(SDK), variants.get(BARE), variants.get(GO)
        shown = (sdk or bare or go or next(iter(variants.values()))).shown
        first = True
        for metric in shown:
            mine = sdk.metrics.get(metric) if sdk else None
            floor = bare.metrics.get(metric) if bare else None
            target = go.metrics.get(metric) if go else None
            rows.append(
                (
                    workload if first else "",
                    setting if first else "",
                    _size(size) if first else "",
                    _LABELS.get(metric, metric),
                    _figure(mine),
                    _figure(floor),
                    _figure(target),
                    _ratio(metric, mine, floor),
                    _ratio(metric, mine, target),
                )
            )
            first = False
    return _layout(rows, left=4)


def _ratio(metric: str, mine: Spread | None, theirs: Spread | None) -> str:
    if (
        metric in (*THROUGHPUT, *LATENCY)
        and mine is not None
        and theirs is not None
        and theirs.median
    ):
        return f"{mine.median / theirs.median:.2f}"
    return "-"


DROP = 0.10
"""A ratio that falls by more than this fraction since the baseline is marked."""


def _ratios(
    document: Mapping[str, object], against: str = "ratio"
) -> dict[tuple[str, str, int], float]:
    """The SDK/bare (``against="ratio"``) or SDK/Go (``"ratio_go"``) msgs/s ratios
    of a run's JSON document, by workload, setting and size."""
    rows = document.get("comparisons")
    ratios: dict[tuple[str, str, int], float] = {}
    for row in rows if isinstance(rows, list) else []:
        if row.get("metric") == "msgs_per_s" and isinstance(row.get(against), int | float):
            ratios[(str(row["workload"]), str(row["setting"]), int(row["value_size"]))] = float(
                row[against]
            )
    return ratios


def ratio_changes(
    before: Mapping[str, object], after: Mapping[str, object], against: str = "ratio"
) -> str:
    """How the SDK/bare (or, with ``against="ratio_go"``, SDK/Go) msgs/s ratios
    moved from one run's JSON document to another's.

    One line per workload, setting and size found in either run; ``-`` where
    a run did not measure it. A ratio that fell by more than :data:`DROP` of
    its baseline value is marked ``DROP``.
    """
    old, new = _ratios(before, against), _ratios(after, against)
    header = ("workload", "setting", "size", "before", "after", "change", "")
    rows: list[tuple[str, ...]] = [header]
    for key in [*old, *(k for k in new if k not in old)]:
        workload, setting, size = key
        was, now = old.get(key), new.get(key)
        change = "-" if was is None or now is None else f"{now - was:+.2f}"
        dropped = was is not None and now is not None and now < was * (1 - DROP)
        rows.append(
            (
                workload,
                setting,
                _size(size),
                "-" if was is None else f"{was:.2f}",
                "-" if now is None else f"{now:.2f}",
                change,
                "DROP" if dropped else "",
            )
        )
    return _layout(rows, left=3)


def drops(
    before: Mapping[str, object], after: Mapping[str, object], against: str = "ratio"
) -> list[tuple[str, str, int]]:
    """The rows whose ratio fell by more than :data:`DROP` since ``before``."""
    old, new = _ratios(before, against), _ratios(after, against)
    return [key for key, was in old.items() if key in new and new[key] < was * (1 - DROP)]


def write_json(path: Path, document: dict[str, object]) -> Path:
    """Writes the run's document as indented JSON, creating the directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    return path
