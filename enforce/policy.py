"""Enforcement decisions: a Situation and the policy in, a list of Actions out. Pure: no I/O, no
clock (``situation.now`` is injected), so every rule and rail is a table test
(tests/enforce/test_policy.py).

Rules (design.md "The rules", Enforcement):

* **set-priority** — one integer per job, higher served first. Bands: production inference (exempt)
  on top, then funded, then unfunded; inside a band the project's fair-share rank orders jobs; the
  job's own declared priority orders only among its project's jobs (its rank among the project's
  distinct declared values), so declaring everything HIGH buys nothing. Planned when the value
  differs from what gpuledger last set, or when Kueue reports another value (a
  WorkloadPriorityClass change rewrote it: the value is set again).
* **warn** — a squatter reaching a stage (warning / second-warning / preempt-eligible), once per
  stage and idle episode.
* **preempt** — requeue when the job declares it resumes (checkpoint label / annotation, Slurm
  Requeue=1), else stop: squatters past the last stage with a recorded warning at least
  ``warn_before_preempt_minutes`` earlier; running jobs that are not protected (unfunded, or funded
  past their minimum runtime) and rank below funded work waiting for GPUs of their kind that the
  idle GPUs cannot serve. Victims are chosen where the least work is lost (``victim_order``: lost
  GPU-minutes, from the job's start and ``checkpoint_interval_minutes``); a funded job past its
  minimum runtime goes only within ``max_lost_minutes`` of a checkpoint (else at a later cycle); no
  victim holds more GPUs than the waiting job still misses (``victim_fit``: the rest would sit idle,
  held for the victim's own restart); a job of whole GPUs counts only wholly idle GPUs
  (``Situation.free_whole_gpus``, when known); one waiting job's victims go together or not at all.
* **none** — recorded with why, so ``gpuledger enforce explain`` can answer.

Rails: the kill switch; exemptions (namespaces, kinds, labels); never preempt a funded job inside
its minimum runtime (a funded squatter gets a warning instead — the safer rail wins); the
stale-data guard; per-cycle and per-project caps on preemptions; demand preemption only when the
waiting job can be served completely (freeing part of what it needs helps nobody).
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta

from gpuledger.enforce.model import (
    NONE,
    PREEMPT,
    REQUEUE,
    SET_PRIORITY,
    STOP,
    WARN,
    Action,
    Finding,
    JobFacts,
    Situation,
)

# Priority bands; Kueue priorities are int32. Inside a band: fair-share position × 1000 + the
# job's position inside its project (< 1000), so up to 399 projects fit below the next band.
EXEMPT_BASE = 1_000_000
FUNDED_BASE = 500_000
UNFUNDED_BASE = 100_000
PROJECT_STEP = 1000
STAGES = ("warning", "second-warning", "preempt-eligible")
CAPPED_WARNING_WINDOW = timedelta(hours=24)
TRUE = ("true", "1", "yes", "enabled")


def _fmt(t: datetime | None) -> str:
    return "-" if t is None else f"{t:%Y-%m-%d %H:%M}Z"


def exemption(job: JobFacts, policy) -> str | None:
    """Why the job may never be preempted (and sits on top), or None."""
    if job.namespace and job.namespace in policy.exempt_namespaces:
        return f"namespace {job.namespace} is exempt"
    if job.kind and job.kind in policy.exempt_kinds:
        return f"kind {job.kind} is exempt (production inference is never preempted)"
    for key, value in policy.exempt_labels.items():
        if job.labels.get(key) == value:
            return f"label {key}={value} is exempt"
    return None


def resumable(job: JobFacts, policy) -> bool:
    """The job declares it can resume from a checkpoint, so a preemption requeues it."""
    return (str(job.labels.get(policy.checkpoint_label, "")).lower() in TRUE
            or str(job.annotations.get(policy.checkpoint_annotation, "")).lower() in TRUE
            or bool(job.requeue_flag))


def protected(job: JobFacts, now: datetime) -> bool:
    """Funded and inside its minimum runtime: never preempted."""
    return bool(job.funded and job.protected_until is not None and now < job.protected_until)


def lost_minutes(job: JobFacts, now: datetime, policy) -> float:
    """Minutes of work a preemption now throws away: a resumable job loses what it did since its
    last checkpoint (every ``checkpoint_interval_minutes`` since it started), any other job all of
    its runtime."""
    ran = max((now - (job.start_time or now)).total_seconds() / 60, 0.0)
    return ran % policy.checkpoint_interval_minutes if resumable(job, policy) else ran


def target_priorities(situation: Situation, policy) -> dict[tuple[str, str], tuple[int, str]]:
    """(priority, explanation) per job; see the module docstring for the bands."""
    n = max(situation.fs_projects, 1)
    declared: dict[str, list[int]] = defaultdict(list)
    for job in situation.jobs:
        d = _declared(job, situation)
        if d is not None:
            declared[job.project].append(d)
    order = {p: sorted(set(v)) for p, v in declared.items()}
    out = {}
    for job in situation.jobs:
        d = _declared(job, situation)
        within = 0 if d is None else min(order[job.project].index(d), PROJECT_STEP - 1)
        exempt = exemption(job, policy)
        rank = job.fs_rank if job.fs_rank is not None else n + 1
        fair = max(n - rank + 1, 0) * PROJECT_STEP
        if exempt:
            value, band = EXEMPT_BASE + within, f"exempt ({exempt}): on top"
        elif job.funded:
            value, band = FUNDED_BASE + fair + within, "funded: above unfunded work"
        else:
            value, band = UNFUNDED_BASE + fair + within, f"unfunded ({job.unfunded_reason or 'not funded'})"
        rank_words = f"project {job.project} ranks {job.fs_rank} of {n} by fair share" if job.fs_rank \
            else f"project {job.project} has no fair-share rank"
        within_words = "" if d is None or len(order[job.project]) < 2 else (
            f"; its declared priority {d} is #{within + 1} of {len(order[job.project])} distinct values "
            f"in the project (it orders only the project's own jobs)")
        out[job.key] = (value, f"{band}; {rank_words}{within_words}")
    return out


def _declared(job: JobFacts, situation: Situation) -> int | None:
    h = situation.history.get(job.key)
    if h is not None and h.declared_priority is not None:
        return h.declared_priority
    return job.declared_priority


def decide(situation: Situation, policy) -> list[Action]:
    """The cycle's actions, every job at least once (``none`` with why when nothing is done).

    ``policy`` is a :class:`gpuledger.config.EnforcementPolicy`. Order: set-priority, warn,
    preempt, none, each by job key — stable, so equal inputs give equal plans.
    """
    now = situation.now
    jobs = sorted(situation.jobs, key=lambda j: j.key)
    if policy.kill_switch:
        return [_act(NONE, j, "the kill switch is on (policy.enforcement.kill_switch): enforcement does nothing",
                     "kill-switch", policy) for j in jobs]
    targets = target_priorities(situation, policy)
    findings = {(f.cluster, f.job_id): f for f in situation.findings}
    actions: list[Action] = []
    notes: dict[tuple[str, str], list[str]] = defaultdict(list)  # why nothing else happened
    proposals: list[tuple[Action, JobFacts]] = []  # preemptions before caps

    for job in jobs:
        value, why = targets[job.key]
        figures = {"priority": value, "fs_rank": job.fs_rank, "fs_projects": situation.fs_projects,
                   "declared_priority": _declared(job, situation), "running": job.running}
        hist = situation.history.get(job.key)
        applied = hist.applied_priority if hist else None
        drifted = (job.source == "kueue" and applied is not None and job.observed_priority is not None
                   and job.observed_priority != applied)
        if applied != value or drifted:
            was = (f"; Kueue reports {job.observed_priority} (a WorkloadPriorityClass change rewrote it), "
                   f"so it is set again" if drifted and applied == value else "")
            actions.append(_act(SET_PRIORITY, job, f"priority {value}: {why}{was}", "priority", policy,
                                priority=value, figures=figures))
        else:
            notes[job.key].append(f"priority {value} already set ({why})")

        if not job.running:
            continue
        exempt = exemption(job, policy) or squatting_exemption(job, situation)
        finding = findings.get(job.key)
        if finding is None or finding.finding != "squatting" or finding.severity not in STAGES:
            if finding is not None and finding.finding == "squatting":
                notes[job.key].append(f"idle {finding.idle_minutes:.0f} min, below the first warning stage")
            continue
        if exempt:
            notes[job.key].append(f"idle {finding.idle_minutes:.0f} min on {finding.gpus_idle} GPU(s) but "
                                  f"{exempt}")
            continue
        squat = _squat_figures(finding)
        # warnings issued during this idle stretch; when it is longer than the evidence's lookback
        # its start is unknown (idle_since moves with the lookback), so warnings of the last
        # CAPPED_WARNING_WINDOW count
        since = min(finding.idle_since, now - CAPPED_WARNING_WINDOW) if finding.capped else finding.idle_since
        warned = [w for w in situation.warnings.get(job.key, []) if w.warned_at >= since]
        warned_stages = {w.stage for w in warned}
        stage = finding.severity
        if stage != "preempt-eligible":
            if stage in warned_stages:
                notes[job.key].append(f"already warned ({stage}) at {_fmt(_when(warned, stage))}")
            else:
                actions.append(_act(WARN, job, _warn_words(finding, stage), f"squatting-{stage}", policy,
                                    stage=stage, idle_since=finding.idle_since, figures=squat))
            continue
        # preempt-eligible: the rails, safest first
        if protected(job, now):
            reason = (f"{_warn_words(finding, stage)}; funded and inside its minimum runtime until "
                      f"{_fmt(job.protected_until)}, so a warning instead of a preemption")
            if stage in warned_stages:
                notes[job.key].append(reason + f" (warned at {_fmt(_when(warned, stage))})")
            else:
                actions.append(_act(WARN, job, reason, "squatting-protected", policy, stage=stage,
                                    idle_since=finding.idle_since, figures=squat))
            continue
        # the clock starts when a warning reached someone (applied on the scheduler, or an alert
        # sent), not when it was planned: a plan nobody applied warned nobody
        earliest = min((w.delivered_at for w in warned if w.delivered_at is not None), default=None)
        need = timedelta(minutes=policy.warn_before_preempt_minutes)
        if earliest is None and warned:
            first = min(w.warned_at for w in warned)
            notes[job.key].append(f"{_warn_words(finding, stage)}; a warning was planned at {_fmt(first)} but has "
                                  "not reached anyone yet (no backend warning applied, no alert sent): no "
                                  "preemption until one does")
            continue
        if earliest is None:
            actions.append(_act(WARN, job, f"{_warn_words(finding, stage)}; a preemption needs a warning at "
                                f"least {policy.warn_before_preempt_minutes:g} min earlier, so a warning now",
                                "squatting-warn-first", policy, stage=stage, idle_since=finding.idle_since,
                                figures=squat))
            continue
        if now - earliest < need:
            notes[job.key].append(f"warned at {_fmt(earliest)}; preemption may follow from "
                                  f"{_fmt(earliest + need)} (warn_before_preempt_minutes)")
            continue
        blocked = stale(situation, policy, job.cluster, "samples") or _blocked(job, situation, policy)
        if blocked:
            notes[job.key].append(f"would be preempted as a squatter, but {blocked}")
            continue
        reason = (f"squatting: all {finding.gpus_idle} GPU(s) idle for {finding.idle_minutes:.0f} min "
                  f"({finding.gpu_hours_idle:.1f} idle GPU-hours"
                  f"{f', {finding.idle_cost} {finding.currency}' if finding.idle_cost else ''}); "
                  f"warned at {_fmt(earliest)}")
        proposals.append((_act(PREEMPT, job, reason, "squatter", policy, warned_at=earliest,
                               idle_since=finding.idle_since, figures=squat), job))

    proposals += _demand_preemptions(situation, policy, targets, {j.key for _, j in proposals}, notes)
    actions += _capped(proposals, situation, policy, notes)
    # A none row explains what was not done: every job without an action, and every job with a
    # reason why it was not warned or preempted (explain answers from it).
    acted = {(a.cluster, a.job_id) for a in actions}
    for job in jobs:
        disruption = [n for n in notes[job.key] if not n.startswith("priority ")]
        if job.key not in acted or disruption:
            words = "; ".join(notes[job.key] if job.key not in acted else disruption) or "nothing to do"
            actions.append(_act(NONE, job, words, "nothing", policy, figures={"priority": targets[job.key][0]}))
    rank = {SET_PRIORITY: 0, WARN: 1, PREEMPT: 2, NONE: 3}
    return sorted(actions, key=lambda a: (rank[a.action], a.cluster, a.job_id))


def squatting_exemption(job: JobFacts, situation: Situation) -> str | None:
    """Why ``gpuledger squatters`` hides the job (policy.squatting.exempt_*): no alert ever reached
    its owner, so it is never warned or preempted as a squatter either — one set of exemptions."""
    ex = situation.squatting_exempt or {}
    if job.namespace and job.namespace in (ex.get("namespaces") or ()):
        return f"namespace {job.namespace} is exempt from squatting (policy.squatting.exempt_namespaces)"
    if job.kind and job.kind in (ex.get("kinds") or ()):
        return f"kind {job.kind} is exempt from squatting (policy.squatting.exempt_kinds)"
    for key, value in (ex.get("labels") or {}).items():
        if job.labels.get(key) == value:
            return f"label {key}={value} is exempt from squatting (policy.squatting.exempt_labels)"
    return None


def stale(situation: Situation, policy, cluster: str, source: str) -> str | None:
    """Why the data of ``cluster`` is too old to preempt on (``source``: samples for squatting,
    jobs for demand), or None. Without per-cluster figures, the newest data of any kind counts."""
    per = situation.samples_as_of if source == "samples" else situation.jobs_as_of
    what = "GPU sample" if source == "samples" else "job record"
    if per is None:
        as_of, where = situation.data_as_of, "the newest data"
    else:
        as_of, where = per.get(cluster), f"cluster {cluster}'s newest {what}"
    if as_of is None:
        return ("there is no data to judge from (stale-data guard)" if per is None
                else f"cluster {cluster} has no {what} to judge from (stale-data guard)")
    age = (situation.now - as_of).total_seconds() / 60
    if age > policy.max_data_age_minutes:
        return (f"{where} is {age:.0f} min old (limit {policy.max_data_age_minutes:g}, "
                "policy.enforcement.max_data_age_minutes): no preemption on stale data")
    return None


def _blocked(job: JobFacts, situation: Situation, policy) -> str | None:
    """Rails that hold whatever the reason to preempt: the scheduler's live view, the cool-down."""
    if job.observed is None:
        if situation.observed_by is None:
            return ("the plan was made without the scheduler's live view (plan with --observe BACKEND; a plan "
                    "file cannot observe): nothing is preempted")
        return f"{situation.observed_by} does not list this job now (ended or gone): nothing is preempted"
    hist = situation.history.get(job.key)
    if hist is not None and hist.last_preempted_at is not None:
        until = hist.last_preempted_at + timedelta(minutes=policy.preemption_cooldown_minutes)
        if situation.now < until:
            return (f"it was preempted at {_fmt(hist.last_preempted_at)}; the cool-down "
                    f"(preemption_cooldown_minutes {policy.preemption_cooldown_minutes:g}) lasts until {_fmt(until)}")
    return None


