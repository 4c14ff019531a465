"""``bench.readme_table``: the README's figures from one results file (no
benchmark is run here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.readme_table import (
    ceiling_table,
    extras,
    latency_table,
    main,
    provenance,
    targets_table,
    throughput_table,
)


def _comparison(
    workload: str, setting: str, size: int, sdk: float, go: float | None
) -> dict[str, object]:
    return {
        "workload": workload,
        "setting": setting,
        "value_size": size,
        "metric": "msgs_per_s",
        "sdk": sdk,
        "bare": None,
        "go": go,
        "ratio_go": None if go is None else sdk / go,
    }


def test_throughput_rows_come_from_the_file_and_missing_ones_print_a_dash() -> None:
    doc = {
        "comparisons": [
            _comparison("publish_async", "LEADER window=1024", 100, 28_088.0, 29_790.0),
            # Same row but a cpu metric: not a rate, ignored.
            {
                **_comparison("publish_async", "LEADER window=1024", 100, 9.0, 8.0),
                "metric": "cpu_us_per_msg",
            },
        ]
    }
    lines = throughput_table(doc).splitlines()
    row = next(line for line in lines if line.startswith("| `publish_async`, `max_inflight=1024`"))
    assert [cell.strip() for cell in row.split("|")[2:-1]] == ["28,088", "", "29,790", "0.94"]
    pynats2 = next(line for line in lines if "pynats2" in line)
    assert [cell.strip() for cell in pynats2.split("|")[2:-1]] == ["-", "", "", "-"]


def test_a_share_just_under_the_goal_does_not_read_as_met() -> None:
    doc = {
        "ceiling": [
            {
                "workload": "nats publish_async",
                "setting": "LEADER window=1024",
                "value_size": 100,
                "cpu_us_per_msg": 21.9,
                "server_cpu_us_per_msg": 19.6,
                "of_bound": 0.7998,
                "go_of_bound": 0.95,
                "met": False,
            }
        ]
    }
    row = ceiling_table(doc).splitlines()[2]
    assert [cell.strip() for cell in row.split("|")[1:-1]] == [
        "nats publish_async, LEADER window=1024, 100 B",
        "21.9",
        "19.6",
        "0.79",
        "0.95",
        "**not met**",
    ]


def test_the_bound_table_shows_the_future_rows_unless_asked_for_every_row() -> None:
    row = {"workload": "publish_async", "value_size": 100, "of_bound": 0.9, "met": True}
    doc = {
        "ceiling": [
            {**row, "setting": "LEADER window=1024"},
            {**row, "setting": "LEADER window=1024 handler, future=False"},
            {**row, "setting": "LEADER window=1024 publish_many_async, batch=100"},
        ]
    }
    assert len(ceiling_table(doc).splitlines()) == 3  # header, rule, one row
    assert "LEADER window=1024," in ceiling_table(doc).splitlines()[2]
    assert len(ceiling_table(doc, every_row=True).splitlines()) == 5


def test_other_targets_read_met_only_at_their_goal() -> None:
    doc = {
        "targets": [
            {
                "setting": "fetch(500)",
                "value_size": 100,
                "against": "SDK subscribe handler",
                "ratio": 0.8998,
                "goal": 0.9,
            },
            {
                "setting": "subscribe earliest TLS",
                "value_size": 1024,
                "against": "plaintext",
                "ratio": 0.8,
                "goal": 0.8,
            },
        ]
    }
    rows = [
        [c.strip() for c in line.split("|")[1:-1]] for line in targets_table(doc).splitlines()[2:]
    ]
    assert rows == [
        ["fetch(500), 100 B", "SDK subscribe handler", "0.89", "≥ 0.9", "**not met**"],
        ["subscribe earliest TLS, 1 KiB", "plaintext", "0.80", "≥ 0.8", "met"],
    ]


def test_a_p99_ratio_just_over_the_goal_does_not_read_as_met() -> None:
    doc = {
        "latency": [
            {
                "setting": "10,000 msgs/s",
                "value_size": 1024,
                "sdk_p50_ms": 1.5,
                "go_p50_ms": 1.25,
                "sdk_p99_ms": 12.004,
                "go_p99_ms": 10.0,
                "p99_ratio": 1.2004,
                "met": False,
            }
        ]
    }
    row = latency_table(doc).splitlines()[2]
    assert [cell.strip() for cell in row.split("|")[1:-1]] == [
        "10,000 msgs/s, 1 KiB",
        "1.50 / 1.25",
        "12.00 / 10.00",
        "1.21, **not met**",
    ]


def test_main_prints_the_run_it_was_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = tmp_path / "20990101-000000.json"
    results.write_text(
        json.dumps(
            {
                "argv": ["--only", "nats"],
                "started_at": "2099-01-01T00:00:00+00:00",
                "duration_s": 600.0,
                "machine": {"cpu_count": 2},
                "comparisons": [_comparison("nats publish", "LEADER", 100, 2_275.0, 2_243.0)],
            }
        )
    )
    assert main([str(results)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(
        "`python -m bench --only nats`, started 2099-01-01 00:00 UTC, 10 min, 2 cores;"
    )
    assert "| `NatsStreamPublisher.publish`, one at a time" in out and "1.01 |" in out


def test_main_refuses_a_file_that_is_not_a_results_document(tmp_path: Path) -> None:
    results = tmp_path / "list.json"
    results.write_text("[]")
    with pytest.raises(SystemExit) as raised:
        main([str(results)])
    assert raised.value.code == 2


def test_extras_quote_memory_and_cluster_reads_from_the_file() -> None:
    doc = {
        "rss": {
            "messages": 1_000_000,
            "window": 1024,
            "peak_rss_mb": 49.87,
            "peak_rss_mb_before": 47.4,
        },
        "results": [
            {
                "workload": "get RF=3",
                "setting": "leader",
                "variant": "sdk",
                "metrics": {"p50_ms": {"median": 2.93}, "p99_ms": {"median": 10.9}},
            }
        ],
    }
    assert extras(doc).splitlines() == [
        "- 1,000,000 pipelined publishes over gRPC (window 1024): peak resident memory 50 MB"
        " (47 MB before the first).",
        "- `get` by offset on the 3-node cluster (RF=3), from the leader:"
        " p50 2.93 ms, p99 10.90 ms.",
    ]


def test_the_readme_quotes_the_kept_run_as_printed() -> None:
    """README.md's performance tables are bench/readme_run.json printed by
    this module, not figures typed from several runs."""
    root = Path(__file__).resolve().parents[2]
    kept = json.loads((root / "bench" / "readme_run.json").read_text())
    readme = (root / "README.md").read_text()
    for part in (
        provenance(kept, Path("bench/readme_run.json")),
        throughput_table(kept),
        latency_table(kept),
        ceiling_table(kept),
        targets_table(kept),
        extras(kept),
    ):
        assert part and part in readme


def test_the_performance_notes_quote_the_same_run_with_every_row() -> None:
    root = Path(__file__).resolve().parents[2]
    kept = json.loads((root / "bench" / "readme_run.json").read_text())
    notes = (root / "bench" / "README_PERFORMANCE.md").read_text()
    latest = notes[notes.index("## Latest full run") :]
    assert latest.startswith(
        "## Latest full run\n\n" + provenance(kept, Path("bench/readme_run.json"))
    )
    for part in (throughput_table(kept), latency_table(kept), ceiling_table(kept, every_row=True)):
        assert part in latest
