"""Fleet-scale benchmark (issue 20, part 3 of its figures): 16,384 simulated GPUs x 7 days held as
5-minute aggregates (what `ingest prometheus --aggregate 5m` stores), through the same analytics as
benchmarks/analytics_bench.py: the full 7-day recompute, the incremental 5-minute update, peak RSS,
and the warehouse's disk per GPU-day.

    .venv/bin/gpuledger simulate warehouse --gpus 16384 --days 7 --interval 300 \\
        --start 2026-11-01T00:00:00 -w data/bench/fleet16384-5m.duckdb
    .venv/bin/python benchmarks/fleet_bench.py --warehouse data/bench/fleet16384-5m.duckdb [--json OUT]

The simulator writes one row per device every 300 s; this script marks each as standing for the
ten 30-s samples a 5-minute window averages (``sample_n = 10``, as the aggregate ingest records
``count_over_time``) and rebuilds the hourly rollup on a copy, so the rollups weight them as they
would weight real aggregates. The given file is only read. The machine is shared: the load average
is printed beside the figures.

A month (issue 41: 16,384 GPUs x 30 days, ~11 GiB) is too large to copy twice on a small disk:
``--in-place`` prepares and measures the file itself (it is changed: rows marked, the last 25
minutes cut by the mid-hour update), ``--in-place --prepare-only`` only prepares it, so other reads
(the month's statement) can be measured on the same marked rows before the analytics::

    .venv/bin/python benchmarks/fleet_bench.py --warehouse W --in-place --prepare-only
    .venv/bin/python benchmarks/fleet_bench.py --warehouse W --in-place --json OUT
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import duckdb

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import analytics_bench
from gpuledger.warehouse.db import apply_migrations, transaction
from gpuledger.warehouse.rollups import refresh_gpu_hourly

MARK_STEP = timedelta(days=1)  # rows marked (and their rollup rebuilt) a day per transaction: memory stays flat


def mark_as_aggregates(con, *, step: timedelta = MARK_STEP) -> int:
    """Mark every sample as a 5-minute aggregate of ten 30-s samples (``sample_n = 10``) and rebuild
    the hourly rollup of the hours it changes, one ``step`` of ``ts`` per transaction (one UPDATE of
    160 M rows holds every changed row's undo in memory). Rows already marked are left alone, so a
    run stopped half-way resumes, and a second run changes nothing. Returns the rows marked."""
    lo, hi = con.execute("SELECT min(ts), max(ts) FROM gpu_samples WHERE sample_n IS DISTINCT FROM 10").fetchall()[0]
    if lo is None:
        return 0
    marked = 0
    day = lo.replace(hour=0, minute=0, second=0, microsecond=0)
    while day <= hi:
        span = {"lo": day, "hi": day + step}
        with transaction(con):
            marked += con.execute("UPDATE gpu_samples SET sample_n = 10 WHERE ts >= $lo AND ts < $hi "
                                  "AND sample_n IS DISTINCT FROM 10", span).fetchall()[0][0]
            refresh_gpu_hourly(con, day, day + step)
        day += step
    con.execute("CHECKPOINT").fetchall()
    return marked


def fleet_facts(con) -> dict:
    """rows, devices (MIG instances included), GPUs (physical) and GPU-days of the warehouse."""
    return dict(zip(("rows", "devices", "gpus", "gpu_days"), con.execute(
        "SELECT (SELECT count(*) FROM gpu_samples), (SELECT count(*) FROM gpus), "
        "(SELECT count(DISTINCT (cluster, gpu_uuid)) FROM gpus), "
        "(SELECT count(DISTINCT (cluster, gpu_uuid)) FROM gpus) * "
        "  date_diff('second', min(ts), max(ts) + INTERVAL 5 MINUTE) / 86400.0 FROM gpu_samples").fetchall()[0]))


def prepare_in_place(path: Path) -> dict:
    """``path`` itself marked as aggregates (:func:`mark_as_aggregates`), with its facts."""
    con = duckdb.connect(str(path))
    try:
        apply_migrations(con)
        t0 = time.perf_counter()
        marked = mark_as_aggregates(con)
        facts = fleet_facts(con)
        facts["prepare_s"] = round(time.perf_counter() - t0, 1)
        facts["rows_marked"] = marked
    finally:
        con.close()
    return facts


def prepare(src: Path, tmp: Path) -> tuple[Path, dict]:
    """A copy of ``src`` whose rows stand for 10 raw samples each, its rollup rebuilt."""
    copy = analytics_bench._copy_warehouse(src, tmp)
    return copy, prepare_in_place(copy)


def _disk_bytes(path: Path) -> int:
    wal = Path(str(path) + ".wal")
    return path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--warehouse", type=Path, required=True)
    ap.add_argument("--json", type=Path, metavar="OUT")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--incremental-repeat", type=int, default=3)
    ap.add_argument("--in-place", action="store_true",
                    help="prepare and measure the file itself, no copies (for a warehouse too large to copy): "
                         "its rows are marked as aggregates and the incremental update's cut removes its last "
                         "25 minutes of samples")
    ap.add_argument("--prepare-only", action="store_true",
                    help="with --in-place: mark the file as aggregates and stop (measure other things on it, "
                         "then run again with --in-place: marked rows are not marked again)")
    args = ap.parse_args(argv)
    if args.prepare_only and not args.in_place:
        ap.error("--prepare-only changes the file: give --in-place too")
    src = args.warehouse.resolve()
    if not src.is_file():
        ap.error(f"--warehouse {src}: no such file (build it with `gpuledger simulate warehouse ...`)")
    if args.in_place:
        disk = _disk_bytes(src)
        facts = prepare_in_place(src)
        if args.prepare_only:
            print(json.dumps({**facts, "disk_bytes": _disk_bytes(src)}))
            return facts
        res = analytics_bench.run(src, repeat=args.repeat, incremental_repeat=args.incremental_repeat, in_place=True)
    else:
        disk = _disk_bytes(src)
        tmp = Path(tempfile.mkdtemp(prefix="fleet_bench_", dir=src.parent))
        try:
            copy, facts = prepare(src, tmp)
            res = analytics_bench.run(copy, repeat=args.repeat, incremental_repeat=args.incremental_repeat)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    res["disk_bytes"] = disk
    res["disk_per_gpu_day_kib"] = round(disk / facts["gpu_days"] / 1024, 1)
    res["fleet"] = facts
    print(analytics_bench.markdown(res))
    print(f"\nwarehouse {disk / 2**30:.2f} GiB for {facts['gpu_days']:,.0f} GPU-days = "
          f"{res['disk_per_gpu_day_kib']} KiB per GPU-day ({facts['rows']:,} rows, {facts['devices']:,} devices); "
          f"load average {os.getloadavg()[0]:.2f} at the end")
    if args.json:
        public = {k: v for k, v in res.items() if not k.startswith("_")}
        public["context"] = {k: str(v) for k, v in res["_context"].items()}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(public, indent=2) + "\n")
    return res


if __name__ == "__main__":
    main()
