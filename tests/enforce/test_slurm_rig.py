"""Enforcement end to end on the project's real Slurm 22.05 rig (scripts/slurm-rig.sh, 8 fake H100s,
PriorityWeightFairShare 10,000, QOS 10,000, Age 1,000): jobs submitted with sbatch, ingested with
`gpuledger ingest slurm --live`, planned with the scheduler's live view, applied through the CLI.

* The review flow of the README: `enforce plan --observe slurm --format json` writes the plan, a dry
  run prints exactly the commands the real run then runs, `apply --plan FILE --yes` requeues the
  `--requeue` job (Restarts=1) and cancels the `--no-requeue` one — both for a funded job that waits
  for 8 GPUs of no named model (`--gres=gpu:8`); applying again performs nothing; a new cycle
  preempts neither again; `enforce preemptions` counts 1 each.
* Priorities Slurm keeps: after `apply`, `sprio` ranks every funded pending job above every
  unfunded one, although the unfunded ones sit in the QOS that adds 10,000 to their priority.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
BIN = Path(sys.executable).parent / "gpuledger"


def sh(rig, *command: str) -> str:
    done = subprocess.run(list(command), capture_output=True, text=True, env=rig["env"], timeout=60, check=False)
    assert done.returncode == 0, f"{' '.join(command)}: {done.stderr}"
    return done.stdout.strip()


def gl(rig, *args: str, code: int = 0) -> subprocess.CompletedProcess:
    done = subprocess.run([str(BIN), *args], capture_output=True, text=True, env={**rig["env"], "COLUMNS": "200"},
                          timeout=300, check=False)
    assert done.returncode == code, f"gpuledger {' '.join(args)}: {done.stdout}\n{done.stderr}"
    return done


def fields(rig, job_id: str) -> dict[str, str]:
    done = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True,
                          env=rig["env"], timeout=60, check=False)
    out: dict[str, str] = {}
    for part in done.stdout.split():
        key, _, value = part.partition("=")
        out.setdefault(key, value)
    return out


def wait_for(rig, job_id: str, check, what: str, deadline_s: float = 60.0) -> dict:
    deadline = time.monotonic() + deadline_s
    seen: dict = {}
    while time.monotonic() < deadline:
        seen = fields(rig, job_id)
        if check(seen):
            return seen
        time.sleep(0.3)
    pytest.fail(f"job {job_id} did not reach {what} within {deadline_s:.0f} s; last {seen}")


def ingest(rig, path: Path, jobs: list[str]) -> None:
    """`gpuledger ingest slurm --live` once sacct lists every job (slurmdbd lags the controller)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        listed = sh(rig, "sacct", "-a", "-X", "-n", "-P", "-o", "JobID", "-j", ",".join(jobs)).split()
        if set(jobs) <= set(listed):
            break
        time.sleep(0.3)
    gl(rig, "ingest", "slurm", "--live", "-w", str(path))


def submit(rig, *args: str) -> str:
    return sh(rig, "sbatch", "--parsable", "--output=/dev/null", *args, "--wrap", "sleep 900").split(";")[0]


@pytest.fixture
def warehouse(slurm, tmp_path):
    """An empty queue, and a warehouse whose config funds proj-b (budget this month; QOS normal
    declares a minimum runtime of 1 h) and not proj-a (no budget)."""
    subprocess.run(["scancel", "--user=root"], env=slurm["env"], capture_output=True, timeout=60, check=False)
    deadline = time.monotonic() + 60
    while sh(slurm, "squeue", "-h", "-o", "%i") and time.monotonic() < deadline:
        time.sleep(0.3)
    path = tmp_path / "w.duckdb"
    config = tmp_path / "c.yaml"
    config.write_text(f"""
currency: USD
org:
  name: acme
  children:
    - {{name: proj-a, shares: 1}}
    - {{name: proj-b, shares: 1}}
budgets:
  - {{node: proj-b, gpu_hours: 1000, period: "{datetime.now(UTC):%Y-%m}"}}
rate_card:
  - {{gpu_model: H100, price_per_gpu_hour: "2.00", effective_from: 2026-01-01}}
policy:
  funding:  # sacct 22.05 does not report --time-min: QOS normal on partition gpu declares 1 h
    slurm_min_runtime: [{{partition: gpu, qos: normal, hours: 1}}]
  enforcement:
    dry_run: false
""")
    gl(slurm, "config", "load", "--config", str(config), "-w", str(path))
    yield path
    subprocess.run(["scancel", "--user=root"], env=slurm["env"], capture_output=True, timeout=60, check=False)


