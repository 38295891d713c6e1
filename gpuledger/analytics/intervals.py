"""Cutting time intervals (allocations, queued jobs, capacity) into hourly pieces.

Everything downstream works on this grain: one row per interval per clock hour it touches,
with the exact seconds it covers inside that hour. Timestamps are naive datetimes meaning UTC.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import polars as pl

HOUR = timedelta(hours=1)
_US_PER_S = 1_000_000


def _every_str(every: timedelta) -> str:
    us = int(every / timedelta(microseconds=1))
    if us <= 0:
        raise ValueError(f"every={every!r}: the bucket length must be positive")
    return f"{us}us"


def split_by_hour(
    lf: pl.LazyFrame,
    *,
    start_col: str = "start_time",
    end_col: str = "end_time",
    now: datetime,
    start: datetime | None = None,
    end: datetime | None = None,
    every: timedelta = HOUR,
) -> pl.LazyFrame:
    """Cut each row's [start_col, end_col) into pieces aligned on ``every`` (default one hour).

    A NULL end means "still running" and is read as ``now``. Intervals are clipped to
    [start, end) when given. Adds ``hour`` (the bucket start), ``piece_start``, ``piece_end``
    and ``piece_s`` (seconds of the piece, float); rows that fall outside are dropped.
    """
    upper = pl.min_horizontal(pl.col(end_col).fill_null(pl.lit(now)), pl.lit(now))
    if end is not None:
        upper = pl.min_horizontal(upper, pl.lit(end))
    lower = pl.col(start_col)
    if start is not None:
        lower = pl.max_horizontal(lower, pl.lit(start))
    every_us = int(every / timedelta(microseconds=1))
    return (
        lf.with_columns(_lo=lower, _hi=upper)
        .filter(pl.col("_hi") > pl.col("_lo"))
        .with_columns(_b0=pl.col("_lo").dt.truncate(_every_str(every)))
        .with_columns(
            _n=((pl.col("_hi") - pl.col("_b0")).dt.total_microseconds() + every_us - 1) // every_us
        )
        .with_columns(_i=pl.int_ranges(0, pl.col("_n")))
        .explode("_i")
        .with_columns(hour=pl.col("_b0") + pl.duration(microseconds=pl.col("_i") * every_us))
        .with_columns(
            piece_start=pl.max_horizontal(pl.col("hour"), pl.col("_lo")),
            piece_end=pl.min_horizontal(pl.col("hour") + pl.duration(microseconds=every_us), pl.col("_hi")),
        )
        .with_columns(
            piece_s=(pl.col("piece_end") - pl.col("piece_start")).dt.total_microseconds() / _US_PER_S
        )
        .filter(pl.col("piece_s") > 0)
        .drop("_lo", "_hi", "_b0", "_n", "_i")
    )


def clip_pieces(pieces: pl.LazyFrame, start: datetime) -> pl.LazyFrame:
    """:func:`split_by_hour` output clipped to begin at ``start``: what the same split with this
    later ``start`` gives, by the same arithmetic (pieces before it dropped, the one across it
    begun there and its ``piece_s`` recomputed), without cutting the intervals again."""
    return (
        pieces.filter(pl.col("piece_end") > pl.lit(start))
        .with_columns(piece_start=pl.max_horizontal(pl.col("piece_start"), pl.lit(start)))
        .with_columns(piece_s=(pl.col("piece_end") - pl.col("piece_start")).dt.total_microseconds() / _US_PER_S)
        .filter(pl.col("piece_s") > 0)
    )


def hour_grid(start: datetime, end: datetime, every: timedelta = HOUR) -> pl.LazyFrame:
    """One row per bucket overlapping [start, end): ``hour``, ``piece_start``, ``piece_end``, ``piece_s``."""
    base = pl.LazyFrame({"start_time": [start], "end_time": [end]})
    return split_by_hour(base, now=end, every=every).drop("start_time", "end_time")