def _when(warned, stage):
    return min(w.warned_at for w in warned if w.stage == stage)


def _warn_words(f: Finding, stage: str) -> str:
    return (f"{stage}: all {f.gpus_idle} GPU(s) idle since {_fmt(f.idle_since)} ({f.idle_minutes:.0f} min, "
            f"{f.gpu_hours_idle:.1f} idle GPU-hours{f', {f.idle_cost} {f.currency}' if f.idle_cost else ''})")


def _squat_figures(f: Finding) -> dict:
    return {"idle_minutes": round(f.idle_minutes, 1), "gpus_idle": f.gpus_idle, "gpus_total": f.gpus_total,
            "gpu_hours_idle": round(f.gpu_hours_idle, 3), "idle_cost": f.idle_cost, "currency": f.currency,
            "severity": f.severity}


def _demand_preemptions(situation, policy, targets, already: set[tuple[str, str]], notes):
    """Unprotected running work below funded jobs that wait for GPUs the idle ones cannot give."""
    now = situation.now
    waiting = [j for j in situation.jobs if not j.running and (j.funded or exemption(j, policy))]
    waiting.sort(key=lambda j: (-targets[j.key][0], j.submit_time or now, j.key))
    free = dict(situation.free_gpus)
    # a job of whole GPUs fits only on wholly idle ones (free_whole_gpus, when known): idle halves of
    # shared GPUs do not add up to a GPU, and stopping a fractional job seldom empties its GPU
    whole_free = None if situation.free_whole_gpus is None else dict(situation.free_whole_gpus)
    taken: set[tuple[str, str]] = set()
    freed: dict[tuple[str, str | None], float] = defaultdict(float)
    for job in situation.jobs:  # squatters already chosen free their GPUs
        if job.key in already:
            freed[(job.cluster, job.gpu_model)] += job.gpus if whole_free is None or _whole(job) else 0.0
            taken.add(job.key)
    out = []
    short: set[tuple[str, str]] = set()
    for w in waiting:
        # a request without a GPU model (Slurm --gres=gpu:N, --gpus=N) may run on any model of its
        # cluster (and partition, when both are known): every such pool serves it
        pools = _pools(w, set(free) | set(freed) | {(j.cluster, j.gpu_model) for j in situation.jobs})
        need = w.gpus
        whole = whole_free is not None and _whole(w)
        for pool in pools:
            idle = min(free.get(pool, 0.0), whole_free.get(pool, 0.0)) if whole else free.get(pool, 0.0)
            use = max(min(idle, need), 0.0)
            free[pool] = free.get(pool, 0.0) - use
            if whole_free is not None:  # whole idle GPUs are idle shares too
                whole_free[pool] = min(whole_free.get(pool, 0.0) - (use if whole else 0.0), free[pool])
            need -= use
            use = min(freed[pool], need)
            freed[pool] -= use
            need -= use
        if need <= 1e-9:
            continue
        w_priority = targets[w.key][0]
        words = f"{_waiting_words(w, policy)} {w.job_id}"
        candidates = [j for j in situation.jobs
                      if j.running and j.key not in taken and _serves(j, w)
                      and targets[j.key][0] < w_priority and not exemption(j, policy) and not protected(j, now)
                      and (not whole or _whole(j))]
        costly = {c.key for c in candidates if _too_costly(c, now, policy)}  # would throw away too much work
        for c in candidates:
            if c.key in costly and c.key not in short:
                short.add(c.key)
                notes[c.key].append(f"ranks below waiting {words}, but a "
                                    f"preemption now would lose {lost_minutes(c, now, policy):.0f} min of work "
                                    f"(more than max_lost_minutes {policy.max_lost_minutes:g})")
        blocked = {}
        for c in candidates:
            why = stale(situation, policy, c.cluster, "jobs") or _blocked(c, situation, policy)
            if why and c.key not in costly:
                blocked[c.key] = why
                if c.key not in short:
                    short.add(c.key)
                    notes[c.key].append(f"ranks below waiting {words}, but {why}")
        candidates = [c for c in candidates if c.key not in costly and c.key not in blocked]
        if policy.victim_fit == "within-need":  # a victim larger than the need leaves GPUs idle, held for its restart
            candidates = [c for c in candidates if c.gpus <= need + 1e-9]
        missing = need
        chosen = _victims(candidates, need, now, policy, targets)
        if not chosen:
            if_all = sum(c.gpus for c in candidates)
            why = (f"the {if_all:g} GPU(s) that could go would not free the {need:g} it needs"
                   if candidates else "no running job below it may be preempted for it")
            if blocked:
                why += f" ({len(blocked)} other job(s) held back: {next(iter(blocked.values()))})"
            notes[w.key].append(f"waits for {w.gpus:g} {w.gpu_model or 'GPU(s) of any model'} "
                                f"({need:g} not idle); nothing is preempted for it: {why}")
            for c in candidates:
                if c.key not in short:  # once per job: the first (highest) waiting job it ranks below
                    short.add(c.key)
                    notes[c.key].append(f"ranks below waiting {words}, but preempting all {if_all:g} GPU(s) "
                                        f"that could go would not free the {need:g} it needs")
            continue
        for c in chosen:
            freed[(c.cluster, c.gpu_model)] += c.gpus
        for pool in pools:  # the waiting job takes what it needs of the freed GPUs
            use = min(freed[pool], need)
            freed[pool] -= use
            need -= use
        for c in chosen:
            taken.add(c.key)
            if c.funded:
                rule, why = "past-min-runtime", (f"funded, but past its minimum runtime "
                                                 f"(protected until {_fmt(c.protected_until)})")
            else:
                rule, why = "unfunded-burst", f"unfunded ({c.unfunded_reason or 'not funded'}), running on burst"
            reason = (f"{why}; holds {c.gpus:g} {c.gpu_model or ''} GPU(s) that {words} "
                      f"(project {w.project}, priority {w_priority}) is waiting for "
                      f"(needs {w.gpus:g}, {w.gpus - missing:g} idle); "
                      f"this job's priority is {targets[c.key][0]}")
            out.append((_act(PREEMPT, c, reason, rule, policy,
                             figures={"priority": targets[c.key][0], "waiting_job": w.job_id,
                                      "waiting_priority": w_priority, "waiting_gpus": w.gpus,
                                      "gpus": c.gpus, "lost_minutes": round(lost_minutes(c, now, policy), 1),
                                      "victims_lost_gpu_minutes": round(sum(
                                          lost_minutes(v, now, policy) * v.gpus for v in chosen), 1)}),
                        c))
    return out


