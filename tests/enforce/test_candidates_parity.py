"""The demand stage's candidate index (enforce/candidates.py: numpy masks, each request's compatible
jobs cached for the cycle, held-back jobs judged with one mask) against the plain scan it replaced:
for any running jobs and any sequence of waiting requests, the same candidates, in the situation's
order, the same held-back count and first reason, and each held job noted once (issue 41)."""

from __future__ import annotations

import dataclasses
from collections import defaultdict

from gpuledger.enforce.candidates import Preemptible, too_costly, whole_gpus
from gpuledger.enforce.model import JobHistory
from gpuledger.enforce.policy import target_priorities
from gpuledger.enforce.rails import exemption, held_by_rails, own_project_spared, protected, stale
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.enforce.test_policy import NOW, H, M, job, policy, situation

running = st.builds(
    lambda i, project, model, partition, gpus, funded, protected_h, ran_min, live, cluster: dataclasses.replace(
        job(f"r{i}", project, funded=funded, gpus=gpus, start_time=NOW - ran_min * M,
            protected_until=NOW + protected_h * H if funded else None,
            observed={"state": "RUNNING"} if live else None),
        gpu_model=model, partition=partition, cluster=cluster),
    st.integers(0, 10**6), st.sampled_from(["p1", "p2", "p3"]), st.sampled_from(["H100", "A100", None]),
    st.sampled_from(["gpu", "debug", None]), st.sampled_from([0.5, 1.0, 2.0, 3 / 7, 8.0]), st.booleans(),
    st.sampled_from([-2, 1]), st.integers(1, 900), st.booleans(), st.sampled_from(["c", "d"]))
request = st.tuples(st.sampled_from(["c", "d", "e"]), st.sampled_from(["H100", "A100", "B200", None]),
                    st.sampled_from(["gpu", "debug", None]), st.booleans(), st.integers(90_000, 600_000),
                    st.sampled_from(["p1", "p2", "p3"]))


def plain_below(jobs, targets, taken, cluster, model, partition, whole, rank, w=None, pol=None):
    """The scan, rule by rule (candidates.Preemptible.below's docstring); ``w`` and ``pol``: the
    waiting job and the policy of rails.own_project_spared (spare_own_project)."""
    s_jobs = [j for j in jobs if j.cluster == cluster and j.running and not exemption(j, policy())
              and not protected(j, NOW)]
    return [j for j in s_jobs if targets[j.key][0] < rank and j.key not in taken
            and (model is None or j.gpu_model == model)
            and (not partition or not j.partition or j.partition == partition)
            and (not whole or whole_gpus(j))
            and (w is None or not own_project_spared(j, w, pol))]


@settings(max_examples=200, deadline=None)
@given(st.lists(running, min_size=1, max_size=25, unique_by=lambda j: j.job_id),
       st.lists(request, min_size=1, max_size=6), st.data())
def test_the_index_finds_what_the_plain_scan_finds(jobs, requests, data):
    pol = policy(max_lost_minutes=60, spare_own_project=data.draw(st.booleans()))
    # some were preempted minutes ago (the cool-down holds them, each with its own words)
    cooled = data.draw(st.dictionaries(st.sampled_from([j.key for j in jobs]), st.integers(1, 50), max_size=5))
    s = situation(jobs, history={k: JobHistory(last_preempted_at=NOW - m * M) for k, m in cooled.items()})
    targets = target_priorities(s, pol)
    taken = set(data.draw(st.sets(st.sampled_from([j.key for j in jobs]), max_size=3)))
    index, notes, noted = Preemptible(s, pol, targets, set(taken)), defaultdict(list), set()
    for cluster, model, partition, whole, rank, project in requests:
        w = dataclasses.replace(job("w", project, running=False, funded=True), cluster=cluster, gpu_model=model,
                                partition=partition)
        c, at = index.below(w, rank, whole_gpus=whole)
        want = plain_below(jobs, targets, taken, cluster, model, partition, whole, rank, w, pol)
        assert index.jobs(c, at) == want
        left, n_held, first = index.hold_back(c, at, "funded job w", pol, notes)
        why = {j.key: stale(s, pol, j.cluster, "jobs") or held_by_rails(j, s, pol) for j in want}
        costly = [j for j in want if too_costly(j, NOW, pol)]
        held = [j for j in want if why[j.key] is not None and j not in costly]
        assert index.jobs(c, left) == [j for j in want if j not in costly and j not in held]
        assert (n_held, first) == (len(held), why[held[0].key] if held else None)
        noted |= {j.key for j in costly + held}
        assert set(notes) == noted and all(len(v) == 1 for v in notes.values())  # each noted once
        chosen = index.jobs(c, left)[:1]  # the stage takes its victims: later requests skip them
        index.take(chosen)
        taken |= {j.key for j in chosen}
