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

import analytics_bench  # noqa: E402

from gpuledger.warehouse.db import apply_migrations  # noqa: E402
from gpuledger.warehouse.rollups import refresh_gpu_hourly  # noqa: E402


def prepare(src: Path, tmp: Path) -> tuple[Path, dict]:
    """A copy of ``src`` whose rows stand for 10 raw samples each, its rollup rebuilt."""
    copy = analytics_bench._copy_warehouse(src, tmp)
    con = duckdb.connect(str(copy))
    try:
        apply_migrations(con)
        t0 = time.perf_counter()
        con.execute("UPDATE gpu_samples SET sample_n = 10").fetchall()
        lo, hi = con.execute("SELECT min(ts), max(ts) FROM gpu_samples").fetchall()[0]
        refresh_gpu_hourly(con, lo, hi + timedelta(seconds=1))
        con.execute("CHECKPOINT").fetchall()
        facts = dict(zip(("rows", "devices", "gpus", "gpu_days"), con.execute(
            "SELECT (SELECT count(*) FROM gpu_samples), (SELECT count(*) FROM gpus), "
            "(SELECT count(DISTINCT (cluster, gpu_uuid)) FROM gpus), "
            "(SELECT count(DISTINCT (cluster, gpu_uuid)) FROM gpus) * "
            "  date_diff('second', min(ts), max(ts) + INTERVAL 5 MINUTE) / 86400.0 FROM gpu_samples").fetchall()[0]))
        facts["prepare_s"] = round(time.perf_counter() - t0, 1)
    finally:
        con.close()
    return copy, facts


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--warehouse", type=Path, required=True)
    ap.add_argument("--json", type=Path, metavar="OUT")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--incremental-repeat", type=int, default=3)
    args = ap.parse_args(argv)
    src = args.warehouse.resolve()
    disk = src.stat().st_size + (Path(str(src) + ".wal").stat().st_size if Path(str(src) + ".wal").exists() else 0)
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
        args.json.write_text(json.dumps(public, indent=2) + "\n")
    return res


if __name__ == "__main__":
    main()
