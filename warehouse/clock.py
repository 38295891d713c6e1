""""Now" for the data, low in the warehouse so the analytics and the read model ask the same rule
without importing each other (and "now" for waits, ``waits_now``): the newest moment the samples cover (a window aggregate reaches its
newest raw sample: ts + covered_ms, migration 021) or job event (submit, start, end) that is not in
the future (a replayed or simulated week ends there); the wall clock when there is none."""

from __future__ import annotations

from datetime import datetime, timedelta

from gpuledger.rules.clock import utc_now
from gpuledger.sql import load_sql

LONGEST_COVERAGE = timedelta(seconds=300)  # the longest aggregate window (ingest --aggregate 5m)


def data_now(con, *, wall: datetime | None = None) -> datetime:
    """"Now" for the data: the end of the samples' coverage or the newest job event, not after
    ``wall`` (default: the wall clock). A single row stamped in the future is ignored rather than
    moving "now" for every report. Two statements: the second's lower bound as a value lets DuckDB
    skip every row group but the newest. Naive UTC."""
    wall = wall or utc_now()
    sample_ts, job_event = con.execute(load_sql(__package__, "data_now.sql"), {"wall": wall}).fetchall()[0]
    covered = None
    if sample_ts is not None:
        covered = con.execute(load_sql(__package__, "sample_coverage_end.sql"),
                              {"wall": wall, "lo": sample_ts - LONGEST_COVERAGE}).fetchall()[0][0]
    newest = max((t for t in (covered, sample_ts, job_event) if t is not None), default=None)
    return newest if newest is not None else wall


def data_now_within(con, lo: datetime, hi: datetime, *, wall: datetime | None = None) -> bool:
    """Whether ``lo <= data_now(con, wall=wall) <= hi``, read from the newest rows only: the newest
    job event since ``lo``, whether a sample's coverage reaches past ``hi`` (when none is that new,
    the table's statistics say so without reading a row group) and, when no job event reaches
    ``lo``, whether a sample's does. :func:`data_now` reads the newest sample of every row group
    and every job's times: ~10 ms at 4,096 GPUs over two days, ~30 ms over a week (issue 41), for a
    reader that only asks whether the data is still near a moment it knows (the squatting
    pipeline's latest evaluation). When nothing reaches ``lo`` (older data, or none: "now" is then
    the wall clock), it asks :func:`data_now`. Naive UTC."""
    wall = wall or utc_now()
    job = con.execute(load_sql(__package__, "newest_job_event_since.sql"), {"t": lo, "wall": wall}).fetchall()[0][0]
    if (job is not None and job > hi) or _samples_reach(con, hi + RESOLUTION, wall):
        return False
    if job is not None or _samples_reach(con, lo, wall):
        return True
    return lo <= data_now(con, wall=wall) <= hi


RESOLUTION = timedelta(microseconds=1)  # DuckDB's TIMESTAMP: "after hi" is "at or after hi + 1 µs"


def _samples_reach(con, t: datetime, wall: datetime) -> bool:
    """Whether a sample's coverage end, not after ``wall``, is at or after ``t``."""
    return con.execute(load_sql(__package__, "data_reaches_samples.sql"),
                       {"t": t, "rows_lo": t - LONGEST_COVERAGE, "wall": wall}).fetchall()[0][0]


def waits_now(con) -> datetime:
    """"Now" for waits: the data's now, or the last import when later — a job the scheduler still
    listed as pending then was still waiting then (an idle queue has no newer job event). Naive UTC."""
    newest = con.execute("SELECT max(updated_at) FROM jobs WHERE updated_at <= ?", [utc_now()]).fetchall()[0][0]
    at = data_now(con)
    return max(at, newest) if newest is not None else at
