"""The quick lane (policy.enforcement.quick_lane: Ai2's debug queue) and where exempt jobs wait
(policy.enforcement.exempt_queue): small hand-built situations, priorities derived by hand.

Bands (enforce/bands.py): exempt 1,000,000; quick lane 899,000 (the funded band's top position,
500,000 + 399 x 1,000); funded 500,000 + fair-share position x 1,000; unfunded 100,000 + the same.
With 3 ranked projects the fair-share position of rank r is 3 - r + 1."""

from __future__ import annotations

from gpuledger.analytics.fairshare import over_share_projects
from gpuledger.config import QuickLane
from gpuledger.enforce.backends.slurm import nice_for
from gpuledger.enforce.bands import FUNDED_BASE, PROJECT_STEP, QUICK_BASE
from gpuledger.enforce.model import PREEMPT
from gpuledger.enforce.policy import decide, target_priorities
from tests.enforce.test_policy import NOW, H, M, job, policy, situation


def lane(**kw) -> QuickLane:
    return QuickLane(enabled=True, **kw)


def debug_job(job_id: str, project: str = "p3", *, running: bool = False, **kw):
    """A one-GPU job submitted with a 20-min limit, whose project has budget (it declares no
    minimum runtime, so it is unfunded for that reason alone)."""
    kw.setdefault("time_limit_s", 20 * 60)
    kw.setdefault("unfunded_reason", "no minimum runtime declared")
    return job(job_id, project, running=running, gpus=1, **kw)


def test_a_small_short_job_is_served_before_every_funded_job_whatever_its_rank():
    # d: p3 (rank 3 of 3), 1 GPU, 20-min limit -> 899,000; f: funded p1 (rank 1) -> 500,000 + 3 x 1,000
    jobs = [debug_job("d"), job("f", "p1", running=False, funded=True)]
    got = target_priorities(situation(jobs), policy(quick_lane=lane()))
    assert got[("c", "d")][0] == QUICK_BASE == 899_000
    assert got[("c", "f")][0] == 503_000
    assert got[("c", "d")][1].startswith("quick lane: 1 GPU, time limit 20 min")
    # the lane is off by default: d is then unfunded work of p3 (100,000 + 1 x 1,000)
    assert target_priorities(situation(jobs), policy())[("c", "d")][0] == 101_000


def test_the_lane_takes_only_small_short_work_with_budget_behind_it():
    p = policy(quick_lane=lane())
    jobs = [
        debug_job("ok"),
        job("two", "p3", running=False, gpus=2, time_limit_s=600, unfunded_reason="no minimum runtime declared"),
        job("long", "p3", running=False, gpus=1, time_limit_s=31 * 60, unfunded_reason="no minimum runtime declared"),
        job("nolimit", "p3", running=False, gpus=1, unfunded_reason="no minimum runtime declared"),
        job("broke", "p3", running=False, gpus=1, time_limit_s=600, unfunded_reason="budget exhausted at p3"),
        job("kind", "p3", running=False, gpus=1, kind="debug", unfunded_reason="no minimum runtime declared"),
    ]
    got = {k[1]: v[0] for k, v in target_priorities(situation(jobs), p).items()}
    # in the lane: 1 GPU with a 20-min limit, and kind debug without a limit; out: 2 GPUs, a 31-min
    # limit, no limit, a project out of budget -> p3's unfunded value 101,000
    assert got == {"ok": QUICK_BASE, "kind": QUICK_BASE, "two": 101_000, "long": 101_000, "nolimit": 101_000,
                   "broke": 101_000}


def test_a_project_has_at_most_max_running_per_project_jobs_in_the_lane():
    # limit 2: r1 runs in the lane; of w1..w3 (submitted in that order) only w1 joins it, the rest
    # wait as p3's unfunded work (101,000); p1's own lane job is not held back by p3's
    jobs = [debug_job("r1", running=True, start_time=NOW - 5 * M)]
    jobs += [debug_job(f"w{i}", submit_time=NOW - (10 - i) * M) for i in (1, 2, 3)]
    jobs += [debug_job("q", "p1", submit_time=NOW - M)]
    got = {k[1]: v[0] for k, v in target_priorities(situation(jobs), policy(quick_lane=lane(max_running_per_project=2))).items()}
    assert got == {"r1": QUICK_BASE, "w1": QUICK_BASE, "w2": 101_000, "w3": 101_000, "q": QUICK_BASE}


