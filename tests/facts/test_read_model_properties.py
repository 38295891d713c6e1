"""The read model, as a property (issue 40): for any small history of jobs, a fair-share and a budget
snapshot materialized the way the pipelines do it (facts computed, then facts.materialize) is read
back by gpuledger.facts as the materialized answer, and that answer is the computed one.

Histories: up to 6 jobs of two projects (alpha, beta; CONFIG_V1, alpha's October budget 1,000 h) on
4 whole GPUs, each starting in the first 48 hours of 2026-10-05 and running 1 to 24 hours; the
moment asked anywhere in the 72 hours from that Monday's start."""

from __future__ import annotations

import tempfile
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from gpuledger import facts, warehouse
from gpuledger.analytics import queries
from gpuledger.facts.materialize import replace_partition, stamped
from gpuledger.ledger.config_versions import stored_config
from tests.helpers.ledger_fixtures import CONFIG_V1, devices, job, load

T0 = datetime(2026, 10, 5)
JOBS = st.lists(st.tuples(st.sampled_from(["alpha", "beta"]), st.integers(0, 3), st.integers(0, 47),
                          st.integers(1, 24)), min_size=1, max_size=6)


def _history(path: Path, jobs) -> None:
    with warehouse.open_writer(path) as con:
        load(con, CONFIG_V1, at=datetime(2026, 9, 1))
        ids = devices(con, [(f"GPU-{i}", f"node{i // 2}", "H100") for i in range(4)])
        for n, (project, gpu, start_h, hours) in enumerate(jobs):
            start = T0 + timedelta(hours=start_h)
            job(con, f"j{n}", project, ids[f"GPU-{gpu}"], start, start + timedelta(hours=hours))


def _materialize(path: Path, as_of: datetime) -> None:
    """What the fair-share and budget assets do for the day of ``as_of`` (their computed facts)."""
    with warehouse.open_writer(path) as con:
        policy = stored_config(con).config.policy
        tree = facts.fairshare(con, policy=policy, as_of=as_of, materialized=False).frame
        replace_partition(con, "fairshare_snapshots", as_of.date(),
                          stamped(tree.rename({"order": "queue_order"}), day=as_of.date(), as_of=as_of))
        burn = facts.budget(con, policy=policy, as_of=as_of, materialized=False).frame
        replace_partition(con, "budget_snapshots", as_of.date(), stamped(burn, day=as_of.date(), as_of=as_of))


@pytest.mark.slow
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs=JOBS, at_hour=st.integers(1, 72))
def test_a_materialized_snapshot_is_the_computed_answer_for_any_history(jobs, at_hour):
    as_of = T0 + timedelta(hours=at_hour)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "w.duckdb"
        _history(path, jobs)
        _materialize(path, as_of)
        with warehouse.open_reader(path) as con:
            policy = stored_config(con).config.policy
            tree = facts.fairshare(con, policy=policy, as_of=as_of)
            burn = facts.budget(con, policy=policy, as_of=as_of)
            # read back from the snapshot tables, not recomputed: otherwise this compares a computation with itself
            assert tree.source == burn.source == facts.MATERIALIZED
            assert_frame_equal(tree.frame, queries.fairshare_report(con, policy=policy, as_of=as_of),
                               rel_tol=1e-12, abs_tol=1e-9)
            assert_frame_equal(burn.frame, queries.budget_report(con, policy=policy, as_of=as_of),
                               rel_tol=1e-12, abs_tol=1e-9)
            # an hour later the snapshot does not hold: computed, never the older rows
            assert facts.fairshare(con, policy=policy, as_of=as_of + timedelta(hours=1)).source == facts.COMPUTED
