"""Does the aggregate ingest's write grow with the history kept? One 5-minute window of every GPU
(what the fleet path stores per chunk at 16,384 GPUs: one window a chunk) written by
``warehouse.write_samples`` in a fresh process into a warehouse already holding D days of 5-minute
aggregates, its peak RSS (VmHWM), time and DuckDB's memory by tag (the primary key's ART index is
the part that could grow with the rows kept). Issue 41: "16,384 GPUs x 30 days ingested in <= 4 GiB".

    .venv/bin/python benchmarks/ingest_history_bench.py W.duckdb --days 1,7,30 [--gpus 16384]

builds W from nothing (synthetic rows: every GPU, every 5 minutes, from 2026-11-01, a day per
transaction, in key order as the ingest writes them), measuring after each listed day count; each
measurement's rows are deleted again before the build goes on. ~10-15 s a day at 16,384 GPUs here;
30 days is 141.6 M rows, ~6 GB.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

T0 = datetime(2026, 11, 1)


def _peak_mib() -> float:
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM")) / 1024


def build(path: Path, gpus: int, d0: int, d1: int) -> None:
    import polars as pl

    from gpuledger import warehouse

    with warehouse.open_writer(path) as con:
        if d0 == 0:
            warehouse.register_gpus(con, pl.DataFrame({
                "cluster": ["fleet"] * gpus, "gpu_uuid": [f"GPU-{i:05d}" for i in range(gpus)],
                "host": [f"n{i // 8:04d}" for i in range(gpus)], "gpu_index": [i % 8 for i in range(gpus)],
                "model": ["H100"] * gpus}))
        lo, hi = con.execute("SELECT min(gpu_id), max(gpu_id) FROM gpus").fetchone()
        for d in range(d0, d1):
            t = time.monotonic()
            con.execute("BEGIN")
            con.execute(
                "INSERT INTO gpu_samples (gpu_id, ts, sm_active_ratio, power_w, source, sample_n, covered_ms) "
                "SELECT g, TIMESTAMP '2026-11-01' + to_seconds(w * 300), random(), 300.0, 'prometheus', 10, 300000 "
                f"FROM range({d * 288}, {(d + 1) * 288}) r(w), range({lo}, {hi + 1}) q(g) ORDER BY w, g")
            con.execute("COMMIT")
            print(f"  built day {d + 1}: {time.monotonic() - t:.1f} s", file=sys.stderr, flush=True)


def measure(path: Path, day: int) -> None:
    import polars as pl

    from gpuledger import warehouse

    start = time.monotonic()
    ts = T0 + timedelta(days=day)
    with warehouse.open_writer(path) as con:
        rows = con.execute("SELECT count(*) FROM gpu_samples").fetchone()[0]
        ids = [r[0] for r in con.execute("SELECT gpu_id FROM gpus ORDER BY gpu_id").fetchall()]
        opened = _peak_mib()
        n = len(ids)
        batch = pl.DataFrame({"gpu_id": ids, "ts": [ts] * n, "sm_active_ratio": [0.5] * n, "power_w": [300.0] * n,
                              "sample_n": [10] * n, "covered_ms": [300000] * n},
                             schema_overrides={"gpu_id": pl.Int32, "sample_n": pl.Int32, "covered_ms": pl.Int32})
        t = time.monotonic()
        new = warehouse.write_samples(con, batch, "prometheus")
        wrote = time.monotonic() - t
        tags = con.execute("SELECT tag, memory_usage_bytes FROM duckdb_memory() WHERE memory_usage_bytes > 0 "
                           "ORDER BY 2 DESC").fetchall()
        con.execute("DELETE FROM gpu_samples WHERE ts = $ts", {"ts": ts})  # the build goes on from here
    ru = resource.getrusage(resource.RUSAGE_SELF)
    duck = ", ".join(f"{tag} {b / 2**20:.0f}" for tag, b in tags)
    print(f"| {day} | {rows:,} | {new:,} | {wrote:.2f} | {time.monotonic() - start:.2f} | "
          f"{ru.ru_utime + ru.ru_stime:.2f} | {opened:.0f} | **{_peak_mib():.0f}** | {duck} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("warehouse", type=Path)
    ap.add_argument("--days", default="1,7,30", help="history lengths to measure at, in days")
    ap.add_argument("--gpus", type=int, default=16384)
    ap.add_argument("--step", nargs=3, help=argparse.SUPPRESS)  # build D0 D1 / measure DAY: one fresh process each
    args = ap.parse_args()
    if args.step:
        kind, a, b = args.step
        build(args.warehouse, args.gpus, int(a), int(b)) if kind == "build" else measure(args.warehouse, int(a))
        return
    if args.warehouse.exists():
        sys.exit(f"{args.warehouse} exists: give a new path (the bench builds its history from nothing)")
    print("| days kept | rows kept | rows written | write (s) | process (s) | CPU-s | RSS after open (MiB) "
          "| peak RSS (MiB) | DuckDB memory by tag (MiB) |\n|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    built = 0
    for days in sorted(int(d) for d in args.days.split(",")):
        for step in (["build", str(built), str(days)], ["measure", str(days), "-"]):
            if step[0] == "build" and built == days:
                continue
            subprocess.run([sys.executable, __file__, str(args.warehouse), "--gpus", str(args.gpus), "--step", *step],
                           check=True)
        built = days


if __name__ == "__main__":
    main()
