"""Where the chargeback page's first load goes on the server (not a test): the month's finance
statement (``reports.statement.build.build_statement``, what the page's figures come from) split into its
parts, each the median of ``--runs`` calls after a warm-up, in one process; first the cold build (a
fresh process after the statement's imports, as the dashboard server's first chargeback load).

    .venv/bin/python benchmarks/statement_parts.py --warehouse /work/bench/rm1024.duckdb --period 2026-11

Parts: the month's lines (``ledger.periods.statement_lines``), the tables loaded once
(``analytics.load.load_tables``), the usage per line and host (attribution), the capacity × price
(the reconciliation computes it twice: per currency and per GPU pool).
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import duckdb
from gpuledger.dashboards import queries


def timed(fn, runs: int) -> tuple[float, float]:
    """(median wall s, median CPU s) of ``runs`` calls."""
    walls, cpus = [], []
    for _ in range(runs):
        wall, cpu = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls), statistics.median(cpus)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warehouse", type=Path, required=True)
    parser.add_argument("--period", default="2026-11", help="YYYY-MM")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    if not args.warehouse.is_file():
        parser.error(f"--warehouse {args.warehouse}: no such file; build one with `gpuledger simulate warehouse "
                     "--gpus 1024 --days 7 --seed 42 -w FILE` and `gpuledger pipelines run-once -w FILE`")
    if not re.fullmatch(r"\d{4}-(0[1-9]|1[0-2])", args.period):
        parser.error(f"--period {args.period!r}: a month, YYYY-MM (e.g. 2026-11)")
    queries.warm_imports()
    from gpuledger.analytics.load import load_tables
    from gpuledger.analytics.queries import data_now
    from gpuledger.config_store import policy_in_force
    from gpuledger.ledger.periods import statement_lines
    from gpuledger.reports.statement import build as s
    from gpuledger.rules.periods import month_bounds

    con = duckdb.connect(str(args.warehouse), read_only=True)
    cold = timed(lambda: s.build_statement(con, args.period), 1)
    policy, now = policy_in_force(con, None), data_now(con)
    start, end = month_bounds(args.period)
    tables = load_tables(con, start=start, end=end, samples=False)
    lines = statement_lines(con, args.period, policy=policy, now=now)
    usage_end = min(end, lines["billed_through"].max() or end)
    grace = timedelta(hours=policy.chargeback.retire_after_hours)
    parts = {
        "build_statement, cold (first in the process)": cold,
        "build_statement, warm": timed(lambda: s.build_statement(con, args.period), args.runs),
        "the month's lines": timed(lambda: statement_lines(con, args.period, policy=policy, now=now), args.runs),
        "the tables": timed(lambda: load_tables(con, start=start, end=end, samples=False), args.runs),
        "usage per line and host": timed(lambda: s._usage(con, tables, start=start, end=usage_end,
                                                          now=min(now, usage_end), policy=policy), args.runs),
        "capacity x price (once)": timed(lambda: s._capacity(con, tables, start=start, end=usage_end,
                                                             config_version=None, closed=False,
                                                             retire_grace=grace), args.runs),
    }
    print(f"{args.warehouse} {args.period}: {lines.height} lines; medians of {args.runs}")
    print("| part | wall s | CPU s |\n|---|---:|---:|")
    for name, (wall, cpu) in parts.items():
        print(f"| {name} | {wall:.3f} | {cpu:.3f} |")


if __name__ == "__main__":
    main()
