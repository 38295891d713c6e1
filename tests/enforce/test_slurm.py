"""The Slurm backend acts on a real single-node Slurm (scripts/slurm-rig.sh, 8 fake H100s): a Nice /
QOS change shows in ``scontrol show job`` and ``sprio``, a requeued job returns to PENDING with
Restarts=1, a cancelled job leaves the queue, a warning lands in AdminComment, a finished job is
skipped. One rig for the module (the ingest tests' session fixture)."""

from __future__ import annotations

import subprocess
import time

import pytest
from gpuledger.enforce.apply import apply_actions
from gpuledger.enforce.backends.slurm import SlurmBackend, nice_for
from gpuledger.enforce.inputs import IDENTITY
from gpuledger.enforce.model import Action

from tests.ingest.test_slurm import slurm_rig  # noqa: F401 - a fixture used by name

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def sh(rig, *command: str) -> str:
    done = subprocess.run(list(command), capture_output=True, text=True, env=rig["env"], cwd=rig["dir"],
                          timeout=60, check=False)
    assert done.returncode == 0, f"{' '.join(command)}: {done.stderr}"
    return done.stdout.strip()


def job_fields(rig, job_id: str) -> dict[str, str]:
    out = sh(rig, "scontrol", "show", "job", "-o", job_id)
    fields = {}
    for part in out.split():
        if "=" in part:
            key, _, value = part.partition("=")
            fields.setdefault(key, value)
    return fields


def wait_for(rig, job_id: str, check, what: str, deadline_s: float = 60.0) -> dict:
    deadline = time.monotonic() + deadline_s
    fields = {}
    while time.monotonic() < deadline:
        fields = job_fields(rig, job_id)
        if check(fields):
            return fields
        time.sleep(0.3)
    pytest.fail(f"job {job_id} did not reach {what} within {deadline_s:.0f} s; last {fields}")


def submit(rig, *extra: str) -> str:
    return sh(rig, "sbatch", "--parsable", "--output=/dev/null", "--gres=gpu:h100:8", "--account=proj-a",
              *extra, "--wrap", "sleep 600").split(";")[0]


def planned(view: dict) -> dict:
    """What a plan records of a live view (enforce.inputs.snapshot): its identity fields only. The
    rest of the view moves on its own - a job just started shows Reason=Prolog until the rig's
    prolog (PrologFlags=Alloc) ends, then Reason=None - and is no reason to refuse."""
    return {k: view[k] for k in IDENTITY if view.get(k) is not None}


def action(kind: str, job_id: str, **kw) -> Action:
    return Action(action=kind, cluster="gpuledger", job_id=job_id, project="proj-a", source="slurm-sacct",
                  reason=kw.pop("reason", f"{kind} because"), rule="test", action_id=f"p:{job_id}:{kind}", **kw)


@pytest.fixture
def jobs(slurm_rig):
    """Two 8-GPU jobs on 8 GPUs: the first runs, the second waits."""
    running = submit(slurm_rig, "--requeue")
    pending = submit(slurm_rig)
    wait_for(slurm_rig, running, lambda f: f.get("JobState") == "RUNNING", "RUNNING")
    yield running, pending
    subprocess.run(["scancel", running, pending], env=slurm_rig["env"], capture_output=True, check=False)


def test_nice_and_qos_show_in_scontrol_and_sprio(slurm_rig, jobs):
    running, pending = jobs
    backend = SlurmBackend(env=slurm_rig["env"], qos_funded="high")
    qos_factor_before = int(sh(slurm_rig, "sprio", "-h", "-j", pending, "-o", "%Q").split()[0])
    # the rig's weights: FairShare 10,000 + QOS 10,000 + Age 1,000 = 21,000, so one step is 21,001 Nice.
    # 503,000 (funded, fair-share position 3, within 0) -> offset (1 × 400 + 3) × 20 + 0 = 8,060 steps
    # -> Nice −8,060 × 21,001 = −169,268,060
    assert backend.step() == 21_001
    assert nice_for(503_000, 21_001) == -169_268_060 and nice_for(100_000, 21_001) == 0
    plan = [action("set-priority", pending, priority=503_000, funded=True, figures={"running": False}),
            action("set-priority", running, priority=503_000, funded=True, figures={"running": True})]
    run = apply_actions(plan, backend, dry_run=False)
    assert [(a.job_id, o.outcome, o.detail) for a, o in run.results] == [
        (pending, "done", f"job {pending} Nice=-169268060 QOS=high; ran: scontrol update JobId={pending} "
                          "Nice=-169268060 QOS=high"),
        (running, "done", f"job {running} Nice=-169268060; ran: scontrol update JobId={running} Nice=-169268060")]
    waiting, busy = job_fields(slurm_rig, pending), job_fields(slurm_rig, running)
    assert (waiting["Nice"], waiting["QOS"]) == ("-169268060", "high")
    assert (busy["Nice"], busy["QOS"]) == ("-169268060", "normal")  # Slurm refuses QOS on a running job: not sent
    job_id, nice, qos_factor = sh(slurm_rig, "sprio", "-h", "-j", pending, "-o", "%i|%N|%Q").split("|")
    assert (job_id.strip(), nice.strip()) == (pending, "-169268060")
    # the rig's QOS "high" carries priority: its factor shows in sprio once the job is in it
    assert int(qos_factor) > qos_factor_before, (qos_factor_before, qos_factor)


