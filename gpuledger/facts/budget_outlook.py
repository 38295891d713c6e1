"""A budget as a reader plans with it: when it runs out inside its period, and what is left when the
period ends. Light on purpose (no polars): the CLI prints materialized budget rows without it.

``projected_exhaustion`` (analytics.budget) is when the remaining budget runs out at the 7-day burn
rate, wherever that falls; past the period's end it is no date a reader can use (the budget ends
first, and status says funded). So readers are shown ``runs_out``: that moment only when it falls
before the period ends (NULL: the budget lasts its period at this rate, or has already run out),
and ``left_at_period_end``: the remaining budget less the burn rate until the period ends, never
below 0 (normalised GPU-hours; what will go unspent at this rate).
"""

from __future__ import annotations

from datetime import date, datetime, time

from gpuledger.facts.rows import Rows

OUTLOOK = {"runs_out": "Datetime", "left_at_period_end": "Float64"}


def _end(period_end: date | datetime) -> datetime:
    return period_end if isinstance(period_end, datetime) else datetime.combine(period_end, time())


def runs_out(projected: datetime | None, period_end: date | datetime) -> datetime | None:
    return projected if projected is not None and projected < _end(period_end) else None


def left_at_period_end(remaining: float | None, burn_per_day: float | None, period_end: date | datetime,
                       as_of: datetime) -> float | None:
    if remaining is None:
        return None
    days = max((_end(period_end) - as_of).total_seconds() / 86400.0, 0.0)
    return max(remaining - (burn_per_day or 0.0) * days, 0.0)


def with_outlook(table, *, as_of: datetime):
    """``table`` (budget rows: facts.rows.Rows or a polars DataFrame with projected_exhaustion,
    period_end, remaining_gpu_hours, burn_gpu_hours_per_day) with ``runs_out`` and
    ``left_at_period_end`` after ``projected_exhaustion``, as of ``as_of`` (or the row's own
    ``as_of`` where the table has one: a daily snapshot)."""
    cols = table.columns
    moments = table["as_of"].to_list() if "as_of" in cols else [as_of] * table.height
    ends = table["period_end"].to_list()
    out = runs, left = (
        [runs_out(p, e) for p, e in zip(table["projected_exhaustion"].to_list(), ends, strict=True)],
        [left_at_period_end(r, b, e, a) for r, b, e, a in zip(table["remaining_gpu_hours"].to_list(),
                                                            table["burn_gpu_hours_per_day"].to_list(), ends, moments,
                                                            strict=True)],
    )
    at = cols.index("projected_exhaustion") + 1
    order = [*cols[:at], *OUTLOOK, *cols[at:]]
    if isinstance(table, Rows):
        types = {c: table.schema[c].name for c in cols}
        rows = [(*row[:at], *extra, *row[at:]) for row, extra in zip(table.rows(), zip(*out, strict=True), strict=True)]
        return Rows(rows, {c: OUTLOOK.get(c) or types[c] for c in order})
    import polars as pl  # lazy: materialized Rows are printed without polars; a DataFrame came, so it is loaded

    return table.with_columns(pl.Series("runs_out", runs, dtype=pl.Datetime("us")),
                              pl.Series("left_at_period_end", left, dtype=pl.Float64)).select(order)
