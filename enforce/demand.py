"""The demand stage of a cycle: unprotected running work below funded (or exempt) jobs that wait
for GPUs the idle ones cannot give. Pure.

Down the waiting list, highest priority first, each waiting job takes idle GPUs of its pools,
then GPUs freed by victims chosen before it (``Capacity``); what it still misses is freed by
victims (``victims``: least lost work, or lowest priority), chosen from the candidates below it
(``candidates.Preemptible.below``) that no rail holds back (``hold_back``) — all of them or none."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from gpuledger.enforce.bands import on_top, quick_band
from gpuledger.enforce.candidates import Preemptible, whole_gpus
from gpuledger.enforce.model import PREEMPT, WAITING, Action, JobFacts, Situation
from gpuledger.enforce.rails import act, fmt, gpus, lost_minutes, own_project_words

Key = tuple[str, str]
Pool = tuple[str, "str | None"]


@dataclass
class Capacity:
    """GPUs per (cluster, model) pool as the stage goes down the waiting list: idle shares
    (``free``), wholly idle GPUs (``whole``; None when not known), GPUs freed by the victims
    chosen so far and not yet taken (``freed``), and the jobs already chosen (``taken``)."""

    free: dict
    whole: dict | None
    freed: defaultdict = field(default_factory=lambda: defaultdict(float))
    taken: set = field(default_factory=set)


def capacity(situation: Situation, already: set[Key]) -> Capacity:
    """The pools at the start: idle GPUs, and the squatters already chosen (``already``) free
    theirs. A job of whole GPUs fits only on wholly idle ones (free_whole_gpus, when known): idle
    halves of shared GPUs do not add up to a GPU, and stopping a fractional job seldom empties
    its GPU."""
    whole = None if situation.free_whole_gpus is None else dict(situation.free_whole_gpus)
    cap = Capacity(free=dict(situation.free_gpus), whole=whole)
    for job in situation.jobs:
        if job.key in already:
            cap.freed[(job.cluster, job.gpu_model)] += job.gpus if whole is None or whole_gpus(job) else 0.0
            cap.taken.add(job.key)
    return cap


def waiting_for_gpus(situation: Situation, policy, targets, notes=None) -> list[JobFacts]:
    """Funded, exempt (on top: exempt_queue) or quick-lane jobs waiting, highest target priority first, then the earliest submitted.
    With the scheduler's live view, only jobs it shows waiting now: the warehouse's job record is up
    to an ingest period old, and a job the scheduler has started since needs nothing freed."""
    now = situation.now
    waiting = [j for j in situation.jobs
               if not j.running and (j.funded or on_top(targets[j.key][0]) or quick_band(targets[j.key][0]))]
    held = [j for j in waiting if _held(j, situation)]
    for j in held:  # a job its lead holds waits for nobody's GPUs
        if notes is not None:
            notes[j.key].append("held by its team lead: nothing is preempted for it")
    waiting = [j for j in waiting if j not in held]
    if situation.observed_by is not None:
        kept = []
        for j in waiting:
            phase = (j.observed or {}).get("phase")
            elsewhere = situation.observed_cluster not in (None, j.cluster)
            if j.observed is not None and phase in (None, WAITING) and not elsewhere:
                kept.append(j)
            elif notes is not None and elsewhere:
                notes[j.key].append(f"the live view is of cluster {situation.observed_cluster} "
                                    f"({situation.observed_by}), this job is on cluster {j.cluster}: nothing is "
                                    f"preempted for it (plan with a backend of {j.cluster})")
            elif notes is not None:
                notes[j.key].append(f"{situation.observed_by} " + (
                    "does not list it now" if j.observed is None else f"shows it {j.observed.get('state')}")
                    + ", so nothing is preempted for it")
        waiting = kept
    return sorted(waiting, key=lambda j: (-targets[j.key][0], j.submit_time or now, j.key))


def _held(job: JobFacts, situation: Situation) -> bool:
    """Whether the job's team lead holds it (asked for, or applied and not released)."""
    choice = situation.team_choices.get(job.key)
    hist = situation.history.get(job.key)
    return bool((choice is not None and choice.held) or (hist is not None and hist.held))


def take_idle(w: JobFacts, pools: list[Pool], cap: Capacity) -> float:
    """The GPUs ``w`` still misses once it took, pool by pool, the idle ones and those freed
    before it (taken out of ``cap``)."""
    need = w.gpus
    whole = cap.whole is not None and whole_gpus(w)
    for pool in pools:
        idle = min(cap.free.get(pool, 0.0), cap.whole.get(pool, 0.0)) if whole else cap.free.get(pool, 0.0)
        use = max(min(idle, need), 0.0)
        cap.free[pool] = cap.free.get(pool, 0.0) - use
        if cap.whole is not None:  # whole idle GPUs are idle shares too
            cap.whole[pool] = min(cap.whole.get(pool, 0.0) - (use if whole else 0.0), cap.free[pool])
        need -= use
        use = min(cap.freed[pool], need)
        cap.freed[pool] -= use
        need -= use
    return need


