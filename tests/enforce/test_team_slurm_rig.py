"""A team lead's own queue on the real Slurm 22.05 rig (issue 38): `gpuledger team order` as the
vision lead puts the team's younger queued job before its older one, and enforcement's next
`apply --backend slurm --yes` carries it into Slurm — `squeue -o %Q` then ranks the two in the
lead's order while the other team's waiting job keeps its Nice and its place. `team hold` holds a
queued job in Slurm (scontrol hold: Reason JobHeldAdmin, priority 0) and `team release` lets it
queue again, each once; the llm lead is refused vision's jobs.

Org: acme -> vision (program: proj-a), llm (program: proj-b); both funded this month (QOS normal on
partition gpu declares 1 h). An llm job inside its minimum runtime holds all 8 GPUs, so the rest wait."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime

import pytest

from tests.enforce.test_slurm_rig import fields, gl, ingest, sh, submit, wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
VISION, LLM = "vision-lead@example.com", "llm-lead@example.com"


@pytest.fixture
def warehouse(slurm, tmp_path):
    subprocess.run(["scancel", "--user=root"], env=slurm["env"], capture_output=True, timeout=60, check=False)
    path = tmp_path / "w.duckdb"
    config = tmp_path / "c.yaml"
    month = f"{datetime.now(UTC):%Y-%m}"
    config.write_text(f"""
currency: USD
org:
  name: acme
  children:
    - {{name: vision, shares: 1, children: [{{name: proj-a, shares: 1}}]}}
    - {{name: llm, shares: 1, children: [{{name: proj-b, shares: 1}}]}}
budgets:
  - {{node: vision, gpu_hours: 1000, period: "{month}"}}
  - {{node: llm, gpu_hours: 1000, period: "{month}"}}
rate_card:
  - {{gpu_model: H100, price_per_gpu_hour: "2.00", effective_from: 2026-01-01}}
dashboards:
  leads: {{{VISION}: [vision], {LLM}: [llm]}}
policy:
  funding:
    slurm_min_runtime: [{{partition: gpu, qos: normal, hours: 1}}]
  enforcement:
    dry_run: false
""")
    gl(slurm, "config", "load", "--config", str(config), "-w", str(path))
    yield path
    subprocess.run(["scancel", "--user=root"], env=slurm["env"], capture_output=True, timeout=60, check=False)


def queue_priority(rig) -> dict[str, int]:
    """squeue's %Q (Slurm's priority now) of every pending job."""
    out = {}
    for line in sh(rig, "squeue", "-h", "-t", "PD", "-o", "%i %Q").splitlines():
        job_id, priority = line.split()
        out[job_id] = int(priority)
    return out


def order(priorities: dict[str, int]) -> list[str]:
    """Pending jobs, served first first (higher priority; Slurm breaks ties by submission)."""
    return sorted(priorities, key=lambda j: (-priorities[j], int(j)))


def test_the_leads_order_reaches_squeue_within_the_team_and_moves_no_other_team(slurm, warehouse):
    w = ["-w", str(warehouse)]
    blocker = submit(slurm, "--gres=gpu:h100:8", "--account=proj-b")
    wait_for(slurm, blocker, lambda f: f.get("JobState") == "RUNNING", "RUNNING")
    older = submit(slurm, "--gres=gpu:h100:8", "--account=proj-a", "--job-name=older")
    younger = submit(slurm, "--gres=gpu:h100:8", "--account=proj-a", "--job-name=younger")
    held = submit(slurm, "--gres=gpu:h100:8", "--account=proj-a", "--job-name=to-hold")
    other = submit(slurm, "--gres=gpu:h100:8", "--account=proj-b", "--job-name=llm-waits")
    ingest(slurm, warehouse, [blocker, older, younger, held, other])
    gl(slurm, "enforce", "apply", "--backend", "slurm", "--yes", *w)
    before = queue_priority(slurm)
    other_nice = fields(slurm, other)["Nice"]
    # no declared priority: the two vision jobs share gpuledger's value (same Nice), so Slurm
    # serves the older first
    assert fields(slurm, older)["Nice"] == fields(slurm, younger)["Nice"]
    assert order(before).index(older) < order(before).index(younger), before

    said = gl(slurm, "team", "order", younger, older, "--as", VISION, *w).stdout
    assert f"job gpuledger/{younger}: no place in the lead's order -> position 1" in said, said
    refused = gl(slurm, "team", "order", older, "--as", LLM, *w, code=2).stderr
    assert f"job '{older}' is not a running or queued job of team llm" in refused, refused

    applied = gl(slurm, "enforce", "apply", "--backend", "slurm", "--yes", *w).stdout
    assert f"done           set-priority gpuledger/{younger}" in applied, applied
    after = queue_priority(slurm)
    print(f"squeue %Q before {before}, after {after}")
    assert after[younger] > after[older], after  # the lead's order, in Slurm's own priority
    # the other team's job: the same Nice, the same place among everything that waits
    assert fields(slurm, other)["Nice"] == other_nice
    assert order(after).index(other) == order(before).index(other), (before, after)
    assert [j for j in order(after) if j not in (older, younger)] == [j for j in order(before)
                                                                      if j not in (older, younger)]
    # exactly once: the next cycle changes nothing more
    again = gl(slurm, "enforce", "apply", "--backend", "slurm", "--yes", *w).stdout
    assert f"set-priority gpuledger/{younger}" not in again, again

    # a hold: scontrol hold through the same path, once; then the release
    gl(slurm, "team", "hold", held, "--as", VISION, *w)
    out = gl(slurm, "enforce", "apply", "--backend", "slurm", "--yes", *w).stdout
    assert f"job {held} held; ran: scontrol hold {held}" in out, out
    seen = fields(slurm, held)
    assert seen["JobState"] == "PENDING" and seen["Reason"] == "JobHeldAdmin" and seen["Priority"] == "0", seen
    assert " hold " not in gl(slurm, "enforce", "apply", "--backend", "slurm", "--yes", *w).stdout
    gl(slurm, "team", "release", held, "--as", VISION, *w)
    out = gl(slurm, "enforce", "apply", "--backend", "slurm", "--yes", *w).stdout
    assert f"job {held} released; ran: scontrol release {held}" in out, out
    assert fields(slurm, held)["Reason"] != "JobHeldAdmin"
    shown = gl(slurm, "team", "show", "--as", VISION, *w).stdout
    assert f"{VISION} [cli (OS user " in shown and f"release gpuledger/{held}: held -> not held" in shown, shown
