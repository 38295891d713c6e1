"""The warehouse side of a lead's own queue and an owner's answer to an alert (migration 028):
read the choices enforcement honours, and change them — each change checked (the job is the
team's and still queued; funding fits the budget left; a keep fits the allowance) and written
with its audit row (who, how they were identified, when, before -> after) in one transaction.

Who may act is decided by the caller (the dashboards' sign-in, the CLI's named lead checked
against ``dashboards.leads``: gpuledger.dashboards.access); this module is handed the team's
projects and never widens them. Nothing here talks to a scheduler: enforcement's next plan ->
apply carries the choices there (enforce.policy, enforce.apply)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta

from gpuledger.enforce import keeps
from gpuledger.enforce.keeps import GRANTED, KEEP, RELEASE, OwnerChoice
from gpuledger.enforce.team import TeamChoice, fund_check, normalised_gpu_hours

from gpuledger import facts, warehouse
from gpuledger.errors import UsageError
from gpuledger.sql import load_sql

_QUEUE = load_sql(__package__, "team_queue.sql")


def _has(con, table: str) -> bool:
    return bool(con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = ?",
                            [table]).fetchone()[0])


# --- what enforcement reads --------------------------------------------------------------------

def load_choices(con) -> dict[tuple[str, str], TeamChoice]:
    """Every lead's choice, by job key."""
    if not _has(con, "team_choices"):
        return {}
    return {(c, j): TeamChoice(node=n, set_by=by, set_at=at, position=pos, fund_hours=fh, fund_gpu_hours=fg,
                               held=bool(held))
            for c, j, n, pos, fh, fg, held, by, at in con.execute(
                "SELECT cluster, job_id, node, position, fund_hours, fund_gpu_hours, held, set_by, set_at "
                "FROM team_choices").fetchall()}


def load_owner_choices(con, now: datetime) -> dict[tuple[str, str], OwnerChoice]:
    """Per job, the owner's granted choice in force at ``now``: a keep not yet over, or a release
    asked for (the newest granted choice asked at or before ``now`` wins)."""
    if not _has(con, "owner_choices"):
        return {}
    out = {}
    for c, j, choice, user, at, until, hours in con.execute(
            "SELECT cluster, job_id, choice, user_name, asked_at, kept_until, hours FROM owner_choices "
            "WHERE outcome = 'granted' AND choice IN ('keep', 'release') AND asked_at <= $now "
            "QUALIFY row_number() OVER (PARTITION BY cluster, job_id ORDER BY asked_at DESC) = 1",
            {"now": now}).fetchall():
        if choice == KEEP and (until is None or until <= now):
            continue
        out[(c, j)] = OwnerChoice(choice=choice, user_name=user, asked_at=at, kept_until=until, hours=hours)
    return out


# --- the team's queue --------------------------------------------------------------------------

@dataclass(frozen=True)
class Team:
    """A lead acting for one team: the org node, its projects, who and how identified."""

    node: str
    projects: frozenset[str]
    lead: str
    identity: str  # "oidc" / "cli (OS user NAME)"


def queue(con, projects, now: datetime) -> list[dict]:
    """The projects' jobs not ended at ``now`` (running or queued), each with its lead's choice:
    cluster, job_id, project, name, user_name, gpus, gpu_model, queued, min_runtime_s, position,
    fund_hours, fund_gpu_hours, held, set_by, set_at."""
    if not _has(con, "team_choices"):
        raise UsageError("this warehouse predates team queues (migration 028): run `gpuledger warehouse migrate`")
    cur = con.execute(_QUEUE, {"projects": sorted(projects), "now": now})
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def _find(rows: list[dict], job: str, team: Team) -> dict:
    """The team's job named ``job`` ("JOB" or "CLUSTER/JOB"), or a UsageError naming the fix."""
    cluster, _, job_id = job.rpartition("/")
    hits = [r for r in rows if r["job_id"] == job_id and (not cluster or r["cluster"] == cluster)]
    if not hits:
        raise UsageError(f"job {job!r} is not a running or queued job of team {team.node} (projects "
                         f"{', '.join(sorted(team.projects)) or 'none'}); `gpuledger team show --as {team.lead}` "
                         "lists them")
    if len(hits) > 1:
        raise UsageError(f"job {job!r} exists on clusters {', '.join(sorted(r['cluster'] for r in hits))}: "
                         "name it CLUSTER/JOB")
    return hits[0]


