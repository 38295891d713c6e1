"""Read the warehouse tables the analytics need as LazyFrames.

DuckDB does the time filtering (so a month's report does not read a year of samples); polars does
the rest. Works on any DuckDB connection, e.g. ``warehouse.open_reader(path)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import duckdb
import polars as pl

from gpuledger.analytics.collect import ENGINE
from gpuledger.analytics.squatting import ACTIVITY_COLUMNS, LOOKBACK, PER_DEVICE, held_devices
from gpuledger.config import SquattingPolicy
from gpuledger.rules.activity import SIGNAL_NAMES
from gpuledger.sql import load_sql
from gpuledger.warehouse.rollups import final_before, hour_span, rollup_frame

_SAMPLE_COLS = (
    "gpu_id, ts, sm_active_ratio, gr_engine_active_ratio, tensor_active_ratio, dram_active_ratio, "
    "gpu_util_ratio, fb_used_bytes, fb_total_bytes, power_w, energy_total_j, namespace, pod, container, hpc_job, "
    "sample_n"
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


_ORG_NODES = "SELECT node, parent, kind, shares, description FROM org_nodes"


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
            # Also every allocation of a loaded job, so a job with devices outside the range is
            # not mistaken for one without any (allocations.py counts those by jobs.gpus).
            "SELECT * FROM job_allocations a WHERE (a.start_time < ? AND (a.end_time IS NULL OR a.end_time > ?)) "
            "OR EXISTS (SELECT 1 FROM jobs j WHERE j.cluster = a.cluster AND j.job_id = a.job_id "
            "AND coalesce(j.submit_time, j.start_time) < ? AND (j.end_time IS NULL OR j.end_time > ?))",
            [hi, lo, hi, lo],
        ),
        org_nodes=_frame(con, _ORG_NODES),
        budgets=_frame(con, "SELECT * FROM budgets"),
        rate_card=_frame(con, "SELECT * FROM rate_card ORDER BY effective_from"),
    )


def load_open_jobs(con: duckdb.DuckDBPyConnection, *, now: datetime, end: datetime
                   ) -> tuple[pl.LazyFrame, pl.LazyFrame]:
    """(jobs, org_nodes) as ``load_tables(end=end)`` gives them, less the jobs ended by ``now``:
    what funding needs once the budgets' remaining is known (facts.funding)."""
    jobs = _frame(con, "SELECT * FROM jobs WHERE coalesce(submit_time, start_time) < ? "
                       "AND (end_time IS NULL OR end_time > ?)", [end, now])
    return jobs, _frame(con, _ORG_NODES)


