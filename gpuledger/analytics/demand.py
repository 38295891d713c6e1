"""GPU demand per project and hour: the GPUs jobs asked for from submit to end, queued time included.

The plain way cuts every job into hourly pieces (intervals.split_by_hour) and sums them; a week
of 4,096 GPUs has ~110k jobs, many queued for days, so that is ~9.5M pieces for ~2.7k
(project, hour) answers. Here only a job's first and last partial hours are pieces; the whole
hours between are one +gpus / −gpus step per job, summed as a running total over the hours in
integer nano-GPUs (exact and order-free, as attribution.rollup_usage). Same figures as the plain
way to the last bits (tests/analytics/test_fast_paths.py), at a fraction of the rows.
"""

from __future__ import annotations

from datetime import datetime

import polars as pl

from gpuledger.analytics.intervals import hour_grid

_NANO = 1_000_000_000
_HOUR = pl.duration(hours=1)


def _piece(lo: pl.Expr, hi: pl.Expr, hour: pl.Expr) -> list[pl.Expr]:
    """A piece [lo, hi) inside one hour, as split_by_hour computes its GPU-hours."""
    piece_s = (hi - lo).dt.total_microseconds() / 1_000_000
    return [pl.col("project"), hour.alias("hour"),
            (pl.col("gpus") * piece_s / 3600.0).alias("gpu_hours_demand"), (hi > lo).alias("_keep")]


def demand_hourly(jobs: pl.LazyFrame, *, start: datetime, end: datetime, now: datetime) -> pl.LazyFrame:
    """Per (project, hour) of [start, end): ``gpu_hours_demand`` = Σ jobs.gpus × the job's time in
    the hour between coalesce(submit_time, start_time) and end_time (NULL or later: ``now``).
    Jobs with neither time are skipped. Rows only where some job wanted GPUs (or asked for 0)."""
    submit = pl.coalesce("submit_time", "start_time")
    lo = pl.max_horizontal(submit, pl.lit(start))
    hi = pl.min_horizontal(pl.col("end_time").fill_null(pl.lit(now)), pl.lit(now), pl.lit(end))
    spans = (
        jobs.filter(submit.is_not_null())
        .select("project", "gpus", _lo=lo, _hi=hi)
        .filter(pl.col("_hi") > pl.col("_lo"))
        .with_columns(_b_lo=pl.col("_lo").dt.truncate("1h"), _b_hi=pl.col("_hi").dt.truncate("1h"))
        # first whole hour: lo itself when on the hour, else the next hour
        .with_columns(_c_lo=pl.when(pl.col("_lo") == pl.col("_b_lo")).then(pl.col("_lo"))
                      .otherwise(pl.col("_b_lo") + _HOUR))
    )
    head = spans.select(_piece(pl.col("_lo"), pl.min_horizontal("_c_lo", "_hi"), pl.col("_b_lo")))
    tail = spans.select(_piece(pl.max_horizontal("_b_hi", "_c_lo"), pl.col("_hi"), pl.col("_b_hi")))
    edges = pl.concat([head, tail]).filter("_keep").drop("_keep")
    # Whole hours [c_lo, b_hi): +gpus from c_lo, −gpus from b_hi, as a running total per project.
    whole = spans.filter(pl.col("_c_lo") < pl.col("_b_hi")).with_columns(
        _g=(pl.col("gpus") * _NANO).round(0).cast(pl.Int64))
    steps = pl.concat([
        whole.select("project", hour="_c_lo", _d="_g"),
        whole.select("project", hour="_b_hi", _d=-pl.col("_g")),
    ]).group_by("project", "hour").agg(pl.col("_d").sum())
    hours = hour_grid(start, end).select(pl.col("hour").cast(pl.Datetime("us")))
    running = (
        whole.select("project").unique().join(hours, how="cross")
        .join(steps.with_columns(pl.col("hour").cast(pl.Datetime("us"))), on=["project", "hour"], how="left")
        .sort("project", "hour")
        .with_columns(_n=pl.col("_d").fill_null(0).cum_sum().over("project"))
        .filter(pl.col("_n") != 0)
        .select("project", "hour", gpu_hours_demand=(pl.col("_n").cast(pl.Decimal(38, 9)) / _NANO)
                .cast(pl.Float64))
    )
    return (
        pl.concat([edges.with_columns(pl.col("hour").cast(pl.Datetime("us"))), running], how="vertical_relaxed")
        .group_by("project", "hour")
        .agg(pl.col("gpu_hours_demand").sum())
    )
