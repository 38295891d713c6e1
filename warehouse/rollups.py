"""The ``gpu_hourly`` rollup (migration 004): per (device, hour) sums of the raw samples.

Attribution of whole hours needs only these sums, so a week of 1,024 GPUs at 30 s is read as
~170k rows instead of ~20M samples. ``warehouse.write_samples`` keeps the hours each batch touches
up to date, in the batch's transaction (:func:`gpu_hourly_kept`): new rows that come after their
hour's stored ones are folded into the stored row (sums and counts add, first / last energy
combine: gpu_hourly_batch.sql, gpu_hourly_fold.sql), which gives what aggregating the hour again
gives (the ratio sums up to the order of their float additions) without reading it; a new hour,
late rows among stored ones or a counter reset have their (device, hour) deleted and aggregated
again from ``gpu_samples``, as :func:`refresh_gpu_hourly` does for whole hours (idempotent). The
columns and their meaning are those of :func:`gpuledger.analytics.attribution.hourly_rollup`, which
computes the same in polars.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import datetime, timedelta

import duckdb
import polars as pl

from gpuledger.sql import load_sql

from gpuledger.warehouse.db import transaction

HOUR = timedelta(hours=1)

# Σ of reset-aware increments = (last − first) + Σ over drops of the value before the drop:
# increments d ≥ 0 count as d, a drop (reset) counts the new value e_i = d_i + e_{i−1}.
_AGGREGATES = load_sql(__package__, "gpu_hourly_aggregates.sql")
_ROLLUP_SELECT = load_sql(__package__, "gpu_hourly_select.sql").replace("{gpu_hourly_aggregates}", _AGGREGATES)
_BATCH = load_sql(__package__, "gpu_hourly_batch.sql").replace("{gpu_hourly_aggregates}", _AGGREGATES)
_FOLD = load_sql(__package__, "gpu_hourly_fold.sql").replace("{gpu_hourly_batch}", _BATCH)


def hour_span(start: datetime, end: datetime) -> tuple[datetime, datetime]:
    """The whole UTC hours covering [start, end)."""
    lo = start.replace(minute=0, second=0, microsecond=0)
    hi = end.replace(minute=0, second=0, microsecond=0)
    if hi < end:
        hi += HOUR
    return lo, hi


def final_before(con: duckdb.DuckDBPyConnection) -> datetime | None:
    """The hour below which ``gpu_hourly`` is final: raw samples there were pruned (retention,
    migration 010), so the rollup is the record and is never rebuilt from what is left. None when
    nothing was pruned (or on a connection without the table)."""
    has = con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'retention_marks'").fetchall()[0][0]
    if not has:  # checked, not caught: a failed statement would abort the caller's transaction
        return None
    return con.execute(
        "SELECT max(pruned_before) FROM retention_marks WHERE table_name = 'gpu_samples'").fetchall()[0][0]


def refresh_gpu_hourly(con: duckdb.DuckDBPyConnection, start: datetime, end: datetime) -> int:
    """Re-aggregate every hour touched by [start, end) (naive UTC) from ``gpu_samples`` into
    ``gpu_hourly``, in one transaction (the caller's, if one is open). Idempotent. Returns the
    number of (gpu_id, hour) rows written. Rebuilds an older warehouse's rollup too. Hours below
    :func:`final_before` are left as they are.
    """
    if end <= start:
        return 0
    lo, hi = hour_span(start, end)
    floor = final_before(con)
    if floor is not None and lo < floor:
        lo = floor
        if hi <= lo:
            return 0
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


@contextlib.contextmanager
def gpu_hourly_kept(con: duckdb.DuckDBPyConnection, start: datetime, end: datetime, *, groups: int,
                    stored_after: bool = True) -> Iterator[None]:
    """Keep ``gpu_hourly`` up to date with a batch of new rows inserted inside the block, in the
    caller's transaction. The batch is ``_new_samples``, a relation the caller made: rows of
    [start, end) (naive UTC), none of them stored yet, none below :func:`final_before`, in
    ``groups`` distinct (gpu_id, hour). Each (gpu_id, hour) is folded (the batch's sums added to
    the stored row's) where that equals aggregating the hour again (gpu_hourly_batch.sql says when),
    before the block; the others (a new hour, late rows among stored ones, a counter reset) are
    aggregated again from ``gpu_samples`` after it. ``stored_after=False`` says that no row is
    stored from ``start`` to the end of its last hour (so no new row is late among stored ones).
    """
    lo, hi = hour_span(start, end)
    span = {"lo": lo, "hi": hi, "first": start, "stored_after": stored_after}
    folded = con.execute(_FOLD, span).fetchall()[0][0]
    if folded < groups:  # the fold left these unchanged, so the batch still marks them `NOT fold`
        con.execute(f"CREATE OR REPLACE TEMP TABLE _hourly_redo AS SELECT gpu_id, hour FROM ({_BATCH}) "
                    "WHERE NOT fold", span).fetchall()
    yield
    if folded < groups:
        rebuild_device_hours(con, "_hourly_redo")
        con.execute("DROP TABLE _hourly_redo").fetchall()


def rebuild_device_hours(con: duckdb.DuckDBPyConnection, pairs: str) -> None:
    """Aggregate each (gpu_id, hour) the relation named ``pairs`` lists again from ``gpu_samples``
    into ``gpu_hourly``, in the caller's transaction: those device-hours only, not the whole hours."""
    lo, hi = con.execute(f"SELECT min(hour), max(hour) FROM {pairs}").fetchall()[0]
    if lo is None:
        return
    con.execute(f"DELETE FROM gpu_hourly h USING {pairs} r WHERE h.gpu_id = r.gpu_id AND h.hour = r.hour").fetchall()
    con.execute(f"INSERT INTO gpu_hourly SELECT r.* FROM ({_ROLLUP_SELECT}) r SEMI JOIN {pairs} USING (gpu_id, hour)",
                {"lo": lo, "hi": hi + HOUR}).fetchall()


def rollup_frame(con: duckdb.DuckDBPyConnection, start: datetime, end: datetime) -> pl.LazyFrame:
    """The rollup of the hours touched by [start, end) computed from ``gpu_samples`` without
    storing it (for readers of a warehouse whose ``gpu_hourly`` is missing or behind)."""
    lo, hi = hour_span(start, end)
    return con.sql(_ROLLUP_SELECT, params={"lo": lo, "hi": hi}).pl().lazy()
