"""An owner's answer to a squatting alert (issue 38): keep the session for a bounded time, release
it now, or ask for an exemption. Pure: the rules that grant or refuse a choice, and what
enforcement does with a granted one (enforce.squatters, enforce.rails). The warehouse side is
enforce.team_store; the signed links are gpuledger.alerts.links.

A keep is bounded three ways, so it can never become a permanent exemption: each one lasts
``min_keep_hours``..``max_keep_hours`` (1–4 h by default), a job has at most one running at a
time, and a team's granted hours over a rolling week may not pass its allowance
(``allowance_hours_per_week``, per team in ``team_allowance_hours``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

KEEP, RELEASE, EXEMPTION = "keep", "release", "exemption"
GRANTED, REFUSED = "granted", "refused"
WEEK = timedelta(days=7)


@dataclass(frozen=True)
class OwnerChoice:
    """A granted choice enforcement honours: a keep until ``kept_until``, or a release (stop now)."""

    choice: str
    user_name: str
    asked_at: datetime
    kept_until: datetime | None = None
    hours: float | None = None


def allowance_node(project: str | None, parent_of: Mapping[str, str | None], per_team: Mapping[str, float]
                   ) -> str | None:
    """The team whose allowance a project's keeps count against: the nearest node on its path
    (itself first) with its own allowance in the config; None: the default allowance, per project."""
    node, seen = project, set()
    while node is not None and node not in seen:
        if node in per_team:
            return node
        seen.add(node)
        node = parent_of.get(node)
    return None


def keep_refusal(*, job: str, hours: float, now: datetime, policy, team: str, allowance: float,
                 granted: list[tuple[str, float, datetime]], active_until: datetime | None) -> str | None:
    """Why a keep of ``hours`` for ``job`` is refused (None: granted). ``granted``: (job, hours,
    asked_at) of the keeps granted to the team's jobs; ``active_until``: the end of the job's
    keep still running, if any; ``policy``: config.OwnerSelfService."""
    lo, hi = policy.min_keep_hours, policy.max_keep_hours
    if not lo <= hours <= hi:
        return f"a keep lasts {lo:g} to {hi:g} h (policy.alerts.self_service), not {hours:g} h"
    if active_until is not None and active_until > now:
        return (f"job {job} is already kept until {active_until:%Y-%m-%d %H:%M} UTC: one keep at a time; ask again "
                "once it ends, or ask for an exemption")
    used = sum(h for _, h, at in granted if now - WEEK < at <= now)
    if used + hours > allowance + 1e-9:
        jobs = ", ".join(sorted({j for j, _, at in granted if now - WEEK < at <= now}))
        return (f"team {team}'s allowance is {allowance:g} h of kept sessions per rolling 7 days; {used:g} h are "
                f"used ({jobs}), {max(allowance - used, 0):g} h left, less than the {hours:g} h asked. "
                "Ask for an exemption instead")
    return None
