"""--regime where a simulated cluster is built (`simulate warehouse`, `whatif schedule
--simulate-gpus`): the figures name the demand regime beside the seeds, a cached warehouse is never
taken for another regime's, and a wrong name is one line, exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime

import pytest
from typer.testing import CliRunner

from gpuledger.cli import app
from gpuledger.whatif.seeds import warehouse_name


@pytest.mark.parametrize("args", [
    ["simulate", "warehouse", "--gpus", "8", "--days", "0.1", "--regime", "ai2-nope", "-w", "w.duckdb"],
    ["whatif", "schedule", "--simulate-gpus", "8", "--days", "1", "--regime", "ai2-nope"],
], ids=["simulate", "whatif"])
def test_a_wrong_regime_is_one_line_exit_2(tmp_path, args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULEDGER_")} | {"COLUMNS": "200"}
    done = subprocess.run([sys.executable, "-m", "gpuledger.cli", *args], check=False, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "--regime" in lines[0]
    assert "'ai2-nope' is no demand regime; choose ai2-backlog or ai2-seasonal" in lines[0]
    assert list(tmp_path.iterdir()) == []  # refused before any work: no warehouse, no simulated seeds


def test_a_regime_without_a_simulated_cluster_is_refused(tmp_path):
    """A --warehouse's jobs are what they were: a regime only means something with --simulate-gpus."""
    done = CliRunner().invoke(app, ["whatif", "schedule", "--regime", "ai2-seasonal",
                                    "-w", str(tmp_path / "w.duckdb")])
    assert done.exit_code == 2 and "give it with --simulate-gpus" in done.output


def test_the_cached_warehouse_names_its_regime():
    start = datetime(2026, 11, 1)
    names = {r: warehouse_name("abcd1234", gpus=256, days=30, seed=3, start=start, interval_s=300, regime=r)
             for r in ("ai2-backlog", "ai2-seasonal")}
    assert names == {"ai2-backlog": "sim-abcd1234-ai2-backlog-g256-d30-s3-20261101-i300.duckdb",
                     "ai2-seasonal": "sim-abcd1234-ai2-seasonal-g256-d30-s3-20261101-i300.duckdb"}


@pytest.mark.slow
def test_whatif_over_seasonal_seeds_names_the_regime(tmp_path):
    runner = CliRunner()
    base = ["whatif", "schedule", "--simulate-gpus", "8", "--days", "1", "--seeds", "2", "--policies",
            "priority,slot-limits", "--sim-dir", str(tmp_path / "sims"), "--no-progress"]
    args = [*base, "--regime", "ai2-seasonal"]
    done = runner.invoke(app, [*args, "--format", "json"])
    assert done.exit_code == 0, done.output
    doc = json.loads(done.stdout)["outcome"]
    assert doc["demand_regime"] == "ai2-seasonal"
    assert doc["regime"] == ("simulated: 8 GPUs, 1 days from 2026-11-01, demand regime ai2-seasonal, "
                             "budgets fitted to the cluster, one warehouse per seed")
    assert all("-ai2-seasonal-" in path for path in doc["sources"].values())
    assert sorted(p.name for p in (tmp_path / "sims").glob("*.duckdb")) == sorted(
        path.rsplit("/", 1)[1] for path in doc["sources"].values())
    table = runner.invoke(app, args)  # the table's title names seeds and regime together
    assert table.exit_code == 0, table.output
    words = " ".join(table.output.split())
    assert "outcome over seeds 1..2" in words and "demand regime ai2-seasonal" in words
    # one seed (the first one's warehouse, already built): its table names its seed and regime too
    one = runner.invoke(app, [*(a for a in args if a not in ("--seeds", "2")), "--seed", "2"])
    assert one.exit_code == 0, one.output
    assert ("trace seed 2, simulated, demand regime ai2-seasonal, budgets fitted to the cluster"
            in " ".join(one.output.split()))
    # the default regime's seeds are other warehouses beside them, and the document says so
    default = runner.invoke(app, [*base, "--format", "json"])
    assert default.exit_code == 0, default.output
    block = json.loads(default.stdout)["outcome"]
    assert block["demand_regime"] == "ai2-backlog" and "demand regime ai2-backlog" in block["regime"]
    assert not set(block["sources"].values()) & set(doc["sources"].values())


def test_a_wrong_budgets_mode_is_one_line_exit_2(tmp_path):
    done = CliRunner().invoke(app, ["whatif", "schedule", "--budgets", "half", "-w", str(tmp_path / "w.duckdb")])
    assert done.exit_code == 2
    assert "'half': choose config or fit" in done.output
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_fitted_budgets_are_the_runs_parameter(tmp_path):
    # 8 simulated GPUs for a day: the example config's budgets (405,500 GPU-h in November) never bind
    # on 8 GPUs, fitted ones are the cluster's month; the run records which it replayed
    base = ["whatif", "schedule", "--simulate-gpus", "8", "--days", "1", "--policies", "fair-share",
            "--sim-dir", str(tmp_path / "sims"), "--no-progress", "--format", "json"]
    got = {}
    for mode in ("config", "fit"):
        done = CliRunner().invoke(app, [*base, "--budgets", mode])
        assert done.exit_code == 0, done.output
        got[mode] = json.loads(done.stdout)
    assert (got["config"]["params"]["budgets"], got["fit"]["params"]["budgets"]) == ("config", "fit")
    # left out: a cluster simulated for the replay is fitted, a warehouse's own history keeps its budgets
    simulated = CliRunner().invoke(app, base)
    assert simulated.exit_code == 0, simulated.output
    assert json.loads(simulated.stdout)["params"]["budgets"] == "fit"
    (built,) = (tmp_path / "sims").glob("*.duckdb")
    recorded = CliRunner().invoke(app, ["whatif", "schedule", "-w", str(built), "--policies", "fair-share",
                                        "--no-progress", "--format", "json"])
    assert recorded.exit_code == 0, recorded.output
    assert json.loads(recorded.stdout)["params"]["budgets"] == "config"
