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
        ids = ",".join(j.split("_")[0] for j in jobs)  # an array by its id: sacct lists 12_[0-1]
        listed = sh(rig, "sacct", "-a", "-X", "-n", "-P", "-o", "JobID", "-j", ids).split()
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
    # the dry run named exactly the commands the real run ran, in its order
    would = [ln.split("would run: ", 1)[1] for ln in dry.splitlines() if "would run: " in ln]
    ran = [ln.split("; ran: ", 1)[1] for ln in real.splitlines() if "; ran: " in ln]
    assert would == ran and len(ran) >= 2, (dry, real)
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


# --- identity: (cluster, scheduler, job), the whole decision re-checked live (issue 33) ----------------------
SACCT_HEADER = "JobID|Cluster|Account|User|JobName|AllocTRES|ReqTRES|Submit|Start|End|State|QOS|Partition|TimeMin"


def other_cluster_export(path: Path, rows: list[str]) -> Path:
    """A second cluster's `sacct --parsable2` export (times UTC), imported beside the rig's own jobs."""
    path.write_text("\n".join([SACCT_HEADER, *rows]) + "\n")
    return path


def test_a_decision_for_another_clusters_job_2_never_touches_the_local_job_2(slurm, warehouse, tmp_path):
    # local: a funded job inside its minimum runtime holds all 8 GPUs (proj-b, QOS normal: 1 h)
    local = submit(slurm, "--gres=gpu:h100:8", "--account=proj-b")
    wait_for(slurm, local, lambda f: f.get("JobState") == "RUNNING", "RUNNING")
    w = ["-w", str(warehouse)]
    ingest(slurm, warehouse, [local])
    # cluster `other`: a job with the SAME id, unfunded (proj-a has no budget) on 8 H100 for 2 h,
    # and funded work waiting for 8 H100 there — other's own scheduler would preempt its job
    now = datetime.now(UTC).replace(tzinfo=None, microsecond=0)
    t = lambda minutes: f"{now.replace(second=0) + __import__('datetime').timedelta(minutes=minutes):%Y-%m-%dT%H:%M:%S}"  # noqa: E731
    export = other_cluster_export(tmp_path / "other.txt", [
        f"{local}|other|proj-a|bob|burst|gres/gpu:h100=8,gres/gpu=8|gres/gpu=8|{t(-130)}|{t(-120)}|Unknown|RUNNING"
        "|normal|gpu|",
        f"9{local}|other|proj-b|ann|waiting||gres/gpu:h100=8,gres/gpu=8|{t(-5)}|Unknown|Unknown|PENDING|normal|gpu|"])
    gl(slurm, "ingest", "slurm", "--file", str(export), "--tz", "UTC", *w)

    # the plan, with Slurm's live view: the view is of cluster gpuledger, so other's job is never observed
    plan = tmp_path / "plan.json"
    gl(slurm, "enforce", "plan", "--observe", "slurm", "--format", "json", "--out", str(plan), *w)
    actions = json.loads(plan.read_text())["actions"]
    assert not [a for a in actions if a["action"] == "preempt"], actions
    # other's waiting job is served by nothing here: its cluster's scheduler was not observed
    (why,) = [a["reason"] for a in actions if a["action"] == "none" and a["job_id"] == f"9{local}"]
    assert "the live view is of cluster gpuledger (slurm), this job is on cluster other" in why, why

    # a plan that does act on other's job (made elsewhere, or by an older gpuledger): every action
    # for cluster other is refused, naming both clusters, in the dry run, the real run and again
    doc = json.loads(plan.read_text())
    (prio,) = [a for a in doc["actions"] if a["action"] == "set-priority" and a["cluster"] == "other"
               and a["job_id"] == local]
    doc["actions"] = [prio, {**prio, "action": "preempt", "mode": "stop", "priority": None,
                             "action_id": prio["action_id"].rsplit(":", 1)[0] + ":999",
                             "observed": {"state": "RUNNING", "phase": "running"}}]
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps(doc))
    for extra in ((), ("--yes",), ("--yes",)):
        out = gl(slurm, "enforce", "apply", "--backend", "slurm", "--plan", str(forged), *extra, *w).stdout
        outcomes = [ln.split()[0] for ln in out.splitlines() if ln.split()[1:2] in (["set-priority"], ["preempt"])]
        assert outcomes == ["refused", "refused"] and "would run" not in out, out
        assert ("decided for cluster other, but this slurm backend acts on cluster gpuledger (ClusterName in "
                "scontrol show config)") in out, out
        seen = fields(slurm, local)
        assert (seen["JobState"], seen["Nice"]) == ("RUNNING", "0"), seen  # untouched, priority too
    # the refusal is kept: explain shows it after the process that made it has ended
    told = gl(slurm, "enforce", "explain", local, "--cluster", "other", *w).stdout
    assert "applied" in told and "refused: decided for cluster other, but this slurm backend acts on cluster " \
                                 "gpuledger" in told, told


