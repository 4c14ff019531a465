"""The TLS rows of ``make bench`` alone, at a size of your choosing.

Issue 24 asks that a TLS client (what production runs) publish and subscribe
at least at 0.8 of a plaintext one. This runs the suite's ``tls`` workload
(:meth:`bench.suite.Suite._tls`: a plaintext and a TLS ``LocalServer``, the
pipelined publish and the subscribe rows taking turns, each row charged its
own server's CPU) with ``--count`` messages per repetition and prints each
TLS/plaintext ratio with both rows' client and server CPU per message.

Run: ``python -m bench.tls_probe [--count 20000] [--reps 3] [--size 100]``.
"""

from __future__ import annotations

import argparse
import dataclasses

from bench.cli import _find_servers
from bench.report import Result
from bench.suite import FULL, Suite

_SHOWN = ("msgs_per_s", "cpu_us_per_msg", "server_cpu_us_per_msg", "of_bound")


def _figures(result: Result) -> str:
    return "  ".join(
        f"{name} {result.metrics[name].median:,.2f}" for name in _SHOWN if name in result.metrics
    )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.tls_probe", description=__doc__)
    parser.add_argument("--count", type=int, default=20_000, help="messages per repetition")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--size", type=int, nargs="+", default=[100], help="value sizes")
    args = parser.parse_args()
    _find_servers()
    plan = dataclasses.replace(
        FULL,
        sizes=tuple(args.size),
        pipelined_count=args.count,
        pipelined_reps=args.reps,
        tls_subscribe_messages=args.count,
        subscribe_reps=args.reps,
    )
    suite = Suite(plan, ("tls",), print, go=False)
    suite.run()
    if suite.errors:
        raise SystemExit(f"the tls workload failed: {suite.errors}")
    for plain, secure in zip(suite.results[::2], suite.results[1::2], strict=True):
        ratio = secure.metrics["msgs_per_s"].median / plain.metrics["msgs_per_s"].median
        print(f"{secure.setting} {secure.value_size} B: TLS/plaintext {ratio:.2f}")
        print(f"    plaintext  {_figures(plain)}")
        print(f"    TLS        {_figures(secure)}")


if __name__ == "__main__":
    main()