def test_a_lane_job_preempts_unprotected_work_for_its_gpu_never_protected_work():
    # the H100 pool is full. u: unfunded 1-GPU job of p2 -> may go for the lane job d; f: funded
    # 1-GPU job inside its minimum runtime -> protected, never a victim
    u = job("u", "p2", gpus=1)
    f = job("f", "p1", gpus=1, funded=True, protected_until=NOW + H)
    d = debug_job("d", submit_time=NOW - M)
    s = situation([u, f, d], free_gpus={("c", "H100"): 0.0}, free_whole_gpus={("c", "H100"): 0.0})
    preempted = [a.job_id for a in decide(s, policy(quick_lane=lane())) if a.action == PREEMPT]
    assert preempted == ["u"]
    # without the lane d is unfunded work and nothing is preempted for it
    assert [a for a in decide(s, policy()) if a.action == PREEMPT] == []
    # with only protected work in the pool the lane job waits for a GPU to free
    s2 = situation([f, d], free_gpus={("c", "H100"): 0.0}, free_whole_gpus={("c", "H100"): 0.0})
    assert [a for a in decide(s2, policy(quick_lane=lane())) if a.action == PREEMPT] == []


def test_slurm_keeps_the_lane_above_every_funded_position():
    # Nice: lower is served first; the lane is the funded band's position 399, above any project's
    # funded position (at most 398 projects)
    assert nice_for(QUICK_BASE) < nice_for(FUNDED_BASE + 398 * PROJECT_STEP + 999) < nice_for(FUNDED_BASE)


# --- where exempt jobs wait --------------------------------------------------------------------------
def test_over_share_projects_from_the_fair_share_rows():
    # p1: 30 % of usage against a 20 % share -> over; p2: 50 % against 50 % -> not over (equal);
    # p3: 20 % against 30 % -> under; the program row has no rank -> never listed
    rows = [{"node": "prog", "fs_rank": None, "usage_norm": 1.0, "share_global": 0.5},
            {"node": "p1", "fs_rank": 3, "usage_norm": 0.3, "share_global": 0.2},
            {"node": "p2", "fs_rank": 2, "usage_norm": 0.5, "share_global": 0.5},
            {"node": "p3", "fs_rank": 1, "usage_norm": 0.2, "share_global": 0.3}]
    assert over_share_projects(rows) == frozenset({"p1"})


def test_an_exempt_job_over_its_projects_share_queues_by_fair_share_when_asked():
    # i: exempt inference of p3 (rank 3), funded, waiting. on-top (the default): 1,000,000;
    # within-share with p3 over its share: the funded band at p3's position, 500,000 + 1 x 1,000
    i = job("i", "p3", running=False, funded=True, kind="inference")
    f = job("f", "p1", running=False, funded=True)
    over = situation([i, f], over_share=frozenset({"p3"}))
    assert target_priorities(over, policy())[("c", "i")][0] == 1_000_000
    got = target_priorities(over, policy(exempt_queue="within-share"))
    assert got[("c", "i")][0] == 501_000 < got[("c", "f")][0] == 503_000
    assert "never preempted" in got[("c", "i")][1] and "more than its share" in got[("c", "i")][1]
    # within its share it stays on top
    within = situation([i, f])
    assert target_priorities(within, policy(exempt_queue="within-share"))[("c", "i")][0] == 1_000_000


def test_a_running_exempt_job_over_share_is_still_never_a_victim():
    # the exempt running job i sits in the funded band by rank (p3: 501,000) below the waiting funded
    # f (503,000), but exemption keeps it: nothing is preempted; the unfunded u goes instead
    i = job("i", "p3", gpus=1, funded=True, kind="inference")
    u = job("u", "p2", gpus=1)
    f = job("f", "p1", running=False, funded=True, gpus=2, submit_time=NOW - M)
    s = situation([i, u, f], free_gpus={("c", "H100"): 1.0}, free_whole_gpus={("c", "H100"): 1.0},
                  over_share=frozenset({"p3"}))
    preempted = [a.job_id for a in decide(s, policy(exempt_queue="within-share")) if a.action == PREEMPT]
    assert preempted == ["u"]
