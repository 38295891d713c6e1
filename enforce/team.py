"""A team lead's own queue (issue 38): the order of the team's queued jobs, which of them the
team's budget funds, and holds. Pure: the choices come in (enforce.team_store reads them), the
priorities go out.

The order holds only inside the team, in two steps:

* inside a project, the lead's order takes the place of the jobs' declared priorities
  (``lead_within``): the ordered jobs take the project's places (< bands.PROJECT_STEP) above its
  other jobs, first served highest — inside the project's own fair-share slot, as declared
  priorities do, so no other project's job moves;
* across the team's projects it **permutes** the priorities of the team's own queued jobs, band by
  band (``reorder``). The set of values the team holds in each band is unchanged, so every other
  team's job has exactly as many of this team's jobs above it as before.

A job moves between bands only by funding, and funding is bounded by the budget the team has left
(``fund_check``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from gpuledger.enforce.bands import PROJECT_STEP, band_of


@dataclass(frozen=True)
class TeamChoice:
    """What a lead chose for one job (team_choices)."""

    node: str  # the team (org node) whose lead chose
    set_by: str
    set_at: datetime
    position: int | None = None  # 1 = first among the team's ordered jobs
    fund_hours: float | None = None  # funded by the team's budget for this minimum runtime (h)
    fund_gpu_hours: float | None = None  # normalised GPU-hours committed
    held: bool = False


def lead_within(jobs, choices: dict, declared: dict) -> dict:
    """Job key -> its place inside its project (bands' ``within``) for the queued jobs a lead
    ordered: above every place the project's other jobs take (``declared``: job key -> place from
    its declared priority), the lead's first highest."""
    ordered: dict[str, list] = {}
    for j in jobs:
        c = choices.get(j.key)
        if c is not None and c.position is not None and not j.running:
            ordered.setdefault(j.project, []).append(j.key)
    out = {}
    for project, keys in ordered.items():
        floor = max((declared.get(j.key, 0) for j in jobs if j.project == project and j.key not in keys),
                    default=-1) + 1
        ranked = sorted(keys, key=lambda k: (choices[k].position, k))
        for i, key in enumerate(ranked):
            out[key] = min(floor + len(ranked) - 1 - i, PROJECT_STEP - 1)
    return out


def reorder(values: dict, queued: set, choices: dict) -> dict:
    """``values`` (job key -> priority) with each team's ordered queued jobs given their team's
    own values of the same band in the lead's order: within a (team, band), the highest value
    goes to position 1, the next to position 2, and so on. Jobs not queued, not ordered, or
    alone in their (team, band) keep their value. Returns job key -> (new value, words) for the
    jobs whose value came from a lead's order (moved or not)."""
    groups: dict[tuple[str, str], list] = {}
    for key, choice in choices.items():
        if choice.position is None or key not in queued or key not in values:
            continue
        groups.setdefault((choice.node, band_of(values[key])), []).append(key)
    out = {}
    for (node, band), keys in sorted(groups.items()):
        ranked = sorted(keys, key=lambda k: (choices[k].position, k))
        pool = sorted((values[k] for k in keys), reverse=True)
        for place, (key, value) in enumerate(zip(ranked, pool, strict=True), start=1):
            c = choices[key]
            where = (f"put it #{place} of the team's {len(keys)} ordered queued jobs in the {band} band"
                     if len(keys) > 1 else f"placed it in the team's order (the only one in the {band} band)")
            out[key] = (value, f"team {node}'s lead {c.set_by} {where} (set {c.set_at:%Y-%m-%d %H:%M}Z): it takes "
                               "one of the team's own priorities, so no other team's job moves")
    return out


def normalised_gpu_hours(gpus: float, hours: float, weight: float) -> float:
    """What funding one job commits of a budget: GPUs × hours × the model's budget weight
    (normalised GPU-hours, the budget's unit)."""
    return float(gpus) * float(hours) * float(weight)


def fund_check(*, job: str, asked: float, remaining: float | None, committed: float, budget_node: str | None,
               hours: float, cap_hours: float) -> str | None:
    """Why the team's budget cannot fund a job (None: it can). ``asked``: normalised GPU-hours
    this funding commits; ``remaining``: what the budget has left (None: the project has no
    budget); ``committed``: what the lead's other fund marks already commit."""
    if not 0 < hours <= cap_hours:
        return (f"--hours {hours:g}: a funded job's minimum runtime is more than 0 and at most {cap_hours:g} h "
                "(policy.funding.min_runtime_cap_hours)")
    if remaining is None or budget_node is None:
        return f"job {job}: its project has no budget to fund it from (add one under `budgets:` in the config)"
    left = remaining - committed
    if asked > left + 1e-9:
        return (f"job {job} needs {asked:,.2f} normalised GPU-hours ({hours:g} h) but budget {budget_node} has "
                f"{remaining:,.2f} left, {committed:,.2f} of it already committed to the team's other funded jobs: "
                f"{max(left, 0):,.2f} free; unfund another job first or fund fewer hours")
    return None
