"""Installed capacity: physical GPUs × hours, from the ``gpus`` inventory.

A physical GPU is one (cluster, gpu_uuid); its MIG instances share it. Each physical GPU gives
one GPU-hour per hour of [start, end) while it exists: from the hour of its ``first_seen`` (always
when NULL) until it is retired, at ``retired_at`` when the inventory says so (migration 006) or
else ``last_seen`` plus a grace (config policy.chargeback.retire_after_hours; never when NULL).
An hour that starts before the retirement counts whole. So a decommissioned GPU stops costing
idle, and a scrape gap shorter than the grace does not retire anything. Unconfigured MIG space
shows up as idle capacity.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import polars as pl

from gpuledger.analytics.allocations import gpu_inventory
from gpuledger.analytics.intervals import hour_grid

DEFAULT_RETIRE_GRACE = timedelta(hours=24)


def physical_gpus(gpus: pl.LazyFrame, *, retire_grace: timedelta = DEFAULT_RETIRE_GRACE) -> pl.LazyFrame:
    """One row per physical GPU: cluster, gpu_uuid, host, model, tier, from_time (first_seen
    hour), until_time (retirement; NULL = still installed)."""
    names = gpus.collect_schema().names()

    def _ts(col: str) -> pl.Expr:
        return (pl.col(col) if col in names else pl.lit(None)).cast(pl.Datetime("us"))

    until = pl.coalesce(_ts("retired_at"), _ts("last_seen") + pl.lit(retire_grace))
    inv = gpu_inventory(gpus).join(
        gpus.select("gpu_id", _ts("first_seen").dt.truncate("1h").alias("from_time"), until.alias("until_time")),
        on="gpu_id", how="left",
    )
    # A MIG instance's rows share the device: it exists from its earliest sighting to its latest
    # (an instance still without a retirement keeps the device installed).
    return inv.group_by("cluster", "gpu_uuid").agg(
        pl.col("host", "model", "tier").first(), pl.col("from_time").min(),
        pl.when(pl.col("until_time").is_null().any()).then(None).otherwise(pl.col("until_time").max())
        .alias("until_time"),
    )


def capacity_hourly(
    gpus: pl.LazyFrame, *, start: datetime, end: datetime, by: tuple[str, ...] = ("cluster", "model", "tier"),
    retire_grace: timedelta = DEFAULT_RETIRE_GRACE,
) -> pl.LazyFrame:
    """GPU-hours of installed capacity per ``by`` keys and hour of [start, end).

    Columns: *by, hour, piece_s (seconds of the hour inside the range), gpu_count,
    gpu_hours_capacity (= gpu_count × piece_s / 3600).
    """
    grid = hour_grid(start, end)
    phys = physical_gpus(gpus, retire_grace=retire_grace)
    return (
        phys.join(grid, how="cross")
        .filter(pl.col("from_time").is_null() | (pl.col("hour") >= pl.col("from_time")))
        .filter(pl.col("until_time").is_null() | (pl.col("hour") < pl.col("until_time")))
        .group_by(*by, "hour", "piece_s")
        .agg(gpu_count=pl.len())
        .with_columns(gpu_hours_capacity=pl.col("gpu_count") * pl.col("piece_s") / 3600.0)
    )