def _pools(w: JobFacts, known: set[tuple[str, str | None]]) -> list[tuple[str, str | None]]:
    """The (cluster, model) pools a waiting job can run in: its model's, or every model of its
    cluster when it names none."""
    if w.gpu_model is not None:
        return [(w.cluster, w.gpu_model)]
    return sorted((k for k in known if k[0] == w.cluster), key=lambda k: (k[1] is not None, k[1] or ""))


def _serves(victim: JobFacts, w: JobFacts) -> bool:
    """Preempting ``victim`` frees GPUs ``w`` can use: same cluster, same model (any, when ``w``
    names none), same partition when both are known."""
    if victim.cluster != w.cluster:
        return False
    if w.gpu_model is not None and victim.gpu_model != w.gpu_model:
        return False
    return not (w.partition and victim.partition and w.partition != victim.partition)


MAX_EXACT_VICTIMS = 18  # candidates searched exactly; beyond, the cheapest (loss per GPU) of them


def _victims(candidates: list[JobFacts], need: float, now: datetime, policy, targets) -> list[JobFacts]:
    """The set of victims that frees at least ``need`` GPUs with the least loss: least-lost-work
    minimises lost GPU-minutes (then GPUs freed beyond the need, then count); priority takes the
    lowest priority, most recently started first. Every victim is needed (none can be dropped);
    equal losses go to the lowest priorities."""
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
        c = pool[i]
        chosen.append(c)
        search(i + 1, chosen, got + c.gpus, loss + cost[c.key])
        chosen.pop()
        search(i + 1, chosen, got, loss)

    search(0, [], 0.0, 0.0)
    return sorted(best_set, key=lambda j: (cost[j.key], j.key))


