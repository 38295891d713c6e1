"""`gpuledger report waits` on the real Slurm 22.05 rig (scripts/slurm-rig.sh: 8 fake H100s): jobs
that must wait are submitted, ingested while they wait (the controller's pending Reason is kept),
allowed to start, ingested again — and every job's wait is exactly sacct's Start − Submit, with a
cause and Slurm's own reason beside it."""

from __future__ import annotations

import json
import time
from datetime import datetime

import pytest
from gpuledger.pipelines.defs.ingest.assets import slurm_jobs

from gpuledger import warehouse as gpuledger_warehouse
from tests.enforce.test_slurm_rig import (
    fields,
    gl,
    ingest,
    sh,
    wait_for,
    warehouse,  # noqa: F401 - the fixture, used by name
)
from tests.pipelines.test_assets import ingest_run

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def sbatch(rig, *args: str, seconds: int = 900) -> str:
    return sh(rig, "sbatch", "--parsable", "--output=/dev/null", *args, "--wrap", f"sleep {seconds}").split(";")[0]


def sacct_times(rig, jobs: list[str]) -> dict[str, tuple[datetime, datetime | None]]:
    out = {}
    for line in sh(rig, "sacct", "-a", "-X", "-n", "-P", "-o", "JobID,Submit,Start", "-j", ",".join(jobs)).splitlines():
        job, submit, start = line.split("|")
        out[job] = (datetime.fromisoformat(submit), None if start in ("Unknown", "None") else datetime.fromisoformat(start))
    return out


def _reasons_stored(path, jobs: list[str]) -> bool:
    with gpuledger_warehouse.open_reader(path) as con:
        have = {r[0] for r in con.execute("SELECT DISTINCT job_id FROM scheduler_reasons WHERE reason IN "
                                          "('Resources', 'Priority')").fetchall()}
    return set(jobs) <= have


def test_report_waits_gives_each_jobs_wait_exactly_and_slurms_reason(slurm, warehouse, tmp_path):
    w = ["-w", str(warehouse)]
    # `first` holds all 8 GPUs until it is cancelled (after the ingest that sees the others
    # waiting: no race with a busy machine); `second` and `third` (4 GPUs each) must wait for it;
    # `held` is submitted on hold and waits for the user, whatever the GPUs do
    first = sbatch(slurm, "--gres=gpu:h100:8", "--account=proj-a")
    wait_for(slurm, first, lambda f: f.get("JobState") == "RUNNING", "RUNNING")
    second = sbatch(slurm, "--gres=gpu:h100:4", "--account=proj-a")
    third = sbatch(slurm, "--gres=gpu:h100:4", "--account=proj-b")
    held = sbatch(slurm, "--gres=gpu:h100:1", "--account=proj-b", "--hold")
    for job in (second, third):
        wait_for(slurm, job, lambda f: f.get("JobState") == "PENDING" and f.get("Reason") in ("Resources", "Priority"),
                 "PENDING for Resources / Priority")
    reasons = {j: fields(slurm, j)["Reason"] for j in (held,)}
    ingest(slurm, warehouse, [first, second, third, held])  # while they wait: Slurm's reasons kept
    # the controller can show a pending job without a reason for a moment (between scheduling
    # passes, more often on a loaded machine): ingest again, as the pipeline would, while they still
    # wait (`first` holds every GPU until it is cancelled below), until both reasons are stored
    deadline = time.monotonic() + 60
    while not _reasons_stored(warehouse, [second, third]) and time.monotonic() < deadline:
        ingest(slurm, warehouse, [first, second, third, held])
    sh(slurm, "scancel", first)
    for job in (second, third):
        wait_for(slurm, job, lambda f: f.get("JobState") == "RUNNING", "RUNNING once `first` ends")
    ingest(slurm, warehouse, [first, second, third, held])

    done = gl(slurm, "report", "waits", "--by", "job", "--format", "json", *w).stdout
    rows = {r["job_id"]: r for r in json.loads(done)}
    truth = sacct_times(slurm, [first, second, third, held])
    for job in (first, second, third):  # exactly sacct's Start − Submit, to the second
        submit, start = truth[job]
        assert rows[job]["wait_s"] == (start - submit).total_seconds() and rows[job]["still_waiting"] is False, rows[job]
    assert truth[second][1] >= truth[first][0] and rows[second]["wait_s"] > 0
    # both waited behind `first`, which held every GPU of the pool (the most ever held at once: 8)
    assert rows[second]["cause"] == rows[third]["cause"] == "pool-full", rows
    # Slurm's reason as the ingest read it while they waited (it may move between Resources and
    # Priority from one scheduling pass to the next: the one read is kept)
    assert rows[second]["scheduler_reason"] in ("Resources", "Priority")
    assert rows[third]["scheduler_reason"] in ("Resources", "Priority")
    # the held job still waits: its wait so far, and Slurm's own reason is its cause
    assert reasons[held] == "JobHeldUser"
    assert rows[held]["still_waiting"] is True and rows[held]["start_time"] is None
    assert (rows[held]["cause"], rows[held]["cause_detail"]) == ("scheduler", "Slurm says JobHeldUser")

    table = gl(slurm, "report", "waits", "--by", "project", "--cause", *w).stdout
    # the rig is shared with the other Slurm tests of the session, whose jobs the live ingest reads too:
    # each project's line counts the causes of every job of that project in the per-job answer above
    for project in ("proj-a", "proj-b"):
        line = next(x for x in table.splitlines() if x.startswith(project + " "))
        scheduler = sum(1 for r in rows.values() if r["project"] == project and r["cause"] == "scheduler")
        assert (f"scheduler {scheduler}" in line) == (scheduler > 0), (line, rows)
    assert any(r["project"] == "proj-b" and r["cause"] == "scheduler" for r in rows.values())  # the held job
    told = gl(slurm, "enforce", "explain", held, *w).stdout
    assert "Slurm says `JobHeldUser`" in told, told
    # the enforcement cycle's live view reads the reason too: released and held again by an admin,
    # the job's reason changes and the plan with `--observe slurm` records it
    sh(slurm, "scontrol", "release", held)
    sh(slurm, "scontrol", "hold", held)  # an operator's hold: JobHeldAdmin
    wait_for(slurm, held, lambda f: f.get("Reason") == "JobHeldAdmin", "JobHeldAdmin")
    gl(slurm, "enforce", "plan", "--observe", "slurm", *w)
    told = gl(slurm, "enforce", "explain", held, *w).stdout
    assert "Slurm says `JobHeldAdmin`" in told and "earlier" in told and "Slurm said `JobHeldUser`" in told, told


