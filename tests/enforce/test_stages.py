"""Each named stage of enforce.policy.decide on its own (enforce/squatters.py, demand.py, caps.py,
policy.py's priority and explanation stages): small hand-built inputs, expectations derived by hand
in the comments. decide's end-to-end rules stay in test_policy.py / test_policy_rails.py."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from decimal import Decimal

from gpuledger.enforce import caps, demand, inputs, rails, squatters
from gpuledger.enforce.candidates import Preemptible, preemptible_by_cluster
from gpuledger.enforce.model import JobHistory, Warning
from gpuledger.enforce.policy import explanations, priority_actions, target_priorities

from gpuledger.config import Policy
from tests.enforce.test_policy import CKPT, NOW, H, M, delivered, job, policy, situation, squat


def policy_config():
    return Policy()  # the whole policy (gather reads its squatting and enforcement parts)


def notes():
    return defaultdict(list)


# --- priorities ------------------------------------------------------------------------------------
def test_priority_actions_set_what_differs_and_note_what_is_set():
    # f1 funded in p1 (rank 1 of 3): 500000 + 3×1000 = 503000, already applied -> a note only;
    # u2 unfunded in p2 (rank 2): 100000 + 2×1000 = 102000, never set -> set-priority
    jobs = [job("f1", "p1", funded=True), job("u2", "p2")]
    s = situation(jobs, history={("c", "f1"): JobHistory(applied_priority=503000)})
    n = notes()
    got = priority_actions(jobs, s, target_priorities(s, policy()), policy(), n)
    assert [(a.job_id, a.priority) for a in got] == [("u2", 102000)]
    assert n[("c", "f1")] == [("priority 503000 already set (funded: above unfunded work; project p1 ranks 1 of 3 "
                              "by fair share)")]


def test_priority_actions_set_a_drifted_kueue_priority_again():
    # gpuledger set 503000, Kueue now reports 7 (a WorkloadPriorityClass rewrote it): set again
    jobs = [job("w", "p1", funded=True, source="kueue", observed_priority=7)]
    s = situation(jobs, history={("c", "w"): JobHistory(applied_priority=503000)})
    [a] = priority_actions(jobs, s, target_priorities(s, policy()), policy(), notes())
    assert a.priority == 503000 and "Kueue reports 7" in a.reason


def test_explanations_cover_jobs_without_action_and_disruption_notes():
    # a: acted on and only a priority note -> no none row; b: no action -> none with its note;
    # c: acted on but with a disruption note -> none with that note alone; d: nothing noted -> "nothing to do"
    jobs = [job(x) for x in "abcd"]
    s = situation(jobs)
    targets = target_priorities(s, policy())
    acted = priority_actions([jobs[0], jobs[2]], s, targets, policy(), notes())
    n = notes()
    n[("c", "a")] = ["priority 1 already set (x)"]
    n[("c", "b")] = ["priority 2 already set (y)"]
    n[("c", "c")] = ["priority 3 already set (z)", "idle 5 min, below the first warning stage"]
    got = {a.job_id: a.reason for a in explanations(jobs, acted, n, targets, policy())}
    assert got == {"b": "priority 2 already set (y)", "c": "idle 5 min, below the first warning stage",
                   "d": "nothing to do"}


# --- squatting: warnings due, squatter preemptions -------------------------------------------------------
def test_warnings_this_episode_start_at_idle_since_or_the_capped_window():
    f = squat("j", 90, "warning")  # idle since NOW − 90 min
    old, inside = Warning(NOW - 2 * H, "warning", NOW - 2 * H), Warning(NOW - 80 * M, "warning", NOW - 80 * M)
    assert squatters.warnings_this_episode([old, inside], f, NOW) == [inside]
    # capped (idle the whole lookback): warnings of the last 24 h count, so the one 2 h ago too
    capped = squatters.Finding(**{**f.__dict__, "capped": True})
    assert squatters.warnings_this_episode([old, inside], capped, NOW) == [old, inside]


def test_warning_due_once_per_stage():
    j, f = job("j"), squat("j", 70, "warning")
    action, note = squatters.warning_due(j, f, [], policy())
    assert (action.action, action.rule, note) == ("warn", "squatting-warning", None)
    again = squatters.warning_due(j, f, [Warning(f.idle_since, "warning", NOW - 5 * M)], policy())
    assert again == (None, "already warned (warning) at 2026-11-07 11:55Z")


def test_protected_squatter_gets_a_warning_instead_once():
    j = job("j", funded=True, protected_until=NOW + H)
    f = squat("j", 130, "preempt-eligible")
    action, note = squatters.protected_warning(j, f, [], policy())
    assert action.rule == "squatting-protected" and "until 2026-11-07 13:00Z" in action.reason and note is None
    action, note = squatters.protected_warning(j, f, [Warning(f.idle_since, "preempt-eligible", NOW - M)], policy())
    assert action is None and note.endswith("(warned at 2026-11-07 11:59Z)")


def test_squatter_preemption_needs_a_delivered_warning_long_enough_before():
    j, f = job("j"), squat("j", 130, "preempt-eligible")
    s = situation([j])
    # no warning at all: a first warning now
    action, _ = squatters.squatter_preemption(j, f, [], s, policy())
    assert action.rule == "squatting-warn-first"
    # planned but never delivered: no preemption, a note
    action, note = squatters.squatter_preemption(j, f, [Warning(f.idle_since, "warning", NOW - H)], s, policy())
    assert action is None and "not reached anyone yet" in note
    # delivered 10 min ago, 15 needed: from 12:05
    action, note = squatters.squatter_preemption(j, f, [delivered(f.idle_since, "warning", NOW - 10 * M)], s, policy())
    assert action is None and note == ("warned at 2026-11-07 11:50Z; preemption may follow from 2026-11-07 12:05Z "
                                       "(warn_before_preempt_minutes)")
    # delivered 20 min ago: preempt (stopped, no checkpointing declared)
    action, note = squatters.squatter_preemption(j, f, [delivered(f.idle_since, "warning", NOW - 20 * M)], s, policy())
    assert (action.action, action.rule, action.mode, note) == ("preempt", "squatter", "stop", None)
    assert action.reason.startswith("squatting: all 8 GPU(s) idle for 130 min (17.3 idle GPU-hours, 10.00 USD)")


def test_squatter_preemption_is_held_on_stale_samples():
    j, f = job("j"), squat("j", 130, "preempt-eligible")
    s = situation([j], data_as_of=NOW - H)  # 60 min old, limit 15
    action, note = squatters.squatter_preemption(j, f, [delivered(f.idle_since, "warning", NOW - H)], s, policy())
    assert action is None and note.startswith("would be preempted as a squatter, but the newest data is 60 min old")


def test_squatter_stage_routes_warnings_proposals_and_notes():
    # a: warning due; b: preempt-eligible, warned 30 min ago -> proposal; c: exempt namespace -> note;
    # d: idle 20 min, info -> "below the first warning stage"; e: waiting -> skipped
    jobs = [job("a"), job("b"), job("c", namespace="kube-system"), job("d"), job("e", running=False)]
    findings = [squat("a", 70, "warning"), squat("b", 130, "preempt-eligible"), squat("c", 130, "preempt-eligible"),
                squat("d", 20, "info"), squat("e", 130, "preempt-eligible")]
    b = findings[1]
    s = situation(jobs, findings=findings, warnings={("c", "b"): [delivered(b.idle_since, "warning", NOW - 30 * M)]})
    n = notes()
    warns, proposals = squatters.squatter_stage(jobs, s, policy(exempt_namespaces=["kube-system"]), n)
    assert [w.job_id for w in warns] == ["a"] and [(a.job_id, j.job_id) for a, j in proposals] == [("b", "b")]
    assert n[("c", "c")] == ["idle 130 min on 8 GPU(s) but namespace kube-system is exempt"]
    assert n[("c", "d")] == ["idle 20 min, below the first warning stage"] and ("c", "e") not in n


# --- demand ------------------------------------------------------------------------------------------------
def test_capacity_counts_the_chosen_squatters_as_freed():
    # squatter s (8 GPUs) was proposed: its 8 GPUs are freed and it is taken; whole-GPU counts known
    s = situation([job("s"), job("r")], free_gpus={("c", "H100"): 2.0}, free_whole_gpus={("c", "H100"): 1.0})
    cap = demand.capacity(s, {("c", "s")})
    assert (cap.free, cap.whole, dict(cap.freed), cap.taken) == (
        {("c", "H100"): 2.0}, {("c", "H100"): 1.0}, {("c", "H100"): 8.0}, {("c", "s")})


def test_waiting_for_gpus_funded_or_exempt_by_priority_then_submit_time():
    # u unfunded: not served by demand; f1/f2 funded in p1 (503000): f2 submitted first goes first;
    # g funded in p3 (501000) after them; x exempt kind on top
    jobs = [job("u", running=False), job("f1", running=False, funded=True, submit_time=NOW - M),
            job("f2", running=False, funded=True, submit_time=NOW - H),
            job("g", "p3", running=False, funded=True), job("x", "p3", running=False, kind="inference")]
    s = situation(jobs)
    got = demand.waiting_for_gpus(s, policy(), target_priorities(s, policy()))
    assert [j.job_id for j in got] == ["x", "f2", "f1", "g"]


def test_take_idle_uses_idle_then_freed_gpus():
    # w needs 8: 3 idle, then 4 of the 4 freed -> misses 1; the pools are taken down accordingly
    w = job("w", running=False, funded=True, gpus=8)
    cap = demand.Capacity(free={("c", "H100"): 3.0}, whole=None)
    cap.freed[("c", "H100")] = 4.0
    assert demand.take_idle(w, [("c", "H100")], cap) == 1.0
    assert (cap.free[("c", "H100")], cap.freed[("c", "H100")]) == (0.0, 0.0)


def test_take_idle_for_whole_gpus_counts_only_wholly_idle_ones():
    # 3.5 idle shares but only 2 whole idle GPUs: a 4-GPU job takes 2, misses 2; whole left 0, free 1.5
    w = job("w", running=False, funded=True, gpus=4)
    cap = demand.Capacity(free={("c", "H100"): 3.5}, whole={("c", "H100"): 2.0})
    assert demand.take_idle(w, [("c", "H100")], cap) == 2.0
    assert (cap.free[("c", "H100")], cap.whole[("c", "H100")]) == (1.5, 0.0)


def test_candidates_below_the_waiting_job_and_preemptible():
    # w funded p1 waits (503000). lo unfunded p3 (101000): candidate; f funded p2 protected: no;
    # svc exempt kind: no; other model: no; taken already: no
    w = job("w", running=False, funded=True)
    jobs = [w, job("lo", "p3"), job("f", "p2", funded=True, protected_until=NOW + H), job("svc", "p3", kind="inference"),
            job("a100", "p3", gpu_model="A100"), job("gone", "p3")]
    s = situation(jobs)
    targets = target_priorities(s, policy())
    index = Preemptible(s, policy(), targets, {("c", "gone")})
    c, at = index.below(w, targets[w.key][0], whole_gpus=False)
    assert [j.job_id for j in index.jobs(c, at)] == ["lo"]
    # once taken (chosen for an earlier waiting job), lo is no candidate either
    index.take([jobs[1]])
    assert index.jobs(*index.below(w, targets[w.key][0], whole_gpus=False)) == []


def test_candidates_of_a_model_less_request_and_a_partition():
    # w asks 1 GPU of any model in partition gpu: lo (H100, gpu) and a100 (A100, no partition known)
    # serve it, other (H100, partition debug) does not; far is on cluster d
    w = dataclasses.replace(job("w", running=False, funded=True, gpus=1), gpu_model=None, partition="gpu")
    far = dataclasses.replace(job("far", "p3"), cluster="d")
    jobs = [w, dataclasses.replace(job("lo", "p3"), partition="gpu"), job("a100", "p3", gpu_model="A100"),
            dataclasses.replace(job("other", "p3"), partition="debug"), far]
    s = situation(jobs)
    targets = target_priorities(s, policy())
    index = Preemptible(s, policy(), targets, set())
    assert [j.job_id for j in index.jobs(*index.below(w, targets[w.key][0], whole_gpus=False))] == ["lo", "a100"]


def test_preemptible_index_keeps_only_jobs_that_may_ever_go_in_order():
    # of the running jobs, the exempt one (kind inference) and the protected one never go; the
    # waiting one is not running; per cluster, in the situation's order (c: lo, a100; d: far)
    w = job("w", running=False, funded=True)
    far = dataclasses.replace(job("far", "p3"), cluster="d")
    jobs = [w, job("lo", "p3"), job("f", "p2", funded=True, protected_until=NOW + H), job("svc", "p3", kind="inference"),
            far, job("a100", "p3", gpu_model="A100")]
    s = situation(jobs)
    index = preemptible_by_cluster(s, policy())
    assert {c: [j.job_id for j in js] for c, js in index.items()} == {"c": ["lo", "a100"], "d": ["far"]}


def test_held_back_costly_and_blocked_each_noted_once():
    # funded f ran 10 h 3 min, not resumable: losing 603 min > max_lost_minutes 5 -> costly;
    # nolive has no live view -> blocked; ok goes. A second pass notes nothing new.
    w = job("w", running=False, funded=True)
    f = job("f", "p2", funded=True, start_time=NOW - 603 * M)
    jobs = [w, f, job("nolive", "p3", observed=None), job("ok", "p3")]
    s, n = situation(jobs), notes()
    targets = target_priorities(s, policy())
    index = Preemptible(s, policy(), targets, set())
    c, at = index.below(w, targets[w.key][0], whole_gpus=False)
    left, held, first = index.hold_back(c, at, "funded job w", policy(), n)
    assert [j.job_id for j in index.jobs(c, left)] == ["ok"] and held == 1
    assert first.startswith("slurm does not list this job now")
    assert n[("c", "f")] == [("ranks below waiting funded job w, but a preemption now would lose 603 min of work "
                             "(more than max_lost_minutes 5)")]
    assert n[("c", "nolive")][0].startswith("ranks below waiting funded job w, but slurm does not list this job now")
    index.hold_back(c, at, "funded job w", policy(), n)
    assert len(n[("c", "f")]) == len(n[("c", "nolive")]) == 1


def test_cheapest_by_lost_work_per_gpu_then_larger():
    # a: 8 GPUs, 600 min -> 600/GPU-min per GPU; b: 1 GPU ran 60 min -> 60; c: 2 GPUs ran 60 min -> 60
    # (ties on rate: the larger first); so c, b, a; cut at 2 -> c, b
    w = job("w", running=False, funded=True)
    jobs = [w, job("a", "p3"), job("b", "p3", gpus=1, start_time=NOW - 60 * M), job("c", "p3", gpus=2, start_time=NOW - 60 * M)]
    s = situation(jobs)
    targets = target_priorities(s, policy())
    index = Preemptible(s, policy(), targets, set())
    c, at = index.below(w, targets[w.key][0], whole_gpus=False)
    assert [j.job_id for j in index.cheapest(c, at, 2)] == ["c", "b"]
    # 8 + 1 + 2 GPUs could go; within a need of 2: b and c, in the situation's order
    assert index.gpus(c, at) == 11.0
    assert [j.job_id for j in index.jobs(c, index.within(c, at, 2.0))] == ["b", "c"]


def test_take_freed_gives_the_waiting_job_what_it_needs():
    # victims of 8 and 4 free 12; w still needs 10 -> 2 stay freed for the next waiting job
    cap = demand.Capacity(free={}, whole=None)
    demand.take_freed([job("v1"), job("v2", gpus=4)], [("c", "H100")], 10.0, cap)
    assert cap.freed[("c", "H100")] == 2.0 and cap.taken == {("c", "v1"), ("c", "v2")}


def test_demand_actions_name_the_waiting_job_and_the_lost_work():
    # w (p1, funded, 503000) needs 8, none idle; victim v unfunded p3 (101000), ran 10 h, not
    # resumable: loses 600 min; 600 × 8 GPUs = 4800 lost GPU-minutes
    w, v = job("w", running=False, funded=True), job("v", "p3")
    s = situation([w, v])
    [(a, victim)] = demand.demand_actions(w, [v], 8.0, "funded job w", NOW, policy(), target_priorities(s, policy()))
    assert victim is v and (a.rule, a.mode) == ("unfunded-burst", "stop")
    assert a.figures == {"priority": 101000, "waiting_job": "w", "waiting_priority": 503000, "waiting_gpus": 8,
                         "gpus": 8, "lost_minutes": 600.0, "victims_lost_gpu_minutes": 4800.0}
    assert "(needs 8, 0 idle)" in a.reason


def test_unserved_explains_on_the_waiting_job_and_its_candidates():
    # 4 GPUs could go, 8 needed: nothing is preempted; one other job held back
    w, c = job("w", running=False, funded=True), job("c4", "p3", gpus=4)
    n = notes()
    demand.unserved(w, 8.0, 4.0, (1, "its data is stale"), [c], "funded job w", n)
    assert n[("c", "w")] == [("waits for 8 H100 (8 not idle); nothing is preempted for it: the 4 GPU(s) that could "
                             "go would not free the 8 it needs (1 other job(s) held back: its data is stale)")]
    assert n[("c", "c4")] == [("ranks below waiting funded job w, but preempting all 4 GPU(s) that could go would "
                              "not free the 8 it needs")]
    demand.unserved(w, 8.0, None, (0, None), [], "funded job w", n)
    assert n[("c", "w")][1].endswith("nothing is preempted for it: no running job below it may be preempted for it")


def test_demand_preemptions_serve_the_first_waiting_job_from_the_cheapest_victim():
    # w needs 8, 0 idle; candidates lo (resumable, checkpoints hourly: ran 10 h -> loses 0 min) and
    # hi (not resumable: loses 600 min): lo goes alone (8 GPUs cover the need)
    w = job("w", running=False, funded=True)
    jobs = [w, job("lo", "p3", labels={CKPT: "true"}), job("hi", "p3")]
    s = situation(jobs)
    got = demand.demand_preemptions(s, policy(), target_priorities(s, policy()), set(), notes())
    assert [(a.job_id, a.mode) for a, _ in got] == [("lo", "requeue")]


# --- the budget of preemptions ---------------------------------------------------------------------------
def _proposal(job_id, project="p3", rule="squatter", cost="1.00", waiting=None):
    j = job(job_id, project)
    figures = {"idle_cost": cost} if rule == "squatter" else {"waiting_job": waiting}
    return rails.act("preempt", j, "why", rule, policy(), figures=figures), j


def test_preemption_groups_squatters_costliest_first_then_victims_per_waiting_job():
    props = [_proposal("s1", cost="1.00"), _proposal("d1", rule="unfunded-burst", waiting="w1"),
             _proposal("s2", cost="9.00"), _proposal("d2", rule="unfunded-burst", waiting="w1"),
             _proposal("d3", rule="unfunded-burst", waiting="w2")]
    got = [[a.job_id for a, _ in g] for g in caps.preemption_groups(props)]
    assert got == [["s2"], ["s1"], ["d1", "d2"], ["d3"]]


def test_cap_reached_per_cycle_per_hour_and_per_project():
    group = [_proposal("x", "p1")]
    hour_ago = NOW - H
    # per cycle: 10 passed + 1 > 10
    assert "10 preemptions per cycle" in caps.cap_reached(group, passed=10, per_project={}, recent=[],
                                                          hour_ago=hour_ago, policy=policy())
    # rolling hour: 20 performed + 0 + 1 > 20
    recent = [("c", f"r{i}", "p9", NOW - M) for i in range(20)]
    assert "20 preemptions per rolling hour" in caps.cap_reached(group, passed=0, per_project={}, recent=recent,
                                                                 hour_ago=hour_ago, policy=policy())
    # project per hour: 6 of p1 performed + 1 > 6
    recent = [("c", f"r{i}", "p1", NOW - M) for i in range(6)]
    assert caps.cap_reached(group, passed=0, per_project={}, recent=recent, hour_ago=hour_ago,
                            policy=policy()).startswith("project p1 reached the cap of 6 preemptions per rolling hour")
    # project per cycle: 3 of p1 passed + 1 > 3
    assert caps.cap_reached(group, passed=3, per_project={"p1": 3}, recent=[], hour_ago=hour_ago,
                            policy=policy()) == "project p1 reached the cap of 3 preemptions per cycle"
    assert caps.cap_reached(group, passed=2, per_project={"p1": 2}, recent=[], hour_ago=hour_ago,
                            policy=policy()) is None


def test_capped_lets_groups_through_whole_or_not_at_all():
    # max 2 per cycle: squatter s passes (1); the pair d1+d2 for w1 would make 3 > 2: both held
    props = [_proposal("s"), _proposal("d1", rule="unfunded-burst", waiting="w1"),
             _proposal("d2", rule="unfunded-burst", waiting="w1")]
    n = notes()
    s = situation([j for _, j in props], history={("c", "s"): JobHistory(preemptions=2)})
    got = caps.capped(props, s, policy(max_actions_per_cycle=2), n)
    assert [a.job_id for a in got] == ["s"] and got[0].figures["preemptions_before"] == 2
    assert n[("c", "d1")] == [("would be preempted (why; it declares no checkpointing, so it is stopped), but the cap "
                               "of 2 preemptions per cycle is reached (with the 1 other job(s) that w1 needs freed; "
                               "a part would not let it start); next cycle")]


# --- gather's pure stages (enforce/inputs.py) ----------------------------------------------------------------
def test_fairshare_ranks_leave_unranked_nodes_out():
    rows = [{"node": "root", "fs_rank": None}, {"node": "p1", "fs_rank": 2}, {"node": "p2", "fs_rank": 1}]
    assert inputs.fairshare_ranks(rows) == {"p1": 2, "p2": 1}


def test_finding_from_row_capped_at_the_lookback_to_the_minute():
    # the evidence lookback is 6 h = 360 min: idle 359 min counts as capped (within a minute), 358 not
    row = {"cluster": "c", "job_id": "j", "finding": "squatting", "severity": "preempt-eligible",
           "idle_since": NOW - 359 * M, "idle_minutes": 359.0, "gpus_idle": 8, "gpus_total": 8,
           "gpu_hours_idle": None, "idle_cost": Decimal("12.50"), "currency": "USD"}
    f = inputs.finding_from_row(row)
    assert (f.capped, f.gpu_hours_idle, f.idle_cost) == (True, 0.0, "12.50")
    assert not inputs.finding_from_row({**row, "idle_minutes": 358.0}).capped


def test_job_facts_running_funded_observed_and_a_workloads_protection():
    row = {"cluster": "c", "job_id": "j", "project": "p1", "name": "n", "namespace": "ns", "kind": "training",
           "source": "kueue", "user_name": "u", "gpus": 8, "gpu_model": "H100", "start_time": NOW - H,
           "submit_time": NOW - 2 * H, "priority": 5, "scheduler_job": "ns/workload/n", "state": "ADMITTED",
           "partition": None, "_derived_start": True}
    fund = {"funded": True, "protected_until": NOW - 30 * M, "min_runtime_s_effective": 7200}
    seen = {"ns/workload/n": {"uid": "u1", "priority": 7, "labels": {"a": "b"}}}
    j = inputs.job_facts(row, fund, seen, policy_config(), {"p1": 3}, NOW)
    # a workload's protection is its pods' start + its minimum runtime: 11:00 + 2 h = 13:00
    assert (j.running, j.funded, j.protected_until, j.fs_rank) == (True, True, NOW + H, 3)
    assert (j.observed_priority, j.declared_priority, j.labels) == (7, 5, {"a": "b"})
    assert j.observed["uid"] == "u1"
    # not observed (no backend asked): the declared priority, no live view; not started by NOW: waiting
    later = inputs.job_facts({**row, "start_time": NOW + H}, {}, None, policy_config(), {}, NOW)
    assert (later.running, later.start_time, later.protected_until, later.observed, later.observed_priority) == (
        False, None, None, None, 5)
