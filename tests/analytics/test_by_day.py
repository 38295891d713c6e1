"""A range attributed a UTC day at a time (queries.attribution_by_day, issue 41: a month at once
held ~50 KiB per GPU-day) gives the range's answers: usage to the last digit (its sums are exact: whole nano-units),
utilization (by hour and by kind), carbon and the statement's usage within float rounding (their float sums differ in
the last bit between two runs of the whole range too: polars sums in parallel) and the statement's
the same once rounded as it prints them.

Over a small simulated warehouse (8 GPUs, 3 days from 2026-11-01, 10-minute samples, seed 5) asked
from 06:00 of the first day to 18:00 of the third: three cuts, the first and last partial days."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from gpuledger import warehouse
from gpuledger.analytics import queries
from gpuledger.analytics.attribution import rollup_usage
from gpuledger.analytics.load import load_tables
from gpuledger.analytics.utilization import utilization_by_kind, utilization_hourly
from gpuledger.ledger.config_versions import stored_config
from gpuledger.reports.statement import build

START, END = datetime(2026, 11, 1, 6), datetime(2026, 11, 3, 18)


@pytest.fixture(scope="module")
def wh(tmp_path_factory):
    path = tmp_path_factory.mktemp("by_day") / "w.duckdb"
    done = subprocess.run([sys.executable, "-m", "gpuledger.cli", "simulate", "warehouse", "--gpus", "8", "--days",
                           "3", "--interval", "600", "--seed", "5", "--start", "2026-11-01T00:00:00", "-w", str(path)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return path


def _whole(con, now):
    """The range's attribution in one piece (as every report computed it before issue 41)."""
    policy = stored_config(con).config.policy
    t = load_tables(con, start=START, end=END, samples=False)
    return t, policy, queries.attribution(con, t, start=START, end=END, now=now, policy=policy)


