"""policy.enforcement.spare_behind_owed (issue 34): demand preemption spares a running job that
cannot checkpoint while its project is behind what it is owed in the running settlement period
(Situation.behind_owed, analytics.delivery_balance.behind_owed). Pure: a hand-built Situation in,
actions out.

The scene, by hand: cluster c has no idle GPU; a funded job of p1 (rank 1) waits for 8 H100s; a
session of p3 (rank 3, unfunded: "no budget", so max_lost_minutes does not keep it) runs on 8
H100s. Priorities (enforce/policy.py, N = 3): the waiting job 500,000 + 3,000, the session
100,000 + 1,000 — below it, so without the rule the session is the one victim that frees the 8.
"""

from __future__ import annotations

from datetime import datetime

import polars as pl
from gpuledger.enforce.model import Finding, Situation, Warning
from gpuledger.enforce.policy import decide
from gpuledger.enforce.rails import spared_behind_owed

from gpuledger.analytics.delivery_balance import behind_owed
from gpuledger.config import EnforcementPolicy
from tests.helpers.enforce_scene import NOW, M, job, waiting_funded_p1

ON, OFF = EnforcementPolicy(spare_behind_owed=True), EnforcementPolicy()
CKPT = {"gpuledger.io/checkpointing": "true"}


WANT = waiting_funded_p1()


def situation(jobs, behind, **kw) -> Situation:
    return Situation(now=NOW, jobs=jobs, fs_projects=3, data_as_of=NOW - 2 * M, observed_by="slurm",
                     behind_owed=behind, **kw)


def preempted(actions) -> list[str]:
    return [a.job_id for a in actions if a.action == "preempt"]


def none_reason(actions, job_id) -> str:
    return " | ".join(a.reason for a in actions if a.action == "none" and a.job_id == job_id)


def test_a_session_of_a_project_behind_owed_is_spared():
    # p3 delivered less than owed so far this period, the session cannot checkpoint: spared, and
    # the funded job waits (no other victim); the reason says why
    sess = job("sess", kind="interactive")
    actions = decide(situation([sess, WANT], frozenset({"p3"})), ON)
    assert preempted(actions) == []
    assert "p3 is behind what it is owed" in none_reason(actions, "sess")
    assert spared_behind_owed(sess, situation([sess], frozenset({"p3"})), ON) is not None


def test_the_same_session_at_or_above_owed_is_not_spared():
    # p3 at (or above) what it is owed: not in behind_owed, so the session goes as before (stopped:
    # it does not checkpoint)
    sess = job("sess", kind="interactive")
    actions = decide(situation([sess, WANT], frozenset()), ON)
    assert preempted(actions) == ["sess"]
    assert next(a for a in actions if a.action == "preempt").mode == "stop"


def test_a_checkpointing_job_is_not_spared():
    # behind owed, but it resumes from a checkpoint: a preemption loses at most an interval, so it goes
    # (requeued)
    train = job("train", kind="training", labels=CKPT)
    actions = decide(situation([train, WANT], frozenset({"p3"})), ON)
    assert preempted(actions) == ["train"]
    assert next(a for a in actions if a.action == "preempt").mode == "requeue"


def test_off_by_default_and_without_the_period_known():
    sess = job("sess", kind="interactive")
    assert preempted(decide(situation([sess, WANT], frozenset({"p3"})), OFF)) == ["sess"]  # the setting off
    assert preempted(decide(situation([sess, WANT], None), ON)) == ["sess"]  # behind_owed not computed


def test_another_victim_still_goes():
    # p3's session is spared; p2's (p2 not behind) frees the 8 GPUs instead: the rule holds back one
    # candidate, not the waiting job's whole search
    sess3, sess2 = job("sess3", kind="interactive"), job("sess2", "p2", kind="interactive")
    actions = decide(situation([sess3, sess2, WANT], frozenset({"p3"})), ON)
    assert preempted(actions) == ["sess2"]


def test_a_squatter_is_reclaimed_whatever_it_is_owed():
    # demand preemption spares; squatter reclaim does not: an idle session holding 8 GPUs, warned
    # 70 min ago, idle 130 min (past the 120-min stage), is preempted though p3 is behind
    sq = job("sq", kind="interactive")
    finding = Finding(cluster="c", job_id="sq", finding="squatting", severity="preempt-eligible",
                      idle_since=NOW - 130 * M, idle_minutes=130, gpus_idle=8, gpus_total=8,
                      gpu_hours_idle=8 * 130 / 60, idle_cost="10.00", currency="USD")
    warned = {("c", "sq"): [Warning(NOW - 130 * M, "warning", NOW - 70 * M, NOW - 70 * M)]}
    actions = decide(situation([sq], frozenset({"p3"}), findings=[finding], warnings=warned), ON)
    assert preempted(actions) == ["sq"]


def test_behind_owed_reads_the_running_period():
    # delivery_balance's frame, two periods: in the newest (running) one p1 was owed 100 GPU-h and
    # allocated 60 (delivered min(60, 100) = 60 < 100: behind); p2 owed 50, allocated 80 (burst:
    # delivered 50 = owed, not behind); p3 owed 0 (wanted nothing). In the older period p2 was
    # behind (10 < 40): a settled period does not count. "team" is an inner node, not a project.
    old, new = datetime(2026, 10, 26), datetime(2026, 11, 2)
    frame = pl.DataFrame({
        "node": ["p1", "p2", "p3", "team", "p2"],
        "period_start": [new, new, new, new, old],
        "gpu_hours_owed": [100.0, 50.0, 0.0, 150.0, 40.0],
        "gpu_hours_allocated": [60.0, 80.0, 0.0, 140.0, 10.0],
    })
    assert behind_owed(frame, ["p1", "p2", "p3"]) == frozenset({"p1"})