def unserved(w: JobFacts, need: float, could_go: float | None, held: tuple[int, str | None],
             fresh: list[JobFacts], words: str, notes) -> None:
    """Notes when nothing is preempted for ``w``: why, on ``w``, and on each candidate not noted yet
    (``fresh``: the first, highest waiting job it ranks below). ``could_go``: the GPUs of the
    candidates that may go (None: there are none); ``held``: how many others are held back, and why
    the first of them is."""
    why = (f"the {gpus(could_go)} GPU(s) that could go would not free the {gpus(need)} it needs"
           if could_go is not None else "no running job below it may be preempted for it")
    if held[0]:
        why += f" ({held[0]} other job(s) held back: {held[1]})"
    notes[w.key].append(f"waits for {gpus(w.gpus)} {w.gpu_model or 'GPU(s) of any model'} "
                        f"({gpus(need)} not idle); nothing is preempted for it: {why}")
    for c in fresh:
        notes[c.key].append(f"ranks below waiting {words}, but preempting all {gpus(could_go or 0)} GPU(s) "
                            f"that could go would not free the {gpus(need)} it needs")


def take_freed(chosen: list[JobFacts], pools: list[Pool], need: float, cap: Capacity) -> None:
    """The victims free their GPUs and ``w`` takes what it needs of them; they are taken."""
    for c in chosen:
        cap.freed[(c.cluster, c.gpu_model)] += c.gpus
    for pool in pools:
        use = min(cap.freed[pool], need)
        cap.freed[pool] -= use
        need -= use
    cap.taken.update(c.key for c in chosen)


def demand_actions(w: JobFacts, chosen: list[JobFacts], missing: float, words: str, now: datetime, policy,
                   targets) -> list[tuple[Action, JobFacts]]:
    """One preemption per victim chosen for ``w`` (``missing``: the GPUs no idle one gave it)."""
    w_priority = targets[w.key][0]
    lost_together = round(sum(lost_minutes(v, now, policy) * v.gpus for v in chosen), 1)
    out = []
    for c in chosen:
        if c.funded:
            rule, why = "past-min-runtime", (f"funded, but past its minimum runtime "
                                             f"(protected until {fmt(c.protected_until)})")
        else:
            rule, why = "unfunded-burst", f"unfunded ({c.unfunded_reason or 'not funded'}), running on burst"
        reason = (f"{why}; holds {gpus(c.gpus)} {c.gpu_model or ''} GPU(s) that {words} "
                  f"(project {w.project}, priority {w_priority}) is waiting for "
                  f"(needs {gpus(w.gpus)}, {gpus(w.gpus - missing)} idle); "
                  f"this job's priority is {targets[c.key][0]}")
        out.append((act(PREEMPT, c, reason, rule, policy, serves=serving(w, words),
                        figures={"priority": targets[c.key][0], "waiting_job": w.job_id,
                                 "waiting_priority": w_priority, "waiting_gpus": w.gpus,
                                 "gpus": c.gpus, "lost_minutes": round(lost_minutes(c, now, policy), 1),
                                 "victims_lost_gpu_minutes": lost_together}), c))
    return out


def serving(w: JobFacts, words: str) -> dict:
    """What apply needs to find the waiting job again and check it still waits (Action.serves)."""
    return {"job_id": w.job_id, "scheduler_job": w.scheduler_job, "source": w.source, "namespace": w.namespace,
            "name": w.name, "words": words.rsplit(" ", 1)[0], "funded": w.funded, "observed": w.observed}


def demand_preemptions(situation: Situation, policy, targets, already: set[Key], notes
                       ) -> list[tuple[Action, JobFacts]]:
    """Preemptions (with their job) for the waiting jobs the idle GPUs cannot serve, in the order
    chosen; ``already``: the squatters proposed, whose GPUs are freed."""
    cap = capacity(situation, already)
    running_pools = {(j.cluster, j.gpu_model) for j in situation.jobs}
    out: list[tuple[Action, JobFacts]] = []
    index = Preemptible(situation, policy, targets, cap.taken)
    for w in waiting_for_gpus(situation, policy, targets, notes):
        # a request without a GPU model (Slurm --gres=gpu:N, --gpus=N) may run on any model of its
        # cluster (and partition, when both are known): every such pool serves it
        pools = _pools(w, set(cap.free) | set(cap.freed) | running_pools)
        need = take_idle(w, pools, cap)
        if need <= 1e-9:
            continue
        words = f"{_waiting_words(w, policy)} {w.job_id}"
        whole = cap.whole is not None and whole_gpus(w)
        c, at = index.below(w, targets[w.key][0], whole_gpus=whole)
        at, n_held, first_held = index.hold_back(c, at, words, policy, notes)
        if policy.victim_fit == "within-need":  # a victim larger than the need leaves GPUs idle, held for its restart
            at = index.within(c, at, need)
        if not len(at):  # nothing below it may go: most waiting jobs at Kueue's large shape
            unserved(w, need, None, _held_back(index, w, targets, whole, n_held, first_held), [], words, notes)
            continue
        if policy.victim_order == "priority":
            chosen = _victims(index.jobs(c, at), need, situation.now, policy, targets)
        else:  # the exact search looks at the cheapest MAX_EXACT_VICTIMS only
            chosen = _victims(index.cheapest(c, at, MAX_EXACT_VICTIMS), need, situation.now, policy, targets)
        if not chosen:
            unserved(w, need, index.gpus(c, at) if len(at) else None,
                     _held_back(index, w, targets, whole, n_held, first_held),
                     index.not_noted(c, at), words, notes)
            continue
        take_freed(chosen, pools, need, cap)
        index.take(chosen)
        out += demand_actions(w, chosen, need, words, situation.now, policy, targets)
    return out


