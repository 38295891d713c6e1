"""Enforcement decisions: a Situation and the policy in, a list of Actions out. Pure: no I/O, no
clock (``situation.now`` is injected), so every rule and rail is a table test
(tests/enforce/test_policy.py).

``decide`` runs named stages, each a small pure function with its own tests: priorities
(``priority_actions``), warnings due and squatter preemptions (enforce.squatters), demand
preemptions (enforce.demand), the budget of preemptions (enforce.caps), and the ``none`` rows
that explain the rest (``explanations``); the judgments they share are in enforce.rails.

Rules (design.md "The rules", Enforcement):

* **set-priority** — one integer per job, higher served first. Bands: production inference (exempt)
  on top, then the quick lane when enabled (small short jobs of projects with budget left, at most
  a few per project: rails.quick_lane), then funded, then unfunded; inside a band the project's fair-share rank orders jobs; the
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

from gpuledger.enforce.bands import EXEMPT_BASE, FUNDED_BASE, PROJECT_STEP, QUICK_BASE, UNFUNDED_BASE
from gpuledger.enforce.caps import capped
from gpuledger.enforce.demand import demand_preemptions
from gpuledger.enforce.model import (
    HOLD,
    NONE,
    PREEMPT,
    RELEASE,
    SET_PRIORITY,
    WARN,
    Action,
    JobFacts,
    Situation,
)
from gpuledger.enforce.rails import (  # noqa: F401  (the rules' public names, as before the split)
    TRUE,
    act,
    exemption,
    lost_minutes,
    protected,
    quick_lane,
    resumable,
    squatting_exemption,
    stale,
)
from gpuledger.enforce.squatters import CAPPED_WARNING_WINDOW, STAGES, squatter_stage  # noqa: F401
from gpuledger.enforce.team import lead_within, reorder

from gpuledger.heap import collector_paused

# a lead's hold / release goes with the priorities, before any warning or preemption
ORDER = {SET_PRIORITY: 0, HOLD: 0, RELEASE: 0, WARN: 1, PREEMPT: 2, NONE: 3}


def target_priorities(situation: Situation, policy) -> dict[tuple[str, str], tuple[int, str]]:
    """(priority, explanation) per job; see the module docstring for the bands."""
    n = max(situation.fs_projects, 1)
    declared_of = {j.key: _declared(j, situation) for j in situation.jobs}
    declared: dict[str, set[int]] = defaultdict(set)
    for job in situation.jobs:
        d = declared_of[job.key]
        if d is not None:
            declared[job.project].add(d)
    order = {p: sorted(v) for p, v in declared.items()}
    place = {p: {d: min(i, PROJECT_STEP - 1) for i, d in enumerate(v)} for p, v in order.items()}  # its rank
    quick = quick_jobs(situation, policy)
    declared_within = {j.key: 0 if declared_of[j.key] is None else place[j.project][declared_of[j.key]]
                       for j in situation.jobs}
    # a team lead's order of its queued jobs takes the place of their declared priorities
    lead = lead_within(situation.jobs, situation.team_choices, declared_within)
    out = {}
    for job in situation.jobs:
        d = declared_of[job.key]
        within = lead.get(job.key, declared_within[job.key])
        exempt = exemption(job, policy)
        rank = job.fs_rank if job.fs_rank is not None else n + 1
        fair = max(n - rank + 1, 0) * PROJECT_STEP
        if exempt and not _queues_by_share(job, situation, policy):
            value, band = EXEMPT_BASE + within, f"exempt ({exempt}): on top"
        elif exempt:
            base = FUNDED_BASE if job.funded else UNFUNDED_BASE
            value, band = base + fair + within, (f"exempt ({exempt}), never preempted, but project {job.project} "
                                                 "has used more than its share, so it queues by fair share")
        elif job.key in quick:
            value, band = QUICK_BASE + within, f"{quick[job.key]}: served before other funded work"
        elif job.funded:
            value, band = FUNDED_BASE + fair + within, ("funded: above unfunded work" if job.funded_by is None
                                                        else f"funded by {job.funded_by}: above unfunded work")
        else:
            value, band = UNFUNDED_BASE + fair + within, f"unfunded ({job.unfunded_reason or 'not funded'})"
        rank_words = f"project {job.project} ranks {job.fs_rank} of {n} by fair share" if job.fs_rank \
            else f"project {job.project} has no fair-share rank"
        within_words = "" if d is None or len(order[job.project]) < 2 or job.key in lead else (
            f"; its declared priority {d} is #{within + 1} of {len(order[job.project])} distinct values "
            f"in the project (it orders only the project's own jobs)")
        out[job.key] = (value, f"{band}; {rank_words}{within_words}")
    # a team lead's order: the team's own queued jobs swap their values within each band
    queued = {j.key for j in situation.jobs if not j.running}
    for key, (value, words) in reorder({k: v for k, (v, _) in out.items()}, queued, situation.team_choices).items():
        out[key] = (value, f"{out[key][1]}; {words}")
    return out


def _queues_by_share(job: JobFacts, situation: Situation, policy) -> bool:
    """An exempt job waits by fair share (not on top) when its project is over its share and the
    policy says so (exempt_queue: within-share)."""
    return getattr(policy, "exempt_queue", "on-top") == "within-share" and job.project in situation.over_share


def quick_jobs(situation: Situation, policy) -> dict[tuple[str, str], str]:
    """Job key -> why it is in the quick lane: every running lane job, and waiting ones, earliest
    submitted first, while their project runs fewer than ``max_running_per_project`` of them (the
    rest keep their own band: the lane is for a person's next test, not a team's queue)."""
    lane = getattr(policy, "quick_lane", None)
    if lane is None or not lane.enabled:
        return {}
    out: dict[tuple[str, str], str] = {}
    running: dict[str, int] = defaultdict(int)
    waiting = []
    for job in situation.jobs:
        why = quick_lane(job, policy)
        if why is None or exemption(job, policy):
            continue
        if job.running:
            out[job.key] = why
            running[job.project] += 1
        else:
            waiting.append((job.submit_time or situation.now, job.key, job, why))
    for _, key, job, why in sorted(waiting):
        if running[job.project] < lane.max_running_per_project:
            out[key] = why
            running[job.project] += 1
    return out


def _declared(job: JobFacts, situation: Situation) -> int | None:
    h = situation.history.get(job.key)
    if h is not None and h.declared_priority is not None:
        return h.declared_priority
    return job.declared_priority


@collector_paused()
def decide(situation: Situation, policy) -> list[Action]:
    """The cycle's actions, every job at least once (``none`` with why when nothing is done).

    ``policy`` is a :class:`gpuledger.config.EnforcementPolicy`. Order: set-priority, warn,
    preempt, none, each by job key — stable, so equal inputs give equal plans.
    """
    jobs = sorted(situation.jobs, key=lambda j: j.key)
    if policy.kill_switch:
        return [act(NONE, j, "the kill switch is on (policy.enforcement.kill_switch): enforcement does nothing",
                    "kill-switch", policy) for j in jobs]
    targets = target_priorities(situation, policy)
    notes: dict[tuple[str, str], list[str]] = defaultdict(list)  # why nothing else happened, per job
    actions = priority_actions(jobs, situation, targets, policy, notes)
    actions += hold_actions(jobs, situation, policy, notes)
    warns, proposals = squatter_stage(jobs, situation, policy, notes)  # preemptions before caps
    proposals += demand_preemptions(situation, policy, targets, {j.key for _, j in proposals}, notes)
    actions += warns + capped(proposals, situation, policy, notes)
    actions += explanations(jobs, actions, notes, targets, policy)
    return sorted(actions, key=lambda a: (ORDER[a.action], a.cluster, a.job_id))


def priority_actions(jobs: list[JobFacts], situation: Situation, targets, policy, notes) -> list[Action]:
    """A set-priority per job whose target differs from what gpuledger last set, or whose Kueue
    priority drifted from it (a WorkloadPriorityClass change rewrote it: set again); else a note."""
    out = []
    for job in jobs:
        value, why = targets[job.key]
        hist = situation.history.get(job.key)
        applied = hist.applied_priority if hist else None
        drifted = (job.source == "kueue" and applied is not None and job.observed_priority is not None
                   and job.observed_priority != applied)
        if applied == value and not drifted:
            notes[job.key].append(f"priority {value} already set ({why})")
            continue
        was = (f"; Kueue reports {job.observed_priority} (a WorkloadPriorityClass change rewrote it), "
               f"so it is set again" if drifted and applied == value else "")
        figures = {"priority": value, "fs_rank": job.fs_rank, "fs_projects": situation.fs_projects,
                   "declared_priority": _declared(job, situation), "running": job.running}
        choice = situation.team_choices.get(job.key)
        rule = "team-order" if choice is not None and choice.position is not None and not job.running else "priority"
        out.append(act(SET_PRIORITY, job, f"priority {value}: {why}{was}", rule, policy,
                       priority=value, figures=figures))
    return out


def hold_actions(jobs: list[JobFacts], situation: Situation, policy, notes) -> list[Action]:
    """A team lead's hold of a waiting job, and its release, each once: planned while what the
    lead chose differs from what was applied (enforcement_job_state.held)."""
    out = []
    for job in jobs:
        choice = situation.team_choices.get(job.key)
        want = bool(choice is not None and choice.held)
        hist = situation.history.get(job.key)
        applied = bool(hist is not None and hist.held)
        if want == applied:
            if want:
                notes[job.key].append(f"held by team {choice.node}'s lead {choice.set_by} (applied)")
            continue
        if want and job.running:
            notes[job.key].append(f"team {choice.node}'s lead {choice.set_by} asked to hold it, but it has started: "
                                  "a hold never stops a running job")
            continue
        who = f"team {choice.node}'s lead {choice.set_by} at {choice.set_at:%Y-%m-%d %H:%M}Z" if choice else "its lead"
        words = (f"held by {who}: it does not start until released" if want
                 else f"released by {who}: it queues again in its team's order")
        out.append(act(HOLD if want else RELEASE, job, words, "team-hold", policy))
    return out


def explanations(jobs: list[JobFacts], actions: list[Action], notes, targets, policy) -> list[Action]:
    """A none row explains what was not done: every job without an action, and every job with a
    reason why it was not warned or preempted (explain answers from it)."""
    acted = {(a.cluster, a.job_id) for a in actions}
    out = []
    for job in jobs:
        said = notes.get(job.key, ())
        disruption = [n for n in said if not n.startswith("priority ")]
        if job.key not in acted or disruption:
            words = "; ".join(said if job.key not in acted else disruption) or "nothing to do"
            out.append(act(NONE, job, words, "nothing", policy, figures={"priority": targets[job.key][0]}))
    return out
