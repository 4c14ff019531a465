"""The benchmark report's comparison of two runs (no benchmark is run here)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from bench.report import ratio_changes

REPO_ROOT = Path(__file__).resolve().parents[2]


def _document(*rows: tuple[str, str, int, str, float | None]) -> dict[str, object]:
    return {
        "comparisons": [
            {"workload": w, "setting": s, "value_size": size, "metric": m, "ratio": r}
            for w, s, size, m, r in rows
        ]
    }


def test_ratio_changes_lines_up_both_runs_and_marks_what_one_lacks() -> None:
    before = _document(
        ("publish", "LEADER", 100, "msgs_per_s", 0.72),
        ("publish", "LEADER", 100, "cpu_us_per_msg", 1.3),  # not a throughput ratio: ignored
        ("subscribe", "earliest", 1024, "msgs_per_s", 0.9),
    )
    after = _document(
        ("publish", "LEADER", 100, "msgs_per_s", 0.95),
        ("publish_async", "LEADER window=1024", 100, "msgs_per_s", 0.97),
    )
    lines = ratio_changes(before, after).splitlines()
    assert lines[0].split() == ["workload", "setting", "size", "before", "after", "change"]
    assert lines[2].split() == ["publish", "LEADER", "100", "B", "0.72", "0.95", "+0.23"]
    assert lines[3].split() == ["subscribe", "earliest", "1", "KiB", "0.90", "-", "-"]
    assert lines[4].split() == [
        *("publish_async", "LEADER", "window=1024"),
        *("100", "B", "-", "0.97", "-"),
    ]
    assert len(lines) == 5


def test_an_unreadable_baseline_is_refused_before_anything_runs(tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--baseline", str(missing)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert f"--baseline {missing}" in done.stderr