def _sorted(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.sort(frame.columns, nulls_last=True)


def test_utc_days_cut_at_midnight():
    assert queries.utc_days(START, END) == [(START, datetime(2026, 11, 2)),
                                            (datetime(2026, 11, 2), datetime(2026, 11, 3)),
                                            (datetime(2026, 11, 3), END)]
    assert queries.utc_days(END, END) == []


def test_some_allocation_crosses_midnight(wh):
    # else the cut would be tested on nothing: a piece split at a day boundary must count once
    with warehouse.open_reader(wh) as con:
        crossing = con.execute("SELECT count(*) FROM job_allocations WHERE start_time < '2026-11-02' "
                               "AND coalesce(end_time, '2026-11-04') > '2026-11-02'").fetchall()[0][0]
    assert crossing > 0


@pytest.mark.parametrize("by", ["project", "job", "node"])
@pytest.mark.parametrize("per_hour", [False, True])
def test_usage_by_day_is_the_ranges_to_the_last_digit(wh, by, per_hour):
    with warehouse.open_reader(wh) as con:
        now = queries.data_now(con)
        t, policy, used = _whole(con, now)
        whole = rollup_usage(used, t.jobs, by=by, org_nodes=t.org_nodes, per_hour=per_hour).collect(engine="in-memory")
        by_day = queries.usage_report(con, start=START, end=END, by=by, policy=policy, now=now, per_hour=per_hour)
    assert by_day["gpu_hours_allocated"].sum() > 0
    assert_frame_equal(_sorted(by_day), _sorted(whole.select(by_day.columns)), check_exact=True)


def test_utilization_by_day_is_the_ranges(wh):
    with warehouse.open_reader(wh) as con:
        now = queries.data_now(con)
        t, policy, used = _whole(con, now)
        whole = utilization_hourly(used, t.gpus, start=START, end=END).collect()
        by_day = queries.utilization_report(con, start=START, end=END, by="model", policy=policy, now=now)
    assert by_day.height == whole.height == 60 * whole.select("cluster", "model").n_unique()  # 06:00 .. 18:00 + 2 d
    # an hour's float sum: the whole range's differs from itself by up to 2e-15 between runs
    assert_frame_equal(_sorted(by_day), _sorted(whole.select(by_day.columns)), check_exact=False,
                       rel_tol=1e-12, abs_tol=1e-12)


def test_an_empty_range_answers_with_no_rows_and_its_columns(wh):
    # no UTC day in [END, END): one empty span, so every report still has its columns (not an error)
    with warehouse.open_reader(wh) as con:
        now = queries.data_now(con)
        policy = stored_config(con).config.policy
        full = queries.usage_report(con, start=START, end=END, by="project", policy=policy, now=now)
        empty = queries.usage_report(con, start=END, end=END, by="project", policy=policy, now=now)
        assert empty.height == 0 and empty.columns == full.columns
        for by in ("model", "kind"):
            full = queries.utilization_report(con, start=START, end=END, by=by, policy=policy, now=now)
            empty = queries.utilization_report(con, start=END, end=END, by=by, policy=policy, now=now)
            assert empty.height == 0 and empty.columns == full.columns, by


def test_utilization_by_kind_by_day_is_the_ranges(wh):
    with warehouse.open_reader(wh) as con:
        now = queries.data_now(con)
        t, policy, used = _whole(con, now)
        whole = utilization_by_kind(used, t.jobs).collect().sort("kind")
        by_day = queries.utilization_report(con, start=START, end=END, by="kind", policy=policy, now=now)
    assert by_day.height == whole.height > 0 and by_day["gpu_hours_allocated"].sum() > 0
    assert_frame_equal(by_day, whole, check_exact=False, rel_tol=1e-12, abs_tol=1e-9)  # float sums reordered


def test_the_statements_usage_built_by_day_is_the_one_built_whole(wh):
    with warehouse.open_reader(wh) as con:
        now = queries.data_now(con)
        t, policy, _ = _whole(con, now)
        args = {"start": START, "end": END, "now": now, "policy": policy}
        days = build._usage(con, t, **args)
        whole = build._usage(con, t, **args, spans=[(START, END)])
    for day_frame, whole_frame, keys in zip(days, whole, (build._USAGE_KEYS, build._JOB_KEYS), strict=True):
        a, b = day_frame.sort(keys, nulls_last=True), whole_frame.sort(keys, nulls_last=True)
        assert a.height == b.height > 0
        assert_frame_equal(a, b, check_exact=False, rel_tol=1e-12, abs_tol=1e-9)  # float sums in another order
        hours = [c for c in a.columns if a[c].dtype == pl.Float64]
        assert_frame_equal(a.with_columns(pl.col(hours).round(6)), b.with_columns(pl.col(hours).round(6)))


def test_carbon_by_day_is_the_ranges(wh):
    from gpuledger.analytics.carbon import carbon_sums, with_carbon
    from gpuledger.analytics.carbon_inputs import site_inputs

    with warehouse.open_reader(wh) as con:
        now = queries.data_now(con)
        t, policy, used = _whole(con, now)
        jobs = t.jobs.select("cluster", "job_id", "project").unique(["cluster", "job_id"])
        whole = (with_carbon(used, *site_inputs(con, START, END)).join(jobs, on=["cluster", "job_id"], how="left")
                 .with_columns(pl.col("project").fill_null("(no job record)"))
                 .group_by("project").agg(pl.col("gpu_hours_allocated").sum().alias("gpu_hours"), *carbon_sums())
                 .sort("project").collect(engine="in-memory"))
        by_day = queries.carbon_report(con, start=START, end=END, now=now, policy=policy)
    assert by_day.height == whole.height > 0 and by_day["gpu_hours"].sum() > 0
    # NULL where no day knew it, as where no hour did; the float sums in another order
    assert_frame_equal(by_day, whole, check_exact=False, rel_tol=1e-12, abs_tol=1e-9)
