"""The squatting stage of a cycle: for each running job with an idle-GPU finding, a warning due, a
preemption proposed (before the caps, enforce.caps), or a note why neither. Pure.

A stage of one job answers an Outcome: (the warn or preempt Action, or None; the note why nothing
more is done, or None). Rails, safest first: below the first stage, exempt, already warned for the
stage, funded inside its minimum runtime (a warning instead), no warning delivered long enough
before, stale samples, the live view and the cool-down."""

from __future__ import annotations

from datetime import datetime, timedelta

from gpuledger.enforce.model import PREEMPT, STOP, WARN, Action, Finding, JobFacts, Situation, Warning
from gpuledger.enforce.rails import act, exemption, fmt, held_by_rails, protected, squatting_exemption, stale

from gpuledger.rules.severity import STAGES

CAPPED_WARNING_WINDOW = timedelta(hours=24)

Outcome = tuple[Action | None, str | None]


def squatter_stage(jobs: list[JobFacts], situation: Situation, policy, notes
                   ) -> tuple[list[Action], list[tuple[Action, JobFacts]]]:
    """(warnings due, squatter preemptions proposed with their job) over ``jobs`` in their order;
    each job's reason for doing nothing more goes to ``notes``."""
    findings = {(f.cluster, f.job_id): f for f in situation.findings}
    warns: list[Action] = []
    proposals: list[tuple[Action, JobFacts]] = []
    for job in jobs:
        if not job.running:
            continue
        owner = situation.owner_choices.get(job.key)
        if owner is not None and owner.choice == "release":
            action, note = owner_release(job, owner, situation, policy)
        else:
            action, note = squatter_outcome(job, findings.get(job.key), situation, policy)
        if note is not None:
            notes[job.key].append(note)
        if action is not None and action.action == PREEMPT:
            proposals.append((action, job))
        elif action is not None:
            warns.append(action)
    return warns, proposals


def squatter_outcome(job: JobFacts, finding: Finding | None, situation: Situation, policy) -> Outcome:
    """What squatting asks of one running job."""
    if finding is None or finding.finding != "squatting" or finding.severity not in STAGES:
        if finding is not None and finding.finding == "squatting":
            return None, f"idle {finding.idle_minutes:.0f} min, below the first warning stage"
        return None, None
    exempt = exemption(job, policy) or squatting_exemption(job, situation)
    if exempt:
        return None, f"idle {finding.idle_minutes:.0f} min on {finding.gpus_idle} GPU(s) but {exempt}"
    kept = situation.owner_choices.get(job.key)
    if kept is not None and kept.kept_until is not None and situation.now < kept.kept_until:
        return None, (f"idle {finding.idle_minutes:.0f} min on {finding.gpus_idle} GPU(s), but its owner "
                      f"{kept.user_name} keeps it until {fmt(kept.kept_until)} (asked at {fmt(kept.asked_at)}): "
                      "no warning or preemption before then")
    warned = warnings_this_episode(situation.warnings.get(job.key, []), finding, situation.now)
    if finding.severity != "preempt-eligible":
        return warning_due(job, finding, warned, policy)
    if protected(job, situation.now):
        return protected_warning(job, finding, warned, policy)
    return squatter_preemption(job, finding, warned, situation, policy)


def owner_release(job: JobFacts, owner, situation: Situation, policy) -> Outcome:
    """The owner asked, from a squatting alert, to stop their job now: a preemption (stop) through
    the same rails as any other — the scheduler's live view, the cool-down, the caps."""
    held = held_by_rails(job, situation, policy)
    if held:
        return None, f"its owner {owner.user_name} asked to release it at {fmt(owner.asked_at)}, but {held}"
    action = act(PREEMPT, job, f"released by its owner {owner.user_name} at {fmt(owner.asked_at)} from a squatting "
                 "alert", "owner-release", policy)
    action.mode, action.reason = STOP, action.reason.split("; it ")[0] + "; it is stopped, as its owner asked"
    return action, None


def warnings_this_episode(warnings: list[Warning], finding: Finding, now: datetime) -> list[Warning]:
    """The warnings issued during this idle stretch. When it is longer than the evidence's lookback
    its start is unknown (idle_since moves with the lookback), so warnings of the last
    CAPPED_WARNING_WINDOW count."""
    since = min(finding.idle_since, now - CAPPED_WARNING_WINDOW) if finding.capped else finding.idle_since
    return [w for w in warnings if w.warned_at >= since]