def load_hourly(
    con: duckdb.DuckDBPyConnection, *, start: datetime, end: datetime, verify: bool = True
) -> pl.LazyFrame:
    """The ``gpu_hourly`` rollup for the hours of [start − 1 h, end) (the extra hour gives the
    first hour's energy its predecessor), shaped as attribution.hourly_rollup, in no set order
    (attribution sorts what it needs; ordering a week here cost DuckDB a sort for nothing).

    With ``verify`` the rollup's sample count is checked against ``gpu_samples`` over the span
    (a count of the samples beside the rows, milliseconds); when they differ (a writer that did
    not refresh, or a warehouse older than migration 004) the rollup is computed from the samples
    on the fly instead. Hours whose raw samples retention pruned (before ``final_before``) are the
    rollup's alone: read, never checked or recomputed.
    """
    lo, hi = hour_span(start - timedelta(hours=1), end)
    check_lo = lo
    if verify:
        floor = final_before(con)
        check_lo = max(lo, floor) if floor is not None else lo
    stored = "SELECT * FROM gpu_hourly WHERE hour >= $lo AND hour < $hi"
    if not verify or check_lo >= hi:
        return con.sql(stored, params={"lo": lo, "hi": hi}).pl().lazy()
    span = {"lo": check_lo, "hi": hi}
    # The raw samples the span's rows stand for, as s_n counts them (sample_n; NULL = one): a
    # plain count(*) never matched a rollup of window aggregates, which was then recomputed from
    # the samples on every read (10.8 CPU-s a week at 16,384 GPUs).
    count_samples = f"SELECT {SAMPLES_STOOD_FOR} FROM gpu_samples WHERE ts >= $lo AND ts < $hi"
    if hi - lo <= ONE_STATEMENT_SPAN:
        # The rows with the raw-sample count beside them: one statement instead of three, ~1 ms
        # less for the hour an update touches; the rollup's count is summed from the rows.
        # (Beside a week's rows the repeated count costs more than the statements it saves.)
        rows = con.sql(f"SELECT *, (SELECT {SAMPLES_STOOD_FOR} FROM gpu_samples WHERE ts >= $check_lo AND ts < $hi) "
                       f"AS _n_samples FROM ({stored})", params={"lo": lo, "hi": hi, "check_lo": check_lo}).pl()
        n_samples = rows["_n_samples"][0] if rows.height else con.execute(count_samples, span).fetchall()[0][0]
        rows = rows.drop("_n_samples")
        n_rollup = (rows.filter(pl.col("hour") >= check_lo) if check_lo > lo else rows)["s_n"].sum()
    else:
        n_rollup = con.execute("SELECT coalesce(sum(s_n), 0) FROM gpu_hourly WHERE hour >= $lo AND hour < $hi",
                               span).fetchall()[0][0]
        n_samples = con.execute(count_samples, span).fetchall()[0][0]
        rows = con.sql(stored, params={"lo": lo, "hi": hi}).pl()
    if n_rollup != n_samples:
        if check_lo == lo:
            return rollup_frame(con, lo, hi)
        return pl.concat([rows.filter(pl.col("hour") < check_lo), rollup_frame(con, check_lo, hi).collect(engine=ENGINE)],
                         how="vertical_relaxed").lazy()
    return rows.lazy()


#: The raw samples that gpu_samples rows stand for, as gpu_hourly.s_n sums them.
SAMPLES_STOOD_FOR = "coalesce(sum(coalesce(sample_n, 1)), 0)"
#: load_hourly reads rows and the samples' count in one statement up to this span (hours).
ONE_STATEMENT_SPAN = timedelta(hours=24)
# The raw-sample columns attribution reads (attribution._window_sums): a partial hour needs
# nothing else, and fewer columns are most of the cost of materializing them.
ATTRIBUTION_SAMPLE_COLS = ("gpu_id, ts, sm_active_ratio, gr_engine_active_ratio, gpu_util_ratio, energy_total_j, "
                           "sample_n")
_US_PER_HOUR = 3_600_000_000
# One UNION ALL branch per wanted hour ("ts in the hour AND gpu_id in the hour's list", filtered
# in the scan: zone maps skip the unwanted hours) costs DuckDB ~2 ms to start, about what the one
# integer-key semi join spends on ~150k rows (~14 ns a row, 2 cores): so branches only when the
# hours they skip hold more than that per branch, and never more than MAX_HOUR_BRANCHES.
MAX_HOUR_BRANCHES = 200
ROWS_PER_BRANCH = 150_000


def _branches_pay(con: duckdb.DuckDBPyConnection, hours: pl.Series) -> bool:
    """Do per-hour branches skip enough samples to beat one semi join over the hours' span?
    Sample counts per hour from the gpu_hourly rollup (cheap); without it, no."""
    if not 1 < hours.len() <= MAX_HOUR_BRANCHES:  # one hour's span skips nothing
        return False
    if not con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'gpu_hourly'").fetchall()[0][0]:
        return False
    lo, hi = hours.min(), hours.max() + timedelta(hours=1)
    per_hour = con.sql("SELECT hour, sum(s_n) AS n FROM gpu_hourly WHERE hour >= $lo AND hour < $hi GROUP BY hour",
                       params={"lo": lo, "hi": hi}).pl()
    skipped = per_hour.filter(~pl.col("hour").is_in(hours.implode()))["n"].sum()
    return skipped > ROWS_PER_BRANCH * hours.len()


