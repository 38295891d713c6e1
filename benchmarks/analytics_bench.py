"""Analytics benchmark: a simulated week of 1,024 GPUs at 30 s (dirty data, seed 1, ~24M samples).

Measures, in one process and one run: a baseline (a bare DuckDB scan of one gpu_samples column),
the one-off gpu_hourly backfill, every step of a full recompute from the rollup, and an
incremental 5-minute update. Wall time and peak RSS per step (VmHWM, reset before each step);
ratios are against the baseline. Writes a markdown table to data/bench/analytics.md.

    .venv/bin/python benchmarks/analytics_bench.py   (or: make bench)

The warehouse is built once with the simulator and cached under data/bench/ (delete it to rebuild).
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

import duckdb
import polars as pl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpuledger.analytics.attribution import allocated_pieces, attribute_usage, partial_hour_keys  # noqa: E402
from gpuledger.analytics.budget import budget_burn, job_funding  # noqa: E402
from gpuledger.analytics.chargeback import chargeback_lines  # noqa: E402
from gpuledger.analytics.fairshare import delivery, fair_share  # noqa: E402
from gpuledger.analytics.load import (  # noqa: E402
    load_device_activity,
    load_hourly,
    load_samples_for_hours,
    load_tables,
)
from gpuledger.warehouse.rollups import refresh_gpu_hourly  # noqa: E402
from gpuledger.analytics.squatting import squatting_findings  # noqa: E402
from gpuledger.analytics.usage import node_usage  # noqa: E402
from gpuledger.analytics.utilization import utilization_hourly  # noqa: E402
from gpuledger.warehouse.db import apply_migrations  # noqa: E402
from gpuledger.warehouse.writes import write_samples  # noqa: E402

GPUS, DAYS, START = 1024, 7, datetime(2026, 11, 1)
END = START + timedelta(days=DAYS)
BENCH_DIR = ROOT / "data" / "bench"
DB = BENCH_DIR / f"week{GPUS}.duckdb"
BUILD_CMD = [str(ROOT / ".venv" / "bin" / "gpuledger"), "simulate", "warehouse", "--gpus", str(GPUS),
             "--days", str(DAYS), "--start", START.isoformat(), "--warehouse", str(DB)]


def _reset_peak() -> None:
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def _peak_mib() -> float:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Timer:
    def __init__(self):
        self.rows: list[tuple[str, str, float, float]] = []

    def step(self, group: str, name: str, fn):
        _reset_peak()
        t = time.perf_counter()
        out = fn()
        wall = time.perf_counter() - t
        self.rows.append((group, name, wall, _peak_mib()))
        return out


def ensure_warehouse() -> None:
    if not DB.exists():
        BENCH_DIR.mkdir(parents=True, exist_ok=True)
        print("building", " ".join(BUILD_CMD), flush=True)
        subprocess.run(BUILD_CMD, check=True)


def full_recompute(con, tm: Timer, *, now: datetime, group: str = "full") -> dict:
    start, end = START, now
    t = tm.step(group, "load jobs, allocations, inventory, tree", lambda: load_tables(con, start=start, end=end,
                                                                                      samples=False))
    jobs, allocs, gpus = t.jobs.collect().lazy(), t.job_allocations.collect().lazy(), t.gpus.collect().lazy()
    hourly = tm.step(group, "load gpu_hourly rollup", lambda: load_hourly(con, start=start, end=end).collect().lazy())
    keys = partial_hour_keys(allocated_pieces(allocs, gpus, now=now, start=start, end=end, jobs=jobs))
    partial = tm.step(group, "load samples of partial hours",
                      lambda: load_samples_for_hours(con, keys).collect().lazy())
    att = tm.step(group, "attribution (job x GPU x hour)", lambda: attribute_usage(
        allocs, gpus, partial, now=now, start=start, end=end, jobs=jobs, hourly=hourly).collect())
    tm.step(group, "utilization by hour", lambda: utilization_hourly(att.lazy(), gpus, start=start, end=end).collect())
    use = tm.step(group, "usage: window + decay", lambda: node_usage(allocs, gpus, jobs, t.org_nodes, as_of=now).collect())
    tm.step(group, "fair share", lambda: fair_share(t.org_nodes, use.lazy()).collect())
    tm.step(group, "delivery", lambda: delivery(jobs, allocs, gpus, t.org_nodes, start=start, end=end,
                                                 now=now).collect())
    burn = tm.step(group, "budget burn", lambda: budget_burn(allocs, gpus, jobs, t.org_nodes, t.budgets,
                                                                       t.rate_card, as_of=now).collect())
    tm.step(group, "job funding", lambda: job_funding(jobs, burn.lazy(), t.org_nodes, now=now).collect())
    evidence = tm.step(group, "squatting evidence: 6 h of held devices (SQL)", lambda: load_device_activity(
        con, jobs, allocs, gpus, now=now, lookback=timedelta(hours=6)).collect().lazy())
    tm.step(group, "squatting findings (polars)", lambda: squatting_findings(
        jobs, allocs, gpus, evidence, t.rate_card, now=now).collect())
    tm.step(group, "chargeback (the week, job lines)", lambda: chargeback_lines(
        allocs, gpus, jobs, t.rate_card, start=start, end=end, now=now).collect())
    return {"tables": t, "jobs": jobs, "allocs": allocs, "gpus": gpus}


def incremental(con, tm: Timer, ctx: dict, *, now: datetime) -> None:
    """5 minutes of new samples: ingest, refresh the touched hours, recompute what samples change."""
    lo = now - timedelta(minutes=5)
    batch = con.sql("SELECT * EXCLUDE (source) FROM gpu_samples WHERE ts >= $lo AND ts < $hi",
                    params={"lo": lo, "hi": now}).pl()
    con.execute("DELETE FROM gpu_samples WHERE ts >= $lo AND ts < $hi", {"lo": lo, "hi": now}).fetchall()
    refresh_gpu_hourly(con, lo, now)  # as it was before those 5 minutes arrived
    g = "incremental"
    tm.step(g, f"ingest {batch.height:,} samples (+ gpu_hourly refresh of the touched hours)",
            lambda: write_samples(con, batch, "simulator"))
    hour = lo.replace(minute=0, second=0, microsecond=0)
    jobs, allocs, gpus = ctx["jobs"], ctx["allocs"], ctx["gpus"]

    def attribution_of_touched_hours():
        hourly = load_hourly(con, start=hour, end=now)
        keys = partial_hour_keys(allocated_pieces(allocs, gpus, now=now, start=hour, end=now, jobs=jobs))
        att = attribute_usage(allocs, gpus, load_samples_for_hours(con, keys), now=now, start=hour, end=now,
                              jobs=jobs, hourly=hourly).collect()
        return utilization_hourly(att.lazy(), gpus, start=hour, end=now).collect()

    tm.step(g, "attribution + utilization (touched hours)", attribution_of_touched_hours)
    t = ctx["tables"]
    six_hours = timedelta(hours=6)
    tm.step(g, "squatting (6 h evidence in SQL + findings)", lambda: squatting_findings(
        jobs, allocs, gpus, load_device_activity(con, jobs, allocs, gpus, now=now, lookback=six_hours),
        t.rate_card, now=now).collect())


def table(tm: Timer, baseline_s: float) -> str:
    out = ["| step | wall s | × baseline | peak RSS MiB |", "|---|---:|---:|---:|"]
    totals: dict[str, float] = {}
    for group, name, wall, rss in tm.rows:
        totals[group] = totals.get(group, 0.0) + wall
        out.append(f"| {group}: {name} | {wall:.3f} | {wall / baseline_s:.1f} | {rss:,.0f} |")
    for group, wall in totals.items():
        peak = max(r for g, _, _, r in tm.rows if g == group)
        out.append(f"| **{group} total** | **{wall:.3f}** | **{wall / baseline_s:.1f}** | **{peak:,.0f}** |")
    return "\n".join(out)


def main() -> str:
    ensure_warehouse()
    con = duckdb.connect(str(DB))
    apply_migrations(con)
    tm = Timer()
    n = con.execute("SELECT count(*) FROM gpu_samples").fetchall()[0][0]
    runs = []
    for _ in range(3):
        _reset_peak()
        t = time.perf_counter()
        con.execute("SELECT sum(sm_active_ratio) FROM gpu_samples").fetchall()
        runs.append(time.perf_counter() - t)
    baseline = min(runs)
    tm.rows.append(("baseline", "DuckDB scan of one column (sum, best of 3)", baseline, _peak_mib()))
    tm.step("one-off", "gpu_hourly backfill of the week (SQL)", lambda: refresh_gpu_hourly(con, START, END))
    ctx = full_recompute(con, tm, now=END)
    incremental(con, tm, ctx, now=END)
    md = (f"{n:,} samples, {GPUS} GPUs × {DAYS} days at 30 s (simulator, dirty), "
          f"{os.cpu_count()} CPUs, polars {pl.__version__}, duckdb {duckdb.__version__}\n\n" + table(tm, baseline))
    con.close()
    (BENCH_DIR / "analytics.md").write_text(md + "\n")
    print(md)
    return md


if __name__ == "__main__":
    main()
