"""The holdings pass (ingest.holdings.store.link_holdings, every 60 s on the single writer) at fleet
sizes: the link query as shipped against its earlier form (one join whose condition ORs the pod uid
and the scheduler's name, kept below as the baseline), in the same run, on the same warehouse.

The warehouse: `gpuledger simulate warehouse --gpus G --days D` (jobs, GPUs, allocations), and one
device holding per allocation, as the agents would report it — a Kubernetes job's by its pod uid
(source pod-resources), a Slurm job's by its JobID (slurm-prolog), with the GPU's UUID, MIG instance,
host and index. Both queries must give the same rows (checked), then each is timed (best of
``--rounds``); the pass itself (``link_holdings``) is timed over the whole history and over the last
hour, and the incremental pass the pipelines run every minute (``holdings_pass``: from the cluster's
checkpoint, as `holdings_links` and `gpuledger ingest link-devices` run it, the disagreement check
over the samples since then included) in its steady state — the previous pass a minute before — to
show it flat in history length.

    .venv/bin/python benchmarks/holdings_bench.py --gpus 1024 4096 --days 1 7
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

BASELINE_RUN = """run AS (
    SELECT d.cluster, d.source, d.scheduler_job, d.host, d.device_id, d.first_seen,
           arg_max(j.job_id, j.start_time) AS job_id, arg_max(j.end_time, j.start_time) AS job_end
    FROM device d JOIN jobs j ON j.cluster = d.cluster
         AND ((d.pod_uid IS NOT NULL AND j.job_id = d.pod_uid)
              OR (d.pod_uid IS NULL AND coalesce(j.scheduler_job, j.job_id) = d.scheduler_job
                  AND coalesce(j.start_time, j.submit_time) <= d.first_seen + INTERVAL 5 MINUTE
                  AND (j.end_time IS NULL OR j.end_time >= d.first_seen)))
    GROUP BY ALL
)"""

HOLDINGS = """
INSERT INTO device_holdings (cluster, source, scheduler_job, host, device_id, first_seen, last_seen, ended,
                             gpu_uuid, mig_instance_id, gpu_index, share, pod_uid, namespace, pod, resource)
SELECT a.cluster,
       CASE WHEN j.job_id LIKE 'k8s-%' THEN 'pod-resources' ELSE 'slurm-prolog' END,
       CASE WHEN j.job_id LIKE 'k8s-%' THEN coalesce(j.namespace, 'default') || '/' || j.job_id ELSE j.job_id END,
       g.host, g.gpu_uuid || CASE WHEN g.mig_instance_id >= 0 THEN '::' || g.mig_instance_id ELSE '' END,
       a.start_time, coalesce(a.end_time, $now), a.end_time IS NOT NULL,
       g.gpu_uuid, g.mig_instance_id, g.gpu_index, NULL,
       CASE WHEN j.job_id LIKE 'k8s-%' THEN j.job_id END, j.namespace, NULL, 'nvidia.com/gpu'
