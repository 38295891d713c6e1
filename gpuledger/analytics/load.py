"""Read the warehouse tables the analytics need as LazyFrames.

DuckDB does the time filtering (so a month's report does not read a year of samples); polars does
the rest. Works on any DuckDB connection, e.g. ``warehouse.open_reader(path)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import duckdb
import polars as pl

_SAMPLE_COLS = (
    "gpu_id, ts, sm_active_ratio, gr_engine_active_ratio, tensor_active_ratio, dram_active_ratio, "
    "gpu_util_ratio, fb_used_bytes, fb_total_bytes, power_w, energy_total_j, namespace, pod, container, hpc_job"
)


@dataclass(frozen=True)
class Tables:
    """The warehouse tables as LazyFrames (shapes of warehouse/migrations/001_initial.sql)."""

    gpus: pl.LazyFrame
    gpu_samples: pl.LazyFrame
    jobs: pl.LazyFrame
    job_allocations: pl.LazyFrame
    org_nodes: pl.LazyFrame
    budgets: pl.LazyFrame
    rate_card: pl.LazyFrame


def _frame(con: duckdb.DuckDBPyConnection, query: str, params: list | None = None) -> pl.LazyFrame:
    # duckdb 2.0: execute() results have no .pl(); sql() relations do, and take params.
    return con.sql(query, params=params or None).pl().lazy()


def load_tables(
    con: duckdb.DuckDBPyConnection,
    *,
    start: datetime | None = None,
    end: datetime | None = None,
    samples: bool = True,
) -> Tables:
    """Read every table; with ``start``/``end`` only samples in [start, end) and jobs and
    allocations overlapping it (still-running ones included). ``samples=False`` skips the big table
    (an empty frame of the right shape instead), for chargeback, budgets and fair share.
    """
    lo = start or datetime(1970, 1, 1)
    hi = end or datetime(9999, 1, 1)
    sample_q = f"SELECT {_SAMPLE_COLS} FROM gpu_samples WHERE ts >= ? AND ts < ? ORDER BY gpu_id, ts"
    if not samples:
        sample_q = f"SELECT {_SAMPLE_COLS} FROM gpu_samples WHERE false"
    return Tables(
        gpus=_frame(con, "SELECT * FROM gpus ORDER BY gpu_id"),
        gpu_samples=_frame(con, sample_q, [lo, hi] if samples else None),
        jobs=_frame(
            con,
            "SELECT * FROM jobs WHERE coalesce(submit_time, start_time) < ? "
            "AND (end_time IS NULL OR end_time > ?)",
            [hi, lo],
        ),
        job_allocations=_frame(
            con,
            "SELECT * FROM job_allocations WHERE start_time < ? AND (end_time IS NULL OR end_time > ?)",
            [hi, lo],
        ),
        org_nodes=_frame(con, "SELECT node, parent, kind, shares, description FROM org_nodes"),
        budgets=_frame(con, "SELECT * FROM budgets"),
        rate_card=_frame(con, "SELECT * FROM rate_card ORDER BY effective_from"),
    )
