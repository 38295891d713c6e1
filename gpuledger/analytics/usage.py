"""Usage over time per org node: a sliding window and exponential decay (half-life).

Units: allocated GPU-hours. Decayed usage weights every instant t before ``as_of`` by
2^(−(as_of − t)/H); each piece's weight is integrated exactly over the piece, so a weight never
exceeds 1 and decayed usage over a window never exceeds window usage over the same window.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

import polars as pl

from gpuledger.analytics.allocations import DEFAULT_TIER
from gpuledger.analytics.attribution import allocated_hours, allocated_pieces
from gpuledger.analytics.collect import ENGINE
from gpuledger.analytics.intervals import clip_pieces
from gpuledger.analytics.tree import rollup_to_nodes

DEFAULT_WINDOW = timedelta(days=7)
DEFAULT_HALF_LIFE = timedelta(days=7)
USAGE_PIECE = timedelta(days=1)
_PIECE_COLUMNS = ["cluster", "job_id", "piece_start", "piece_end", "piece_s", "device_fraction", "alloc_fraction",
                  "gpu_hours_allocated"]


def decay_weight(as_of: datetime, half_life: timedelta) -> pl.Expr:
    """Mean of 2^(−age/H) over [piece_start, piece_end): (H/ln 2)(2^(−a_end/H) − 2^(−a_start/H)) / len."""
    h_s = half_life.total_seconds()
    age_start = (pl.lit(as_of) - pl.col("piece_start")).dt.total_microseconds() / 1e6
    age_end = (pl.lit(as_of) - pl.col("piece_end")).dt.total_microseconds() / 1e6
    length = age_start - age_end
    integral = (h_s / math.log(2)) * ((-age_end / h_s * math.log(2)).exp() - (-age_start / h_s * math.log(2)).exp())
    return pl.when(length > 0).then(integral / length).otherwise(pl.lit(2.0).pow(-age_end / h_s))


def project_usage(
    job_allocations: pl.LazyFrame,
    gpus: pl.LazyFrame,
    jobs: pl.LazyFrame,
    *,
    as_of: datetime,
    window: timedelta = DEFAULT_WINDOW,
    half_life: timedelta = DEFAULT_HALF_LIFE,
    decay_horizon: timedelta | None = None,
    default_tier: str = DEFAULT_TIER,
) -> pl.LazyFrame:
    """Per project: ``gpu_hours_window`` (allocated GPU-hours in [as_of − window, as_of)) and
    ``gpu_hours_decayed`` (all allocations before ``as_of``, or within ``decay_horizon``, decayed).
    Jobs without device allocations count by their jobs.gpus (allocations.py).
    """
    horizon_start = None if decay_horizon is None else as_of - decay_horizon
    # only what the decay and the window read: the pieces' other columns (host, UUID, model, ...)
    # doubled what a month of them held (issue 41). Pieces a UTC day long, not an hour: usage joins
    # no hourly samples and the decay's weight is integrated exactly over any piece, so the sums are
    # the hourly pieces' (to float rounding) from a fraction of the rows (fair share reads 70 days).
    pieces = allocated_pieces(job_allocations, gpus, now=as_of, start=horizon_start, end=as_of, jobs=jobs,
                              default_tier=default_tier, every=USAGE_PIECE).select(_PIECE_COLUMNS)
    pieces = pieces.collect(engine=ENGINE).lazy()
    # Cut at the window start itself, which need not be an hour boundary: the decay's pieces
    # clipped there when they reach back that far (one cut of the allocations, not two).
    win_start = as_of - window
    if horizon_start is None or horizon_start <= win_start:
        win = clip_pieces(pieces, win_start).with_columns(gpu_hours_allocated=allocated_hours())
    else:
        win = allocated_pieces(job_allocations, gpus, now=as_of, start=win_start, end=as_of, jobs=jobs,
                               default_tier=default_tier, every=USAGE_PIECE)
    projects = jobs.select("cluster", "job_id", "project")
    decayed = (
        pieces.with_columns(w=decay_weight(as_of, half_life))
        .join(projects, on=["cluster", "job_id"], how="left")
        .group_by("project")
        .agg(gpu_hours_decayed=(pl.col("gpu_hours_allocated") * pl.col("w")).sum())
    )
    windowed = (
        win.join(projects, on=["cluster", "job_id"], how="left")
        .group_by("project")
        .agg(gpu_hours_window=pl.col("gpu_hours_allocated").sum())
    )
    return (
        decayed.join(windowed, on="project", how="full", coalesce=True)
        .with_columns(pl.col("project").fill_null("(no job record)"),
                      pl.col("gpu_hours_window", "gpu_hours_decayed").fill_null(0.0))
    )


def node_usage(
    job_allocations: pl.LazyFrame,
    gpus: pl.LazyFrame,
    jobs: pl.LazyFrame,
    org_nodes: pl.LazyFrame,
    *,
    as_of: datetime,
    window: timedelta = DEFAULT_WINDOW,
    half_life: timedelta = DEFAULT_HALF_LIFE,
    decay_horizon: timedelta | None = None,
    default_tier: str = DEFAULT_TIER,
) -> pl.LazyFrame:
    """:func:`project_usage` rolled up to every org node: node, gpu_hours_window, gpu_hours_decayed."""
    per_project = project_usage(job_allocations, gpus, jobs, as_of=as_of, window=window,
                                half_life=half_life, decay_horizon=decay_horizon, default_tier=default_tier)
    return rollup_to_nodes(per_project, org_nodes, sum_cols=["gpu_hours_window", "gpu_hours_decayed"])
