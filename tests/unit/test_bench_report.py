"""The benchmark report's comparison of two runs (no benchmark is run here)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.report import (
    BARE,
    GO,
    SDK,
    Result,
    ceiling_rows,
    ceiling_table,
    drops,
    latency_row,
    latency_table,
    ratio_changes,
    target_row,
    target_table,
)
from bench.stats import Run, process_cpu_seconds, summarise
from bench.suite import FULL, QUICK, Suite, _Entry

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
    assert "DROP" not in lines[2]
    assert lines[2].split() == ["publish", "LEADER", "100", "B", "0.72", "0.95", "+0.23"]
    assert lines[3].split() == ["subscribe", "earliest", "1", "KiB", "0.90", "-", "-"]
    assert lines[4].split() == [
        *("publish_async", "LEADER", "window=1024"),
        *("100", "B", "-", "0.97", "-"),
    ]
    assert len(lines) == 5


def test_a_ratio_that_falls_over_ten_percent_is_marked_and_listed() -> None:
    before = _document(
        ("publish", "LEADER", 100, "msgs_per_s", 1.00),
        ("subscribe", "earliest", 100, "msgs_per_s", 1.00),
    )
    after = _document(
        ("publish", "LEADER", 100, "msgs_per_s", 0.91),  # -9 %: within
        ("subscribe", "earliest", 100, "msgs_per_s", 0.85),  # -15 %: a drop
    )
    lines = ratio_changes(before, after).splitlines()
    assert lines[2].split()[-1] == "-0.09"
    assert lines[3].split()[-1] == "DROP"
    assert drops(before, after) == [("subscribe", "earliest", 100)]


def test_drops_read_the_go_ratio_when_asked() -> None:
    before = {"comparisons": [_go_row(1.2, 1.0)]}
    after = {"comparisons": [_go_row(1.2, 0.5)]}
    assert drops(before, after) == []
    assert drops(before, after, "ratio_go") == [("publish", "LEADER", 100)]


def _go_row(bare: float, go: float) -> dict[str, object]:
    return {
        "workload": "publish",
        "setting": "LEADER",
        "value_size": 100,
        "metric": "msgs_per_s",
        "ratio": bare,
        "ratio_go": go,
    }


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


def _result(setting: str, rate: float, cpu: float) -> Result:
    metrics = summarise([Run(10, 10 / rate, 1000, 10 * cpu / 1e6)])
    return Result(
        workload="pull",
        setting=setting,
        value_size=100,
        variant="sdk",
        count=10,
        metrics=metrics,
        shown=("msgs_per_s", "cpu_us_per_msg"),
    )


def test_a_target_row_compares_two_sdk_paths_and_says_whether_the_goal_is_met() -> None:
    fetch = _result("fetch(500)", 90_000.0, 10.0)
    handler = _result("subscribe handler", 100_000.0, 9.0)
    row = target_row(fetch, handler, goal=0.9, against="SDK subscribe handler")
    assert row["ratio"] == pytest.approx(0.9)
    assert row["cpu_us_per_msg"] == pytest.approx(10.0)
    assert row["against_cpu_us_per_msg"] == pytest.approx(9.0)
    slower = target_row(
        _result("fetch(500)", 80_000.0, 12.0), handler, goal=0.9, against="SDK subscribe handler"
    )
    lines = target_table([row, slower]).splitlines()
    assert lines[0].split()[:4] == ["workload", "setting", "size", "against"]
    assert lines[2].endswith(">= 0.9 met") and "90,000 (10.00 us)" in lines[2]
    assert "100,000 (9.00 us)" in lines[2] and " 0.90 " in lines[2]
    assert lines[3].endswith(">= 0.9 NOT met") and " 0.80 " in lines[3]


def _latencies(variant: str, *seconds: float) -> Result:
    runs = [Run(len(seconds), 1.0, 100, 0.01, tuple(seconds))]
    return Result(
        workload="e2e latency",
        setting="1,000 msgs/s",
        value_size=100,
        variant=variant,
        count=len(seconds),
        metrics=summarise(runs),
        shown=("p50_ms", "p99_ms", "p999_ms", "max_ms"),
    )


def test_a_latency_row_bounds_the_sdk_p99_by_a_multiple_of_go() -> None:
    # 1,000 latencies of 1..1000 ms: p50 500.5 ms, p99 990.01, p99.9 999.001, max 1000
    go = _latencies(GO, *(n / 1000 for n in range(1, 1001)))
    close = _latencies(SDK, *(1.1 * n / 1000 for n in range(1, 1001)))
    far = _latencies(SDK, *(1.3 * n / 1000 for n in range(1, 1001)))
    assert go.metrics["p999_ms"].median == pytest.approx(999.001)
    assert go.metrics["max_ms"].median == pytest.approx(1000.0)
    met, missed = (latency_row(r, go, goal=1.2) for r in (close, far))
    assert met["p99_ratio"] == pytest.approx(1.1) and met["met"] is True
    assert missed["p99_ratio"] == pytest.approx(1.3) and missed["met"] is False
    assert met["go_p50_ms"] == pytest.approx(500.5)
    lines = latency_table([met, missed]).splitlines()
    assert lines[2].endswith("<= 1.2 met") and " 1.10 " in lines[2]
    assert "500.50 / 990.01 / 999.00 / 1000.00" in lines[2]
    assert lines[3].endswith("<= 1.2 NOT met") and " 1.30 " in lines[3]


def test_a_run_with_the_server_cpu_reads_against_the_machine_bound() -> None:
    # 10 us of client and 10 us of server CPU a message on 2 cores: 100,000 msgs/s
    run = Run(1000, 0.05, 100_000, 0.01, server_cpu_seconds=0.01, cores=2)
    figures = run.metrics()
    assert figures["server_cpu_us_per_msg"] == pytest.approx(10.0)
    assert figures["bound_msgs_per_s"] == pytest.approx(100_000.0)
    assert figures["of_bound"] == pytest.approx(0.2)  # 20,000 msgs/s of 100,000
    assert "of_bound" not in Run(1000, 0.05, 100_000, 0.01).metrics()  # server not measured
    both = Run.combined([run, Run(1000, 0.05, 100_000, 0.01, server_cpu_seconds=0.03, cores=2)])
    assert both.server_cpu_seconds == pytest.approx(0.04) and both.cores == 2
    result = Result("publish_async", "LEADER", 100, SDK, 1000, summarise([run]), ())
    (row,) = ceiling_rows([result], goal=0.8)
    assert row["of_bound"] == pytest.approx(0.2) and row["met"] is False
    assert row["go_of_bound"] is None  # Go did not run this setting
    assert ceiling_table([row]).splitlines()[2].endswith(" -  >= 0.8 NOT met")


def test_the_ceiling_rows_show_go_s_share_in_the_same_setting_beside_the_sdk_s() -> None:
    # Go: 30,000 msgs/s at 10 + 10 us on 2 cores, 0.3 of 100,000; another setting's Go row
    # (0.5) and the SDK's bare floor must not be taken for it.
    go = Run(1000, 1000 / 30_000, 100_000, 0.01, server_cpu_seconds=0.01, cores=2)
    other = Run(1000, 0.02, 100_000, 0.01, server_cpu_seconds=0.01, cores=2)
    sdk = Run(1000, 0.05, 100_000, 0.01, server_cpu_seconds=0.01, cores=2)
    results = [
        Result("publish_async", "window=32", 100, SDK, 1000, summarise([sdk]), ()),
        Result("publish_async", "window=32", 100, GO, 1000, summarise([go]), ()),
        Result("publish_async", "window=32", 100, BARE, 1000, summarise([other]), ()),
        Result("publish_async", "window=1024", 100, GO, 1000, summarise([other]), ()),
    ]
    (row,) = ceiling_rows(results, goal=0.8)
    assert row["of_bound"] == pytest.approx(0.2)
    assert row["go_of_bound"] == pytest.approx(0.3)
    line = ceiling_table([row]).splitlines()[2]
    assert " 0.20 " in line and " 0.30 " in line and line.endswith(">= 0.8 NOT met")


def test_process_cpu_seconds_reads_this_process() -> None:
    spent = process_cpu_seconds(os.getpid())
    assert spent is not None and spent > 0


class _Burn:
    """A driver that spends 50 ms of this process's CPU per run."""

    def run(self, count: int) -> Run:
        start = time.process_time()
        while time.process_time() - start < 0.05:
            pass
        return Run(count, 0.05, count, time.process_time() - start)

    def close(self) -> None:
        pass


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0]


