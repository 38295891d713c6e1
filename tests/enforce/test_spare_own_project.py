"""policy.enforcement.spare_own_project (issue 34): demand preemption never takes a running job of the
waiting job's own project — the project's allocation is the same either way, the preemption would
only throw the running job's work away and queue its demand again. Pure: a hand-built Situation in,
actions out.

The scene, by hand: cluster c has no idle GPU; a funded job of p1 (rank 1) waits for 8 H100s.
Running sessions on 8 H100s each declare no minimum runtime, so they are unfunded ("no minimum
runtime declared") and max_lost_minutes does not keep them. Priorities (enforce/policy.py, N = 3):
the waiting job 500,000 + 3,000; an unfunded session of p1 100,000 + 3,000, of p3 100,000 + 1,000 —
both below it, so without the rule either is a victim that frees the 8.
"""

from __future__ import annotations

from gpuledger.enforce.model import Finding, JobFacts, Situation, Warning
from gpuledger.enforce.policy import decide
from gpuledger.enforce.rails import own_project_spared

from gpuledger.config import EnforcementPolicy
from tests.helpers.enforce_scene import NOW, H, M, waiting_funded_p1
from tests.helpers.enforce_scene import job as scene_job

ON, OFF = EnforcementPolicy(spare_own_project=True), EnforcementPolicy()


def job(job_id, project="p3", **kw) -> JobFacts:
    return scene_job(job_id, project, **{"unfunded_reason": "no minimum runtime declared", **kw})


WANT = waiting_funded_p1()


def situation(jobs, **kw) -> Situation:
    return Situation(now=NOW, jobs=jobs, fs_projects=3, data_as_of=NOW - 2 * M, observed_by="slurm", **kw)


def preempted(actions) -> list[str]:
    return [a.job_id for a in actions if a.action == "preempt"]


def none_reason(actions, job_id) -> str:
    return " | ".join(a.reason for a in actions if a.action == "none" and a.job_id == job_id)


def test_the_rule_itself():
    own, other = job("own", "p1", kind="interactive"), job("other", "p3", kind="interactive")
    assert own_project_spared(own, WANT, ON) and not own_project_spared(other, WANT, ON)
    assert not own_project_spared(own, WANT, OFF)  # off by default


def test_a_funded_job_does_not_displace_its_own_projects_session():
    # the only job below it is p1's own session: on, nothing is preempted and the funded job waits
    # (p1 holds the 8 GPUs either way); off, the session is the victim (stopped: no checkpoint)
    own = job("own", "p1", kind="interactive")
    actions = decide(situation([own, WANT]), ON)
    assert preempted(actions) == []
    assert "no running job below it may be preempted" in none_reason(actions, "want")
    assert "1 other job(s) held back: of project p1, as the waiting job is" in none_reason(actions, "want")
    off = decide(situation([own, WANT]), OFF)
    assert preempted(off) == ["own"] and next(a for a in off if a.action == "preempt").mode == "stop"


def test_another_projects_job_goes_instead():
    # both sessions rank below the waiting job; p1's ran 1 h (a preemption loses 60 min × 8 GPUs =
    # 480 GPU-min), p3's 10 h (600 × 8 = 4,800): off, least lost work takes p1's own session; on,
    # p1's may not go, so p3's frees the 8 GPUs — the rule holds back a candidate, not the search
    own = job("own", "p1", kind="interactive", start_time=NOW - H)
    other = job("other", "p3", kind="interactive")
    assert preempted(decide(situation([own, other, WANT]), OFF)) == ["own"]
    assert preempted(decide(situation([own, other, WANT]), ON)) == ["other"]


def test_a_squatter_of_the_same_project_is_still_reclaimed():
    # the rule holds demand preemption only: p1's idle session, warned 70 min ago, idle 130 min (past
    # the 120-min stage), is reclaimed though a job of p1 waits
    sq = job("sq", "p1", kind="interactive")
    finding = Finding(cluster="c", job_id="sq", finding="squatting", severity="preempt-eligible",
                      idle_since=NOW - 130 * M, idle_minutes=130, gpus_idle=8, gpus_total=8,
                      gpu_hours_idle=8 * 130 / 60, idle_cost="10.00", currency="USD")
    warned = {("c", "sq"): [Warning(NOW - 130 * M, "warning", NOW - 70 * M, NOW - 70 * M)]}
    actions = decide(situation([sq, WANT], findings=[finding], warnings=warned), ON)
    assert preempted(actions) == ["sq"]
    assert next(a for a in actions if a.action == "preempt").rule == "squatter"
