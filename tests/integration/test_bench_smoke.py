"""The benchmark suite's quick mode runs end to end, so the bench code cannot rot.

Nothing here judges speed: the machine running the tests decides that, not
the code. The test only checks that every workload produced figures.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

QUICK_WORKLOADS = ("publish", "publish_async", "subscribe", "pull", "e2e", "nats", "rss")


def test_quick_bench_writes_figures_for_every_workload(tmp_path: Path) -> None:
    baseline = tmp_path / "baseline" / "earlier.json"
    baseline.parent.mkdir()
    baseline.write_text(
        json.dumps(
            {
                "comparisons": [
                    {
                        "workload": "subscribe",
                        "setting": "earliest",
                        "value_size": 100,
                        "metric": "msgs_per_s",
                        "ratio": 0.5,
                    }
                ]
            }
        ),
        encoding="utf-8",
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "--quick",
            "--only",
            *QUICK_WORKLOADS,
            "--output",
            str(tmp_path),
            "--baseline",
            str(baseline),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert done.returncode == 0, f"bench failed:\n{done.stdout}\n{done.stderr}"
    assert "SDK/bare" in done.stdout and "SDK/Go" in done.stdout  # the table was printed
    # ... and how the ratios moved since the baseline run
    _, changes = done.stdout.split(f"SDK/bare msgs/s against {baseline}:")
    bare_changes, go_changes = changes.split(f"SDK/Go msgs/s against {baseline}:")
    (moved,) = [
        line.split()
        for line in bare_changes.splitlines()
        if line.split()[:2] == ["subscribe", "earliest"] and " 100 B " in line
    ]
    assert moved[4] == "0.50" and moved[6][0] in "+-"
    assert "SDK/bare row(s) fell by more than 10%" in bare_changes
    # The baseline had no SDK/Go ratio for the row: nothing to compare, no drop.
    assert "0 SDK/Go row(s) fell by more than 10%" in go_changes

    (path,) = tmp_path.glob("*-quick.json")
    document = json.loads(path.read_text(encoding="utf-8"))
    assert document["errors"] == []
    assert document["machine"]["cpu_count"] >= 1
    assert {"python", "grpcio", "protobuf", "platform"} <= document["machine"].keys()

    workloads = {(r["workload"], r["variant"]) for r in document["results"]}
    for workload in ("publish", "publish_async", "subscribe", "pull", "e2e latency"):
        assert (workload, "sdk") in workloads
        assert (workload, "bare") in workloads
    for workload in ("publish", "publish_async", "subscribe"):
        assert (workload, "go") in workloads  # the Go client, built from bench/go
    assert ("nats publish_async", "sdk") in workloads
    # end-to-end latency: the SDK against Go at 1,000 and 10,000 msgs/s and
    # at Go's highest sustained rate, for both sizes
    assert ("e2e latency", "go") in workloads
    assert [(row["setting"].split()[0], row["value_size"]) for row in document["latency"]] == [
        ("1,000", 100),
        ("10,000", 100),
        (document["latency"][2]["setting"].split()[0], 100),
        ("1,000", 1024),
        ("10,000", 1024),
        (document["latency"][5]["setting"].split()[0], 1024),
    ]
    assert all("Go's highest" in document["latency"][i]["setting"] for i in (2, 5))
    assert all(row["p99_ratio"] > 0 for row in document["latency"])
    assert "End-to-end latency, publish to handler" in done.stdout
    # each throughput row with the server's CPU and the machine's bound
    pipelined = {(row["workload"], row["value_size"]) for row in document["ceiling"]}
    assert {("publish_async", 100), ("nats publish_async", 1024)} <= pipelined
    assert all(row["of_bound"] > 0 and row["bound_msgs_per_s"] > 0 for row in document["ceiling"])
    assert "against the machine's bound" in done.stdout
    settings = {(r["workload"], r["setting"], r["variant"]) for r in document["results"]}
    assert ("subscribe", "iterated", "sdk") in settings  # the same read, without a handler
    # pull: fetch and the handler subscribe, each next to the bare floor, and
    # fetch against the handler (the target) for both value sizes
    for setting in ("fetch(500)", "subscribe handler"):
        assert {("pull", setting, "sdk"), ("pull", setting, "bare")} <= settings
    assert [(t["workload"], t["value_size"]) for t in document["targets"]] == [
        ("pull", 100),
        ("pull", 1024),
    ]
    assert all(
        t["ratio"] > 0 and t["against"] == "SDK subscribe handler" for t in document["targets"]
    )
    assert "SDK paths against each other" in done.stdout
    for result in document["results"]:
        for spread in result["metrics"].values():
            assert spread["low"] <= spread["median"] <= spread["high"]

    both = {
        (c["workload"], c["value_size"])
        for c in document["comparisons"]
        if c["ratio"] is not None and c["ratio_go"] is not None
    }
    assert {("publish", 100), ("publish_async", 100), ("subscribe", 100)} <= both
    ratios = [c[r] for c in document["comparisons"] for r in ("ratio", "ratio_go")]
    assert all(ratio is None or ratio > 0 for ratio in ratios)
    assert ("nats publish_async", "go") in workloads
    for figures in (document["rss"], document["rss_nats"]):  # over gRPC and over NATS
        assert figures["messages"] == 5_000
        assert figures["peak_rss_mb"] > 0
