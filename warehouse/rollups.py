"""The ``gpu_hourly`` rollup (migration 004): per (device, hour) sums of the raw samples.

Attribution of whole hours needs only these sums, so a week of 1,024 GPUs at 30 s is read as
~170k rows instead of ~20M samples. ``warehouse.write_samples`` refreshes the hours each batch
touched, in the batch's transaction: those hours are deleted and aggregated again from
``gpu_samples`` (idempotent; late samples just refresh their hour again). The columns and their
meaning are those of :func:`gpuledger.analytics.attribution.hourly_rollup`, which computes the
same in polars.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import duckdb
import polars as pl

from gpuledger.warehouse.db import transaction

HOUR = timedelta(hours=1)

# Σ of reset-aware increments = (last − first) + Σ over drops of the value before the drop:
# increments d ≥ 0 count as d, a drop (reset) counts the new value e_i = d_i + e_{i−1}.
_ROLLUP_SELECT = """
WITH s AS (
    SELECT gpu_id, ts, date_trunc('hour', ts) AS hour,
           sm_active_ratio, gr_engine_active_ratio, gpu_util_ratio, energy_total_j
    FROM gpu_samples
    WHERE ts >= $lo AND ts < $hi
),
agg AS (
    SELECT gpu_id, hour,
           count(*) AS s_n,
           coalesce(sum(least(greatest(sm_active_ratio, 0.0), 1.0)), 0.0) AS s_sm_active,
           coalesce(sum(least(greatest(gr_engine_active_ratio, 0.0), 1.0)), 0.0) AS s_gr_engine_active,
           coalesce(sum(least(greatest(gpu_util_ratio, 0.0), 1.0)), 0.0) AS s_gpu_util,
           count(sm_active_ratio) AS s_n_sm_active,
           count(gr_engine_active_ratio) AS s_n_gr_engine_active,
           count(gpu_util_ratio) AS s_n_gpu_util,
           arg_min(energy_total_j, ts) FILTER (WHERE energy_total_j IS NOT NULL) AS e_first,
           arg_max(energy_total_j, ts) FILTER (WHERE energy_total_j IS NOT NULL) AS e_last,
           min(energy_total_j) AS e_min
    FROM s
    GROUP BY gpu_id, hour
),
-- Only hours whose minimum is below their first value can hold a drop; walk just those.
suspect AS (SELECT gpu_id, hour FROM agg WHERE e_min < e_first),
drops AS (
    SELECT gpu_id, hour, sum(prev) AS drop_sum
    FROM (
        SELECT s.gpu_id, s.hour, s.energy_total_j AS e,
               lag(s.energy_total_j) OVER (PARTITION BY s.gpu_id, s.hour ORDER BY s.ts) AS prev
        FROM s SEMI JOIN suspect USING (gpu_id, hour)
        WHERE s.energy_total_j IS NOT NULL
    )
    WHERE e < prev
    GROUP BY gpu_id, hour
)
SELECT agg.gpu_id, agg.hour, s_n, s_sm_active, s_gr_engine_active, s_gpu_util,
       s_n_sm_active, s_n_gr_engine_active, s_n_gpu_util, e_first, e_last,
       CASE WHEN e_first IS NULL THEN NULL ELSE e_last - e_first + coalesce(drop_sum, 0.0) END AS e_inside
FROM agg LEFT JOIN drops USING (gpu_id, hour)
"""


def hour_span(start: datetime, end: datetime) -> tuple[datetime, datetime]:
    """The whole UTC hours covering [start, end)."""
    lo = start.replace(minute=0, second=0, microsecond=0)
    hi = end.replace(minute=0, second=0, microsecond=0)
    if hi < end:
        hi += HOUR
    return lo, hi


def refresh_gpu_hourly(con: duckdb.DuckDBPyConnection, start: datetime, end: datetime) -> int:
    """Re-aggregate every hour touched by [start, end) (naive UTC) from ``gpu_samples`` into
    ``gpu_hourly``, in one transaction (the caller's, if one is open). Idempotent. Returns the
    number of (gpu_id, hour) rows written. Rebuilds an older warehouse's rollup too.
    """
    if end <= start:
        return 0
    lo, hi = hour_span(start, end)
    with transaction(con):
        con.execute("DELETE FROM gpu_hourly WHERE hour >= $lo AND hour < $hi", {"lo": lo, "hi": hi}).fetchall()
        con.execute(f"INSERT INTO gpu_hourly {_ROLLUP_SELECT}", {"lo": lo, "hi": hi}).fetchall()
        return con.execute(
            "SELECT count(*) FROM gpu_hourly WHERE hour >= $lo AND hour < $hi", {"lo": lo, "hi": hi}
        ).fetchall()[0][0]


def refresh_gpu_hourly_for(con: duckdb.DuckDBPyConnection, samples: pl.DataFrame) -> int:
    """:func:`refresh_gpu_hourly` over the span of a just-written batch of samples (``ts`` column)."""
    if samples.is_empty():
        return 0
    lo, hi = samples.select(pl.col("ts").min().alias("lo"), pl.col("ts").max().alias("hi")).row(0)
    return refresh_gpu_hourly(con, lo, hi + timedelta(microseconds=1))


def rollup_frame(con: duckdb.DuckDBPyConnection, start: datetime, end: datetime) -> pl.LazyFrame:
    """The rollup of the hours touched by [start, end) computed from ``gpu_samples`` without
    storing it (for readers of a warehouse whose ``gpu_hourly`` is missing or behind)."""
    lo, hi = hour_span(start, end)
    return con.sql(_ROLLUP_SELECT, params={"lo": lo, "hi": hi}).pl().lazy()