def test_plan_file_requeues_the_requeue_job_cancels_the_other_exactly_once(slurm, warehouse, tmp_path):
    requeue = submit(slurm, "--gres=gpu:h100:4", "--account=proj-a", "--requeue")
    stop = submit(slurm, "--gres=gpu:h100:4", "--account=proj-a", "--no-requeue")
    for job in (requeue, stop):
        wait_for(slurm, job, lambda f: f.get("JobState") == "RUNNING", "RUNNING")
    # funded (proj-b has budget, QOS normal a minimum runtime), asking for 8 GPUs of any model
    waiting = submit(slurm, "--gres=gpu:8", "--account=proj-b")
    wait_for(slurm, waiting, lambda f: f.get("JobState") == "PENDING", "PENDING")
    w = ["-w", str(warehouse)]
    ingest(slurm, warehouse, [requeue, stop, waiting])

    plan = tmp_path / "plan.json"
    gl(slurm, "enforce", "plan", "--observe", "slurm", "--format", "json", "--out", str(plan), *w)
    actions = json.loads(plan.read_text())["actions"]
    pre = {a["job_id"]: a for a in actions if a["action"] == "preempt"}
    assert set(pre) == {requeue, stop}, actions
    assert (pre[requeue]["mode"], pre[stop]["mode"]) == ("requeue", "stop")
    # what the plan relied on, as Slurm showed it
    assert pre[requeue]["observed"]["requeue_flag"] is True and pre[stop]["observed"]["requeue_flag"] is False
    assert {pre[j]["observed"]["state"] for j in pre} == {"RUNNING"} and pre[requeue]["observed"]["restarts"] == 0
    assert all(p["figures"]["waiting_job"] == waiting for p in pre.values())

    dry = gl(slurm, "enforce", "apply", "--backend", "slurm", "--plan", str(plan), *w).stdout
    assert f"would run: scontrol requeue {requeue}" in dry and f"would run: scancel {stop}" in dry
    assert fields(slurm, requeue)["JobState"] == fields(slurm, stop)["JobState"] == "RUNNING"

    real = gl(slurm, "enforce", "apply", "--backend", "slurm", "--plan", str(plan), "--yes", *w).stdout
    assert f"job {requeue} requeued" in real and f"job {stop} cancelled" in real, real
    assert wait_for(slurm, requeue, lambda f: f.get("Restarts") == "1", "Restarts=1")["Restarts"] == "1"
    wait_for(slurm, stop, lambda f: f.get("JobState") in (None, "CANCELLED"), "CANCELLED")

    again = gl(slurm, "enforce", "apply", "--backend", "slurm", "--plan", str(plan), "--yes", *w).stdout
    assert "applied: 0 action(s) performed" in again and "already done before" in again, again
    # a new cycle with the live view: the warehouse still says both run, Slurm does not — neither
    # is preempted again (the one is requeued and cooling down, the other has ended)
    cycle = gl(slurm, "enforce", "apply", "--backend", "slurm", "--yes", *w).stdout
    assert not [ln for ln in cycle.splitlines() if ln.startswith("done") and " preempt " in ln], cycle
    assert fields(slurm, requeue)["Restarts"] == "1"
    counts = gl(slurm, "enforce", "preemptions", *w).stdout.splitlines()
    assert sorted(ln.split()[:2] for ln in counts) == [["1", f"gpuledger/{j}"] for j in sorted((requeue, stop))]


def test_sprio_ranks_every_funded_pending_job_above_every_unfunded_one(slurm, warehouse):
    # a funded job inside its minimum runtime holds all 8 GPUs, so the others wait
    hold = submit(slurm, "--gres=gpu:h100:8", "--account=proj-b")
    wait_for(slurm, hold, lambda f: f.get("JobState") == "RUNNING", "RUNNING")
    funded = [submit(slurm, "--gres=gpu:h100:2", "--account=proj-b") for _ in range(2)]
    # unfunded, in the QOS that adds PriorityWeightQOS × 1 = 10,000 to Slurm's own priority
    unfunded = [submit(slurm, "--gres=gpu:h100:2", "--account=proj-a", "--qos=high") for _ in range(2)]
    w = ["-w", str(warehouse)]
    ingest(slurm, warehouse, [hold, *funded, *unfunded])
    out = gl(slurm, "enforce", "apply", "--backend", "slurm", "--yes", *w).stdout
    assert out.count("done           set-priority") == 5, out
    ranked = {}
    for line in sh(slurm, "sprio", "-h", "-o", "%i %Y %N").splitlines():
        job_id, priority, nice = line.split()
        ranked[job_id] = (int(priority), int(nice))
    assert set(funded) | set(unfunded) <= set(ranked), ranked
    assert min(ranked[j][0] for j in funded) > max(ranked[j][0] for j in unfunded), ranked
    assert all(ranked[j][1] < 0 for j in funded)  # the bands are carried by Nice, sized from the weights