def test_requeue_returns_the_job_to_pending_with_one_restart(slurm_rig, jobs):
    running, _ = jobs
    backend = SlurmBackend(env=slurm_rig["env"])
    seen = planned(backend.observe()[running])
    run = apply_actions([action("preempt", running, mode="requeue", observed=seen)], backend, dry_run=False)
    assert [(o.outcome, o.detail) for _, o in run.results] == [
        ("done", f"job {running} requeued; ran: scontrol requeue {running}")]
    fields = wait_for(slurm_rig, running, lambda f: f.get("JobState") == "PENDING", "PENDING")
    assert fields["Restarts"] == "1"


def test_cancel_removes_the_job_from_the_queue(slurm_rig, jobs):
    running, pending = jobs
    backend = SlurmBackend(env=slurm_rig["env"])
    seen = backend.observe()
    # only a running job holds GPUs a preemption frees: the pending one is left alone, with why
    plan = [action("preempt", pending, mode="stop", observed=planned(seen[pending])),
            action("preempt", running, mode="stop", observed=planned(seen[running]))]
    run = apply_actions(plan, backend, dry_run=False)
    assert [(o.outcome, o.cause) for _, o in run.results] == [("skipped", "not-holding"), ("done", None)], \
        [o.detail for _, o in run.results]
    assert "holds no GPUs now (PENDING" in run.results[0][1].detail
    deadline = time.monotonic() + 60
    while sh(slurm_rig, "squeue", "-h", "-j", running, "-o", "%i %T") and time.monotonic() < deadline:
        time.sleep(0.3)
    assert sh(slurm_rig, "squeue", "-h", "-j", running, "-o", "%i %T") == ""


def test_warning_goes_to_admin_comment_and_gone_jobs_are_skipped(slurm_rig, jobs):
    running, _ = jobs
    backend = SlurmBackend(env=slurm_rig["env"])
    plan = [action("warn", running, stage="warning", reason="all 8 GPU(s) idle for 70 min"),
            action("set-priority", "999999", priority=1, figures={"running": True})]
    run = apply_actions(plan, backend, dry_run=False)
    assert [o.outcome for _, o in run.results] == ["done", "skipped"]
    assert "Invalid job id" in run.results[1][1].error
    out = sh(slurm_rig, "scontrol", "show", "job", "-o", running)
    assert "AdminComment=gpuledger warning: all 8 GPU(s) idle for 70 min" in out


def test_dry_run_runs_no_command_that_acts(slurm_rig, jobs):
    running, _ = jobs
    backend = SlurmBackend(env=slurm_rig["env"], scancel="/nonexistent/scancel")
    seen = backend.observe()[running]
    run = apply_actions([action("preempt", running, mode="stop", observed=planned(seen))], backend, dry_run=True)
    assert [(o.outcome, o.detail) for _, o in run.results] == [("dry-run", f"would run: /nonexistent/scancel {running}")]
    assert job_fields(slurm_rig, running)["JobState"] == "RUNNING"
    # planned without a live view: refused, in the dry run as in the real one
    blind = apply_actions([action("preempt", running, mode="stop")], backend, dry_run=True)
    assert [o.outcome for _, o in blind.results] == ["refused"] and "live view" in blind.results[0][1].detail


def test_observe_reads_the_requeue_flag(slurm_rig, jobs):
    running, pending = jobs
    seen = SlurmBackend(env=slurm_rig["env"]).observe()
    # the rig's slurm.conf sets JobRequeue=1, so every batch job may be requeued
    assert seen[running]["requeue_flag"] is True and seen[pending]["requeue_flag"] is True
    assert (seen[running]["state"], seen[running]["restarts"]) == ("RUNNING", 0) and seen[pending]["state"] == "PENDING"
    assert seen[running]["submit_time"] == job_fields(slurm_rig, running)["SubmitTime"]
    assert SlurmBackend().handles(action("preempt", running)) is None  # ingested rows say slurm-sacct
    assert SlurmBackend().handles(Action(action="preempt", cluster="c", job_id="ml/p", project="p", reason="r",
                                         rule="t", source="kubernetes")) is not None
