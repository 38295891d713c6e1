"""Raw-sample retention (warehouse/retention.py): old raw samples go once their hourly rollups are
complete, the partial hours at allocation edges stay, and every report of the pruned period —
usage, utilization, chargeback, fair share, budgets — is the same before and after."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from gpuledger import warehouse
from gpuledger.analytics import queries
from gpuledger.simulator import build_cluster
from gpuledger.simulator.to_warehouse import write_simulation

ROOT = Path(__file__).resolve().parents[2]
START = datetime(2026, 11, 1)
DAYS = 3
NOW = START + timedelta(days=DAYS)


@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
    path = tmp_path_factory.mktemp("retention") / "gpuledger.duckdb"
    sim = build_cluster(seed=11, gpus=32, start=START, days=DAYS)
    with warehouse.open_writer(path) as con:
        write_simulation(con, sim)
    return path


def _reports(con) -> dict[str, pl.DataFrame]:
    """Every report over whole hours of the period the prune below removes, and one across it."""
    pruned = (START, START + timedelta(days=1, hours=12))
    across = (START + timedelta(days=1), NOW)
    return {
        "usage by project": queries.usage_report(con, start=pruned[0], end=pruned[1], now=NOW),
        "usage by job": queries.usage_report(con, start=pruned[0], end=pruned[1], by="job", now=NOW),
        "usage per hour": queries.usage_report(con, start=pruned[0], end=pruned[1], per_hour=True, now=NOW),
        "usage across the cutoff": queries.usage_report(con, start=across[0], end=across[1], by="job", now=NOW),
        "utilization by model": queries.utilization_report(con, start=pruned[0], end=pruned[1], now=NOW),
        "utilization by kind": queries.utilization_report(con, start=pruned[0], end=pruned[1], by="kind", now=NOW),
        "chargeback": queries.chargeback_report(con, f"{START.date()}..{(START + timedelta(days=2)).date()}",
                                                level="job", now=NOW),
        "fair share": queries.fairshare_report(con, as_of=NOW),
        "budget": queries.budget_report(con, as_of=NOW),
    }


def _table(con, name, order):
    return con.sql(f"SELECT * FROM {name} ORDER BY {order}").pl()


@pytest.mark.slow
def test_retention_drops_old_raw_samples_and_leaves_every_report_unchanged(simulated):
    with warehouse.open_reader(simulated) as con:
        before = _reports(con)
        rollup = _table(con, "gpu_hourly", "gpu_id, hour")
        jobs = _table(con, "jobs", "cluster, job_id")
        samples_before = con.execute("SELECT count(*) FROM gpu_samples").fetchall()[0][0]
    assert before["usage by job"]["gpu_hours_active"].sum() > 0  # the period has real activity

    with warehouse.open_writer(simulated) as con:
        stats = warehouse.prune_raw_samples(con, keep_days=1.5)
    newest = START + timedelta(days=DAYS) - timedelta(seconds=30)
    assert stats.pruned_before == (newest - timedelta(days=1.5)).replace(minute=0, second=0)
    assert stats.rows_deleted > 0 and stats.rows_kept > 0  # partial hours at allocation edges stay

    with warehouse.open_reader(simulated) as con:
        old = con.execute("SELECT count(*) FROM gpu_samples WHERE ts < ?", [stats.pruned_before]).fetchall()[0][0]
        assert old == stats.rows_kept
        assert con.execute("SELECT count(*) FROM gpu_samples").fetchall()[0][0] == samples_before - stats.rows_deleted
        # What is kept is exactly the raw hours the reports still read: allocation edges.
        edges = con.execute(
            "SELECT count(*) FROM gpu_samples s WHERE ts < ? AND NOT EXISTS (SELECT 1 FROM job_allocations a "
            "WHERE a.gpu_id = s.gpu_id AND (date_trunc('hour', a.start_time) = date_trunc('hour', s.ts) "
            "AND a.start_time <> date_trunc('hour', a.start_time) OR date_trunc('hour', a.end_time) = "
            "date_trunc('hour', s.ts) AND a.end_time <> date_trunc('hour', a.end_time)))",
            [stats.pruned_before]).fetchall()[0][0]
        assert edges == 0
        assert_frame_equal(_table(con, "gpu_hourly", "gpu_id, hour"), rollup)  # rollups kept as they were
        assert_frame_equal(_table(con, "jobs", "cluster, job_id"), jobs)
        after = _reports(con)
    for name, frame in before.items():  # to 1e-9: polars' parallel sums may add in another order
        assert_frame_equal(after[name], frame, rel_tol=1e-9, abs_tol=1e-9), name

    # Idempotent; and a late copy of a pruned sample cannot rebuild its hour from what is left.
    with warehouse.open_writer(simulated) as con:
        assert warehouse.prune_raw_samples(con, keep_days=1.5).rows_deleted == 0
        gpu_id = con.execute("SELECT min(gpu_id) FROM gpu_hourly").fetchall()[0][0]
        late = pl.DataFrame({"gpu_id": [gpu_id], "ts": [START + timedelta(hours=5, seconds=7)],
                             "sm_active_ratio": [0.5]}, schema_overrides={"gpu_id": pl.Int32})
        assert warehouse.write_samples(con, late, "late") == 0
    with warehouse.open_reader(simulated) as con:
        assert_frame_equal(_table(con, "gpu_hourly", "gpu_id, hour"), rollup)


@pytest.mark.slow
def test_prune_and_disk_use_from_the_cli(tmp_path):
    path = tmp_path / "gpuledger.duckdb"
    sim = build_cluster(seed=2, gpus=8, start=START, days=1)
    with warehouse.open_writer(path) as con:
        write_simulation(con, sim)

    def cli(*args):
        result = subprocess.run([sys.executable, "-m", "gpuledger.cli", *args, "--warehouse", str(path)],
                                cwd=ROOT, capture_output=True, text=True, timeout=300, env={"COLUMNS": "120",
                                **__import__("os").environ})
        assert result.returncode == 0, result.stderr
        return result.stdout

    out = cli("warehouse", "prune", "--keep-days", "0.5")
    assert "pruned raw samples before 2026-11-01T11:00:00Z" in out and "deleted" in out
    assert "no raw samples older than 0.5 days" in cli("warehouse", "prune", "--keep-days", "0.5")
    summary = cli("warehouse", "summary")
    assert "disk use per table" in summary and "gpu_samples" in summary and "(indexes, catalog)" in summary