def test_the_pipelines_slurm_asset_keeps_the_controllers_reason_as_the_cli_does(slurm, warehouse, tmp_path,
                                                                              monkeypatch):
    """The Dagster `slurm_jobs` asset's live path (a `sources.slurm` without a file) reads squeue as
    `ingest slurm --live` does: a job submitted on hold is pending with no eligible time, so sacct's
    window does not list it and sacct would say Reason None; the controller says JobHeldUser."""
    held = sbatch(slurm, "--gres=gpu:h100:1", "--account=proj-b", "--hold")
    wait_for(slurm, held, lambda f: f.get("Reason") == "JobHeldUser", "JobHeldUser")
    deadline = time.monotonic() + 60  # slurmdbd lags the controller: the asset's `sacct -j` needs the record
    while held not in sh(slurm, "sacct", "-a", "-X", "-n", "-P", "-o", "JobID", "-j", held).split():
        assert time.monotonic() < deadline, f"sacct never listed {held}"
        time.sleep(0.3)
    config = tmp_path / "live.yaml"  # the fixture's config (proj-a, proj-b) with the live Slurm source
    config.write_text((tmp_path / "c.yaml").read_text()
                      + "sources:\n  slurm:\n    lookback_hours: 1\n    cluster: gpuledger\n")
    monkeypatch.setenv("SLURM_CONF", slurm["env"]["SLURM_CONF"])  # the asset runs sacct / squeue in-process
    monkeypatch.setenv("TZ", "UTC")
    ingest_run(warehouse, config, assets=[slurm_jobs])
    with gpuledger_warehouse.open_reader(warehouse) as con:
        job = con.execute("SELECT state, project FROM jobs WHERE cluster = 'gpuledger' AND job_id = ?",
                          [held]).fetchone()
        reasons = con.execute("SELECT reason FROM scheduler_reasons WHERE job_id = ?", [held]).fetchall()
        every = con.execute("SELECT cluster, job_id, state, project FROM jobs ORDER BY job_id").fetchall()
    assert job == ("PENDING", "proj-b"), (held, every)
    assert ("JobHeldUser",) in reasons, reasons
