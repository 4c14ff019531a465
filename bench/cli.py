"""The command line of ``python -m bench``: run the suite, print a table, write a JSON file.

Environment switches for ``make bench``, which passes no arguments:
``BENCH_QUICK=1`` (same as ``--quick``), ``BENCH_CLUSTER=1`` (``--cluster``),
``BENCH_NO_RSS=1`` (``--no-rss``), ``BENCH_NO_GO=1`` (``--no-go``),
``BENCH_BASELINE=<json>`` (``--baseline``).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import logging
import os
import sys
import time
from pathlib import Path

from bench import machine, report
from bench.suite import CEILING_TARGET, FULL, QUICK, WORKLOADS, Suite, plan_with

ROOT = Path(__file__).resolve().parent.parent
SERVERS_BIN = ROOT / ".cache" / "servers" / "bin"
RESULTS = Path(__file__).resolve().parent / "results"


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


def _find_servers() -> None:
    """Uses the servers ``make server`` builds unless the environment names others."""
    for variable, name in (
        ("LIFTBRIDGE_SERVER_BIN", "liftbridge"),
        ("NATS_SERVER_BIN", "nats-server"),
    ):
        candidate = SERVERS_BIN / name
        if not os.environ.get(variable) and candidate.is_file():
            os.environ[variable] = str(candidate)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Benchmarks of the liftbridge SDK against the bare gRPC floor and Go.",
    )
    parser.add_argument(
        "--quick", action="store_true", default=_flag("BENCH_QUICK"), help="a short smoke run"
    )
    parser.add_argument(
        "--cluster",
        action="store_true",
        default=_flag("BENCH_CLUSTER"),
        help="also run the 3-node RF=3 AckPolicy.ALL workloads (LocalCluster)",
    )
    parser.add_argument(
        "--no-rss",
        action="store_true",
        default=_flag("BENCH_NO_RSS"),
        help="skip the peak-RSS run (1,000,000 publish_async in a subprocess)",
    )
    parser.add_argument(
        "--no-go",
        action="store_true",
        default=_flag("BENCH_NO_GO"),
        help="skip the Go client (bench/go, built with the machine's Go on first use)",
    )
    parser.add_argument(
        "--only",
        nargs="+",
        choices=WORKLOADS,
        metavar="WORKLOAD",
        help=f"run only these workloads: {', '.join(WORKLOADS)}",
    )
    parser.add_argument("--reps", type=int, help="repetitions of every workload")
    parser.add_argument("--output", type=Path, default=RESULTS, help="directory for the JSON file")
    parser.add_argument(
        "--baseline",
        type=Path,
        default=os.environ.get("BENCH_BASELINE") or None,
        metavar="JSON",
        help="an earlier run's JSON file (make bench passes bench/baseline.json): also print "
        "how each SDK/bare and SDK/Go ratio moved since, marking drops over 10%%",
    )
    args = parser.parse_args(argv)
    if args.reps is not None and args.reps < 1:
        parser.error("--reps must be at least 1")
    if args.baseline is not None:
        try:
            args.baseline_document = json.loads(Path(args.baseline).read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            parser.error(f"--baseline {args.baseline}: {e}")
    return args


def _workloads(args: argparse.Namespace) -> list[str]:
    if args.only:
        chosen = list(args.only)
        if args.cluster and "cluster" not in chosen:
            chosen.append("cluster")
        return chosen
    chosen = [w for w in WORKLOADS if w != "cluster"]
    if args.no_rss:
        chosen.remove("rss")
    if args.cluster:
        chosen.append("cluster")
    return chosen


def run(argv: list[str] | None = None) -> tuple[int, Path]:
    """Runs the suite; returns the exit status and the JSON file written."""
    args = _parse(argv)
    _find_servers()
    plan = plan_with(QUICK if args.quick else FULL, reps=args.reps)
    workloads = _workloads(args)

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    description = machine.describe()
    started = datetime.datetime.now(datetime.UTC)
    log(f"bench: {'quick' if args.quick else 'full'} run of {', '.join(workloads)}")
    clock = time.monotonic()
    suite = Suite(plan, workloads, log, go=not args.no_go)
    suite.run()
    duration = time.monotonic() - clock

    print(report.table(suite.results))
    for how, figures in (
        ("Client.publish_async", suite.rss),
        ("NatsStreamPublisher.publish_async", suite.rss_nats),
    ):
        if figures is None:
            continue
        print(
            f"\npeak RSS publishing {int(figures['messages']):,} x {int(figures['value_size'])} B "
            f"with {how} (max_inflight={int(figures['window'])}): "
            f"{figures['peak_rss_mb']:.0f} MB (before publishing: "
            f"{figures['peak_rss_mb_before']:.0f} MB; {figures['msgs_per_s']:,.0f} msgs/s)"
        )
    if suite.targets:
        print("\nSDK paths against each other (msgs/s, client CPU per message):")
        print(report.target_table(suite.targets))
    ceiling = report.ceiling_rows(suite.results, goal=CEILING_TARGET)
    if ceiling:
        print("\nPipelined publishing against the machine's bound (cores / CPU per message):")
        print(report.ceiling_table(ceiling))
    if suite.latency:
        print("\nEnd-to-end latency, publish to handler, SDK against Go (ms):")
        print(report.latency_table(suite.latency))
    for error in suite.errors:
        print(f"FAILED {error['workload']}: {error['error']}")

    comparisons = report.comparisons(suite.results)
    stamp = started.strftime("%Y%m%d-%H%M%S")
    path = args.output / f"{stamp}{'-quick' if args.quick else ''}.json"
    report.write_json(
        path,
        {
            "started_at": started.isoformat(),
            "duration_s": round(duration, 1),
            "mode": "quick" if args.quick else "full",
            "argv": sys.argv[1:] if argv is None else argv,
            "workloads": workloads,
            "plan": dataclasses.asdict(plan),
            "machine": description,
            "results": [result.as_json() for result in suite.results],
            "comparisons": comparisons,
            "targets": suite.targets,
            "latency": suite.latency,
            "ceiling": ceiling,
            "rss": suite.rss,
            "rss_nats": suite.rss_nats,
            "errors": suite.errors,
        },
    )
    if args.baseline is not None:
        now = {"comparisons": comparisons}
        for against, label in (("ratio", "SDK/bare"), ("ratio_go", "SDK/Go")):
            print(f"\n{label} msgs/s against {args.baseline}:")
            print(report.ratio_changes(args.baseline_document, now, against))
            fell = report.drops(args.baseline_document, now, against)
            print(
                f"{len(fell)} {label} row(s) fell by more than {report.DROP:.0%}"
                + (": " + ", ".join(f"{w} {s} {n} B" for w, s, n in fell) if fell else "")
            )
    print(f"\n{len(suite.results)} results in {duration:.0f}s, written to {path}")
    return (1 if suite.errors else 0), path


def main() -> int:
    logging.basicConfig(
        level=logging.WARNING,
        format="%(asctime)s %(threadName)s %(name)s %(levelname)s %(message)s",
    )
    status, _ = run()
    return status
