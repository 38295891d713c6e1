"""Installed capacity: physical GPUs × hours, from the ``gpus`` inventory.

A physical GPU is one (cluster, gpu_uuid); its MIG instances share it. Each physical GPU gives
one GPU-hour per hour of [start, end), from the hour of its ``first_seen`` (or always when
``first_seen`` is NULL). Unconfigured MIG space therefore shows up as idle capacity.
"""

from __future__ import annotations

from datetime import datetime

import polars as pl

from gpuledger.analytics.allocations import gpu_inventory
from gpuledger.analytics.intervals import hour_grid


def physical_gpus(gpus: pl.LazyFrame) -> pl.LazyFrame:
    """One row per physical GPU: cluster, gpu_uuid, host, model, tier, from_time (first_seen hour)."""
    names = gpus.collect_schema().names()
    first_seen = (pl.col("first_seen") if "first_seen" in names else pl.lit(None, pl.Datetime("us")))
    inv = gpu_inventory(gpus).join(
        gpus.select("gpu_id", first_seen.cast(pl.Datetime("us")).dt.truncate("1h").alias("from_time")),
        on="gpu_id", how="left",
    )
    return inv.group_by("cluster", "gpu_uuid").agg(
        pl.col("host", "model", "tier").first(), pl.col("from_time").min()
    )


def capacity_hourly(
    gpus: pl.LazyFrame, *, start: datetime, end: datetime, by: tuple[str, ...] = ("cluster", "model", "tier")
) -> pl.LazyFrame:
    """GPU-hours of installed capacity per ``by`` keys and hour of [start, end).

    Columns: *by, hour, piece_s (seconds of the hour inside the range), gpu_count,
    gpu_hours_capacity (= gpu_count × piece_s / 3600).
    """
    grid = hour_grid(start, end)
    phys = physical_gpus(gpus)
    return (
        phys.join(grid, how="cross")
        .filter(pl.col("from_time").is_null() | (pl.col("hour") >= pl.col("from_time")))
        .group_by(*by, "hour", "piece_s")
        .agg(gpu_count=pl.len())
        .with_columns(gpu_hours_capacity=pl.col("gpu_count") * pl.col("piece_s") / 3600.0)
    )