def load_samples_for_hours(
    con: duckdb.DuckDBPyConnection, keys: pl.LazyFrame | pl.DataFrame, *, columns: str = ATTRIBUTION_SAMPLE_COLS
) -> pl.LazyFrame:
    """The raw samples of just the (gpu_id, hour) pairs in ``keys`` (e.g.
    attribution.partial_hour_keys), in no set order (attribution sorts what it keeps; sorting
    here too was ~15 % of the lookup): DuckDB filters, so polars never holds the rest.
    ``columns`` defaults to what attribution reads.

    Without an index DuckDB reads gpu_id and ts of the samples in the wanted hours, so the
    per-row work is kept small: per wanted hour a scan filter on the hour's gpu_id list (when
    that skips enough hours: _branches_pay), else one semi join on a BIGINT per (gpu_id, hour)
    (hours since the first wanted hour × 2^32 + gpu_id + 2^31, exact for any INTEGER gpu_id) —
    both several times cheaper than joining on (gpu_id, date_trunc('hour', ts)).
    """
    frame = keys.lazy().select(pl.col("gpu_id").cast(pl.Int32), pl.col("hour").cast(pl.Datetime("us"))).collect(
        engine=ENGINE)
    if frame.is_empty():
        return con.sql(f"SELECT {columns} FROM gpu_samples WHERE false").pl().lazy()
    cols = ", ".join("s." + c.strip() for c in columns.split(","))
    per_hour = frame.drop_nulls().group_by("hour").agg(pl.col("gpu_id").unique().sort()).sort("hour")
    if _branches_pay(con, per_hour["hour"]):
        params: dict[str, object] = {}
        branches = []
        for i, (hour, ids) in enumerate(per_hour.iter_rows()):
            params[f"lo{i}"], params[f"hi{i}"], params[f"ids{i}"] = hour, hour + timedelta(hours=1), ids
            branches.append(f"SELECT {cols} FROM gpu_samples s WHERE s.ts >= $lo{i} AND s.ts < $hi{i} "
                            f"AND list_contains($ids{i}, s.gpu_id)")
        return con.sql(" UNION ALL ".join(branches), params=params).pl().lazy()
    lo, hi = frame["hour"].min(), frame["hour"].max() + timedelta(hours=1)
    wanted = frame.select(
        k=((pl.col("hour") - lo).dt.total_microseconds() // _US_PER_HOUR) * 2**32
        + pl.col("gpu_id").cast(pl.Int64) + 2**31
    ).unique()
    con.register("_wanted_hours", wanted.to_arrow())
    try:
        out = con.sql(
            f"SELECT {cols} FROM gpu_samples s SEMI JOIN _wanted_hours w "
            f"ON ((epoch_us(s.ts) - $lo_us) // {_US_PER_HOUR}) * 4294967296 + s.gpu_id + 2147483648 = w.k "
            "WHERE s.ts >= $lo AND s.ts < $hi",
            params={"lo": lo, "hi": hi, "lo_us": (lo - datetime(1970, 1, 1)) // timedelta(microseconds=1)},
        ).pl()
    finally:
        con.unregister("_wanted_hours")
    return out.lazy()


def load_device_activity(
    con: duckdb.DuckDBPyConnection,
    jobs: pl.LazyFrame,
    job_allocations: pl.LazyFrame,
    gpus: pl.LazyFrame,
    *,
    now: datetime,
    policy: SquattingPolicy | None = None,
    lookback: timedelta = LOOKBACK,
) -> pl.LazyFrame:
    """The squatting evidence (squatting.ACTIVITY_COLUMNS) of every device held at ``now`` by a
    running job (squatting.held_devices), from ``gpu_samples`` in [now − max(lookback, sustained),
    now): DuckDB aggregates the lookback of just those devices (no buckets, no window functions)
    and returns one row per (cluster, job_id, gpu_id) with at least one judged sample — the input
    of squatting.squatting_findings. Definitions: the squatting module's docstring.

    Sustained window first: the same aggregate over [now − sustained, now) alone settles most
    devices exactly (see :func:`_settled`); only the others — idle through the whole window,
    without memory readings in it, or whose window signal an earlier one outranks — are
    aggregated again over the lookback: from the earliest judged_from among them when the window's
    signal is the lookback's (only judged samples count, so a job started inside the lookback is
    read from its grace end), else over the whole lookback (that signal comes from all of it). An
    update every few minutes then reads about one sixth of the 6 h lookback for a busy fleet.

    ``gpu_samples`` is whatever the connection calls that (the warehouse table, or a registered
    frame with gpu_id, ts, sm_active_ratio, gr_engine_active_ratio, gpu_util_ratio,
    fb_used_bytes)."""
    p = policy or SquattingPolicy()
    sustained = timedelta(minutes=p.sustained_minutes)
    held = held_for_evidence(jobs, job_allocations, gpus, now=now, policy=p, lookback=lookback)
    if held.is_empty():
        return pl.DataFrame(schema=ACTIVITY_COLUMNS).lazy()
    lo, cov_from = now - max(lookback, sustained), now - sustained
    epoch = datetime(1970, 1, 1, tzinfo=now.tzinfo)
    params = {"now": now, "thr": p.idle_threshold_ratio, "cov_from": cov_from,
              "now_us": (now - epoch) // timedelta(microseconds=1)}
    if SUSTAINED_FIRST and lo < cov_from:
        out = evidence_sustained_first(con, held, lo=lo, cov_from=cov_from, params=params)
    else:
        out = _evidence(con, held, since=lo, params=params)
    return with_pod_evidence(con, as_activity(held, out), held, jobs, params=params)


POD_SIGNAL = "gpu_util_per_pod"  # analytics.attribution's name for a pod's own utilization
_POD_ACTIVITY_SQL = load_sql(__package__, "squatting_pod_activity.sql")


def with_pod_evidence(con: duckdb.DuckDBPyConnection, activity: pl.LazyFrame, held: pl.DataFrame,
                      jobs: pl.LazyFrame, *, params: dict) -> pl.LazyFrame:
    """``activity`` with each pod on a shared device (two or more held rows of one gpu_id) judged by
    its own utilization where ``pod_gpu_samples`` has it, instead of the device's: one pod idle on
    a busy time-sliced GPU is idle, its busy neighbours are not."""
    shared = held.filter(pl.col("gpu_id").count().over("gpu_id") > 1)
    if shared.is_empty() or "scheduler_job" not in jobs.collect_schema().names():
        return activity
    pods = shared.join(jobs.select(pl.col("cluster").cast(pl.String), pl.col("job_id").cast(pl.String),
                                   "scheduler_job").unique(["cluster", "job_id"]).collect(engine=ENGINE),
                       on=["cluster", "job_id"], how="inner").filter(pl.col("scheduler_job").is_not_null())
    if pods.is_empty():
        return activity
    con.register("_squat_pods", pods.select("k", "gpu_id", "scheduler_job", "judged_from").to_arrow())
    try:
        rows = con.execute(_POD_ACTIVITY_SQL, params).fetchall()
    except duckdb.CatalogException:  # no pod_gpu_samples table yet (before migration 025)
        return activity
    finally:
        con.unregister("_squat_pods")
    if not rows:
        return activity
    own = pl.DataFrame(rows, schema={k: v for k, v in _EVIDENCE_SCHEMA.items() if k != "sig"}, orient="row")
    measured = (held.select(pl.col(PER_DEVICE).gather(own["k"]))
                .hstack(own.select(pl.lit(POD_SIGNAL).alias("activity_signal"), "last_active", "idle_since",
                                   "covered_minutes", "fb_used_bytes"))
                .cast(ACTIVITY_COLUMNS))
    return pl.concat([activity.join(measured.lazy().select(PER_DEVICE), on=PER_DEVICE, how="anti"),
                      measured.lazy()], how="vertical_relaxed")


def held_for_evidence(
    jobs: pl.LazyFrame, job_allocations: pl.LazyFrame, gpus: pl.LazyFrame, *, now: datetime,
    policy: SquattingPolicy, lookback: timedelta,
) -> pl.DataFrame:
    """The held devices that can have samples (gpu_id not NULL), as the SQL takes them: k (row
    number), cluster, job_id, gpu_id, judged_from, is_mig (:func:`squatting.held_devices`)."""
    return (
        held_devices(jobs, job_allocations, gpus, now=now, policy=policy, lookback=lookback)
        .filter(pl.col("gpu_id").is_not_null())
        .select(pl.col("cluster").cast(pl.String), pl.col("job_id").cast(pl.String),
                pl.col("gpu_id").cast(pl.Int32), pl.col("judged_from").cast(pl.Datetime("us")), "is_mig")
        .with_row_index("k")
        .collect(engine=ENGINE)
    )


def evidence_sustained_first(con: duckdb.DuckDBPyConnection, held: pl.DataFrame, *, lo: datetime,
                             cov_from: datetime, params: dict) -> pl.DataFrame:
    """:func:`_evidence` over the lookback [lo, now), read as the sustained window [cov_from, now)
    first: its rows that settle their device (:func:`_settled`) stand; the other devices are
    aggregated again over as much of the lookback as they need."""
    window = _evidence(con, held, since=cov_from, params=params)
    settled, kept, signal_known = _settled(con, held, window, lo=lo, cov_from=cov_from)
    out = [window.filter(kept)]
    # A device whose window signal is the lookback's needs only its judged samples, from its
    # judged_from on (a job started inside the lookback: its grace end); the others (no window
    # row, or a better signal before the window) need the whole lookback for their signal.
    for redo, whole in ((held.filter(~settled & signal_known), False),
                        (held.filter(~settled & ~signal_known), True)):
        if not redo.is_empty():
            since = lo if whole else redo["judged_from"].min().replace(tzinfo=lo.tzinfo)
            out.append(_evidence(con, redo, since=since, params=params))
    return pl.concat(out)


def as_activity(held: pl.DataFrame, evidence: pl.DataFrame) -> pl.LazyFrame:
    """Evidence rows (:data:`_EVIDENCE_SCHEMA`, k = ``held``'s row number) → squatting's
    ACTIVITY_COLUMNS: each row takes its device's keys by position, its signal's name (1, 2, 3 =
    sm_active, gr_engine_active, gpu_util)."""
    signal = pl.col("sig").replace_strict(dict(enumerate(_SIGNALS, 1)), return_dtype=pl.String)
    return (
        held.select(pl.col(PER_DEVICE).gather(evidence["k"]))
        .hstack(evidence.select(signal.alias("activity_signal"), "last_active", "idle_since", "covered_minutes",
                                "fb_used_bytes"))
        .cast(ACTIVITY_COLUMNS)
        .lazy()
    )


def _evidence(con: duckdb.DuckDBPyConnection, held: pl.DataFrame, *, since: datetime, params: dict) -> pl.DataFrame:
    """_ACTIVITY_SQL over the samples in [since, now) of the ``held`` rows (k, gpu_id,
    judged_from, is_mig): per k with a judged sample there, k, sig, last_active, idle_since,
    covered_minutes, fb_used_bytes. Judged samples are those at or after max(judged_from, since)."""
    con.register("_squat_held", held.select("k", "gpu_id", "judged_from", "is_mig").to_arrow())
    try:
        # execute, not sql().pl(): a relation binds the statement once more before running it
        # (~1 ms for this one), and the rows are few.
        rows = con.execute(_activity_sql(con), {"lo": since, **params}).fetchall()
    finally:
        con.unregister("_squat_held")
    return pl.DataFrame(rows, schema=_EVIDENCE_SCHEMA, orient="row")


def _settled(con: duckdb.DuckDBPyConnection, held: pl.DataFrame, window: pl.DataFrame, *, lo: datetime,
             cov_from: datetime) -> tuple[pl.Series, pl.Series, pl.Series]:
    """Which k of ``held`` have as evidence over the whole lookback [lo, now) their evidence from
    the sustained window [cov_from, now) alone (``window``, :func:`_evidence` since cov_from): a
    row there or, when it has none, no row at all. With the same best signal over both (the
    window's is sm_active, or the lookback before it reads nothing better: the second query,
    only for the devices whose window signal is not sm_active), the judged samples in the window
    are the lookback's from cov_from on, so k is settled when:

    * judged_from ≥ cov_from: the window holds all its judged samples; or
    * the window holds an active sample and a memory reading: last_active, the samples after it
      (idle_since), the coverage (counted from cov_from anyway) and the last memory reading all
      lie in the window.

    A device whose best signal differs is aggregated again (its window row, if any, is moot).
    Returns a mask over ``held`` (settled), one over ``window`` (its rows that stand) and one over
    ``held`` (signal_known: a window row whose signal is the lookback's, so an aggregate from any
    time before the window on finds the same signal). k is held's row number, so window rows find
    their device by position, not by a join."""
    at = window["k"]
    gpu = held["gpu_id"].gather(at)
    kept = (held["judged_from"].gather(at) >= cov_from) | (
        window["last_active"].is_not_null() & window["fb_used_bytes"].is_not_null())
    check = pl.DataFrame({"gpu_id": gpu, "sig": window["sig"]}).filter(pl.col("sig") > 1).unique("gpu_id")
    if not check.is_empty():
        con.register("_squat_check", check.to_arrow())
        try:
            outranked = [g for (g,) in con.execute(_BETTER_SIGNAL_SQL, {"lo": lo, "hi": cov_from}).fetchall()]
        finally:
            con.unregister("_squat_check")
        known = ~gpu.is_in(outranked)
        kept = kept & known
        no_row_outranked = held["gpu_id"].is_in(outranked)
    else:
        no_row_outranked = pl.repeat(False, held.height, eager=True)
        known = pl.repeat(True, window.height, eager=True)
    # Without a window row: settled when inside (no judged sample at all); with one: kept.
    settled = ((held["judged_from"] >= cov_from) & ~no_row_outranked).scatter(at, kept)
    signal_known = pl.repeat(False, held.height, eager=True).scatter(at, known)
    return settled, kept, signal_known


# The sustained window first (load_device_activity); False: one pass over the whole lookback,
# the reference the tests compare it with.
SUSTAINED_FIRST = True
_EVIDENCE_SCHEMA = {"k": pl.UInt32, "sig": pl.Int32, "last_active": pl.Datetime("us"), "idle_since": pl.Datetime("us"),
                    "covered_minutes": pl.Float64, "fb_used_bytes": pl.Int64}
_SIGNALS = SIGNAL_NAMES  # best first (gpuledger.rules.activity); squatting_activity.sql numbers them 1, 2, 3
# s: the lookback of the held devices (NaN = no reading, gpu_util dropped on MIG); sig: each
# device's best signal (1, 2, 3 = _SIGNALS) over the whole lookback; a: the judged samples of each
# held (job, device) k — from its judged_from on, with a reading of that signal; g, u, cov: the
# time those at or after cov_from cover (sample_n × the device's raw interval, at most
# COVERED_PER_SAMPLE a sample, never past the next judged row or now: squatting's docstring);
# per: last active sample, memory; then the first judged sample after the last active one. One
# scan of the lookback.
_ACTIVITY_SQL = {weighted: load_sql(__package__, "squatting_activity.sql",
                                    sample_weight="coalesce(s.sample_n, 1)" if weighted else "1")
                 for weighted in (True, False)}
#: The longest a raw sample vouches for in the stale-data guard (the clock minute the guard
#: counted before rows could stand for many samples): squatting_activity.sql's 60000000 µs.
COVERED_PER_SAMPLE = timedelta(minutes=1)


def _activity_sql(con: duckdb.DuckDBPyConnection) -> str:
    """_ACTIVITY_SQL for what ``gpu_samples`` is: the warehouse table weighs each row by its
    ``sample_n``; a registered frame without that column holds raw samples (one each)."""
    return _ACTIVITY_SQL["sample_n" in con.sql("SELECT * FROM gpu_samples").columns]
_BETTER_SIGNAL_SQL = load_sql(__package__, "squatting_better_signal.sql")