def warning_due(job: JobFacts, finding: Finding, warned: list[Warning], policy) -> Outcome:
    """A warning or second warning, once per stage and idle episode."""
    stage = finding.severity
    if stage in {w.stage for w in warned}:
        return None, f"already warned ({stage}) at {fmt(_when(warned, stage))}"
    return act(WARN, job, warn_words(finding, stage), f"squatting-{stage}", policy, stage=stage,
               idle_since=finding.idle_since, figures=squat_figures(finding)), None


def protected_warning(job: JobFacts, finding: Finding, warned: list[Warning], policy) -> Outcome:
    """A funded squatter inside its minimum runtime past the last stage: a warning instead of a
    preemption (the safer rail wins), once."""
    stage = finding.severity
    reason = (f"{warn_words(finding, stage)}; funded and inside its minimum runtime until "
              f"{fmt(job.protected_until)}, so a warning instead of a preemption")
    if stage in {w.stage for w in warned}:
        return None, reason + f" (warned at {fmt(_when(warned, stage))})"
    return act(WARN, job, reason, "squatting-protected", policy, stage=stage, idle_since=finding.idle_since,
               figures=squat_figures(finding)), None


def squatter_preemption(job: JobFacts, finding: Finding, warned: list[Warning], situation: Situation,
                        policy) -> Outcome:
    """A squatter past the last stage: preempted once a warning reached someone at least
    ``warn_before_preempt_minutes`` earlier and no rail holds it; else a first warning, or a note."""
    stage, now = finding.severity, situation.now
    # the clock starts when a warning reached someone (applied on the scheduler, or an alert
    # sent), not when it was planned: a plan nobody applied warned nobody
    earliest = min((w.delivered_at for w in warned if w.delivered_at is not None), default=None)
    need = timedelta(minutes=policy.warn_before_preempt_minutes)
    if earliest is None and warned:
        first = min(w.warned_at for w in warned)
        return None, (f"{warn_words(finding, stage)}; a warning was planned at {fmt(first)} but has "
                      "not reached anyone yet (no backend warning applied, no alert sent): no "
                      "preemption until one does")
    if earliest is None:
        return act(WARN, job, f"{warn_words(finding, stage)}; a preemption needs a warning at "
                   f"least {policy.warn_before_preempt_minutes:g} min earlier, so a warning now",
                   "squatting-warn-first", policy, stage=stage, idle_since=finding.idle_since,
                   figures=squat_figures(finding)), None
    if now - earliest < need:
        return None, (f"warned at {fmt(earliest)}; preemption may follow from "
                      f"{fmt(earliest + need)} (warn_before_preempt_minutes)")
    held = stale(situation, policy, job.cluster, "samples") or held_by_rails(job, situation, policy)
    if held:
        return None, f"would be preempted as a squatter, but {held}"
    reason = (f"squatting: all {finding.gpus_idle} GPU(s) idle for {_at_least(finding)}{finding.idle_minutes:.0f} min "
              f"({finding.gpu_hours_idle:.1f} idle GPU-hours"
              f"{f', {finding.idle_cost} {finding.currency}' if finding.idle_cost else ''}); "
              f"warned at {fmt(earliest)}")
    return act(PREEMPT, job, reason, "squatter", policy, warned_at=earliest, idle_since=finding.idle_since,
               figures=squat_figures(finding)), None


def _when(warned, stage):
    return min(w.warned_at for w in warned if w.stage == stage)


def _at_least(f: Finding) -> str:
    """A finding idle for the whole evidence lookback (6 h) was idle longer than its figures say:
    how long is not known, so its minutes and idle_since are a floor ("at least", "or earlier")."""
    return "at least " if f.capped else ""


def warn_words(f: Finding, stage: str) -> str:
    since = f"{fmt(f.idle_since)} or earlier" if f.capped else fmt(f.idle_since)
    return (f"{stage}: all {f.gpus_idle} GPU(s) idle since {since} ({_at_least(f)}{f.idle_minutes:.0f} min, "
            f"{f.gpu_hours_idle:.1f} idle GPU-hours{f', {f.idle_cost} {f.currency}' if f.idle_cost else ''})")


def squat_figures(f: Finding) -> dict:
    return {"idle_minutes": round(f.idle_minutes, 1), "gpus_idle": f.gpus_idle, "gpus_total": f.gpus_total,
            "gpu_hours_idle": round(f.gpu_hours_idle, 3), "idle_cost": f.idle_cost, "currency": f.currency,
            "severity": f.severity}
