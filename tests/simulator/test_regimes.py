"""The simulator's demand regimes (issue 34): `ai2-backlog`, the default, draws what it drew before
the second regime came; `ai2-seasonal` moves what each team asks for week by week — a deadline
week, an exploring week, a quiet week, a normal week, each team at its own phase — so some teams
leave part of their share unused while others queue for more, and the cluster is still scheduled
as one (no pool idle while a job that fits it waits).

What teams ask for is read from the rows the warehouse receives (submit to end, queue included, as
design.md's owed counts demand), never from the generator's targets."""

from __future__ import annotations

import hashlib
from datetime import datetime

import numpy as np
import polars as pl
import pytest

from gpuledger.simulator import build_cluster
from gpuledger.simulator.defaults import REGIME_NAMES
from gpuledger.simulator.demand import (
    DEADLINE,
    QUIET,
    REGIMES,
    SEASONAL_CYCLE,
    WEEK_ORIGIN_S,
    cycle_phases,
    global_shares,
    regime_named,
)
from tests.simulator.test_scheduling import idle_while_a_job_fits

START = datetime(2026, 11, 1)  # a Sunday: the first calendar week is one day long
WEEK = 7 * 86400
DAY = 86400


def jobs_digest(sim) -> str:
    """sha256 (16 hex digits) of what the generator decided per job: who, what, where, when."""
    cols = ["job_id", "project", "name", "partition", "gpus", "submit_s", "start_s", "end_s"]
    return hashlib.sha256(sim.workload.jobs.select(cols).write_csv().encode()).hexdigest()[:16]


def test_the_regimes_are_the_ones_the_cli_offers():
    assert tuple(REGIMES) == REGIME_NAMES and REGIME_NAMES[0] == "ai2-backlog"
    with pytest.raises(ValueError, match="no demand regime 'ai2-nope': choose ai2-backlog or ai2-seasonal"):
        regime_named("ai2-nope")
    with pytest.raises(ValueError, match="no demand regime"):
        build_cluster(seed=1, gpus=8, start=START, days=0.1, regime="ai2-nope")


def test_the_default_regime_draws_the_jobs_it_drew_before():
    """Seed 5, 64 GPUs, 2 days: jobs_digest of build_cluster(seed=5, gpus=64, start=2026-11-01,
    days=2, dirt=False) run at the commit that made production replicas follow traffic (issue 34,
    session 29; from session 25's sessions with a patience: 438 jobs, bc381a355b7fa4a3; from
    224b9ba: 619 jobs, d80ee2c155de8614): 716 jobs, f9dd39a92286566b. Naming the default changes nothing; the
    seasonal regime draws other jobs (so the digest tells them apart). A deliberate change to the
    generator changes this digest too: take the new one from its commit, and say so there."""
    default = build_cluster(seed=5, gpus=64, start=START, days=2, dirt=False)
    assert default.workload.regime == "ai2-backlog"
    assert default.workload.jobs.height == 716
    assert jobs_digest(default) == "f9dd39a92286566b"
    named = build_cluster(seed=5, gpus=64, start=START, days=2, dirt=False, regime="ai2-backlog")
    assert jobs_digest(named) == "f9dd39a92286566b"
    seasonal = build_cluster(seed=5, gpus=64, start=START, days=2, dirt=False, regime="ai2-seasonal")
    assert seasonal.workload.regime == "ai2-seasonal"
    assert jobs_digest(seasonal) != "f9dd39a92286566b"


def test_each_team_runs_the_cycle_at_its_own_phase():
    """Nine projects over a four-week cycle take phases 0,1,2,3,0,1,2,3,0: three at phase 0, two at
    each other, so every week two or three teams are quiet and two or three at a deadline."""
    projects = sorted(global_shares(_config()))
    assert len(projects) == 9
    for seed in (1, 2, 3):
        phases = cycle_phases(seed, projects, len(SEASONAL_CYCLE))
        assert sorted(np.bincount(list(phases.values())).tolist()) == [2, 2, 2, 3]
    assert cycle_phases(1, projects, 4) != cycle_phases(2, projects, 4)  # the order is drawn per seed
    assert SEASONAL_CYCLE.count(QUIET) == 1 and SEASONAL_CYCLE.count(DEADLINE) == 1


def _config():
    from gpuledger.config import load_config

    return load_config()