def _queued(row: dict, what: str) -> None:
    if not row["queued"]:
        raise UsageError(f"job {row['cluster']}/{row['job_id']} is already running: a lead {what} queued jobs only")


def _audit(con, team: Team, change: str, row: dict, before: str, after: str, at: datetime) -> None:
    con.execute("INSERT INTO team_audit VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [at, team.lead, team.identity, team.node, change, row["cluster"], row["job_id"], before, after])


def _upsert(con, team: Team, row: dict, at: datetime, **values) -> None:
    cols = ", ".join(values)
    con.execute(f"INSERT INTO team_choices (cluster, job_id, node, set_by, set_at, {cols}) "
                f"VALUES (?, ?, ?, ?, ?{', ?' * len(values)}) ON CONFLICT (cluster, job_id) DO UPDATE SET "
                "node = excluded.node, set_by = excluded.set_by, set_at = excluded.set_at, "
                + ", ".join(f"{c} = excluded.{c}" for c in values),
                [row["cluster"], row["job_id"], team.node, team.lead, at, *values.values()])


def _place(position) -> str:
    return f"position {position}" if position is not None else "no place in the lead's order"


def set_order(con, team: Team, jobs: list[str], *, now: datetime, at: datetime) -> list[tuple[str, str, str]]:
    """The team's queued jobs ``jobs`` in this order (first served first); the team's other
    queued jobs leave the lead's order. Returns (job, before, after) per job whose place changed."""
    rows = queue(con, team.projects, now)
    picked = [_find(rows, j, team) for j in jobs]
    for r in picked:
        _queued(r, "orders")
    keys = [(r["cluster"], r["job_id"]) for r in picked]
    if len(set(keys)) < len(keys):
        raise UsageError("a job is named twice in the order: name each once, first served first")
    wanted = {k: n for n, k in enumerate(keys, start=1)}
    changed = []
    with warehouse.transaction(con):
        for r in rows:
            key = (r["cluster"], r["job_id"])
            new = wanted.get(key)
            if not r["queued"] or new == r["position"]:
                continue
            _upsert(con, team, r, at, position=new)
            before, after = _place(r["position"]), _place(new)
            _audit(con, team, "order", r, before, after, at)
            changed.append((f"{r['cluster']}/{r['job_id']}", before, after))
    return changed


def set_funding(con, team: Team, job: str, hours: float | None, *, now: datetime, at: datetime, cfg
                ) -> tuple[str, str, str]:
    """Fund a queued job from the team's budget for ``hours`` (its minimum runtime), or stop
    funding it (``hours`` None). Refused, with why, beyond the budget the team has left."""
    rows = queue(con, team.projects, now)
    r = _find(rows, job, team)
    _queued(r, "funds")
    before = _funded_words(r["fund_hours"], r["fund_gpu_hours"])
    asked = None
    if hours is not None:
        node, remaining = binding_budget(con, cfg, r["project"], now)
        asked = normalised_gpu_hours(r["gpus"], hours, budget_weight(con, r["gpu_model"]))
        committed = committed_gpu_hours(con, node, now, exclude=(r["cluster"], r["job_id"]))
        why = fund_check(job=f"{r['cluster']}/{r['job_id']}", asked=asked, remaining=remaining, committed=committed,
                         budget_node=node, hours=hours, cap_hours=cfg.policy.funding.min_runtime_cap_hours)
        if why:
            raise UsageError(why)
    after = _funded_words(hours, asked)
    with warehouse.transaction(con):
        _upsert(con, team, r, at, fund_hours=hours, fund_gpu_hours=asked)
        _audit(con, team, "fund" if hours is not None else "unfund", r, before, after, at)
    return f"{r['cluster']}/{r['job_id']}", before, after


def set_hold(con, team: Team, job: str, held: bool, *, now: datetime, at: datetime) -> tuple[str, str, str]:
    """Hold a queued job (it does not start until released) or release it."""
    rows = queue(con, team.projects, now)
    r = _find(rows, job, team)
    _queued(r, "holds and releases")
    before, after = ("held" if r["held"] else "not held"), ("held" if held else "not held")
    with warehouse.transaction(con):
        _upsert(con, team, r, at, held=held)
        _audit(con, team, "hold" if held else "release", r, before, after, at)
    return f"{r['cluster']}/{r['job_id']}", before, after


def _funded_words(hours, gpu_hours) -> str:
    if hours is None:
        return "not funded by the team"
    return f"funded by the team for {hours:g} h ({gpu_hours:,.2f} normalised GPU-h)"


def budget_weight(con, gpu_model: str | None) -> float:
    """The rate card's budget weight for a GPU model (its newest entry; 1.0 when it has none)."""
    row = con.execute("SELECT budget_weight FROM rate_card WHERE gpu_model = ? ORDER BY effective_from DESC "
                      "LIMIT 1", [gpu_model]).fetchone()
    return float(row[0]) if row else 1.0


def binding_budget(con, cfg, project: str, now: datetime) -> tuple[str | None, float | None]:
    """(node, remaining normalised GPU-hours) of the budget on the project's path with the least
    left now (every budget on the path caps it); (None, None) without one."""
    parent = dict(con.execute("SELECT node, parent FROM org_nodes").fetchall())
    path, node = [], project
    while node is not None and node not in path:
        path.append(node)
        node = parent.get(node)
    rows = [r for r in facts.budget(con, policy=cfg.policy, as_of=now).frame.iter_rows(named=True)
            if r["node"] in path and r.get("budget_own") and r["period_start"] <= now.date() < r["period_end"]]
    if not rows:
        return None, None
    least = min(rows, key=lambda r: r["remaining_gpu_hours"])
    return least["node"], float(least["remaining_gpu_hours"])


def committed_gpu_hours(con, budget_node: str | None, now: datetime, *, exclude) -> float:
    """What the leads' other fund marks on queued jobs under ``budget_node`` commit (a started job
    burns the budget itself, so it commits nothing more here)."""
    if budget_node is None or not _has(con, "team_choices"):
        return 0.0
    members = _under(dict(con.execute("SELECT node, parent FROM org_nodes").fetchall()), budget_node)
    rows = con.execute(
        "SELECT t.cluster, t.job_id, t.fund_gpu_hours FROM team_choices t JOIN jobs j USING (cluster, job_id) "
        "WHERE t.fund_gpu_hours IS NOT NULL AND list_contains($members, j.project) "
        "AND (j.start_time IS NULL OR j.start_time > $now) AND (j.end_time IS NULL OR j.end_time > $now)",
        {"members": sorted(members), "now": now}).fetchall()
    return sum(float(g) for c, j, g in rows if (c, j) != exclude)


def job_story(con, job_id: str) -> list[tuple[str, datetime, str]]:
    """(cluster, when, words) of every lead's change and owner's answer about ``job_id``, oldest
    first (enforce explain prints them beside the actions they led to)."""
    out = []
    if _has(con, "team_audit"):
        for cluster, at, by, identity, node, change, before, after in con.execute(
                "SELECT cluster, changed_at, changed_by, identity, node, change, before, after FROM team_audit "
                "WHERE job_id = ?", [job_id]).fetchall():
            out.append((cluster, at, f"team {node}'s lead {by} [{identity}]: {change}, {before} -> {after}"))
    if _has(con, "owner_choices"):
        for cluster, at, user, identity, choice, hours, outcome, why in con.execute(
                "SELECT cluster, asked_at, user_name, identity, choice, hours, outcome, why FROM owner_choices "
                "WHERE job_id = ?", [job_id]).fetchall():
            what = f"{choice} {hours:g} h" if hours is not None else choice
            out.append((cluster, at, f"its owner {user} [{identity}] asked to {what}: {outcome}: {why}"))
    return sorted(out, key=lambda r: (r[1], r[2]))


# --- an owner's answer to an alert -------------------------------------------------------------

def link_id(token: str) -> str:
    """A signed link's identity in the warehouse (a digest: the link itself is a credential)."""
    return hashlib.sha256(token.encode()).hexdigest()[:32]


def owner_choice(con, cfg, *, cluster: str, job_id: str, user: str, identity: str, choice: str,
                 hours: float | None, now: datetime, token: str | None = None) -> tuple[str, str, datetime | None]:
    """Record an owner's choice for their job, granted or refused: (outcome, why, kept until).
    A link acts once (its second use is refused, saying when it was used); the job must be the
    user's and still running; a keep must fit the bounds and the team's weekly allowance."""
    policy = cfg.policy.alerts.self_service
    ident = link_id(token) if token else None
    used = None if ident is None else con.execute("SELECT asked_at, outcome FROM owner_choices WHERE link_id = ?",
                                                  [ident]).fetchone()
    job = con.execute("SELECT project, user_name, start_time, end_time FROM jobs WHERE cluster = ? AND job_id = ?",
                      [cluster, job_id]).fetchone()
    project = job[0] if job else None
    outcome, why, until = GRANTED, "", None
    if used is not None:  # audited too, without the link's id (it is the first use's)
        ident, outcome = None, "refused"
        why = f"this link was already used at {used[0]:%Y-%m-%d %H:%M} UTC ({used[1]}): each link acts once"
    elif job is None:
        outcome, why = "refused", f"job {cluster}/{job_id} is not in the warehouse"
    elif (job[1] or "") != user:
        outcome, why = "refused", f"job {cluster}/{job_id} belongs to {job[1]}, not {user}: only its owner chooses"
    elif job[3] is not None and job[3] <= now:
        outcome, why = "refused", f"job {cluster}/{job_id} ended at {job[3]:%Y-%m-%d %H:%M} UTC: nothing to keep"
    elif choice == KEEP:
        parent = dict(con.execute("SELECT node, parent FROM org_nodes").fetchall())
        team = keeps.allowance_node(project, parent, policy.team_allowance_hours)
        allowance = policy.team_allowance_hours[team] if team else policy.allowance_hours_per_week
        members = _under(parent, team) if team else {project}
        granted = [(f"{c}/{j}", h, at) for c, j, h, at, p in con.execute(
            "SELECT cluster, job_id, hours, asked_at, project FROM owner_choices WHERE outcome = 'granted' "
            "AND choice = 'keep'").fetchall() if p in members]
        active = con.execute("SELECT max(kept_until) FROM owner_choices WHERE cluster = ? AND job_id = ? "
                             "AND outcome = 'granted' AND choice = 'keep'", [cluster, job_id]).fetchone()[0]
        refusal = keeps.keep_refusal(job=f"{cluster}/{job_id}", hours=float(hours or 0), now=now, policy=policy,
                                     team=team or project, allowance=allowance, granted=granted, active_until=active)
        if refusal:
            outcome, why = "refused", refusal
        else:
            until = now + timedelta(hours=float(hours))
            why = (f"kept until {until:%Y-%m-%d %H:%M} UTC: no squatting warning or preemption before then; "
                   f"counted against team {team or project}'s {allowance:g} h per rolling 7 days")
    elif choice == RELEASE:
        why = "released by its owner: the next enforcement cycle stops it (plan -> apply, dry run where enforcement is)"
    else:
        why = "an exemption was asked for: on-call decides (policy.alerts.contact); enforcement goes on meanwhile"
    with warehouse.transaction(con):
        con.execute("INSERT INTO owner_choices VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [now, cluster, job_id, project, user, identity, choice, hours, until, outcome, why, ident])
    return outcome, why, until


def _under(parent: dict, node: str) -> set[str]:
    """``node`` and every node below it."""
    out = {node}
    grew = True
    while grew:
        grew = False
        for child, up in parent.items():
            if up in out and child not in out:
                out.add(child)
                grew = True
    return out