FROM job_allocations a JOIN jobs j USING (cluster, job_id) JOIN gpus g USING (cluster, gpu_id)
WHERE a.start_time IS NOT NULL AND (a.gpu_fraction IS NULL OR a.gpu_fraction >= 0.999)
ON CONFLICT DO NOTHING
"""


def build(folder: Path, gpus: int, days: float) -> Path:
    path = folder / f"holdings-g{gpus}-d{days:g}.duckdb"
    env = {**os.environ, "GPULEDGER_WAREHOUSE": str(path)}
    subprocess.run([str(BIN / "gpuledger"), "simulate", "warehouse", "--gpus", str(gpus), "--days", f"{days:g}",
                    "--seed", "1"], env=env, check=True, capture_output=True, text=True)
    import duckdb

    from gpuledger.facts import data_now

    with duckdb.connect(str(path)) as con:
        now = data_now(con)
        con.execute(HOLDINGS, {"now": now})
    return path


def timed(fn, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def measure(path: Path, rounds: int) -> dict:
    import duckdb

    from gpuledger.facts import data_now
    from gpuledger.ingest.holdings import store

    shipped = store._LINKS
    start = shipped.index("-- Two exact-match joins")
    end = shipped.index("SELECT d.cluster, d.source, d.scheduler_job, d.host, d.device_id, d.first_seen, d.gpu_id,")
    baseline = shipped[:start] + BASELINE_RUN + "\n" + shipped[end:]
    work = path.with_suffix(".work.duckdb")
    shutil.copyfile(path, work)
    with duckdb.connect(str(work)) as con:
        holdings = con.execute("SELECT count(*) FROM device_holdings").fetchall()[0][0]
        jobs = con.execute("SELECT count(*) FROM jobs").fetchall()[0][0]
        out = {}
        for name, text in (("baseline", baseline), ("shipped", shipped)):
            out[name] = timed(lambda t=text: con.execute(t, {"since": None, "cluster": None}).fetchall(), rounds)
            con.execute(f"CREATE OR REPLACE TEMP TABLE _{name} AS SELECT * FROM _holding_links")
        differ = con.execute("SELECT (SELECT count(*) FROM (SELECT * FROM _baseline EXCEPT ALL SELECT * FROM _shipped))"
                             " + (SELECT count(*) FROM (SELECT * FROM _shipped EXCEPT ALL SELECT * FROM _baseline))"
                             ).fetchall()[0][0]
        linked = con.execute("SELECT count(*) FILTER (WHERE job_id IS NOT NULL AND gpu_id IS NOT NULL) "
                             "FROM _shipped").fetchall()[0][0]
        now = data_now(con)
        whole = timed(lambda: store.link_holdings(con, since=None, now=now, check=False), rounds)
        hour = timed(lambda: store.link_holdings(con, since=now - timedelta(hours=1), now=now, check=False), rounds)
        incremental, read = steady_pass(con, rounds)
    work.unlink()
    return {"holdings": holdings, "jobs": jobs, "linked": linked, "differ": differ, **out,
            "pass_all_s": whole, "pass_last_hour_s": hour, "incremental_s": incremental, "incremental_read": read}


def steady_pass(con, rounds: int) -> tuple[float, int]:
    """(best seconds, holdings read) of every cluster's incremental pass, each cluster's checkpoint
    at its newest holding (the pass a minute before saw everything up to it)."""
    import polars as pl
    from gpuledger.warehouse import upsert

    from gpuledger.ingest.holdings import store
    from gpuledger.rules.clock import utc_now

    newest = con.execute("SELECT cluster, max(last_seen) FROM device_holdings GROUP BY 1").fetchall()
    upsert(con, "ingest_checkpoints", pl.DataFrame({
        "source": [store.PASS_SOURCE] * len(newest), "scope": [store.pass_scope(c) for c, _ in newest],
        "position": [t.isoformat() for _, t in newest], "updated_at": [utc_now()] * len(newest)}))
    read = []
    best = timed(lambda: read.append(sum(store.holdings_pass(con, cluster=c).holdings for c, _ in newest)), rounds)
    return best, read[-1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, nargs="+", default=[1024, 4096])
    ap.add_argument("--days", type=float, nargs="+", default=[1.0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--warehouse", type=Path, nargs="+", default=[],
                    help="measure these warehouses (with device holdings, as build() makes them) instead")
    args = ap.parse_args()
    print("| GPUs | days | holdings | jobs | linked | link query, earlier form (s) | as shipped (s) | ratio "
          "| pass, whole history (s) | pass, last hour (s) | incremental pass, checked (s) | holdings it read "
          "| rows differ |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="holdings-bench-") as tmp:
        runs = [(path, path.stem, "") for path in args.warehouse]
        runs = runs or [(None, f"{g:,}", f"{d:g}") for g in args.gpus for d in args.days]
        for path, gpus, days in runs:
            if path is None:
                path = build(Path(tmp), int(gpus.replace(",", "")), float(days))
            r = measure(path, args.rounds)
            print(f"| {gpus} | {days} | {r['holdings']:,} | {r['jobs']:,} | {r['linked']:,} | "
                  f"{r['baseline']:.3f} | {r['shipped']:.3f} | {r['baseline'] / r['shipped']:.1f}x | "
                  f"{r['pass_all_s']:.3f} | {r['pass_last_hour_s']:.3f} | {r['incremental_s']:.3f} | "
                  f"{r['incremental_read']:,} | {r['differ']} |", flush=True)

if __name__ == "__main__":
    main()
