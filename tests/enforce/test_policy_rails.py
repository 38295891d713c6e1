"""Table tests of the rails issue 19 adds to gpuledger.enforce.policy (pure: a hand-built Situation
in, actions out): per-cluster freshness, one set of exemptions, the delivered-warning clock, the
cool-down, rolling caps across runs, the smallest-loss victim set and untyped GPU requests.

Priorities by hand (enforce/policy.py): N = 3 ranked projects; a job of the project ranked r gets
base + (3 − r + 1) × 1000; base 500,000 funded, 100,000 unfunded.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from gpuledger.enforce.model import Finding, JobFacts, JobHistory, Situation, Warning
from gpuledger.enforce.policy import decide

from gpuledger.config import EnforcementPolicy

NOW = datetime(2026, 11, 7, 12, 0)
H, M = timedelta(hours=1), timedelta(minutes=1)


def job(job_id, project="p3", *, cluster="c", running=True, funded=False, gpus=8.0, model="H100", **kw) -> JobFacts:
    kw.setdefault("start_time", NOW - 10 * H if running else None)
    kw.setdefault("observed", {"state": "RUNNING" if running else "PENDING"})
    return JobFacts(cluster=cluster, job_id=job_id, project=project, running=running, gpus=gpus, gpu_model=model,
                    funded=funded, fs_rank={"p1": 1, "p2": 2, "p3": 3}[project],
                    unfunded_reason=None if funded else "no budget", **kw)


def squat(job_id, minutes=130, cluster="c") -> Finding:
    return Finding(cluster=cluster, job_id=job_id, finding="squatting", severity="preempt-eligible",
                   idle_since=NOW - minutes * M, idle_minutes=minutes, gpus_idle=8, gpus_total=8,
                   gpu_hours_idle=8 * minutes / 60, idle_cost="10.00", currency="USD")


def delivered(job_id, cluster="c", at=NOW - 70 * M) -> dict:
    return {(cluster, job_id): [Warning(NOW - 130 * M, "warning", at, at)]}


def situation(jobs, **kw) -> Situation:
    kw.setdefault("fs_projects", 3)
    kw.setdefault("data_as_of", NOW - 2 * M)
    kw.setdefault("observed_by", "slurm")
    return Situation(now=NOW, jobs=jobs, **kw)


def preempted(actions) -> list[str]:
    return [a.job_id for a in actions if a.action == "preempt"]


def none_reason(actions, job_id) -> str:
    return " | ".join(a.reason for a in actions if a.action == "none" and a.job_id == job_id)


def test_freshness_is_per_cluster_and_per_source():
    # cluster a's samples are 3 h old, cluster b's 2 min; a fresh job record on b (or on a) lifts
    # nothing on a: a squatter on a is not preempted, the same squatter on b is
    jobs = [job("sq-a", cluster="a"), job("sq-b", cluster="b")]
    s = situation(jobs, findings=[squat("sq-a", cluster="a"), squat("sq-b", cluster="b")],
                  warnings={**delivered("sq-a", "a"), **delivered("sq-b", "b")},
                  samples_as_of={"a": NOW - 3 * H, "b": NOW - 2 * M}, jobs_as_of={"a": NOW - M, "b": NOW - M})
    actions = decide(s, EnforcementPolicy())
    assert preempted(actions) == ["sq-b"]
    assert "cluster a's newest GPU sample is 180 min old (limit 15" in none_reason(actions, "sq-a")
    # demand preemption reads job records: stale job records on a stop it, fresh samples do not help
    want = [job("burst", cluster="a"), job("want", "p1", cluster="a", running=False, funded=True)]
    stale_jobs = situation(want, samples_as_of={"a": NOW - M}, jobs_as_of={"a": NOW - 2 * H})
    actions = decide(stale_jobs, EnforcementPolicy())
    assert preempted(actions) == [] and "cluster a's newest job record is 120 min old" in none_reason(actions, "burst")
    fresh_jobs = situation(want, samples_as_of={}, jobs_as_of={"a": NOW - M})
    assert preempted(decide(fresh_jobs, EnforcementPolicy())) == ["burst"]


def test_squatting_exemptions_are_enforcement_exemptions():
    # hidden from `gpuledger report squatters` by policy.squatting.exempt_* (no alert reached the owner):
    # never warned or preempted as a squatter; the same job without the exemption is preempted
    for exempt, field in (({"namespaces": ["notebooks"]}, {"namespace": "notebooks"}),
                          ({"kinds": ["interactive"]}, {"kind": "interactive"}),
                          ({"labels": {"team": "viz"}}, {"labels": {"team": "viz"}})):
        s = situation([job("sq", **field)], findings=[squat("sq")], warnings=delivered("sq"), squatting_exempt=exempt)
        actions = decide(s, EnforcementPolicy())
        assert [a.action for a in actions if a.job_id == "sq" and a.action in ("warn", "preempt")] == [], exempt
        assert "exempt from squatting (policy.squatting.exempt_" in none_reason(actions, "sq"), exempt
        plain = situation([job("sq", **field)], findings=[squat("sq")], warnings=delivered("sq"))
        assert preempted(decide(plain, EnforcementPolicy())) == ["sq"]


def test_the_preemption_clock_starts_when_a_warning_reached_someone():
    policy = EnforcementPolicy(warn_before_preempt_minutes=15)
    planned_only = {("c", "sq"): [Warning(NOW - 130 * M, "warning", NOW - 70 * M, None)]}
    actions = decide(situation([job("sq")], findings=[squat("sq")], warnings=planned_only), policy)
    assert preempted(actions) == [] and "not reached anyone yet" in none_reason(actions, "sq")
    assert "warn" not in [a.action for a in actions if a.job_id == "sq"]  # planned once, not again
    # delivered 10 min ago (planned 70 min ago): 10 < 15, it waits until 12:05
    late = {("c", "sq"): [Warning(NOW - 130 * M, "warning", NOW - 70 * M, NOW - 10 * M)]}
    actions = decide(situation([job("sq")], findings=[squat("sq")], warnings=late), policy)
    assert preempted(actions) == [] and "preemption may follow from 2026-11-07 12:05Z" in none_reason(actions, "sq")
    # delivered 20 min ago: 20 >= 15, preempted, relying on the delivery time
    ok = {("c", "sq"): [Warning(NOW - 130 * M, "warning", NOW - 70 * M, NOW - 20 * M)]}
    (pre,) = [a for a in decide(situation([job("sq")], findings=[squat("sq")], warnings=ok), policy)
              if a.action == "preempt"]
    assert pre.warned_at == NOW - 20 * M


def test_cool_down_after_a_preemption():
    # preempted 30 min ago (default cool-down 60 min): the job (requeued, running again) is left alone
    want = [job("burst"), job("want", "p1", running=False, funded=True)]
    recent = {("c", "burst"): JobHistory(preemptions=1, last_preempted_at=NOW - 30 * M)}
    actions = decide(situation(want, history=recent), EnforcementPolicy())
    assert preempted(actions) == []
    assert "the cool-down (preemption_cooldown_minutes 60) lasts until 2026-11-07 12:30Z" in none_reason(actions, "burst")
    old = {("c", "burst"): JobHistory(preemptions=1, last_preempted_at=NOW - 61 * M)}
    assert preempted(decide(situation(want, history=old), EnforcementPolicy())) == ["burst"]


def test_rolling_caps_count_what_earlier_runs_performed():
    # 3 squatters of p3, all eligible; per-cycle caps leave room (10 / 3 per project)
    jobs = [job(f"s{i}") for i in range(3)]
    warned = {k: v for i in range(3) for k, v in delivered(f"s{i}").items()}
    findings = [squat(f"s{i}") for i in range(3)]
    base = dict(findings=findings, warnings=warned)
    assert len(preempted(decide(situation(jobs, **base), EnforcementPolicy()))) == 3
    # an earlier apply run preempted 19 jobs in the last hour: the hourly cap of 20 leaves one
    earlier = [("c", f"old{i}", "p2", NOW - 30 * M) for i in range(19)]
    actions = decide(situation(jobs, recent_preemptions=earlier, **base), EnforcementPolicy())
    assert len(preempted(actions)) == 1
    assert "the cap of 20 preemptions per rolling hour is reached (19 performed since 2026-11-07 11:00Z)" in \
        " ".join(a.reason for a in actions if a.action == "none")
    # per project per hour: 5 of p3 performed before, cap 6 -> one more
    of_p3 = [("c", f"old{i}", "p3", NOW - 10 * M) for i in range(5)]
    actions = decide(situation(jobs, recent_preemptions=of_p3, **base), EnforcementPolicy())
    assert len(preempted(actions)) == 1
    assert "project p3 reached the cap of 6 preemptions per rolling hour" in \
        " ".join(a.reason for a in actions if a.action == "none")
    # preemptions older than an hour do not count
    stale = [("c", f"old{i}", "p3", NOW - 61 * M) for i in range(30)]
    assert len(preempted(decide(situation(jobs, recent_preemptions=stale, **base), EnforcementPolicy()))) == 3


def test_the_four_gpu_waiter_gets_the_one_four_gpu_victim():
    # funded `want` needs 4 H100; none idle. Unfunded running: two2 (2 GPUs, started 1 h ago: loses
    # 60 min × 2 = 120 GPU-min) and four (4 GPUs, started 2 h ago: 120 × 4 = 480 GPU-min).
    # Greedy took two2 first, then skipped four (4 > the 2 still missing): nothing. The smallest-loss
    # set that frees 4 is {four} (two2 alone frees too little; {two2, four} is not minimal).
    jobs = [job("two2", gpus=2, start_time=NOW - H), job("four", gpus=4, start_time=NOW - 2 * H),
            job("want", "p1", running=False, funded=True, gpus=4)]
    actions = decide(situation(jobs, free_gpus={("c", "H100"): 0.0}), EnforcementPolicy())
    assert preempted(actions) == ["four"]
    # two 2-GPU jobs losing less (2 × 30 min × 2 = 120 GPU-min) beat the 4-GPU one (480)
    cheaper = [job("a2", gpus=2, start_time=NOW - 30 * M), job("b2", gpus=2, start_time=NOW - 30 * M), *jobs[1:]]
    assert sorted(preempted(decide(situation(cheaper), EnforcementPolicy()))) == ["a2", "b2"]


def test_untyped_request_is_served_by_any_model_of_its_cluster_or_says_why():
    # `want` asks for 8 GPUs with no model (Slurm --gres=gpu:8): the unfunded 8-GPU A100 job on its
    # cluster serves it; one on another cluster does not
    jobs = [job("burst", model="A100"), job("far", cluster="other", model="A100"),
            job("want", "p1", running=False, funded=True, model=None)]
    actions = decide(situation(jobs), EnforcementPolicy())
    assert preempted(actions) == ["burst"]
    # idle GPUs of any model count first: 8 idle H100 serve it, nothing is preempted
    assert preempted(decide(situation(jobs, free_gpus={("c", "H100"): 8.0}), EnforcementPolicy())) == []
    # in another partition nothing can go: the waiting job gets a none row with why
    parted = [job("burst", model="A100", partition="cpu-gpu"), job("want", "p1", running=False, funded=True,
                                                                   model=None, partition="gpu")]
    actions = decide(situation(parted), EnforcementPolicy())
    assert preempted(actions) == []
    assert ("waits for 8 GPU(s) of any model (8 not idle); nothing is preempted for it: no running job below it "
            "may be preempted for it") in none_reason(actions, "want")


def test_no_live_view_no_preemption_and_the_plan_says_so():
    jobs = [job("burst", observed=None), job("want", "p1", running=False, funded=True, observed=None)]
    actions = decide(situation(jobs, observed_by=None), EnforcementPolicy())
    assert preempted(actions) == []
    assert "without the scheduler's live view" in none_reason(actions, "burst")
    # a backend that observed but lists neither: the waiting job is served by nothing (it may have
    # started or gone since its record), so the running one is never even a candidate
    actions = decide(situation(jobs, observed_by="slurm"), EnforcementPolicy())
    assert preempted(actions) == []
    assert "slurm does not list it now, so nothing is preempted for it" in none_reason(actions, "want")
    # the waiting job listed, waiting; the running one not listed: it ended or is gone
    seen = [job("burst", observed=None), job("want", "p1", running=False, funded=True,
                                             observed={"state": "PENDING", "phase": "waiting"})]
    actions = decide(situation(seen, observed_by="slurm"), EnforcementPolicy())
    assert preempted(actions) == []
    assert "slurm does not list this job now (ended or gone)" in none_reason(actions, "burst")
