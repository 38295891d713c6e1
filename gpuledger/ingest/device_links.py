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

from gpuledger.ingest.holdings.store import link_holdings, record_disagreements
from gpuledger.sql import load_sql
from gpuledger.warehouse import transaction

SOURCE = "labels"

# Samples in the window whose labels name a job, joined to the jobs that exist, with any earlier
# derived interval, so the result is the merged interval per (cluster, job_id, gpu_id).
_LINKS = load_sql(__package__, "device_links.sql")
# Spread each touched job's GPUs over the compute of every device it was seen on.
_FRACTIONS = load_sql(__package__, "device_link_fractions.sql")


def link_devices(con: duckdb.DuckDBPyConnection, *, start: datetime, end: datetime) -> int:
    """Derive job → device allocations from the labels of samples in [start, end) (naive UTC).

    Returns the number of (job, device) intervals written. Runs in the caller's transaction if
    one is open.
    """
    with transaction(con):
        # The scheduler side first (issue 20): holdings whose device arrived with these samples
        # get linked, and their jobs are then not derived from labels below.
        holdings = con.execute("SELECT count(*) FROM device_holdings WHERE last_seen >= $lo",
                               {"lo": start}).fetchall()[0][0]
        if holdings:
            link_holdings(con, since=start, check=False)
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
            con.execute(_FRACTIONS).fetchall()
        con.execute("DROP TABLE _device_links").fetchall()
        if holdings:
            record_disagreements(con, start=start, end=end)
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
