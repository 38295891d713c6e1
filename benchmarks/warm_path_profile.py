"""Where a warm dashboard question's time goes (not a test): the idle-60-minute question
(``dashboards.queries.squatting_open``) on an analysed warehouse, split into its parts, each the
median (and best) of ``--runs`` calls after a warm-up, in one process.

    .venv/bin/python benchmarks/warm_path_profile.py --warehouse data/bench/prom/week256-materialized.duckdb

Parts: the kept reader's enter/exit alone; ``SELECT 1`` and ``SELECT count(*)`` through it (DuckDB's
floor per statement); the question's SQL executed, then fetched, then framed
(``queries.result_frame``); the whole call as the page makes it.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpuledger.dashboards import queries as q

from gpuledger import warehouse


def timed(fn, runs: int) -> tuple[float, float]:
    fn()
    seconds = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        seconds.append(time.perf_counter() - t)
    return statistics.median(seconds), min(seconds)


def parts(path: str) -> dict:
    sql = q.sql("squatting_open")

    def through_kept(work):
        def call():
            with warehouse.kept_reader(path) as con:
                return work(con)
        return call

    return {
        "kept reader enter + exit": through_kept(lambda con: None),
        "SELECT 1": through_kept(lambda con: con.execute("SELECT 1").fetchall()),
        "SELECT count(*) FROM squatting_findings": through_kept(
            lambda con: con.execute("SELECT count(*) FROM squatting_findings").fetchall()),
        "the question's SQL: execute": through_kept(lambda con: con.execute(sql)),
        "execute + fetch": through_kept(lambda con: con.execute(sql).fetchall()),
        "execute + result_frame": through_kept(lambda con: q.result_frame(con.execute(sql))),
        "queries.squatting_open (the page's call)": lambda: q.squatting_open(path, ()),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--warehouse", required=True, help="an analysed warehouse (pipelines run-once done)")
    ap.add_argument("--runs", type=int, default=300)
    args = ap.parse_args()
    try:
        with warehouse.kept_reader(args.warehouse) as con:
            rows = con.execute("SELECT count(*) FILTER (WHERE resolved_at IS NULL), count(*) "
                               "FROM squatting_findings").fetchall()[0]
    except warehouse.WarehouseError as exc:  # a missing or unreadable file: its one line, exit 1
        sys.exit(f"warm_path_profile: {exc}")
    print(f"{args.warehouse}: {rows[0]} open findings of {rows[1]}; median / best of {args.runs} calls, ms")
    for name, fn in parts(args.warehouse).items():
        median, best = timed(fn, args.runs)
        print(f"  {name:<45} {median * 1e3:7.3f} / {best * 1e3:.3f}")


if __name__ == "__main__":
    main()
