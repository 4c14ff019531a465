"""``python -m bench.readme_table RESULTS.json``: the README's performance
figures, printed as Markdown from one ``make bench`` results file.

The README quotes one run, not a collage of runs: this prints its throughput
table (SDK, bare stub, Go, SDK/Go), the issue-29 targets (Futures against Go,
end-to-end p99 against Go, each pipelined row's share of the machine's bound)
and the run's provenance line, all from the same file. Rows the file lacks
print as ``-`` so a partial run still reads.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path

_Doc = Mapping[str, object]

ROWS: tuple[tuple[str, str, str, int], ...] = (
    ("`publish`, one at a time", "publish", "LEADER", 100),
    ("`publish_async`, `max_inflight=1024`", "publish_async", "LEADER window=1024", 100),
    ("the same, 1 KiB values", "publish_async", "LEADER window=1024", 1024),
    ("`publish_async`, `max_inflight=32`", "publish_async", "LEADER window=32", 100),
    (
        "`publish_async`, 1024, ack handler and `future=False`",
        "publish_async",
        "LEADER window=1024 handler, future=False",
        100,
    ),
    (
        "`publish_many_async`, batches of 100, window 1024",
        "publish_async",
        "LEADER window=1024 publish_many_async, batch=100",
        100,
    ),
    ("`subscribe` from earliest (handler)", "subscribe", "earliest", 100),
    ("`subscribe` from earliest, 1 KiB values", "subscribe", "earliest", 1024),
    ("`PullConsumer.fetch(500)`", "pull", "fetch(500)", 100),
    ("`NatsStreamPublisher.publish`, one at a time", "nats publish", "LEADER", 100),
    (
        "`NatsStreamPublisher.publish_async`, window 1024",
        "nats publish_async",
        "LEADER window=1024",
        100,
    ),
    ("the same, 1 KiB values", "nats publish_async", "LEADER window=1024", 1024),
    (
        "the same, ack handler and `future=False`",
        "nats publish_async",
        "LEADER window=1024 handler, future=False",
        100,
    ),
    (
        "`NatsStreamPublisher.publish_many_async`, batches of 100",
        "nats publish_async",
        "LEADER window=1024 publish_many_async, batch=100",
        100,
    ),
    (
        "`NatsPublisher` (pynats2), window 1024",
        "nats publish_async (pynats2)",
        "LEADER window=1024",
        100,
    ),
)
"""(label, workload, setting, value size) of each throughput row, in order."""


def _rows(doc: _Doc, key: str) -> list[Mapping[str, object]]:
    rows = doc.get(key)
    return [r for r in rows if isinstance(r, Mapping)] if isinstance(rows, list) else []


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _shown(value: object, render: Callable[[float], str], missing: str = "-") -> str:
    number = _number(value)
    return missing if number is None else render(number)


def _rate(value: object) -> str:
    return _shown(value, lambda n: f"{n:,.0f}", missing="")


def _ratio(value: object) -> str:
    return _shown(value, lambda n: f"{n:.2f}")


def _share(value: object) -> str:
    """Rounded down (a goal of at least 0.8): 0.7998 reads 0.79, not a met 0.80."""
    return _shown(value, lambda n: f"{math.floor(n * 100 + 1e-9) / 100:.2f}")


def _at_most(value: object) -> str:
    """Rounded up (a goal of at most 1.2): 1.2004 reads 1.21, not a met 1.20."""
    return _shown(value, lambda n: f"{math.ceil(n * 100 - 1e-9) / 100:.2f}")


def _size(size: object) -> str:
    return "1 KiB" if size == 1024 else f"{size} B"


def _markdown(header: Sequence[str], rows: Sequence[Sequence[str]], *, left: int = 1) -> str:
    """A Markdown table padded to fixed widths; the first ``left`` columns
    left-aligned, the rest right-aligned."""
    widths = [max([len(header[i]), *(len(r[i]) for r in rows)]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        padded = [
            c.ljust(w) if i < left else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "| " + " | ".join(padded) + " |"

    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(header), rule, *(line(r) for r in rows)])


def throughput_table(doc: _Doc) -> str:
    """msgs/s of the SDK, the bare stub and Go, and SDK/Go, row by row."""
    found = {
        (c.get("workload"), c.get("setting"), c.get("value_size")): c
        for c in _rows(doc, "comparisons")
        if c.get("metric") == "msgs_per_s"
    }
    rows = []
    for label, workload, setting, size in ROWS:
        c = found.get((workload, setting, size), {})
        sdk = _rate(c.get("sdk")) or "-"
        rows.append(
            (label, sdk, _rate(c.get("bare")), _rate(c.get("go")), _ratio(c.get("ratio_go")))
        )
    return _markdown(("workload (100 B unless said)", "SDK", "bare", "Go", "SDK/Go"), rows)


def _met(row: Mapping[str, object]) -> str:
    return "met" if row.get("met") else "**not met**"


def latency_table(doc: _Doc) -> str:
    """End-to-end p50 and p99 of both clients at each rate, and p99 SDK/Go."""
    rows = []
    for r in _rows(doc, "latency"):
        rows.append(
            (
                f"{r.get('setting')}, {_size(r.get('value_size'))}",
                f"{_ratio(r.get('sdk_p50_ms'))} / {_ratio(r.get('go_p50_ms'))}",
                f"{_ratio(r.get('sdk_p99_ms'))} / {_ratio(r.get('go_p99_ms'))}",
                f"{_at_most(r.get('p99_ratio'))}, {_met(r)}",
            )
        )
    return _markdown(
        ("rate, value size", "p50 ms SDK / Go", "p99 ms SDK / Go", "p99 SDK/Go (goal ≤ 1.2)"), rows
    )


def _plain(setting: object) -> bool:
    """A Future per message: not the handler or the batch variant of a row."""
    return isinstance(setting, str) and "handler" not in setting and "publish_many" not in setting


def ceiling_table(doc: _Doc, *, every_row: bool = False) -> str:
    """Each pipelined row's share of the machine's bound, the SDK's and Go's;
    the Future-per-message rows only unless ``every_row``."""
    rows = []
    for r in _rows(doc, "ceiling"):
        if not every_row and not _plain(r.get("setting")):
            continue
        cpu = _number(r.get("cpu_us_per_msg"))
        server = _number(r.get("server_cpu_us_per_msg"))
        rows.append(
            (
                f"{r.get('workload')}, {r.get('setting')}, {_size(r.get('value_size'))}",
                "-" if cpu is None else f"{cpu:.1f}",
                "-" if server is None else f"{server:.1f}",
                _share(r.get("of_bound")),
                _share(r.get("go_of_bound")),
                _met(r),
            )
        )
    header = ("row", "client µs/msg", "server µs/msg", "share", "Go's share", "goal ≥ 0.8")
    return _markdown(header, rows)


def targets_table(doc: _Doc) -> str:
    """The run's other goals: ``fetch`` against a handler subscription, TLS
    against plaintext."""
    rows = []
    for r in _rows(doc, "targets"):
        ratio, goal = _number(r.get("ratio")), _number(r.get("goal"))
        met = ratio is not None and goal is not None and ratio >= goal
        rows.append(
            (
                f"{r.get('setting')}, {_size(r.get('value_size'))}",
                str(r.get("against")),
                _share(ratio),
                f"≥ {goal:g}" if goal is not None else "-",
                "met" if met else "**not met**",
            )
        )
    return _markdown(("row", "against", "ratio", "goal", ""), rows, left=2)


def _result(doc: _Doc, workload: str, setting: str) -> Mapping[str, object]:
    for r in _rows(doc, "results"):
        if (r.get("workload"), r.get("setting"), r.get("variant")) == (workload, setting, "sdk"):
            metrics = r.get("metrics")
            return metrics if isinstance(metrics, Mapping) else {}
    return {}


def _median(metrics: Mapping[str, object], name: str) -> str:
    spread = metrics.get(name)
    return _ratio(spread.get("median") if isinstance(spread, Mapping) else None)


def extras(doc: _Doc) -> str:
    """Memory over a million pipelined publishes, and direct reads on the
    3-node cluster, as one bullet list."""
    lines = []
    for key, path in (("rss", "over gRPC"), ("rss_nats", "through NATS")):
        rss = doc.get(key)
        if isinstance(rss, Mapping):
            peak, before = _number(rss.get("peak_rss_mb")), _number(rss.get("peak_rss_mb_before"))
            if peak is not None and before is not None:
                lines.append(
                    f"- {rss.get('messages'):,} pipelined publishes {path} "
                    f"(window {rss.get('window')}): peak resident memory {peak:.0f} MB "
                    f"({before:.0f} MB before the first)."
                )
    for setting, how in (
        ("leader", "from the leader"),
        ("read_replica", "with `read_replica=True`"),
    ):
        metrics = _result(doc, "get RF=3", setting)
        if metrics:
            lines.append(
                f"- `get` by offset on the 3-node cluster (RF=3), {how}: "
                f"p50 {_median(metrics, 'p50_ms')} ms, p99 {_median(metrics, 'p99_ms')} ms."
            )
    return "\n".join(lines)


def provenance(doc: _Doc, path: Path) -> str:
    """Where the figures come from: the file, when, how long, on what."""
    machine = doc.get("machine")
    cores = machine.get("cpu_count") if isinstance(machine, Mapping) else None
    argv = doc.get("argv")
    command = (
        " ".join(["python -m bench", *(str(a) for a in argv)])
        if isinstance(argv, list)
        else "python -m bench"
    )
    duration = _number(doc.get("duration_s"))
    minutes = "" if duration is None else f", {duration / 60:.0f} min"
    started = doc.get("started_at")
    when = str(started)
    if isinstance(started, str):
        with contextlib.suppress(ValueError):
            when = datetime.fromisoformat(started).astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"`{command}`, started {when}{minutes}, {cores} cores; `{path.as_posix()}`"


def render(doc: _Doc, path: Path, *, every_row: bool = False) -> str:
    parts = [provenance(doc, path), throughput_table(doc)]
    if _rows(doc, "latency"):
        parts.append(latency_table(doc))
    if _rows(doc, "ceiling"):
        parts.append(ceiling_table(doc, every_row=every_row))
    if _rows(doc, "targets"):
        parts.append(targets_table(doc))
    more = extras(doc)
    if more:
        parts.append(more)
    return "\n\n".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.readme_table", description=__doc__)
    parser.add_argument("results", type=Path, help="a bench/results/*.json file")
    parser.add_argument(
        "--every-row",
        action="store_true",
        help="every pipelined row against the bound (default: the Future-per-message rows)",
    )
    args = parser.parse_args(argv)
    doc = json.loads(args.results.read_text())
    if not isinstance(doc, dict):
        parser.error(f"{args.results}: not a results document")
    print(render(doc, args.results, every_row=args.every_row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
