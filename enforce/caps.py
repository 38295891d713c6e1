"""The budget of preemptions of a cycle: the proposals (squatters, then demand victims) pass the
per-cycle, per-project and rolling-hour caps in order, or wait for a later cycle with a note. Pure.

The victims chosen for one waiting job go all together or not at all: part of them would free too
little for it to start, and their work would be lost for nothing."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta

from gpuledger.enforce.model import Action, JobFacts
from gpuledger.enforce.rails import fmt

Proposal = tuple[Action, JobFacts]


def preemption_groups(proposals: list[Proposal]) -> list[list[Proposal]]:
    """Squatters one by one, costliest first (then by job id), then each waiting job's victims
    together, waiting jobs in the order their victims were chosen."""
    alone = ("squatter", "owner-release")  # each stands on its own (an owner's release first)
    squatters = sorted((p for p in proposals if p[0].rule in alone),
                       key=lambda p: (p[0].rule != "owner-release", -float(p[0].figures.get("idle_cost") or 0),
                                      p[0].job_id))
    groups: dict[object, list[Proposal]] = {}
    for p in proposals:
        if p[0].rule not in alone:
            groups.setdefault(p[0].figures.get("waiting_job"), []).append(p)
    return [[p] for p in squatters] + list(groups.values())


def cap_reached(group: list[Proposal], *, passed: int, per_project: dict[str, int], recent: list,
                hour_ago: datetime, policy) -> str | None:
    """Which cap ``group`` would break, or None. ``passed``: preemptions this cycle let through so
    far, ``per_project`` their count by project; ``recent``: (…, project, performed_at) of the
    preemptions performed in the rolling hour since ``hour_ago``."""
    add: dict[str, int] = defaultdict(int)
    for _, job in group:
        add[job.project] += 1
    hour_project: dict[str | None, int] = defaultdict(int)
    for r in recent:
        hour_project[r[2]] += 1
    full_hour = [p for p, n in add.items()
                 if hour_project[p] + per_project.get(p, 0) + n > policy.max_preemptions_per_project_per_hour]
    if passed + len(group) > policy.max_actions_per_cycle:
        return f"the cap of {policy.max_actions_per_cycle} preemptions per cycle is reached"
    if len(recent) + passed + len(group) > policy.max_preemptions_per_hour:
        return (f"the cap of {policy.max_preemptions_per_hour} preemptions per rolling hour is reached "
                f"({len(recent)} performed since {fmt(hour_ago)})")
    if full_hour:
        return (f"project {full_hour[0]} reached the cap of {policy.max_preemptions_per_project_per_hour} "
                f"preemptions per rolling hour ({hour_project[full_hour[0]]} performed since {fmt(hour_ago)})")
    full = [p for p, n in add.items() if per_project.get(p, 0) + n > policy.max_preemptions_per_project]
    if full:
        return f"project {full[0]} reached the cap of {policy.max_preemptions_per_project} preemptions per cycle"
    return None


def capped(proposals: list[Proposal], situation, policy, notes) -> list[Action]:
    """The preemptions that pass the caps, in group order; each held one gets a note."""
    hour_ago = situation.now - timedelta(hours=1)
    recent = [r for r in situation.recent_preemptions if r[3] >= hour_ago]  # performed in the last hour
    per_project: dict[str, int] = defaultdict(int)
    out: list[Action] = []
    for group in preemption_groups(proposals):
        over = cap_reached(group, passed=len(out), per_project=per_project, recent=recent, hour_ago=hour_ago,
                           policy=policy)
        if over:
            also = (f" (with the {len(group) - 1} other job(s) that {group[0][0].figures.get('waiting_job')} "
                    "needs freed; a part would not let it start)") if len(group) > 1 else ""
            for action, job in group:
                notes[job.key].append(f"would be preempted ({action.reason}), but {over}{also}; next cycle")
            continue
        for action, job in group:
            per_project[job.project] += 1
            hist = situation.history.get(job.key)
            if hist and hist.preemptions:
                action.reason += f" (preempted {hist.preemptions} time(s) before)"
                action.figures["preemptions_before"] = hist.preemptions
            out.append(action)
    return out
