"""What `make demo` shows (`gpuledger enforce replay` over a simulated week): each planted squatter
(the simulator names them squat-...) is warned, then preempted as a squatter at a later cycle; the
exempt inference services never get a warning or a preemption."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
LINE = re.compile(r"^(?P<at>\S+ \S+Z)\s+(?P<action>warn|preempt) \((?P<detail>[^)]+)\)\s+(?P<cluster>[^/\s]+)/"
                  r"(?P<job>\S+) (?P<name>\S*) \[(?P<project>[^,]+), (?P<kind>[^\]]+)\]: (?P<reason>.*)$")

pytestmark = pytest.mark.slow


def run(*args: str, env: dict) -> str:
    done = subprocess.run([str(BIN / "gpuledger"), *args], capture_output=True, text=True, env=env, timeout=600,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.fixture(scope="module")
def week(tmp_path_factory) -> dict:
    env = {**os.environ, "GPULEDGER_WAREHOUSE": str(tmp_path_factory.mktemp("week") / "w.duckdb"), "COLUMNS": "200"}
    env.pop("GPULEDGER_CONFIG", None)
    # 16 GPUs, one sample a minute (the stale-data guard wants 80 % of the minutes covered); seed 4:
    # five squatters hold their GPUs 3.5 h or more (seed 7 gave three once replicas followed traffic)
    run("simulate", "warehouse", "--gpus", "16", "--days", "7", "--interval", "60", "--seed", "4", env=env)
    return env


def test_simulated_week_squatters_warned_then_preempted_inference_never(week):
    out = run("enforce", "replay", "--every", "1h", "--only-when-idle", "--all", env=week)
    lines = [m.groupdict() for m in map(LINE.match, out.splitlines()) if m]
    squatters = sorted({ln["name"] for ln in lines if ln["name"].startswith("squat-")})
    # the simulator's squatters (named squat-...: four planted, and the notebook sessions left idle)
    # that held their GPUs long enough for a warning and a preemption: idle after 5 min, warned
    # at 60 min past the 30-min grace, preempted at 120, seen by hourly cycles: 3.5 h
    from gpuledger import warehouse

    with warehouse.open_reader(week["GPULEDGER_WAREHOUSE"]) as con:
        held = sorted(r[0] for r in con.execute(
            "SELECT name FROM jobs WHERE name LIKE 'squat-%' AND start_time IS NOT NULL "
            "AND coalesce(end_time, TIMESTAMP '2026-11-08') - start_time >= INTERVAL 210 MINUTE").fetchall())
    assert squatters == held and len(held) >= 4, out
    for name in squatters:
        mine = [ln for ln in lines if ln["name"] == name]
        warns = [ln["at"] for ln in mine if ln["action"] == "warn"]
        (preempt,) = [ln for ln in mine if ln["action"] == "preempt"]  # one: after it the plan had stopped it
        assert all(w <= preempt["at"] for w in warns), (name, mine)
        if preempt["reason"].startswith("squatting:"):  # a warning, then (a later cycle) the preemption
            assert warns and min(warns) < preempt["at"] and f"warned at {min(warns)}" in preempt["reason"], (name, mine)
        else:  # unfunded, it went sooner, for waiting funded work (--all prints it), warned or not yet
            assert preempt["reason"].startswith("unfunded") and "funded job" in preempt["reason"], (name, mine)
        # nothing is printed for it after it was stopped
        assert not [ln for ln in mine if ln["at"] > preempt["at"]], (name, mine)
    # most are found as squatters: warned, then preempted
    assert sum(1 for ln in lines if ln["action"] == "preempt" and ln["reason"].startswith("squatting:")) >= 3
    assert not [ln for ln in lines if ln["kind"] == "inference"]
    summary = out.strip().splitlines()[-1]
    exempt = re.search(r"(\d+) exempt job\(s\) running .*: warned (\d+), preempted (\d+)", summary)
    assert exempt and int(exempt.group(1)) >= 1 and exempt.group(2, 3) == ("0", "0"), summary


def test_the_warning_history_survives_between_runs(week):
    """Two separate `plan` processes: the first plans a warning for the squatter (recorded in the
    warehouse); the second, 55 minutes later, knows it — and preempts nothing, because a planned
    warning that no one applied and no alert carried reached no one (the clock starts at delivery)."""
    import json
    from datetime import timedelta

    from gpuledger import warehouse

    # the week's first squatter that held its GPU 3 h: idle from 30 min after its start (the grace),
    # so 105 min after its start it has idled 75 min (a warning), 55 min later 130 min
    with warehouse.open_reader(week["GPULEDGER_WAREHOUSE"]) as con:
        name, started = con.execute(
            "SELECT name, start_time FROM jobs WHERE name LIKE 'squat-%' AND start_time IS NOT NULL "
            "AND end_time - start_time >= INTERVAL 3 HOUR ORDER BY start_time LIMIT 1").fetchone()
    at = (started + timedelta(minutes=105, seconds=59)).replace(second=0, microsecond=0)
    later_at = at + timedelta(minutes=55)
    first = json.loads(run("enforce", "plan", "--format", "json", "--now", at.isoformat(), env=week))
    (warn,) = [a for a in first["actions"] if a["action"] == "warn" and a["name"] == name]
    assert warn["stage"] == "warning"  # idle 75 min
    later = json.loads(run("enforce", "plan", "--format", "json", "--now", later_at.isoformat(), env=week))
    assert not [a for a in later["actions"] if a["action"] == "preempt" and a["job_id"] == warn["job_id"]]
    (why,) = [a["reason"] for a in later["actions"] if a["action"] == "none" and a["job_id"] == warn["job_id"]]
    assert f"a warning was planned at {at:%Y-%m-%d %H:%M}Z but has not reached anyone yet" in why
    explained = run("enforce", "explain", warn["job_id"], env=week)
    assert f"warned (warning) at {at:%Y-%m-%d %H:%M}Z" in explained and "not delivered" in explained
