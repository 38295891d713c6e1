"""`enforce replay` decides each cycle as if the earlier plans had been carried out
(enforce/replay.ReplayMemory): a job the plan preempted leaves the replay's situation, though the
recorded data shows it running on, and its preemption counts against the caps as a performed one.

Five squatters of one project, 8 GPUs each, idle since 10:00; the recorded history shows all five
running at every cycle. Caps: 3 preemptions per project a cycle (the default), and in the second
test 4 per project per rolling hour."""

from __future__ import annotations

from datetime import datetime, timedelta

from gpuledger.enforce.model import Finding, JobFacts, Situation
from gpuledger.enforce.policy import decide
from gpuledger.enforce.replay import ReplayMemory

from gpuledger.config import EnforcementPolicy

IDLE_SINCE = datetime(2026, 11, 7, 10, 0)
M = timedelta(minutes=1)
JOBS = ["a", "b", "c", "d", "e"]


def recorded(at: datetime) -> Situation:
    """What the warehouse shows at ``at``: all five running and idle since 10:00 (the same idle
    cost each, so the caps take them in job-id order)."""
    minutes = (at - IDLE_SINCE) / M
    severity = "preempt-eligible" if minutes >= 120 else "warning"
    jobs = [JobFacts(cluster="c", job_id=j, project="p1", running=True, gpus=8, gpu_model="H100", funded=False,
                     fs_rank=1, unfunded_reason="no budget", start_time=IDLE_SINCE - 30 * M) for j in JOBS]
    findings = [Finding(cluster="c", job_id=j, finding="squatting", severity=severity, idle_since=IDLE_SINCE,
                        idle_minutes=minutes, gpus_idle=8, gpus_total=8, gpu_hours_idle=8 * minutes / 60,
                        idle_cost="10.00", currency="USD") for j in JOBS]
    return Situation(now=at, jobs=jobs, findings=findings, fs_projects=1, data_as_of=at - 2 * M)


def cycle(memory: ReplayMemory, at: datetime, policy: EnforcementPolicy) -> dict[str, list[str]]:
    actions = decide(memory.situation(recorded(at), observed_by="the warehouse (replay)"), policy)
    memory.carried_out(actions, at)
    out: dict[str, list[str]] = {}
    for a in actions:
        out.setdefault(a.action, []).append(a.job_id)
    return out | {"notes": [a.reason for a in actions if a.action == "none"]}


def test_a_stopped_job_does_not_take_the_cap_from_the_squatters_still_running():
    memory, policy = ReplayMemory(), EnforcementPolicy()
    # 11:10 (70 min idle): all five warned
    assert sorted(cycle(memory, datetime(2026, 11, 7, 11, 10), policy)["warn"]) == JOBS
    # 12:10 (130 min, warned an hour ago): three preempted, the cap of 3 per project per cycle holds d, e
    first = cycle(memory, datetime(2026, 11, 7, 12, 10), policy)
    assert first["preempt"] == ["a", "b", "c"]
    assert sum("reached the cap of 3 preemptions per cycle" in n for n in first["notes"]) == 2
    # 13:10: the history still shows a, b, c running; the plan had stopped them, so d and e go now
    # (re-planned, a, b, c would have taken the cap again and held d and e cycle after cycle)
    second = cycle(memory, datetime(2026, 11, 7, 13, 10), policy)
    assert second["preempt"] == ["d", "e"]
    assert {j for kind, jobs in second.items() if kind != "notes" for j in jobs} == {"d", "e"}  # a-c gone
    assert set(memory.stopped) == {("c", j) for j in JOBS}


def test_the_replays_own_preemptions_count_against_the_rolling_hour():
    # 4 per project per rolling hour: three at 12:10, so at 12:40 one more (d), and e at 13:20 once
    # the 12:10 ones are an hour old (the cycle at 13:10 still counts them: 12:10 >= 12:10)
    memory = ReplayMemory()
    policy = EnforcementPolicy(max_preemptions_per_project_per_hour=4)
    cycle(memory, datetime(2026, 11, 7, 11, 10), policy)
    assert cycle(memory, datetime(2026, 11, 7, 12, 10), policy)["preempt"] == ["a", "b", "c"]
    half = cycle(memory, datetime(2026, 11, 7, 12, 40), policy)
    assert half["preempt"] == ["d"]
    # e: a, b, c performed (by the replay) in the hour since 11:40, d passed this cycle: 3 + 1 + 1 > 4
    assert any("reached the cap of 4 preemptions per rolling hour (3 performed since 2026-11-07 11:40Z)" in n
               for n in half["notes"])
    assert "preempt" not in cycle(memory, datetime(2026, 11, 7, 13, 10), policy)
    assert cycle(memory, datetime(2026, 11, 7, 13, 20), policy)["preempt"] == ["e"]