def _too_costly(job: JobFacts, now: datetime, policy) -> bool:
    """A funded job past its minimum runtime whose preemption now would lose more than
    ``max_lost_minutes`` of work: it waits for its next checkpoint. Unfunded work runs on burst
    and goes whenever funded work needs its GPUs."""
    if policy.max_lost_minutes is None or not job.funded:
        return False
    return lost_minutes(job, now, policy) > policy.max_lost_minutes + 1e-9


def _whole(job: JobFacts) -> bool:
    """The job holds whole GPUs (1, 2, 8 ...), not slices or fractions of them."""
    return job.gpus >= 1 - 1e-9 and abs(job.gpus - round(job.gpus)) < 1e-9


def _waiting_words(w: JobFacts, policy) -> str:
    return "funded job" if w.funded else "exempt job"


def _capped(proposals, situation, policy, notes) -> list[Action]:
    """Squatters first (costliest first), then demand preemptions in the order chosen. The victims
    chosen for one waiting job go all together or not at all: part of them would free too little
    for it to start, and their work would be lost for nothing."""
    squatters = sorted((p for p in proposals if p[0].rule == "squatter"),
                       key=lambda p: (-float(p[0].figures.get("idle_cost") or 0), p[0].job_id))
    groups: dict[object, list] = {}
    for p in proposals:
        if p[0].rule != "squatter":
            groups.setdefault(p[0].figures.get("waiting_job"), []).append(p)
    per_project: dict[str, int] = defaultdict(int)
    hour_ago = situation.now - timedelta(hours=1)
    recent = [r for r in situation.recent_preemptions if r[3] >= hour_ago]  # performed in the last hour
    hour_project: dict[str | None, int] = defaultdict(int)
    for r in recent:
        hour_project[r[2]] += 1
    out: list[Action] = []
    for group in [[p] for p in squatters] + list(groups.values()):
        add: dict[str, int] = defaultdict(int)
        for _, job in group:
            add[job.project] += 1
        over = None
        full_hour = [p for p, n in add.items()
                     if hour_project[p] + per_project[p] + n > policy.max_preemptions_per_project_per_hour]
        if len(out) + len(group) > policy.max_actions_per_cycle:
            over = f"the cap of {policy.max_actions_per_cycle} preemptions per cycle is reached"
        elif len(recent) + len(out) + len(group) > policy.max_preemptions_per_hour:
            over = (f"the cap of {policy.max_preemptions_per_hour} preemptions per rolling hour is reached "
                    f"({len(recent)} performed since {_fmt(hour_ago)})")
        elif full_hour:
            over = (f"project {full_hour[0]} reached the cap of {policy.max_preemptions_per_project_per_hour} "
                    f"preemptions per rolling hour ({hour_project[full_hour[0]]} performed since {_fmt(hour_ago)})")
        else:
            full = [p for p, n in add.items() if per_project[p] + n > policy.max_preemptions_per_project]
            if full:
                over = (f"project {full[0]} reached the cap of {policy.max_preemptions_per_project} "
                        "preemptions per cycle")
        if over:
            also = (f" (with the {len(group) - 1} other job(s) that {group[0][0].figures.get('waiting_job')} "
                    "needs freed; a part would not let it start)") if len(group) > 1 else ""
            for action, job in group:
                notes[job.key].append(f"would be preempted ({action.reason}), but {over}{also}; next cycle")
            continue
        for p, n in add.items():
            per_project[p] += n
        for action, job in group:
            hist = situation.history.get(job.key)
            if hist and hist.preemptions:
                action.reason += f" (preempted {hist.preemptions} time(s) before)"
                action.figures["preemptions_before"] = hist.preemptions
            out.append(action)
    return out


def _act(kind: str, job: JobFacts, reason: str, rule: str, policy, **extra) -> Action:
    mode = None
    if kind == PREEMPT:
        mode = REQUEUE if resumable(job, policy) else STOP
        extra["reason"] = reason + ("; it resumes from its checkpoint, so it is requeued" if mode == REQUEUE
                                    else "; it declares no checkpointing, so it is stopped")
        reason = extra.pop("reason")
    if kind in (PREEMPT, WARN):  # what apply checks again before acting
        extra.setdefault("observed", job.observed)
    return Action(action=kind, cluster=job.cluster, job_id=job.job_id, project=job.project, reason=reason,
                  rule=rule, mode=mode, funded=job.funded, min_runtime_until=job.protected_until,
                  dry_run=policy.dry_run, name=job.name, namespace=job.namespace, source=job.source,
                  kind=job.kind, scheduler_job=job.scheduler_job, **extra)