def test_a_victim_is_not_preempted_once_the_job_it_serves_has_started(slurm, warehouse, tmp_path):
    # two unfunded 4-GPU jobs fill the node; funded work waits for 4 H100
    burst = [submit(slurm, "--gres=gpu:h100:4", "--account=proj-a", "--requeue") for _ in range(2)]
    for job in burst:
        wait_for(slurm, job, lambda f: f.get("JobState") == "RUNNING", "RUNNING")
    waiting = submit(slurm, "--gres=gpu:h100:4", "--account=proj-b")
    wait_for(slurm, waiting, lambda f: f.get("JobState") == "PENDING", "PENDING")
    w = ["-w", str(warehouse)]
    ingest(slurm, warehouse, [*burst, waiting])
    plan = tmp_path / "plan.json"
    gl(slurm, "enforce", "plan", "--observe", "slurm", "--format", "json", "--out", str(plan), *w)
    (pre,) = [a for a in json.loads(plan.read_text())["actions"] if a["action"] == "preempt"]
    assert pre["serves"]["job_id"] == waiting and pre["serves"]["observed"]["phase"] == "waiting"
    victim = pre["job_id"]
    # between plan and apply the other burst job ends: Slurm starts the funded job on its GPUs
    (other,) = [j for j in burst if j != victim]
    sh(slurm, "scancel", other)
    wait_for(slurm, waiting, lambda f: f.get("JobState") == "RUNNING", "RUNNING")
    dry = gl(slurm, "enforce", "apply", "--backend", "slurm", "--plan", str(plan), *w).stdout
    real = gl(slurm, "enforce", "apply", "--backend", "slurm", "--plan", str(plan), "--yes", *w).stdout
    for out in (dry, real):
        assert f"the funded job {waiting} it would serve no longer waits (RUNNING): not preempted" in out, out
        assert "would run: scontrol requeue" not in out and "requeued" not in out.replace("no longer", ""), out
    seen = fields(slurm, victim)
    assert (seen["JobState"], seen["Restarts"]) == ("RUNNING", "0"), seen
    told = gl(slurm, "enforce", "explain", victim, *w).stdout
    assert "refused: the funded job" in told and "no longer waits (RUNNING)" in told, told
    assert "no longer waits" in gl(slurm, "enforce", "preemptions", *w).stdout


def test_a_pending_funded_array_is_prioritised_through_its_array_id_and_sized_tasks_times_gpus(slurm, warehouse):
    # a funded job inside its minimum runtime holds the node; a funded array of 2 tasks x 4 GPUs and
    # unfunded work in the QOS that adds 10,000 wait
    hold = submit(slurm, "--gres=gpu:h100:8", "--account=proj-b")
    wait_for(slurm, hold, lambda f: f.get("JobState") == "RUNNING", "RUNNING")
    array = submit(slurm, "--array=0-1", "--gres=gpu:h100:4", "--account=proj-b")
    unfunded = [submit(slurm, "--gres=gpu:h100:2", "--account=proj-a", "--qos=high") for _ in range(2)]
    w = ["-w", str(warehouse)]
    ingest(slurm, warehouse, [hold, f"{array}_[0-1]", *unfunded])
    out = gl(slurm, "enforce", "apply", "--backend", "slurm", "--yes", *w).stdout
    assert f"gpuledger/{array}_[0-1]: job {array}_[0-1] Nice=" in out and "not a Slurm job" not in out, out
    queue = {}
    for line in sh(slurm, "squeue", "-h", "-o", "%i %Q").splitlines():
        job_id, priority = line.split()
        queue[job_id] = int(priority)
    assert queue[f"{array}_[0-1]"] > max(queue[j] for j in unfunded), queue
    plan = json.loads(gl(slurm, "enforce", "plan", "--observe", "slurm", "--format", "json", "--no-record",
                         *w).stdout)["actions"]
    (why,) = [a["reason"] for a in plan if a["action"] == "none" and a["job_id"] == f"{array}_[0-1]"]
    assert "waits for 8 H100" in why, why  # 2 tasks x 4 GPUs, not 4
