"""Utilization: how much of the installed capacity was allocated and how much was busy.

Percentages are 0..100 of installed capacity (physical GPUs × hours; MIG slices count by their
fraction of the physical GPU). Active GPU-hours only count devices with samples; the hours with
unknown activity are reported beside them.
"""

from __future__ import annotations

from datetime import datetime

import polars as pl

from gpuledger.analytics.capacity import capacity_hourly

USED_SUMS = ["gpu_hours_allocated", "gpu_hours_active", "gpu_hours_unknown"]


def _pct(num: str, den: str) -> pl.Expr:
    return pl.when(pl.col(den) > 0).then(100.0 * pl.col(num) / pl.col(den)).otherwise(None)


def utilization_hourly(
    attribution: pl.LazyFrame,
    gpus: pl.LazyFrame,
    *,
    start: datetime,
    end: datetime,
    by: tuple[str, ...] = ("cluster", "model"),
) -> pl.LazyFrame:
    """Per ``by`` keys (from cluster, model, tier; ``()`` for the whole fleet) and hour of [start, end).

    ``attribution`` is :func:`attribution.attribute_usage` output. Columns: *by, hour,
    gpu_hours_capacity, gpu_hours_allocated, gpu_hours_active, gpu_hours_unknown,
    allocation_pct, active_pct (of capacity), active_of_allocated_pct (of the allocated hours
    with known activity).
    """
    cap = capacity_hourly(gpus, start=start, end=end, by=by).select(*by, "hour", "gpu_hours_capacity")
    used = (
        attribution.filter((pl.col("hour") >= start.replace(minute=0, second=0, microsecond=0)) & (pl.col("hour") < end))
        .group_by(*by, "hour").agg(pl.col(USED_SUMS).sum())
    )
    return _with_percentages(
        cap.join(used, on=[*by, "hour"], how="full", coalesce=True)
        .with_columns(pl.col("gpu_hours_capacity", *USED_SUMS).fill_null(0.0)), by)


def _with_percentages(hours: pl.LazyFrame, by) -> pl.LazyFrame:
    """Hourly figures with their percentages (of capacity; active of the allocated hours whose
    activity is known), sorted by ``by`` and hour."""
    return (
        hours
        .with_columns(_known=pl.col("gpu_hours_allocated") - pl.col("gpu_hours_unknown"))
        .with_columns(
            allocation_pct=_pct("gpu_hours_allocated", "gpu_hours_capacity"),
            active_pct=_pct("gpu_hours_active", "gpu_hours_capacity"),
            active_of_allocated_pct=_pct("gpu_hours_active", "_known"),
        )
        .drop("_known")
        .sort(*by, "hour")
    )


_NANO = 1e9  # figures summed over models in whole nano-units (1e-9 GPU-hour), as usage is


def utilization_over_models(by_model: pl.LazyFrame, by: tuple[str, ...]) -> pl.LazyFrame:
    """:func:`utilization_hourly` rows by ``("cluster", "model")`` summed over models per ``by``
    (``("cluster",)``, or ``()`` for the whole fleet) and hour, percentages recomputed. Sums are
    exact and order-free: each figure in whole nano-units summed as integers, the rule the
    materialized rows are summed by (gpuledger/facts/utilization_sums.sql), so a range answered
    from stored days gives these digits."""
    figures = ["gpu_hours_capacity", *USED_SUMS]
    return _with_percentages(
        by_model.with_columns((pl.col(c) * _NANO).round(0).cast(pl.Int64).alias(c) for c in figures)
        .group_by(*by, "hour").agg(pl.col(figures).sum())
        .with_columns((pl.col(c).cast(pl.Decimal(38, 9)) / 1_000_000_000).cast(pl.Float64).alias(c)
                      for c in figures), by)


def utilization_by_kind(attribution: pl.LazyFrame, jobs: pl.LazyFrame, *, by: tuple[str, ...] = ()) -> pl.LazyFrame:
    """Per workload kind (jobs.kind; NULL → "unknown") and ``by`` keys: allocated, active and
    unknown GPU-hours, share_of_allocated_pct (of all allocated hours in the group), and
    active_of_allocated_pct."""
    kinds = jobs.select("cluster", "job_id", pl.col("kind").fill_null("unknown"))
    out = (
        attribution.join(kinds, on=["cluster", "job_id"], how="left")
        .with_columns(pl.col("kind").fill_null("unknown"))
        .group_by(*by, "kind").agg(pl.col(USED_SUMS).sum())
        .with_columns(_known=pl.col("gpu_hours_allocated") - pl.col("gpu_hours_unknown"),
                      _total=pl.col("gpu_hours_allocated").sum().over(list(by)) if by
                      else pl.col("gpu_hours_allocated").sum())
    )
    return out.with_columns(
        share_of_allocated_pct=_pct("gpu_hours_allocated", "_total"),
        active_of_allocated_pct=_pct("gpu_hours_active", "_known"),
    ).drop("_known", "_total").sort(*by, "kind")
