"""Which devices a job held, read from the labels DCGM puts on each device's samples.

Kubernetes pods and Slurm jobs arrive without their devices (`jobs` rows only), so the analytics
would count them by `jobs.gpus` with activity unknown, and idle-GPU detection could not judge
them. dcgm-exporter already says which pod (`namespace`/`pod`) or Slurm job (`hpc_job`) runs on
each device, so the allocation is derived here: for every job of the `jobs` table seen in those
labels, one `job_allocations` row per device, from the first labelled sample (never before the
job's start) to the job's end (NULL while it runs), marked `source = 'labels'`. Labels carry the
scheduler's name (`jobs.scheduler_job`), which a recreated pod or a requeued Slurm job repeats, so
a sample belongs to the run of that name whose start..end holds its time.

Only derived rows are ever rewritten; a job whose allocations came from its scheduler (or the
simulator) is left alone. Re-running over any window changes nothing that is already right: an
interval keeps its earliest start. The held share of a device is the job's GPUs spread over the
compute of the devices it was seen on, capped at the whole device (a 0.5-GPU shared pod holds half
its GPU; a `1g` MIG pod holds its whole 1/7 instance).
"""

from __future__ import annotations

from datetime import datetime, timedelta

import duckdb
import polars as pl

from gpuledger.warehouse import transaction

SOURCE = "labels"

# Samples in the window whose labels name a job, joined to the jobs that exist, with any earlier
# derived interval, so the result is the merged interval per (cluster, job_id, gpu_id).
_LINKS = """
CREATE OR REPLACE TEMP TABLE _device_links AS
WITH labelled AS (
    SELECT s.gpu_id, s.ts,
           CASE WHEN s.pod IS NOT NULL THEN coalesce(s.namespace, '') || '/' || s.pod ELSE s.hpc_job END
               AS scheduler_job
    FROM gpu_samples s
    WHERE s.ts >= $lo AND s.ts < $hi AND (s.pod IS NOT NULL OR s.hpc_job IS NOT NULL)
),
observed AS (  -- a label names a run by the scheduler's name and the sample's time: a recreated
               -- pod or a requeued Slurm job repeats the name, each run owns only its own samples
    SELECT g.cluster, j.job_id, l.gpu_id, min(l.ts) AS first_ts
    FROM labelled l JOIN gpus g USING (gpu_id)
    JOIN jobs j ON j.cluster = g.cluster AND coalesce(j.scheduler_job, j.job_id) = l.scheduler_job
         AND l.ts >= coalesce(j.start_time, j.submit_time, l.ts) AND (j.end_time IS NULL OR l.ts <= j.end_time)
    GROUP BY ALL
),
scheduled AS (  -- jobs whose devices their scheduler already told us: not ours to derive
    SELECT DISTINCT cluster, job_id FROM job_allocations WHERE source IS DISTINCT FROM 'labels'
)
SELECT o.cluster, o.job_id, o.gpu_id,
       greatest(least(o.first_ts, coalesce(a.start_time, o.first_ts)),
                coalesce(j.start_time, o.first_ts)) AS start_time,
       j.end_time,
       j.gpus
FROM observed o
JOIN jobs j ON j.cluster = o.cluster AND j.job_id = o.job_id
ANTI JOIN scheduled x ON x.cluster = o.cluster AND x.job_id = o.job_id
LEFT JOIN (SELECT cluster, job_id, gpu_id, min(start_time) AS start_time FROM job_allocations
           WHERE source = 'labels' GROUP BY ALL) a
       ON a.cluster = o.cluster AND a.job_id = o.job_id AND a.gpu_id = o.gpu_id
"""


def link_devices(con: duckdb.DuckDBPyConnection, *, start: datetime, end: datetime) -> int:
    """Derive job → device allocations from the labels of samples in [start, end) (naive UTC).

    Returns the number of (job, device) intervals written. Runs in the caller's transaction if
    one is open.
    """
    with transaction(con):
        con.execute(_LINKS, {"lo": start, "hi": end}).fetchall()
        written = con.execute("SELECT count(*) FROM _device_links").fetchall()[0][0]
        if written:
            con.execute(
                "DELETE FROM job_allocations a USING _device_links l WHERE a.source = 'labels' "
                "AND a.cluster = l.cluster AND a.job_id = l.job_id AND a.gpu_id = l.gpu_id"
            ).fetchall()
            con.execute(
                "INSERT INTO job_allocations (cluster, job_id, gpu_id, start_time, end_time, gpu_fraction, source) "
                "SELECT cluster, job_id, gpu_id, start_time, end_time, 1.0, 'labels' FROM _device_links"
            ).fetchall()
            # Spread each touched job's GPUs over the compute of every device it was seen on.
            con.execute(
                """UPDATE job_allocations a SET gpu_fraction = least(1.0, f.gpus / f.compute)
                   FROM (SELECT a.cluster, a.job_id, any_value(j.gpus) AS gpus,
                                sum(g.gpu_fraction) AS compute
                         FROM job_allocations a JOIN gpus g USING (gpu_id)
                         JOIN jobs j ON j.cluster = a.cluster AND j.job_id = a.job_id
                         WHERE a.source = 'labels'
                           AND (a.cluster, a.job_id) IN (SELECT cluster, job_id FROM _device_links)
                         GROUP BY a.cluster, a.job_id) f
                   WHERE a.source = 'labels' AND a.cluster = f.cluster AND a.job_id = f.job_id"""
            ).fetchall()
        con.execute("DROP TABLE _device_links").fetchall()
    return written


def link_devices_for_jobs(con: duckdb.DuckDBPyConnection, jobs: pl.DataFrame) -> int:
    """:func:`link_devices` over the time the just-written ``jobs`` rows ran (start to end, or to
    the newest sample while running), so samples ingested before their job record get linked."""
    if jobs.is_empty() or "start_time" not in jobs.columns:
        return 0
    span = jobs.select(pl.col("start_time").min().alias("lo"),
                       pl.col("end_time").max().alias("hi"),
                       pl.col("end_time").is_null().any().alias("open")).row(0, named=True)
    if span["lo"] is None:
        return 0
    hi = span["hi"]
    if span["open"] or hi is None:
        newest = con.execute("SELECT max(ts) FROM gpu_samples").fetchall()[0][0]
        hi = max(filter(None, (hi, newest)), default=None)
    if hi is None or hi < span["lo"]:
        return 0
    return link_devices(con, start=span["lo"], end=hi + timedelta(microseconds=1))


def link_devices_for_samples(con: duckdb.DuckDBPyConnection, samples: pl.DataFrame) -> int:
    """:func:`link_devices` over the span of a just-written batch of samples (``ts`` column)."""
    if samples.is_empty():
        return 0
    lo, hi = samples.select(pl.col("ts").min().alias("lo"), pl.col("ts").max().alias("hi")).row(0)
    return link_devices(con, start=lo, end=hi + timedelta(microseconds=1))