def _held_back(index: Preemptible, w: JobFacts, targets, whole: bool, n_held: int, first_held: str | None
               ) -> tuple[int, str | None]:
    """The held-back count and first reason of an unserved ``w``, with its own project's jobs that
    ``spare_own_project`` left out (rails.own_project_spared) counted as held back."""
    own = index.own_project_below(w, targets[w.key][0], whole_gpus=whole)
    return (n_held + own, first_held or own_project_words(w)) if own else (n_held, first_held)


def _pools(w: JobFacts, known: set[tuple[str, str | None]]) -> list[tuple[str, str | None]]:
    """The (cluster, model) pools a waiting job can run in: its model's, or every model of its
    cluster when it names none."""
    if w.gpu_model is not None:
        return [(w.cluster, w.gpu_model)]
    return sorted((k for k in known if k[0] == w.cluster), key=lambda k: (k[1] is not None, k[1] or ""))


MAX_EXACT_VICTIMS = 18  # candidates searched exactly; beyond, the cheapest (loss per GPU) of them


def _victims(candidates: list[JobFacts], need: float, now: datetime, policy, targets) -> list[JobFacts]:
    """The set of victims that frees at least ``need`` GPUs with the least loss: least-lost-work
    minimises lost GPU-minutes (then GPUs freed beyond the need, then count); priority takes the
    lowest priority, most recently started first. Every victim is needed (none can be dropped);
    equal losses go to the lowest priorities."""
    if not candidates:  # most waiting jobs at Kueue's large shape: nothing below them may go
        return []
    if policy.victim_order == "priority":
        ordered = sorted(candidates, key=lambda j: (targets[j.key][0], -(j.start_time or now).timestamp(), j.key))
        chosen, got = [], 0.0
        for c in ordered:
            if got >= need - 1e-9:
                break
            chosen.append(c)
            got += c.gpus
        return chosen if got >= need - 1e-9 else []
    cost = {c.key: lost_minutes(c, now, policy) * c.gpus for c in candidates}
    pool = sorted(candidates, key=lambda j: (cost[j.key] / max(j.gpus, 1e-9), -j.gpus, j.key))[:MAX_EXACT_VICTIMS]
    best: tuple | None = None
    best_set: list[JobFacts] = []
    suffix = [0.0] * (len(pool) + 1)
    for i in range(len(pool) - 1, -1, -1):
        suffix[i] = suffix[i + 1] + pool[i].gpus
    # the pool is cheapest per GPU first, so whatever completes a partial set costs at least the
    # GPUs still missing at pool[i]'s rate: a bound that cuts most of the search (a cycle at Kueue's
    # large shape, issue 41); its margin (1e-6 > the key's rounding) never cuts a set as good as the best
    per_gpu = [cost[c.key] / max(c.gpus, 1e-9) for c in pool]

    def search(i: int, chosen: list[JobFacts], got: float, loss: float) -> None:
        nonlocal best, best_set
        if got >= need - 1e-9:
            if all(got - c.gpus < need - 1e-9 for c in chosen):  # minimal: every victim is needed
                key = (round(loss, 6), round(got - need, 6), len(chosen), sum(targets[c.key][0] for c in chosen),
                       sorted(c.key for c in chosen))
                if best is None or key < best:
                    best, best_set = key, list(chosen)
            return
        if i == len(pool) or got + suffix[i] < need - 1e-9 or (best is not None and loss > best[0] + 1e-9):
            return
        if best is not None and loss + (need - got) * per_gpu[i] > best[0] + 1e-6:
            return
        c = pool[i]
        chosen.append(c)
        search(i + 1, chosen, got + c.gpus, loss + cost[c.key])
        chosen.pop()
        search(i + 1, chosen, got, loss)

    search(0, [], 0.0, 0.0)
    return sorted(best_set, key=lambda j: (cost[j.key], j.key))


def _waiting_words(w: JobFacts, policy) -> str:
    return "funded job" if w.funded else "exempt job"
