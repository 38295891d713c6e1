"""Who a job is (issue 33), in pure terms: a Slurm array's pending tasks and a het job's components
as sacct lists them, Slurm exemptions by account, user and QOS, the Nice layout's stated bound, a
plan whose live view is of one cluster, and apply refusing another cluster's actions before any
backend verb runs."""

from __future__ import annotations

from gpuledger.enforce.apply import apply_actions
from gpuledger.enforce.backends.base import DONE, Backend, Outcome
from gpuledger.enforce.backends.slurm import MAX_WEIGHTS, nice_bound, nice_for, step_for
from gpuledger.enforce.inputs import _het_jobs_are_one_job, array_width
from gpuledger.enforce.model import Action, Finding
from gpuledger.enforce.policy import FUNDED_BASE, UNFUNDED_BASE, decide, exemption

from gpuledger.config import EnforcementPolicy
from tests.enforce.test_policy_rails import NOW, job, none_reason, preempted, situation


def test_a_pending_arrays_width_is_its_task_count_at_most_its_throttle():
    # 0-1: 2 tasks; 0-7%2: 8 tasks, 2 at once; 1,3,5-9: 1 + 1 + 5 = 7; a task or a plain job: 1
    assert [array_width(j) for j in ("12_[0-1]", "12_[0-7%2]", "12_[1,3,5-9]", "12_3", "12", "12+1")] == \
        [2, 2, 7, 1, 1, 1]


def test_a_het_jobs_components_are_one_job_squatting_only_when_every_component_does():
    def row(job_id, gpus, model="H100"):
        return {"cluster": "c", "job_id": job_id, "source": "slurm", "gpus": gpus, "gpu_model": model}

    def finding(job_id, minutes):
        return Finding(cluster="c", job_id=job_id, finding="squatting", severity="warning", idle_since=NOW,
                       idle_minutes=minutes, gpus_idle=1, gpus_total=1)

    rows = [row("30+0", 1), row("30+1", 2), row("31", 4), row("32+0", 1, "A100"), row("32+1", 1, "H100")]
    kept, found = _het_jobs_are_one_job([dict(r) for r in rows], [finding("30+0", 90), finding("30+1", 70),
                                                                  finding("32+0", 80)])
    # 30: 1 + 2 = 3 GPUs under its first component; 32: two models, so any model serves it
    assert [(r["job_id"], r["gpus"], r["gpu_model"]) for r in kept] == [("30+0", 3.0, "H100"), ("31", 4, "H100"),
                                                                        ("32+0", 2.0, None)]
    # 30 squats as a whole (the shorter idle stretch, 70 min, and both GPUs); 32+1 is busy: no finding
    assert [(f.job_id, f.idle_minutes, f.gpus_idle) for f in found] == [("30+0", 70, 2)]


def test_slurm_jobs_are_exempt_by_account_user_or_qos():
    rails = EnforcementPolicy(exempt_accounts=["p3"], exempt_users=["svc-infer"], exempt_qos=["critical"])
    assert "account p3 is exempt" in exemption(job("a", "p3", source="slurm"), rails)
    assert "user svc-infer is exempt" in exemption(job("b", "p1", user_name="svc-infer", source="slurm"), rails)
    assert "QOS critical is exempt" in exemption(job("c", "p1", qos="critical", source="slurm"), rails)
    # Slurm's names only: a pod of a project called like an exempt account is not exempt
    assert exemption(job("d", "p3", source="kubernetes"), rails) is None
    # an exempt account's running job is never a victim for waiting funded work
    rails = EnforcementPolicy(exempt_accounts=["p3"])
    jobs = [job("burst", "p3", source="slurm"), job("want", "p1", running=False, funded=True)]
    assert preempted(decide(situation(jobs), rails)) == []
    assert preempted(decide(situation(jobs), EnforcementPolicy())) == ["burst"]


def test_the_nice_layout_states_its_bound():
    assert nice_bound(MAX_WEIGHTS) is None and MAX_WEIGHTS == 89_477
    words = nice_bound(MAX_WEIGHTS + 1)
    assert "add up to 89,478, more than the 89,477" in words and "slurm_qos_funded" in words
    # at the bound the layout still holds: neighbouring positions are one step (89,478 Nice) apart,
    # more than all of Slurm's factors (89,477) can add — the lowest funded job over the highest unfunded
    step = step_for(MAX_WEIGHTS)
    assert step == MAX_WEIGHTS + 1
    assert nice_for(UNFUNDED_BASE + 399_999, step) - nice_for(FUNDED_BASE, step) > MAX_WEIGHTS


def test_a_live_view_of_one_cluster_serves_no_waiting_job_of_another():
    # even were another cluster's jobs to carry a view (gather gives them none), the plan neither
    # serves its waiting job nor picks its running one
    jobs = [job("burst", cluster="other"), job("want", "p1", cluster="other", running=False, funded=True)]
    actions = decide(situation(jobs, observed_cluster="c"), EnforcementPolicy())
    assert preempted(actions) == []
    assert "the live view is of cluster c (slurm), this job is on cluster other" in none_reason(actions, "want")
    assert preempted(decide(situation(jobs), EnforcementPolicy())) == ["burst"]  # its own cluster's view: served
    # a squatter of the other cluster is not preempted either
    from tests.enforce.test_policy_rails import delivered, squat
    idle = situation([job("sq", cluster="other")], findings=[squat("sq", cluster="other")],
                     warnings=delivered("sq", "other"), observed_cluster="c")
    assert preempted(decide(idle, EnforcementPolicy())) == []
    assert "the live view is of cluster c (slurm), this job is on cluster other" in none_reason(
        decide(idle, EnforcementPolicy()), "sq")


class _OneCluster(Backend):
    """The interface with nothing behind it but a record of which verbs ran."""

    name = "slurm"
    cluster_source = "ClusterName in scontrol show config"

    def __init__(self):
        self.ran = []

    def cluster_name(self):
        return "c"

    def set_priority(self, action, *, dry_run):
        self.ran.append(action.job_id)
        return Outcome(DONE, "set")


def test_apply_refuses_another_clusters_action_before_any_verb_runs():
    backend = _OneCluster()
    acts = [Action(action="set-priority", cluster=c, job_id="2", project="p", reason="r", rule="t", priority=5,
                   action_id=f"p:{n}") for n, c in enumerate(("other", "c"))]
    run = apply_actions(acts, backend, dry_run=False)
    assert [(a.cluster, o.outcome, o.cause) for a, o in run.results] == [("other", "refused", "other-cluster"),
                                                                         ("c", "done", None)]
    assert backend.ran == ["2"] and "decided for cluster other, but this slurm backend acts on cluster c" \
        in run.results[0][1].detail