def outstanding_by_team_week(sim, *, skip_s: int = DAY, replicas: bool = True) -> dict[tuple[str, int], float]:
    """Per (project, calendar week fully in the window): GPUs asked for (running or queued: jobs
    from submit to end) averaged over the week's hours after its first ``skip_s`` (a deadline's queue
    takes hours to drain), ÷ the project's share of the cluster's GPUs (MIG by slices).
    ``replicas`` False: without production inference (it follows traffic, not seasons)."""
    jobs = sim.workload.jobs
    if not replicas:
        jobs = jobs.filter(pl.col("kind") != "inference")
    shares = global_shares(sim.config)
    capacity = float(sim.hardware.devices["gpu_fraction"].sum())
    submit = jobs["submit_s"].to_numpy()
    end = jobs["end_s"].fill_null(sim.end_s).to_numpy()
    gpus = jobs["gpus"].to_numpy()
    project = jobs["project"].to_numpy()
    first_week = -(-(sim.start_s - WEEK_ORIGIN_S) // WEEK)
    out = {}
    for week in range(first_week, (sim.end_s - WEEK_ORIGIN_S) // WEEK):
        hours = np.arange(WEEK_ORIGIN_S + week * WEEK + skip_s, WEEK_ORIGIN_S + (week + 1) * WEEK, 3600)
        for name, share in shares.items():
            m = project == name
            live = (submit[m][:, None] <= hours) & (end[m][:, None] > hours)
            out[(name, week)] = float((gpus[m][:, None] * live).sum(axis=0).mean()) / (share * capacity)
    return out


@pytest.fixture(scope="module")
def seasonal_month():
    # 128 GPUs, 29 days from Sunday 1 Nov: four whole calendar weeks (2-29 Nov), each phase of the
    # cycle once for every team
    return build_cluster(seed=2, gpus=128, start=START, days=29, dirt=False, regime="ai2-seasonal")


@pytest.mark.slow  # a simulated month: 4-5 s on a quiet core, more on a busy one
def test_quiet_weeks_lend_and_deadline_weeks_queue_for_more(seasonal_month):
    """The targets (demand.SEASONAL_FACTOR x BACKLOG_FACTOR 2.5, moved by the day's rhythm,
    0.85-1.15): a quiet week ~0.25x the team's share outstanding, a deadline week ~4x. A team's
    multi-node training chains run on through its quiet week (60 % of its whole-GPU share, a node
    at least: 0.5-0.75 of its share), and a deadline's queue of 8-GPU jobs can outlast the exploring
    week after it for a small team (at 128 GPUs a team of 0.09 share has 11 GPUs), so quiet weeks
    are asserted with that room: each team asks in its quiet week under 0.35x what it asked in its
    deadline week (0.25 / 4 = 0.06 by the targets), quiet weeks' median under 0.7 of the share,
    deadline weeks' median over 3x. Lent (the share quiet and exploring teams leave unused), averaged
    over the weeks: at least 0.08 of the cluster (a quarter of the share quiet at ~0.5 of it: 0.12).
    Production replicas follow traffic, not seasons (demand.Demand.serving_gpus): the seasons are
    asserted on the rest of what teams ask (for the serving team, its short debug queue), what is
    lent on all of it."""
    sim = seasonal_month
    shares = global_shares(sim.config)
    phases = cycle_phases(sim.workload.seed, sorted(shares), len(SEASONAL_CYCLE))
    asked = outstanding_by_team_week(sim)
    weeks = sorted({w for _, w in asked})
    assert len(weeks) == 4
    by_team = {(p, SEASONAL_CYCLE[(w + phases[p]) % 4]): ratio
               for (p, w), ratio in outstanding_by_team_week(sim, replicas=False).items()}
    for project in shares:
        assert by_team[(project, QUIET)] < 0.35 * by_team[(project, DEADLINE)], project
    quiet = [by_team[(p, QUIET)] for p in shares]
    deadline = [by_team[(p, DEADLINE)] for p in shares]
    assert float(np.median(quiet)) < 0.7 and float(np.median(deadline)) > 3.0, (sorted(quiet), sorted(deadline))
    lent = [sum(shares[p] * max(0.0, 1 - asked[(p, w)]) for p in shares) for w in weeks]
    assert float(np.mean(lent)) >= 0.08, lent


def test_no_pool_idles_while_a_job_that_fits_waits_in_the_seasonal_regime():
    """As test_scheduling checks the default on every size (its slow test runs this regime too):
    64 GPUs over the first Monday, when every team's season changes."""
    sim = build_cluster(seed=3, gpus=64, start=START, days=2, dirt=False, regime="ai2-seasonal")
    assert idle_while_a_job_fits(sim) == []


def test_simulate_warehouse_records_the_regime(tmp_path):
    """`simulate warehouse --regime`: the warehouse's provenance (what `warehouse summary` shows
    beside every figure) names the regime its jobs were drawn from."""
    from typer.testing import CliRunner

    from gpuledger import warehouse
    from gpuledger.analytics.queries import warehouse_summary
    from gpuledger.cli import app

    path = tmp_path / "w.duckdb"
    done = CliRunner().invoke(app, ["simulate", "warehouse", "--gpus", "8", "--days", "0.1", "--seed", "4",
                                    "--interval", "300", "--clean", "--regime", "ai2-seasonal", "-w", str(path)])
    assert done.exit_code == 0, done.output
    assert "seed 4, regime ai2-seasonal" in " ".join(done.output.split())  # rich wraps the console's lines
    with warehouse.open_reader(path) as con:
        assert warehouse_summary(con)["simulated"] == "seed 4, regime ai2-seasonal"
