"""Allocations, one frame: device-level rows from ``job_allocations`` and job-level ones from ``jobs``.

Jobs from the CSV importer, Kubernetes and Slurm often arrive with a GPU count, a model and
start/end times but no device (design.md: "Allocation comes from job records"). Such a job — a
start_time, gpus > 0 and no ``job_allocations`` row at all — is held for ``jobs.gpus`` GPUs
(fractional allowed: 460 milli-GPU = 0.46) of ``jobs.gpu_model`` at the chargeback policy's
default tier, on no known device: ``gpu_id`` NULL, activity unknown. Every analytics entry point
builds its hourly pieces from :func:`allocation_intervals`, so attribution, usage, budget,
chargeback, delivery and utilization all count the same GPU-hours.
"""

from __future__ import annotations

from datetime import datetime

import polars as pl

DEVICE = "device"
JOB = "job"
DEFAULT_TIER = "reserved"


def gpu_inventory(gpus: pl.LazyFrame) -> pl.LazyFrame:
    """The columns of ``gpus`` the analytics use, with ``is_mig`` and ``tier`` (= pricing_tier)."""
    names = gpus.collect_schema().names()
    mig_id = pl.col("mig_instance_id") if "mig_instance_id" in names else pl.lit(-1)
    return gpus.select(
        "gpu_id",
        "cluster",
        pl.col("gpu_uuid") if "gpu_uuid" in names else pl.col("gpu_id").cast(pl.String).alias("gpu_uuid"),
        pl.col("host") if "host" in names else pl.lit(None, pl.String).alias("host"),
        "model",
        pl.col("mig_profile") if "mig_profile" in names else pl.lit(None, pl.String).alias("mig_profile"),
        pl.col("gpu_fraction").fill_null(1.0).alias("device_fraction"),
        (mig_id.fill_null(-1) >= 0).alias("is_mig"),
        (pl.col("pricing_tier") if "pricing_tier" in names else pl.lit(None, pl.String))
        .fill_null("reserved")
        .alias("tier"),
    )


Span = tuple[datetime | None, datetime]  # [lo, hi): lo None = from the beginning


def overlapping(frame: pl.LazyFrame, span: Span | None) -> pl.LazyFrame:
    """The rows of ``frame`` whose [start_time, end_time) (NULL end: still held) can overlap
    ``span``: every row ``intervals.split_by_hour`` keeps for a clip to it (a NULL start_time is
    kept too: the clip reads it as the span's start). Filtering first keeps the joins below to
    what the span holds: an update of one hour does not join the whole window's allocations."""
    if span is None:
        return frame
    lo, hi = span
    keep = pl.col("start_time").is_null() | (pl.col("start_time") < hi)
    if lo is not None:
        keep &= pl.col("end_time").is_null() | (pl.col("end_time") > lo)
    return frame.filter(keep)


def job_level_allocations(
    jobs: pl.LazyFrame, job_allocations: pl.LazyFrame, *, default_tier: str = DEFAULT_TIER,
    span: Span | None = None,
) -> pl.LazyFrame:
    """Jobs that started, hold gpus > 0 and have no ``job_allocations`` row, as allocation rows
    (with ``span``: only the jobs that can overlap it, :func:`overlapping`).

    Columns as :func:`allocation_intervals`: gpu_id NULL, alloc_fraction = jobs.gpus (GPUs),
    model = jobs.gpu_model, tier = ``default_tier``, device_fraction 1.0, is_mig false,
    allocation_level "job".
    """
    started = overlapping(jobs.filter(pl.col("start_time").is_not_null() & (pl.col("gpus").fill_null(0.0) > 0)),
                          span)
    # Any allocation row of the job, whenever it was, makes it device-level: the candidates'
    # rows are found by a semi join (hashing the few candidates, not every allocation's key).
    with_devices = job_allocations.select("cluster", "job_id").join(
        started.select("cluster", "job_id"), on=["cluster", "job_id"], how="semi")
    return (
        started
        .join(with_devices, on=["cluster", "job_id"], how="anti")
        .select(
            "cluster", "job_id",
            pl.lit(None, pl.Int32).alias("gpu_id"),
            pl.col("start_time").cast(pl.Datetime("us")),
            pl.col("end_time").cast(pl.Datetime("us")),
            pl.col("gpus").cast(pl.Float64).alias("alloc_fraction"),
            pl.lit(None, pl.String).alias("gpu_uuid"),
            pl.lit(None, pl.String).alias("host"),
            pl.col("gpu_model").cast(pl.String).alias("model"),
            pl.lit(None, pl.String).alias("mig_profile"),
            pl.lit(1.0).alias("device_fraction"),
            pl.lit(False).alias("is_mig"),
            # A Slurm partition rule may price the job (jobs.pricing_tier, gpuledger.ingest.tiers).
            (pl.col("pricing_tier").fill_null(default_tier) if "pricing_tier" in jobs.collect_schema().names()
             else pl.lit(default_tier)).alias("tier"),
            pl.lit(JOB).alias("allocation_level"),
        )
    )


def allocation_intervals(
    job_allocations: pl.LazyFrame,
    gpus: pl.LazyFrame,
    jobs: pl.LazyFrame | None = None,
    *,
    default_tier: str = DEFAULT_TIER,
    span: Span | None = None,
) -> pl.LazyFrame:
    """Every allocation interval: device-level rows, then (with ``jobs``) the job-level ones;
    with ``span`` only those that can overlap it (:func:`overlapping`).

    Columns: cluster, job_id, gpu_id (NULL for job level), start_time, end_time (NULL = still
    held), alloc_fraction (share of the device held; job level: GPUs held), gpu_uuid, host,
    model, mig_profile, device_fraction, is_mig, tier, allocation_level ("device" / "job").
    Device rows take model and tier from the inventory (tier ``default_tier`` when the device
    is unknown; its model is then NULL and chargeback cannot price it).
    """
    inv = gpu_inventory(gpus).drop("cluster")
    device = (
        overlapping(job_allocations, span).select(
            "cluster", "job_id", pl.col("gpu_id").cast(pl.Int32),
            pl.col("start_time").cast(pl.Datetime("us")), pl.col("end_time").cast(pl.Datetime("us")),
            pl.col("gpu_fraction").fill_null(1.0).cast(pl.Float64).alias("alloc_fraction"),
        )
        .join(inv.with_columns(pl.col("gpu_id").cast(pl.Int32)), on="gpu_id", how="left")
        .with_columns(pl.col("device_fraction").fill_null(1.0), pl.col("tier").fill_null(default_tier),
                      pl.col("is_mig").fill_null(False), pl.lit(DEVICE).alias("allocation_level"))
    )
    if jobs is None:
        return device
    job_level = job_level_allocations(jobs, job_allocations, default_tier=default_tier, span=span)
    return pl.concat([device, job_level.select(device.collect_schema().names())], how="vertical_relaxed")
