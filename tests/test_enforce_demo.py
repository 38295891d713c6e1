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


def test_simulated_week_squatters_warned_then_preempted_inference_never(tmp_path):
    env = {**os.environ, "GPULEDGER_WAREHOUSE": str(tmp_path / "w.duckdb"), "COLUMNS": "200"}
    env.pop("GPULEDGER_CONFIG", None)
    # 16 GPUs, one sample a minute (the stale-data guard wants 80 % of the minutes covered)
    run("simulate", "warehouse", "--gpus", "16", "--days", "7", "--interval", "60", "--seed", "7", env=env)
    out = run("enforce", "replay", "--every", "1h", "--only-when-idle", env=env)
    lines = [m.groupdict() for m in map(LINE.match, out.splitlines()) if m]
    squatters = sorted({ln["name"] for ln in lines if ln["name"].startswith("squat-")})
    assert len(squatters) == 4, out  # the simulator plants max(4, GPUs // 64) squatters
    for name in squatters:
        mine = [ln for ln in lines if ln["name"] == name]
        warns = [ln["at"] for ln in mine if ln["action"] == "warn"]
        squat_preempts = [ln["at"] for ln in mine if ln["action"] == "preempt" and ln["reason"].startswith("squatting:")]
        assert warns and squat_preempts, (name, mine)
        assert min(warns) < min(squat_preempts), (name, mine)  # a warning, then (a later cycle) the preemption
        assert f"warned at {min(warns)}" in next(ln["reason"] for ln in mine if ln["at"] == min(squat_preempts)
                                                 and ln["action"] == "preempt" and "squatting:" in ln["reason"])
        # once preempted as a squatter it is not warned again for the same stretch
        assert not [w for w in warns if w > min(squat_preempts)], (name, mine)
    assert not [ln for ln in lines if ln["kind"] == "inference"]
    summary = out.strip().splitlines()[-1]
    exempt = re.search(r"(\d+) exempt job\(s\) running .*: warned (\d+), preempted (\d+)", summary)
    assert exempt and int(exempt.group(1)) >= 1 and exempt.group(2, 3) == ("0", "0"), summary
