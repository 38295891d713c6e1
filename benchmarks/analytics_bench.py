"""Analytics benchmark (issue 14 §3): a full 7-day recompute and an incremental 5-minute update
over a simulated warehouse, against a bare DuckDB scan of exactly what the recompute reads.

    .venv/bin/python benchmarks/analytics_bench.py [--warehouse data/bench/week1024.duckdb] [--json OUT]

The warehouse is one of `gpuledger simulate warehouse --gpus N --days 7 --start 2026-11-01T00:00:00
--warehouse data/bench/weekN.duckdb` (seed 1, dirty data, 30 s samples). The incremental update
writes, so the file (and its .wal) is copied to a temporary directory first and the copy deleted
at the end: the given file is only ever read.

In one process: migrations (a one-off backfill of a rollup the file lacks is reported, not
counted), the scan floor (best of 3), then ``--repeat`` rounds (default 2) of the full recompute
and of the incremental update (``--incremental-repeat`` rounds of the update, default 5, at the
week's end and again at 23:35; their medians are reported too); the figures are the best round's (a warm process, as the
pipelines and dashboards are), and the first round's totals are reported too (cold: polars and
the allocator warming up). Wall time per step, and peak RSS per step (VmHWM, reset before it).
The full recompute is what the pipelines' and dashboards' entry points (analytics/queries.py)
do over the week, collected as they collect (analytics/collect.py): attribution and utilization a
UTC day at a time as the pipelines materialize them (queries.attribution_by_day; issue 41: the
whole window at once held ~50 KiB per GPU-day), the window-wide steps over the window.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

import duckdb
import polars as pl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpuledger.warehouse.db import apply_migrations
from gpuledger.warehouse.rollups import refresh_gpu_hourly
from gpuledger.warehouse.writes import write_samples

from gpuledger.analytics.attribution import allocated_pieces, partial_hour_keys
from gpuledger.analytics.budget import budget_burn, job_funding
from gpuledger.analytics.chargeback import chargeback_lines
from gpuledger.analytics.collect import collect
from gpuledger.analytics.fairshare import delivery, fair_share
from gpuledger.analytics.load import (
    ATTRIBUTION_SAMPLE_COLS,
    load_device_activity,
    load_tables,
)
from gpuledger.analytics.queries import attribution, attribution_by_day, utc_days
from gpuledger.analytics.squatting import squatting_findings
from gpuledger.analytics.usage import node_usage
from gpuledger.analytics.utilization import utilization_hourly
from gpuledger.config_store import policy_in_force

DEFAULT_WAREHOUSE = Path("data/bench/week1024.duckdb")
SIX_HOURS = timedelta(hours=6)
FIVE_MINUTES = timedelta(minutes=5)
MID_HOUR_BACK = timedelta(minutes=25)  # the second incremental update: at hh:35 of the week's last hour


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
    """Steps of one round: (name, wall s, peak RSS MiB, CPU s). CPU seconds (this process's, all
    threads) tell a slow step from one that waited for the core: under contention wall > CPU."""

    def __init__(self):
        self.rows: list[tuple[str, float, float, float]] = []

    def step(self, name: str, fn):
        _reset_peak()
        t, c = time.perf_counter(), time.process_time()
        out = fn()
        self.rows.append((name, time.perf_counter() - t, _peak_mib(), time.process_time() - c))
        return out

    @property
    def total(self) -> float:
        return sum(row[1] for row in self.rows)

    @property
    def peak(self) -> float:
        return max((row[2] for row in self.rows), default=0.0)


def full_recompute(con, tm: Timer, *, start: datetime, now: datetime) -> dict:
    """Every analytic over [start, now) as the product computes it: attribution and utilization a
    UTC day at a time (queries.attribution_by_day: the pipelines' daily partitions,
    pipelines/defs/usage), the window-wide steps (usage decay, delivery, budget burn, squatting,
    chargeback) over the window as their reports compute them; reports.py's reads, then the pure
    functions."""
    end = now
    policy = policy_in_force(con)

    def tables():
        t = load_tables(con, start=start, end=end, samples=False)
        t = replace(t, jobs=collect(t.jobs).lazy(), job_allocations=collect(t.job_allocations).lazy(),
                    gpus=collect(t.gpus).lazy())
        return t, t.jobs, t.job_allocations, t.gpus

    t, jobs, allocs, gpus = tm.step("load jobs, allocations, inventory, tree", tables)

    def utilization_of(used, lo, hi):
        return collect(utilization_hourly(collect(used).lazy(), gpus, start=lo, end=hi)).height

    days = utc_days(start, end)
    tm.step(f"attribution (job x GPU x hour) + utilization by hour, a UTC day at a time ({len(days)} days)",
            lambda: attribution_by_day(con, t, start=start, end=end, now=now, policy=policy, reduce=utilization_of))
    use = tm.step("usage: window + decay", lambda: collect(node_usage(allocs, gpus, jobs, t.org_nodes, as_of=now)))
    tm.step("fair share", lambda: collect(fair_share(t.org_nodes, use.lazy())))
    tm.step("delivery", lambda: collect(delivery(jobs, allocs, gpus, t.org_nodes, start=start, end=end, now=now)))
    burn = tm.step("budget burn", lambda: collect(budget_burn(allocs, gpus, jobs, t.org_nodes, t.budgets,
                                                              t.rate_card, as_of=now)))
    tm.step("job funding", lambda: collect(job_funding(jobs, burn.lazy(), t.org_nodes, now=now)))
    evidence = tm.step("squatting evidence: 6 h of held devices (SQL)", lambda: collect(load_device_activity(
        con, jobs, allocs, gpus, now=now, lookback=SIX_HOURS)).lazy())
    tm.step("squatting findings (polars)", lambda: collect(squatting_findings(
        jobs, allocs, gpus, evidence, t.rate_card, now=now)))
    tm.step("chargeback (the week, job lines)", lambda: collect(chargeback_lines(
        allocs, gpus, jobs, t.rate_card, start=start, end=end, now=now)))
    return {"tables": t, "jobs": jobs, "allocs": allocs, "gpus": gpus, "policy": policy}


def incremental(con, tm: Timer, ctx: dict, *, now: datetime) -> int:
    """The last 5 minutes arrive: ingest them (write_samples refreshes the touched hour of the
    rollup), then recompute what samples change — attribution and utilization of the touched
    hour, squatting over its lookback. Allocation-only outputs (usage, fair share, budget,
    chargeback, delivery) do not change with samples and are not part of it."""
    lo = now - FIVE_MINUTES
    batch = con.sql("SELECT * EXCLUDE (source) FROM gpu_samples WHERE ts >= $lo AND ts < $hi",
                    params={"lo": lo, "hi": now}).pl()
    con.execute("DELETE FROM gpu_samples WHERE ts >= $lo AND ts < $hi", {"lo": lo, "hi": now}).fetchall()
    refresh_gpu_hourly(con, lo, now)  # the rollup as it was before those 5 minutes arrived
    tm.step(f"ingest {batch.height:,} samples (+ gpu_hourly refresh of the touched hour)",
            lambda: write_samples(con, batch, "simulator"))
    hour = lo.replace(minute=0, second=0, microsecond=0)
    jobs, allocs, gpus, t = ctx["jobs"], ctx["allocs"], ctx["gpus"], ctx["tables"]

    def attribution_of_touched_hour():  # the running day's partition, its touched hour only
        att = collect(attribution(con, t, start=hour, end=now, now=now, policy=ctx["policy"]))
        return collect(utilization_hourly(att.lazy(), gpus, start=hour, end=now))

    tm.step("attribution + utilization (touched hour)", attribution_of_touched_hour)
    tm.step("squatting (6 h evidence in SQL + findings)", lambda: collect(squatting_findings(
        jobs, allocs, gpus, load_device_activity(con, jobs, allocs, gpus, now=now, lookback=SIX_HOURS),
        t.rate_card, now=now)))
    return batch.height


def scan_floor(con, *, start: datetime, now: datetime) -> tuple[float, str]:
    """A bare DuckDB scan (count and sum/max of every column, nothing materialized in Python) of
    exactly the rows and columns the full recompute reads, best of 3. Raw samples of partial
    GPU-hours: without an index DuckDB must read gpu_id and ts of every sample in the hours that
    hold them to find them (one UNION ALL branch per hour, as load_samples_for_hours reads them;
    DuckDB starts each branch in ~1 ms), then their value columns; the floor is those two bare
    scans (the rows are located once, outside the timing, into a temp table of their values)."""
    t = load_tables(con, start=start, end=now, samples=False)
    jobs, allocs, gpus = (collect(f).lazy() for f in (t.jobs, t.job_allocations, t.gpus))
    # the partial GPU-hours' keys a day at a time, as the recompute cuts them (the window's pieces at
    # once would hold more than the recompute itself: issue 41)
    keys = pl.concat([collect(partial_hour_keys(allocated_pieces(allocs, gpus, now=now, start=lo, end=hi, jobs=jobs)))
                      for lo, hi in utc_days(start, now)])
    values = [c.strip() for c in ATTRIBUTION_SAMPLE_COLS.split(",") if c.strip() not in ("gpu_id", "ts")]
    con.register("_floor_keys", keys.select(pl.col("gpu_id").cast(pl.Int32),
                                            pl.col("hour").cast(pl.Datetime("us"))).to_arrow())
    con.execute(f"CREATE OR REPLACE TEMP TABLE _floor_partial AS SELECT {', '.join(values)} FROM gpu_samples s "
                "SEMI JOIN _floor_keys k ON s.gpu_id = k.gpu_id AND date_trunc('hour', s.ts) = k.hour")
    con.unregister("_floor_keys")
    n_partial = con.execute("SELECT count(*) FROM _floor_partial").fetchall()[0][0]
    hours = keys["hour"].unique().sort().to_list()
    p = {"lo": start - timedelta(hours=1), "hi": now, "sq": now - SIX_HOURS, "klo": min(hours, default=start),
         "khi": max(hours, default=start - timedelta(hours=1)) + timedelta(hours=1)}
    for i, h in enumerate(hours):
        p[f"h{i}"], p[f"e{i}"] = h, h + timedelta(hours=1)
    in_hours = " UNION ALL ".join(f"SELECT count(*) AS n, sum(gpu_id) AS g, max(ts) AS t FROM gpu_samples "
                                  f"WHERE ts >= $h{i} AND ts < $e{i}" for i in range(len(hours))) \
        or "SELECT 0 AS n, 0 AS g, NULL AS t"
    parts = [
        ("gpu_hourly of the span, every column",
         ("SELECT count(*), sum(s_n), sum(s_sm_active), sum(s_gr_engine_active), sum(s_gpu_util), "
         "sum(s_n_sm_active), sum(s_n_gr_engine_active), sum(s_n_gpu_util), sum(e_first), sum(e_last), "
         "sum(e_inside), max(gpu_id), max(hour) FROM gpu_hourly WHERE hour >= $lo AND hour < $hi")),
        ((f"gpu_id and ts of every raw sample in the {len(hours)} hours holding partial GPU-hours (to find them; "
          "the cheaper of one branch per hour, as the loader reads them, and one scan of the hours' whole span)"),
         [f"SELECT sum(n), sum(g), max(t) FROM ({in_hours})",
          "SELECT count(*), sum(gpu_id), max(ts) FROM gpu_samples WHERE ts >= $klo AND ts < $khi"]),
        (f"the {len(values)} value columns of the {n_partial:,} raw samples of the {keys.height:,} partial GPU-hours",
         f"SELECT count(*), {', '.join(f'sum({c})' for c in values)} FROM _floor_partial"),
        ("the 6 h squatting lookback of devices held at now (gpu_id, ts, 3 signals, fb_used)",
         ("SELECT count(*), max(ts), sum(sm_active_ratio), sum(gr_engine_active_ratio), sum(gpu_util_ratio), "
         "sum(fb_used_bytes) FROM gpu_samples WHERE ts >= $sq AND ts < $hi AND gpu_id IN (SELECT gpu_id "
         "FROM job_allocations WHERE start_time <= $hi AND (end_time IS NULL OR end_time > $hi))")),
        ("jobs, job_allocations, gpus of the range",
         ("SELECT (SELECT count(*) + sum(gpus) + count(project) + count(submit_time) + count(end_time) "
         "        FROM jobs WHERE coalesce(submit_time, start_time) < $hi AND (end_time IS NULL OR end_time > $lo)), "
         "       (SELECT count(*) + sum(gpu_fraction) + count(job_id) + count(end_time) FROM job_allocations "
         "        WHERE start_time < $hi AND (end_time IS NULL OR end_time > $lo)), "
         "       (SELECT count(*) + count(model) + count(gpu_uuid) FROM gpus)")),
    ]
    floor = 0.0
    for _, sqls in parts:  # each part: its best of 3 (the cheapest alternative)
        best = float("inf")
        for sql in [sqls] if isinstance(sqls, str) else sqls:
            for _ in range(3):
                t0 = time.perf_counter()
                con.execute(sql, {k: v for k, v in p.items() if re.search(rf"\${k}\b", sql)}).fetchall()
                best = min(best, time.perf_counter() - t0)
        floor += best
    con.execute("DROP TABLE _floor_partial")
    return floor, "bare DuckDB scans (count + sum/max of each column) of: " + "; ".join(name for name, _ in parts)


def _copy_warehouse(src: Path, into: Path) -> Path:
    dst = into / src.name
    shutil.copyfile(src, dst)
    wal = src.with_name(src.name + ".wal")
    if wal.exists():
        shutil.copyfile(wal, dst.with_name(dst.name + ".wal"))
    return dst


def run(warehouse: Path, *, repeat: int = 2, incremental_repeat: int = 5, in_place: bool = False) -> dict:
    """Measure ``warehouse``: on a copy in a temporary folder (deleted after), or with ``in_place``
    on the file itself, which the updates then change (a warehouse too large to copy, e.g. 11 GiB
    at 16,384 GPUs x 30 days: the samples after the mid-hour cut are gone afterwards)."""
    if not warehouse.exists():
        raise SystemExit(f"{warehouse}: no such warehouse (build it with `gpuledger simulate warehouse ...`)")
    if in_place:
        con = duckdb.connect(str(warehouse))
        try:
            return _measure(con, warehouse, repeat=repeat, incremental_repeat=incremental_repeat)
        finally:
            con.close()
    tmp = Path(tempfile.mkdtemp(prefix="analytics_bench_"))
    try:
        con = duckdb.connect(str(_copy_warehouse(warehouse, tmp)))
        try:
            return _measure(con, warehouse, repeat=repeat, incremental_repeat=incremental_repeat)
        finally:
            con.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _measure(con, warehouse: Path, *, repeat: int, incremental_repeat: int) -> dict:
    one_off = Timer()
    one_off.step("apply migrations (and any backfill they hold)", lambda: apply_migrations(con))
    n, first, last = con.execute("SELECT count(*), min(ts), max(ts) FROM gpu_samples").fetchall()[0]
    gpus = con.execute("SELECT count(DISTINCT (cluster, gpu_uuid)) FROM gpus").fetchall()[0][0]
    devices = con.execute("SELECT count(*) FROM gpus").fetchall()[0][0]
    start = first.replace(minute=0, second=0, microsecond=0)
    now = last.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)  # the week's end
    floor_s, floor_what = scan_floor(con, start=start, now=now)
    fulls, incs = [], []
    for _ in range(max(1, repeat)):
        tm = Timer()
        ctx = full_recompute(con, tm, start=start, now=now)
        fulls.append(tm)
        ti = Timer()
        incremental(con, ti, ctx, now=now)
        incs.append(ti)
    for _ in range(incremental_repeat - len(incs)):  # an update is ~0.1 s: more rounds steady its best
        ti = Timer()
        incremental(con, ti, ctx, now=now)
        incs.append(ti)
    # The week ends on the hour, where an update's hour has no raw samples to attribute yet. A real
    # 5-minute update mostly lands inside an hour: the same update at MID_HOUR, the data cut there.
    mid = now - MID_HOUR_BACK
    con.execute("DELETE FROM gpu_samples WHERE ts >= $mid", {"mid": mid}).fetchall()
    refresh_gpu_hourly(con, mid, now)
    mids = []
    for _ in range(max(1, incremental_repeat)):
        ti = Timer()
        incremental(con, ti, ctx, now=mid)
        mids.append(ti)
    full = min(fulls, key=lambda x: x.total)
    on_hour, mid_hour = min(incs, key=lambda x: x.total), min(mids, key=lambda x: x.total)
    inc = max(on_hour, mid_hour, key=lambda x: x.total)  # the target holds for both
    medians = {k: round(statistics.median(x.total for x in xs), 4) for k, xs in (("on_hour", incs), ("mid_hour", mids))}
    def rows(label: str, timer: Timer) -> list[dict]:
        return [{"step": f"{label}: {s}", "wall_s": round(w, 4), "cpu_s": round(c, 4), "peak_rss_mib": round(r, 1)}
                for s, w, r, c in timer.rows]

    steps = rows("one-off", one_off) + rows("full", full)
    for label, x in ((f"incremental at {now:%H:%M}", on_hour), (f"incremental at {mid:%H:%M}", mid_hour)):
        steps += rows(label, x)
    steps += [{"step": f"first round (cold process): {g} total", "wall_s": round(x.total, 4),
               "peak_rss_mib": round(x.peak, 1)} for g, x in (("full", fulls[0]), ("incremental", incs[0]))]
    return {
        "gpus": gpus,
        "full_recompute_s": round(full.total, 4),
        "incremental_s": round(inc.total, 4),
        "incremental_on_hour_s": round(on_hour.total, 4),
        "incremental_mid_hour_s": round(mid_hour.total, 4),
        "incremental_rounds": len(mids),
        "incremental_on_hour_median_s": medians["on_hour"],
        "incremental_mid_hour_median_s": medians["mid_hour"],
        "peak_rss_mib": round(full.peak, 1),
        "incremental_peak_rss_mib": round(inc.peak, 1),
        "scan_floor_s": round(floor_s, 4),
        "full_vs_scan": round(full.total / floor_s, 2),
        "incremental_vs_scan": round(inc.total / floor_s, 2),
        "scan_floor_what": f"{floor_what} (each part's best of 3; both ratios are against this one floor)",
        "steps": steps,
        "command": shlex.join([".venv/bin/python", "benchmarks/analytics_bench.py", *sys.argv[1:]]),
        "_context": {"samples": n, "devices": devices, "start": start.isoformat(), "now": now.isoformat(),
                     "mid_hour_now": mid.isoformat(),
                     "warehouse": str(warehouse), "repeat": repeat, "incremental_repeat": len(mids),
                     "cpus": os.cpu_count(),
                     "loadavg": os.getloadavg(), "polars": pl.__version__, "duckdb": duckdb.__version__},
    }


def markdown(res: dict) -> str:
    c = res["_context"]
    out = [(f"{c['samples']:,} samples, {res['gpus']:,} GPUs ({c['devices']:,} devices), {c['start']} .. {c['now']}; "
           f"{c['cpus']} CPUs, load average {c['loadavg'][0]:.2f}, polars {c['polars']}, duckdb {c['duckdb']}; "
           f"best of {c['repeat']} rounds (the incremental update: of {c['incremental_repeat']}, medians "
           f"{res['incremental_on_hour_median_s']:.3f} / {res['incremental_mid_hour_median_s']:.3f} s)"), "",
           f"Scan floor {res['scan_floor_s']:.3f} s: {res['scan_floor_what']}", "",
           "| step | wall s | CPU s | × scan floor | peak RSS MiB |", "|---|---:|---:|---:|---:|"]
    for s in res["steps"]:
        cpu = f"{s['cpu_s']:.3f}" if "cpu_s" in s else "–"
        out.append(f"| {s['step']} | {s['wall_s']:.3f} | {cpu} | {s['wall_s'] / res['scan_floor_s']:.1f} | "
                   f"{s['peak_rss_mib']:,.0f} |")
    out.append(f"| **full recompute** | **{res['full_recompute_s']:.3f}** | | **{res['full_vs_scan']:.1f}** | "
               f"**{res['peak_rss_mib']:,.0f}** |")
    out.append(f"| **incremental 5 min** (the slower of {res['incremental_on_hour_s']:.3f} on the hour and "
               f"{res['incremental_mid_hour_s']:.3f} mid-hour) | **{res['incremental_s']:.3f}** | | **{res['incremental_vs_scan']:.1f}** | "
               f"**{res['incremental_peak_rss_mib']:,.0f}** |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--warehouse", type=Path, default=DEFAULT_WAREHOUSE,
                    help=f"simulated warehouse to measure, only read (default {DEFAULT_WAREHOUSE})")
    ap.add_argument("--json", type=Path, metavar="OUT", help="write the figures as JSON to OUT")
    ap.add_argument("--repeat", type=int, default=2, help="rounds of recompute + update; the best is kept")
    ap.add_argument("--incremental-repeat", type=int, default=5,
                    help="rounds of the incremental update at each instant (at least --repeat); the best is kept")
    args = ap.parse_args(argv)
    warehouse = args.warehouse if args.warehouse.is_absolute() else Path.cwd() / args.warehouse
    res = run(warehouse, repeat=args.repeat, incremental_repeat=args.incremental_repeat)
    print(markdown(res), flush=True)
    if args.json:
        public = {k: v for k, v in res.items() if not k.startswith("_")}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(public, indent=2) + "\n")
    return res


if __name__ == "__main__":
    main()
