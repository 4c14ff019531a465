"""``python -m chaos``: the fault matrix and the million-input fuzz run.

    python -m chaos                    every row, then the fuzz run
    python -m chaos --fast             the subset ``make test`` runs
    python -m chaos --rows leader-kill,handlers --fuzz 0

Prints a table and writes it as JSON (``--json``, default
``chaos/results/last.json``). Exits 1 when a row FAILs or the fuzzer finds
anything; a known failure (an SDK defect already filed) does not fail the run
but is never counted as a pass.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path

from chaos import fuzz, fuzz_http2, fuzz_nats
from chaos.fuzz import FuzzReport
from chaos.rows import FAST, ROWS, RowResult, run_row

ROOT = Path(__file__).resolve().parent.parent
SERVERS = ROOT / ".cache" / "servers" / "bin"
RESULTS = Path(__file__).resolve().parent / "results" / "last.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos", description=__doc__)
    parser.add_argument("--fast", action="store_true", help="only the make-test subset")
    parser.add_argument("--rows", help="comma-separated row names (default: all; none: no rows)")
    parser.add_argument("--fuzz", type=int, default=1_000_000, help="fuzz inputs (0: none)")
    parser.add_argument(
        "--fuzz-http2",
        type=int,
        default=1_000_000,
        help="HTTP/2 frame reader fuzz inputs, each fed whole and byte by byte (0: none)",
    )
    parser.add_argument(
        "--fuzz-nats",
        type=int,
        default=1_000_000,
        help="NATS frame parser fuzz inputs, each fed whole and byte by byte (0: none)",
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=870.0,
        help="seconds for the whole run (make chaos: timeout 900): the fuzz passes share "
        "what the rows leave and stop short of their inputs rather than overrun it",
    )
    parser.add_argument("--json", type=Path, default=RESULTS, help="where to write results")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.ERROR, format="%(asctime)s %(threadName)s %(name)s %(levelname)s %(message)s"
    )
    for variable, name in (
        ("LIFTBRIDGE_SERVER_BIN", "liftbridge"),
        ("NATS_SERVER_BIN", "nats-server"),
    ):
        if not os.environ.get(variable) and (SERVERS / name).is_file():
            os.environ[variable] = str(SERVERS / name)

    names = list(FAST) if args.fast else (args.rows.split(",") if args.rows else list(ROWS))
    if args.rows == "none":
        names = []  # only the fuzz passes
    unknown = [name for name in names if name not in ROWS]
    if unknown:
        parser.error(f"unknown rows {unknown}; known: {', '.join(ROWS)}")
    started = time.monotonic()
    results: list[RowResult] = []
    for name in names:
        print(f"-- {name} ...", flush=True)
        results.append(run_row(name))
        print(_line(results[-1]), flush=True)
    report: dict[str, object] = {"rows": [r.as_json() for r in results]}
    passes = [
        (key, what, run, asked)
        for key, what, run, asked in (
            ("fuzz", "decoders", fuzz.run, args.fuzz),
            ("fuzz_http2", "HTTP/2 frame reader", fuzz_http2.run, args.fuzz_http2),
            ("fuzz_nats", "NATS frame parser", fuzz_nats.run, args.fuzz_nats),
        )
        if asked
    ]
    fuzzed: list[tuple[str, FuzzReport]] = []
    for left, (key, what, run, asked) in enumerate(passes):
        # What the rows left of the budget, shared by the passes still to run.
        budget = max(0.0, args.budget - (time.monotonic() - started)) / (len(passes) - left)
        print(f"-- fuzz the {what}: {asked:,} inputs (at most {budget:.0f} s) ...", flush=True)
        done = run(asked, budget=budget)
        report[key] = done.as_json()
        fuzzed.append((what, done))
    fuzz_failed = any(done.findings for _, done in fuzzed)
    report["seconds"] = round(time.monotonic() - started, 1)
    print()
    print(table(results))
    for what, done in fuzzed:
        print(done.line(what))
    print(f"total {report['seconds']} s; JSON: {args.json}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    failed = any(r.status == "FAIL" for r in results)
    return 1 if failed or fuzz_failed else 0


_COLUMNS = ("sent", "acked", "failed", "no_answer", "lost", "unexpected", "recovered", "duplicates")


def _line(result: RowResult) -> str:
    reasons = result.problems + result.known + result.notes
    return f"   {result.status} in {result.seconds} s" + "".join(f"\n   - {r}" for r in reasons)


def table(results: list[RowResult]) -> str:
    """The results as a Markdown table."""
    head = ["row", "status", *_COLUMNS, "sub gaps/repeats", "max overshoot s", "s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        v = r.verdict
        counts = [str(getattr(v, c)) if v is not None else "-" for c in _COLUMNS]
        sub = r.subscription
        subs = f"{sub['gaps']}/{sub['repeats']}" if sub is not None else "-"
        over = f"{v.max_overshoot:.2f}" if v is not None else "-"
        lines.append(
            "| " + " | ".join([r.name, r.status, *counts, subs, over, f"{r.seconds:.0f}"]) + " |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