def test_each_row_is_charged_the_cpu_of_its_own_server() -> None:
    # The suite's own server idles (a sleeping process); the second row names
    # this process as its server, which burns CPU during the row's run: only
    # that row may be charged it (the TLS rows were charged the plaintext
    # server's CPU instead of their own).
    idle = subprocess.Popen(["sleep", "60"])
    try:
        for _ in range(500):  # until it sleeps (bounded: 5 s at most)
            if _state(idle.pid) == "S":
                break
            time.sleep(0.01)
        suite = Suite(QUICK, (), lambda line: None, go=False)
        suite._server_pids = (idle.pid,)
        plain = _Entry("tls", "plaintext", 100, SDK, _Burn(), ())
        secure = _Entry("tls", "TLS", 100, SDK, _Burn(), (), server_pids=(os.getpid(),))
        suite._measure([plain, secure], 10, 1, 0)
    finally:
        idle.kill()
        idle.wait()
    charged = [r.metrics["server_cpu_us_per_msg"].median for r in suite.results]
    assert charged[0] == 0.0
    # Most of the 50 ms burnt, per message: /proc counts CPU in 10 ms ticks, so it
    # may read 40 ms, which the float division puts a hair under 4,000 us.
    assert charged[1] >= 0.03 / 10 * 1e6


def test_a_pipelined_repetition_lasts_sixty_windows_at_least() -> None:
    # At a window of 1,024 a 20,000-message repetition was 20 windows: its
    # fill and drain weighed in. The full plan stretches large windows only.
    assert FULL.pipelined_count_for(1024) == 61_440
    assert FULL.pipelined_count_for(256) == FULL.pipelined_count == 20_000
    assert FULL.pipelined_count_for(32) == 20_000
    assert QUICK.pipelined_count_for(1024) == QUICK.pipelined_count
