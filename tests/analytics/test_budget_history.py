"""Budget burn and funding read only the budget periods containing "now" (queries.budget_tables):
on a simulated cluster whose history starts before the period, the figures equal those computed
from every row of the history, and fewer allocations are read. (The example config budgets
November 2026 only.)"""

from __future__ import annotations

from datetime import datetime, timedelta

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from gpuledger.analytics import queries
from gpuledger.analytics.budget import budget_burn, job_funding
from gpuledger.analytics.collect import collect
from gpuledger.analytics.load import load_tables
from gpuledger.config import Policy

START = datetime(2026, 10, 30)  # two days before the budgets' period (November) begins
IN_PERIOD = datetime(2026, 11, 1, 18)
BEFORE_PERIOD = datetime(2026, 10, 31, 12)  # no budget period contains it
DAY = timedelta(days=1)


@pytest.fixture(scope="module")
def con(tmp_path_factory):
    from gpuledger import warehouse
    from gpuledger.config import load_config
    from gpuledger.simulator.scenario import build_cluster
    from gpuledger.simulator.to_warehouse import write_simulation

    sim = build_cluster(seed=3, gpus=16, start=START, days=3, interval_s=300, cluster="sim", config=load_config(None))
    with warehouse.open_writer(tmp_path_factory.mktemp("budget-history") / "sim.duckdb") as c:
        write_simulation(c, sim, cells=4_000)
        yield c


def _funding_from_everything(con, now):
    """funding_report's judgement from every row of the history (its own arguments, default policy)."""
    funding = Policy().funding
    t, burn = _burn_from_everything(con, now)
    rules = [(r.qos, r.partition, int(r.hours * 3600)) for r in funding.slurm_min_runtime]
    return collect(job_funding(t.jobs, burn, t.org_nodes, now=now, min_runtime_rules=rules,
                               min_runtime_cap=timedelta(hours=funding.min_runtime_cap_hours))).sort("cluster", "job_id")


def _burn_from_everything(con, as_of):
    t = load_tables(con, end=as_of + DAY, samples=False)
    return t, budget_burn(t.job_allocations, t.gpus, t.jobs, t.org_nodes, t.budgets, t.rate_card, as_of=as_of)


def test_the_burn_reads_the_period_only_and_equals_the_burn_over_all_history(con):
    t, everything = _burn_from_everything(con, IN_PERIOD)
    expected = collect(everything).sort("node")
    got = queries.budget_report(con, as_of=IN_PERIOD).sort("node")
    assert_frame_equal(got.select(expected.columns), expected)
    assert got["consumed_gpu_hours"].sum() > 0  # the period's first 18 hours burned something
    # the history before November 1 is not read: allocations ended before it are left out
    read = collect(queries.budget_tables(con, as_of=IN_PERIOD).job_allocations).height
    every = collect(t.job_allocations)
    ended_before = every.filter(pl.col("end_time") <= datetime(2026, 11, 1)).height
    assert ended_before > 0 and read <= every.height - ended_before


def test_funding_reads_the_period_only_and_equals_funding_over_all_history(con):
    expected = _funding_from_everything(con, IN_PERIOD)
    got = queries.funding_report(con, now=IN_PERIOD, policy=Policy()).sort("cluster", "job_id")
    assert got.height > 0 and got["funded"].any()
    assert_frame_equal(got.select(expected.columns), expected)


def test_with_no_period_containing_now_the_jobs_running_then_are_still_judged(con):
    _, everything = _burn_from_everything(con, BEFORE_PERIOD)
    assert queries.budget_report(con, as_of=BEFORE_PERIOD).height == 0 == collect(everything).height
    expected = _funding_from_everything(con, BEFORE_PERIOD)
    got = queries.funding_report(con, now=BEFORE_PERIOD, policy=Policy()).sort("cluster", "job_id")
    # every job running then is judged, and none is funded: no budget covers October
    assert got.height > 0 and not got["funded"].any()
    assert_frame_equal(got.select(expected.columns), expected)
