"""Table tests of gpuledger.enforce.policy: one hand-built situation per rule, rail and conflict.

Priority golden values, by hand (enforce/policy.py bands): with N = 3 ranked projects, a job of the
project ranked r gets base + (3 − r + 1) × 1000 + its position among its project's distinct
declared priorities (0 = lowest); base 1,000,000 exempt, 500,000 funded, 100,000 unfunded.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from gpuledger.enforce.model import Finding, JobFacts, JobHistory, Situation, Warning
from gpuledger.enforce.policy import decide
from gpuledger.enforce import rails

from gpuledger.config import EnforcementPolicy

NOW = datetime(2026, 11, 7, 12, 0)
CKPT = "gpuledger.io/checkpointing"
H = timedelta(hours=1)
M = timedelta(minutes=1)


def job(job_id: str, project: str = "p1", *, running: bool = True, funded: bool = False, gpus: float = 8,
        rank: int | None = None, **kw) -> JobFacts:
    ranks = {"p1": 1, "p2": 2, "p3": 3}
    kw.setdefault("gpu_model", "H100")
    kw.setdefault("start_time", NOW - 10 * H if running else None)
    kw.setdefault("unfunded_reason", None if funded else "no budget")
    kw.setdefault("observed", {"state": "RUNNING" if running else "PENDING"})  # the scheduler's live view
    return JobFacts(cluster="c", job_id=job_id, project=project, running=running, gpus=gpus, funded=funded,
                    fs_rank=rank if rank is not None else ranks.get(project), **kw)


def delivered(idle_since, stage, warned_at, delivered_at=None) -> Warning:
    """A warning that reached its owner when it was issued (applied, or an alert sent)."""
    return Warning(idle_since, stage, warned_at, delivered_at or warned_at)


def squat(job_id: str, minutes: float, severity: str, gpus: int = 8) -> Finding:
    return Finding(cluster="c", job_id=job_id, finding="squatting", severity=severity,
                   idle_since=NOW - minutes * M, idle_minutes=minutes, gpus_idle=gpus, gpus_total=gpus,
                   gpu_hours_idle=gpus * minutes / 60, idle_cost="10.00", currency="USD")


def situation(jobs, **kw) -> Situation:
    kw.setdefault("fs_projects", 3)
    kw.setdefault("data_as_of", NOW - 2 * M)
    kw.setdefault("observed_by", "slurm")
    return Situation(now=NOW, jobs=jobs, **kw)


def policy(**kw) -> EnforcementPolicy:
    return EnforcementPolicy(**kw)


def by_job(actions, kind=None):
    out: dict[str, list] = {}
    for a in actions:
        if kind is None or a.action == kind:
            out.setdefault(a.job_id, []).append(a)
    return out


def kinds(actions, job_id):
    return [a.action for a in actions if a.job_id == job_id]


# --- set priority -------------------------------------------------------------------------------------
def test_priority_bands_funded_over_unfunded_fair_share_inside_and_inference_on_top():
    jobs = [job("f1", "p1", funded=True), job("f3", "p3", funded=True), job("u1", "p1"),
            job("u2", "p2"), job("svc", "p3", kind="inference")]
    got = {a.job_id: a.priority for a in decide(situation(jobs), policy()) if a.action == "set-priority"}
    # f1: 500000 + 3×1000; f3: 500000 + 1×1000; u1: 100000 + 3000; u2: 100000 + 2000; svc: 1000000
    assert got == {"f1": 503000, "f3": 501000, "u1": 103000, "u2": 102000, "svc": 1_000_000}


def test_declared_priority_orders_only_within_its_project():
    jobs = [job("a-low", "p1", funded=True, declared_priority=10),
            job("a-high", "p1", funded=True, declared_priority=1000),
            job("b-max", "p2", funded=True, declared_priority=2_000_000_000)]
    got = {a.job_id: a.priority for a in decide(situation(jobs), policy()) if a.action == "set-priority"}
    # p1's values {10, 1000}: positions 0 and 1. b-max is the only value in p2: position 0, so
    # 502000 — still below p1's lowest job: declaring everything HIGH buys nothing across projects.
    assert got == {"a-low": 503000, "a-high": 503001, "b-max": 502000}
    assert "orders only the project's own jobs" in next(
        a.reason for a in decide(situation(jobs), policy()) if a.job_id == "a-high")


def test_priority_already_set_is_none_with_why_and_kueue_drift_is_set_again():
    jobs = [job("same", "p1", funded=True),
            job("drift", "p1", funded=True, source="kueue", observed_priority=100)]
    hist = {("c", "same"): JobHistory(applied_priority=503000), ("c", "drift"): JobHistory(applied_priority=503000)}
    actions = decide(situation(jobs, history=hist), policy())
    assert kinds(actions, "same") == ["none"]
    assert "priority 503000 already set" in by_job(actions)["same"][0].reason
    (again,) = by_job(actions)["drift"]
    assert again.action == "set-priority" and again.priority == 503000
    assert "WorkloadPriorityClass" in again.reason


def test_declared_priority_kept_from_before_gpuledger_changed_it():
    # after gpuledger patched spec.priority, the scheduler reports gpuledger's value; the declared
    # one recorded before the first change still orders the project
    jobs = [job("a", "p1", funded=True, declared_priority=503000), job("b", "p1", funded=True, declared_priority=5)]
    hist = {("c", "a"): JobHistory(applied_priority=503000, declared_priority=1)}
    got = {a.job_id: a.priority for a in decide(situation(jobs, history=hist), policy())
           if a.action in ("set-priority", "none")}
    # declared {1, 5}: a is position 0 -> 503000 (already applied: none); b position 1 -> 503001
    assert [a.action for a in decide(situation(jobs, history=hist), policy()) if a.job_id == "a"] == ["none"]
    assert got["b"] == 503001


# --- squatting: warn, then preempt ------------------------------------------------------------------
@pytest.mark.parametrize("minutes, severity", [(70, "warning"), (110, "second-warning")])
def test_squatter_is_warned_once_per_stage(minutes, severity):
    jobs = [job("sq")]
    first = decide(situation(jobs, findings=[squat("sq", minutes, severity)]), policy())
    (warn,) = by_job(first, "warn")["sq"]
    assert warn.stage == severity and warn.idle_since == NOW - minutes * M
    assert "all 8 GPU(s) idle since" in warn.reason and f"{minutes} min" in warn.reason
    earlier = {("c", "sq"): [delivered(NOW - minutes * M, severity, NOW - 5 * M)]}
    again = decide(situation(jobs, findings=[squat("sq", minutes, severity)], warnings=earlier), policy())
    assert "warn" not in kinds(again, "sq")
    assert "already warned" in by_job(again, "none")["sq"][0].reason


def test_squatter_past_last_stage_without_warning_is_warned_not_preempted():
    actions = decide(situation([job("sq")], findings=[squat("sq", 130, "preempt-eligible")]), policy())
    assert kinds(actions, "sq") == ["set-priority", "warn"]
    assert "needs a warning at least 15 min earlier" in by_job(actions, "warn")["sq"][0].reason


def test_squatter_warned_too_recently_waits():
    warned = {("c", "sq"): [delivered(NOW - 130 * M, "warning", NOW - 10 * M)]}
    actions = decide(situation([job("sq")], findings=[squat("sq", 130, "preempt-eligible")], warnings=warned),
                     policy())
    assert "preempt" not in kinds(actions, "sq")
    assert "preemption may follow from 2026-11-07 12:05Z" in by_job(actions, "none")["sq"][0].reason


def test_warning_counts_when_the_idle_stretch_outlasts_the_lookback():
    # idle for the whole 6 h lookback: idle_since is the lookback's start (it moves every cycle),
    # so the warning issued 7 h ago, when the job had been idle 60 min, still counts (24 h window)
    warned = {("c", "sq"): [delivered(NOW - 8 * H, "warning", NOW - 7 * H)]}
    capped = Finding(**{**squat("sq", 360, "preempt-eligible").__dict__, "capped": True})
    actions = decide(situation([job("sq")], findings=[capped], warnings=warned), policy())
    assert "preempt" in kinds(actions, "sq")
    # how long beyond the 6 h is not known: the reason says the floor, not "360 min" as if exact
    (pre,) = [a for a in actions if a.action == "preempt"]
    assert "all 8 GPU(s) idle for at least 360 min (48.0 idle GPU-hours" in pre.reason, pre.reason
    # never warned: the warning names the lookback's start as a floor too (06:00 = 12:00 - 6 h)
    (warn,) = [a for a in decide(situation([job("sq")], findings=[capped]), policy()) if a.action == "warn"]
    assert "idle since 2026-11-07 06:00Z or earlier (at least 360 min, 48.0 idle GPU-hours" in warn.reason
    # not capped: a stretch that began 6 h ago is a new one, the older warning does not count
    fresh = squat("sq", 360, "preempt-eligible")
    assert "preempt" not in kinds(decide(situation([job("sq")], findings=[fresh], warnings=warned), policy()), "sq")


def test_warning_of_an_earlier_idle_episode_does_not_count():
    # warned yesterday for another idle spell; this episode started 130 min ago
    warned = {("c", "sq"): [delivered(NOW - 30 * H, "warning", NOW - 29 * H)]}
    actions = decide(situation([job("sq")], findings=[squat("sq", 130, "preempt-eligible")], warnings=warned),
                     policy())
    assert kinds(actions, "sq") == ["set-priority", "warn"]


def test_squatter_warned_long_enough_before_is_preempted_stop_or_requeue():
    warned = {("c", "sq"): [delivered(NOW - 130 * M, "warning", NOW - 70 * M)],
              ("c", "ck"): [delivered(NOW - 130 * M, "warning", NOW - 70 * M)]}
    jobs = [job("sq"), job("ck", labels={"gpuledger.io/checkpointing": "true"})]
    actions = decide(situation(jobs, findings=[squat("sq", 130, "preempt-eligible"),
                                               squat("ck", 130, "preempt-eligible")], warnings=warned), policy())
    pre = {a.job_id: a for a in actions if a.action == "preempt"}
    assert pre["sq"].mode == "stop" and pre["ck"].mode == "requeue"
    assert pre["sq"].warned_at == NOW - 70 * M and pre["sq"].rule == "squatter"
    assert "idle for 130 min" in pre["sq"].reason and "warned at 2026-11-07 10:50Z" in pre["sq"].reason
    assert pre["sq"].figures["gpu_hours_idle"] == pytest.approx(8 * 130 / 60, abs=1e-3)


def test_slurm_requeue_flag_means_requeue():
    warned = {("c", "s"): [delivered(NOW - 130 * M, "warning", NOW - 70 * M)]}
    actions = decide(situation([job("s", requeue_flag=True)], findings=[squat("s", 130, "preempt-eligible")],
                               warnings=warned), policy())
    assert by_job(actions, "preempt")["s"][0].mode == "requeue"


# --- rails and conflicts ------------------------------------------------------------------------------
def test_conflict_funded_squatter_inside_min_runtime_gets_a_warning_not_a_preemption():
    warned = {("c", "fs"): [delivered(NOW - 130 * M, "warning", NOW - 70 * M)]}
    j = job("fs", funded=True, protected_until=NOW + 2 * H)
    actions = decide(situation([j], findings=[squat("fs", 130, "preempt-eligible")], warnings=warned), policy())
    assert kinds(actions, "fs") == ["set-priority", "warn"]
    assert "inside its minimum runtime until 2026-11-07 14:00Z" in by_job(actions, "warn")["fs"][0].reason


def test_exempt_inference_squatting_is_never_warned_or_preempted():
    warned = {("c", "svc"): [delivered(NOW - 300 * M, "warning", NOW - 200 * M)]}
    jobs = [job("svc", kind="inference"), job("ns", namespace="kube-system"),
            job("lab", labels={"team": "prod"})]
    findings = [squat(j, 300, "preempt-eligible") for j in ("svc", "ns", "lab")]
    actions = decide(situation(jobs, findings=findings, warnings=warned), policy(exempt_labels={"team": "prod"}))
    assert not [a for a in actions if a.action in ("warn", "preempt")]
    nones = by_job(actions, "none")
    assert "kind inference is exempt" in nones["svc"][0].reason
    assert "namespace kube-system is exempt" in nones["ns"][0].reason
    assert "label team=prod is exempt" in nones["lab"][0].reason


def test_kill_switch_plans_nothing():
    actions = decide(situation([job("a"), job("sq")], findings=[squat("sq", 130, "preempt-eligible")]),
                     policy(kill_switch=True))
    assert {a.action for a in actions} == {"none"} and {a.rule for a in actions} == {"kill-switch"}


def test_stale_data_guard_blocks_preemption_only():
    warned = {("c", "sq"): [delivered(NOW - 130 * M, "warning", NOW - 70 * M)]}
    actions = decide(situation([job("sq")], findings=[squat("sq", 130, "preempt-eligible")], warnings=warned,
                               data_as_of=NOW - 40 * M), policy())
    assert "preempt" not in kinds(actions, "sq")
    assert "the newest data is 40 min old (limit 15" in by_job(actions, "none")["sq"][0].reason


def test_caps_per_cycle_and_per_project():
    warned = {("c", f"s{i}"): [delivered(NOW - 200 * M, "warning", NOW - 100 * M)] for i in range(5)}
    jobs = [job(f"s{i}", "p1" if i < 3 else "p2") for i in range(5)]
    findings = [squat(f"s{i}", 200, "preempt-eligible") for i in range(5)]
    actions = decide(situation(jobs, findings=findings, warnings=warned),
                     policy(max_actions_per_cycle=3, max_preemptions_per_project=2))
    pre = sorted(a.job_id for a in actions if a.action == "preempt")
    # equal costs: by job id; p1 s0 s1 (then p1's cap), p2 s3 (then the cycle's cap of 3)
    assert pre == ["s0", "s1", "s3"]
    nones = by_job(actions, "none")
    assert "project p1 reached the cap of 2" in nones["s2"][0].reason
    assert "cap of 3 preemptions per cycle is reached" in nones["s4"][0].reason


# --- funded work waiting -----------------------------------------------------------------------------
def test_unfunded_burst_is_preempted_only_when_funded_work_waits_for_its_gpus():
    burst = job("burst", "p1", gpus=8)
    alone = decide(situation([burst]), policy())
    assert "preempt" not in kinds(alone, "burst")  # nobody waits: burst keeps the idle GPUs
    waiting = job("want", "p3", running=False, funded=True, gpus=8, submit_time=NOW - H)
    actions = decide(situation([burst, waiting]), policy())
    (pre,) = by_job(actions, "preempt")["burst"]
    assert pre.rule == "unfunded-burst" and pre.figures["waiting_job"] == "want"
    assert "holds 8 H100 GPU(s) that funded job want (project p3, priority 501000)" in pre.reason


def test_gpu_counts_in_reasons_read_as_people_write_them():
    # a MIG 2g.20gb slice is 2/7 of an H100: 0.285714... shows as 0.286; what float sums leave of
    # "nothing" (2/7 - (1/7 + 1/7) = 2.8e-14 here, or -0.0) shows as 0; whole counts stay whole
    assert rails.gpus(2 / 7) == "0.286" and rails.gpus(1 / 7) == "0.143"
    assert rails.gpus(2 / 7 - (1 / 7 + 1 / 7)) == "0" and rails.gpus(-0.0) == "0"
    assert rails.gpus(8) == "8" and rails.gpus(0.5) == "0.5"
    burst = job("burst", "p1", gpus=2 / 7)
    waiting = job("want", "p3", running=False, funded=True, gpus=2 / 7, submit_time=NOW - H)
    (pre,) = by_job(decide(situation([burst, waiting]), policy()), "preempt")["burst"]
    assert "holds 0.286 H100 GPU(s) that funded job want" in pre.reason and "(needs 0.286, 0 idle)" in pre.reason


def test_idle_gpus_serve_waiting_work_before_any_preemption():
    burst, waiting = job("burst", gpus=8), job("want", "p3", running=False, funded=True, gpus=8)
    actions = decide(situation([burst, waiting], free_gpus={("c", "H100"): 8}), policy())
    assert "preempt" not in kinds(actions, "burst")
    # other GPU model: does not help, does not get preempted
    other = job("b200", gpus=8, gpu_model="B200")
    actions = decide(situation([other, waiting]), policy())
    assert "preempt" not in kinds(actions, "b200")


def test_funded_inside_min_runtime_never_preempted_past_it_may_be():
    inside = job("inside", "p3", funded=True, protected_until=NOW + H)
    # resumable, started 10 h ago: just at a checkpoint (every 60 min), so nothing is lost
    past = job("past", "p3", funded=True, protected_until=NOW - H, labels={CKPT: "true"})
    waiting = job("want", "p1", running=False, funded=True, gpus=8)
    actions = decide(situation([inside, past, waiting]), policy())
    assert "preempt" not in kinds(actions, "inside")
    (pre,) = by_job(actions, "preempt")["past"]
    assert pre.rule == "past-min-runtime" and "past its minimum runtime" in pre.reason
    # ranks above the waiting job: not preempted even when unprotected
    higher = job("higher", "p1", funded=True, protected_until=NOW - H)
    low_wait = job("want", "p3", running=False, funded=True, gpus=8)
    assert "preempt" not in kinds(decide(situation([higher, low_wait]), policy()), "higher")


def test_demand_preemption_only_when_the_waiting_job_can_be_served_whole():
    small = job("small", gpus=4)
    waiting = job("want", "p3", running=False, funded=True, gpus=8)
    actions = decide(situation([small, waiting]), policy())
    assert "preempt" not in kinds(actions, "small")
    assert "would not free the 8 it needs" in by_job(actions, "none")["small"][0].reason


def test_lowest_priority_preempted_first_and_no_more_than_needed():
    jobs = [job("u1", "p1", gpus=8), job("u3", "p3", gpus=8), job("want", "p2", running=False, funded=True, gpus=8)]
    pre = [a.job_id for a in decide(situation(jobs), policy()) if a.action == "preempt"]
    assert pre == ["u3"]  # 101000 < 103000: u3 goes, u1 stays


# --- checkpoint-aware, size-fit demand preemption ---------------------------------------------------
# `want` (p1, funded, rank 1: priority 503000) waits for 8 H100; none are idle. Running, all of p3
# (funded 501000 / unfunded 101000), checkpoint every 60 min (the default):
#   ckpt  funded, resumable, started 10 h 03 min ago -> loses 603 mod 60 =  3 min × 8 GPUs =   24 GPU-min
#   mid   funded, resumable, started 10 h 30 min ago -> loses 30 min × 8                 =  240 GPU-min
#   norsm funded, no checkpoint, started 10 h ago    -> loses all 600 min × 8            = 4800 GPU-min
#   big   unfunded, 16 GPUs, no checkpoint, 10 h ago -> loses 600 × 16                   = 9600 GPU-min
# Defaults: mid and norsm lose more than max_lost_minutes (5) and wait for a checkpoint; big holds
# 16 > the 8 missing (victim_fit within-need: 8 of its GPUs would sit idle, held for its restart);
# ckpt goes. Kueue's order (victim_order priority, victim_fit any, no loss limit) takes the lowest
# priority first: big (101000 < 501000), 16 GPUs >= 8, and throws away 9600 GPU-min.
def _ckpt_jobs():
    past = {"funded": True, "protected_until": NOW - 5 * H}
    return [job("ckpt", "p3", start_time=NOW - 10 * H - 3 * M, labels={CKPT: "true"}, **past),
            job("mid", "p3", start_time=NOW - 10 * H - 30 * M, labels={CKPT: "true"}, **past),
            job("norsm", "p3", **past),
            job("big", "p3", gpus=16),
            job("want", "p1", running=False, funded=True, gpus=8, submit_time=NOW - H)]


def test_demand_preemption_takes_the_job_just_past_its_checkpoint():
    actions = decide(situation(_ckpt_jobs()), policy())
    assert [a.job_id for a in actions if a.action == "preempt"] == ["ckpt"]
    (pre,) = by_job(actions, "preempt")["ckpt"]
    assert pre.mode == "requeue" and pre.figures["lost_minutes"] == 3.0
    nones = by_job(actions, "none")
    assert "would lose 30 min of work (more than max_lost_minutes 5)" in nones["mid"][0].reason
    assert "would lose 600 min of work" in nones["norsm"][0].reason
    # Kueue's order: the lowest priority first, whatever it throws away
    old = decide(situation(_ckpt_jobs()), policy(victim_order="priority", victim_fit="any", max_lost_minutes=None))
    assert [a.job_id for a in old if a.action == "preempt"] == ["big"]
    # least work lost first, no loss limit, any size: ckpt (24 GPU-min) before mid (240)
    least = decide(situation(_ckpt_jobs()), policy(victim_fit="any", max_lost_minutes=None))
    assert [a.job_id for a in least if a.action == "preempt"] == ["ckpt"]


def test_unfunded_burst_is_not_spared_by_the_loss_limit():
    # design.md: unfunded work may be preempted. Alone below `want`, big (no checkpoint, 600 min in)
    # still goes when it fits the need: want needs 16 here.
    jobs = [job("big", "p3", gpus=16), job("want", "p1", running=False, funded=True, gpus=16)]
    assert [a.job_id for a in decide(situation(jobs), policy()) if a.action == "preempt"] == ["big"]


def test_victims_of_one_waiting_job_go_together_or_not_at_all():
    # want needs 16; two 8-GPU p3 jobs at a checkpoint would free them, but p3 may lose only one job
    # a cycle (max_preemptions_per_project 1): one alone frees 8 of 16, want still cannot start, so
    # neither goes (before, the first went and its work was lost for nothing).
    past = {"funded": True, "protected_until": NOW - H, "labels": {CKPT: "true"}}
    jobs = [job("v1", "p3", **past), job("v2", "p3", **past),
            job("want", "p1", running=False, funded=True, gpus=16)]
    actions = decide(situation(jobs), policy(max_preemptions_per_project=1))
    assert "preempt" not in {a.action for a in actions}
    assert "project p3 reached the cap of 1" in by_job(actions, "none")["v1"][0].reason
    assert [a.job_id for a in decide(situation(jobs), policy(max_preemptions_per_project=2))
            if a.action == "preempt"] == ["v1", "v2"]


def test_whole_gpu_job_counts_only_wholly_idle_gpus():
    # 8 idle H100 shares, of which 4 whole GPUs (the rest halves beside shared jobs). want needs 8
    # whole GPUs: 4 idle + 4 to free. half (0.5 of a shared GPU) frees no whole GPU; four (4 GPUs)
    # does: four goes, half stays. Without free_whole_gpus the 8 shares look like enough: nothing.
    jobs = [job("half", "p3", gpus=0.5), job("four", "p3", gpus=4),
            job("want", "p1", running=False, funded=True, gpus=8)]
    fit = decide(situation(jobs, free_gpus={("c", "H100"): 8}, free_whole_gpus={("c", "H100"): 4}), policy())
    assert [a.job_id for a in fit if a.action == "preempt"] == ["four"]
    blind = decide(situation(jobs, free_gpus={("c", "H100"): 8}), policy())
    assert "preempt" not in {a.action for a in blind}


def test_preemption_count_is_in_the_reason():
    warned = {("c", "sq"): [delivered(NOW - 130 * M, "warning", NOW - 70 * M)]}
    actions = decide(situation([job("sq")], findings=[squat("sq", 130, "preempt-eligible")], warnings=warned,
                               history={("c", "sq"): JobHistory(preemptions=2)}), policy())
    assert "(preempted 2 time(s) before)" in by_job(actions, "preempt")["sq"][0].reason


def test_every_job_gets_at_least_one_row_and_the_plan_is_deterministic():
    jobs = [job("a"), job("b", running=False), job("c", kind="inference")]
    s = situation(jobs, history={("c", j.job_id): JobHistory(applied_priority=p) for j, p in
                                 zip(jobs, (103000, 103000, 1_000_000), strict=True)})
    first, second = decide(s, policy()), decide(s, policy())
    assert [a.to_json() for a in first] == [a.to_json() for a in second]
    assert {a.job_id for a in first} == {"a", "b", "c"} and {a.action for a in first} == {"none"}
    assert all(a.dry_run for a in first)
