"""Which alerts the findings and budgets call for — pure functions of frames, policy and "now"
(UTC, naive). The idempotency key says what an alert is about, so planning the same state again
gives the same keys and the outbox sends nothing new:

* squatting: ``squatting|cluster|job|episode start|severity|channel|recipient`` — one per finding
  and severity; a raised severity is a new key (one more alert), a severity that falls and rises
  back is not;
* digest: ``digest|project|day|channel`` — the day before, per team, after ``digest_hour_utc``;
* budget: ``budget|node|period start|80 / 100 / exhaustion|channel``.

Quiet hours hold alerts below ``quiet_hours.urgent_severity`` (and every budget and digest alert)
until they end; the owner of a job hears of it by e-mail (``owners`` map, else the template).
"""

from __future__ import annotations

from datetime import datetime, time, timedelta

import polars as pl

from gpuledger.alerts import links, owner
from gpuledger.alerts.outbox import Alert
from gpuledger.rules.severity import SEVERITY_RANK, stage_minutes


def _s(n) -> str:
    """The plural ending for a count of GPUs ("1 idle GPU", "2 idle GPUs")."""
    return "" if n == 1 else "s"

def _clock(text: str) -> time:
    h, m = text.split(":")
    return time(int(h), int(m))


def quiet_until(now: datetime, quiet) -> datetime | None:
    """The end of the quiet hours ``now`` falls in, or None outside them (UTC clock times)."""
    if quiet is None:
        return None
    start, end, t = _clock(quiet.start), _clock(quiet.end), now.time()
    today_end = datetime.combine(now.date(), end)
    if start < end:
        return today_end if start <= t < end else None
    if t >= start:  # overnight: 22:00 -> 07:00 the next morning
        return today_end + timedelta(days=1)
    return today_end if t < end else None


def _not_before(now: datetime, policy, urgent: bool) -> datetime:
    until = quiet_until(now, policy.quiet_hours)
    return until if until is not None and not urgent else now


def owner_address(user: str | None, policy) -> str | None:
    if not user:
        return None
    if user in policy.owners:
        return policy.owners[user]
    return policy.owner_address_template.format(user=user) if policy.owner_address_template else None


def _recipients(policy, user: str | None) -> list[tuple[str, str | None]]:
    out = [(c, None) for c in policy.on_call]
    address = owner_address(user, policy)
    if policy.owner_channel and address:
        out.append((policy.owner_channel, address))
    return out


def _ts(value) -> str:
    return value.strftime("%Y-%m-%d %H:%M") if value is not None else "?"


def squatting_alerts(episodes: pl.DataFrame, policy, *, now: datetime, squatting=None, enforcement=None,
                     currency: str = "USD", enforcement_log: dict | None = None,
                     identities: dict | None = None, link_key: str | None = None) -> list[Alert]:
    """One alert per open episode at its current severity, to on-call and the owner.

    ``episodes``: squatting_findings rows (open ones: resolved_at NULL), or squatters_report rows
    (then ``idle_since`` marks the episode). ``squatting`` (SquattingPolicy) gives what happens next
    and when; ``enforcement`` whether preemption is dry run; ``enforcement_log`` maps (cluster,
    job_id) to what gpuledger.enforce last did about the job (its audit trail), said in the alert."""
    alerts = policy.alerts
    floor = SEVERITY_RANK[alerts.min_severity]
    out: list[Alert] = []
    if episodes.is_empty():
        return out
    if "resolved_at" in episodes.columns:
        episodes = episodes.filter(pl.col("resolved_at").is_null())
    for ep in episodes.sort("cluster", "job_id").iter_rows(named=True):
        severity = ep["severity"]
        if SEVERITY_RANK.get(severity, 0) < floor:
            continue
        episode = ep.get("first_seen") or ep["idle_since"]
        idle_since = ep.get("idle_since")
        nxt = ""
        if squatting is not None and idle_since is not None:
            second, preempt = _stage_starts(idle_since, squatting)
            if severity == "warning":
                nxt = f"second warning at {_ts(second)} UTC, eligible for preemption at {_ts(preempt)} UTC"
            elif severity == "second-warning":
                nxt = f"eligible for preemption at {_ts(preempt)} UTC"
            else:
                dry = enforcement is not None and enforcement.dry_run
                nxt = ("eligible for preemption now; enforcement is in dry run (it records, does not preempt)"
                       if dry else "eligible for preemption now: the next enforcement cycle may preempt it")
        thr = squatting.idle_threshold_ratio if squatting is not None else 0.0
        rule = (f"{ep.get('finding', 'squatting')}: GPU activity under {thr * 100:g} % (ratio {thr:g}) for "
                f"{squatting.sustained_minutes:g} min after a {squatting.grace_minutes:g} min grace"
                if squatting is not None else ep.get("finding", "squatting"))
        cost = ep.get("idle_cost")
        cur = ep.get("currency") or currency
        link = (f"{alerts.dashboard_url.rstrip('/')}/squatters?cluster={ep['cluster']}&job={ep['job_id']}"
                if alerts.dashboard_url else None)
        wasted = ep.get("gpu_hours_idle") or 0.0
        n_idle, n_total = ep.get("gpus_idle"), ep.get("gpus_total")
        ident = (identities or {}).get((ep["cluster"], ep["job_id"]))
        name = (ident or {}).get("name") or ep["job_id"]
        subject = f"[{severity}] job {name} ({ep.get('project')}) holds {n_idle} idle GPU{_s(n_idle)}"
        lines = [
            f"job {owner.called(ident, ep['job_id'])} {owner.where(ident, ep['cluster'])}, owner "
            f"{ep.get('user_name')}, project {ep.get('project')}",
            f"{n_idle} of {n_total} GPU{_s(n_total)} idle since {_ts(idle_since)} UTC",
            f"wasted {wasted:,.2f} GPU-hours" + (f", {cost:,.2f} {cur}" if cost is not None else ""),
            f"rule: {rule}", f"severity: {severity}",
        ]
        if nxt:
            lines.append(f"next: {nxt}")
        if enforcement_log and (ep["cluster"], ep["job_id"]) in enforcement_log:
            lines.append(f"enforcement: {enforcement_log[(ep['cluster'], ep['job_id'])]}")
        if link:
            lines.append(f"dashboard: {link}")
        payload = {"job_id": ep["job_id"], "name": (ident or {}).get("name"), "cluster": ep["cluster"],
                   "project": ep.get("project"), "hosts": (ident or {}).get("hosts"),
                   "gpu_model": (ident or {}).get("models"),
                   "owner": ep.get("user_name"), "severity": severity, "gpus_idle": ep.get("gpus_idle"),
                   "gpus_total": ep.get("gpus_total"), "idle_since": idle_since, "gpu_hours_idle": wasted,
                   "idle_cost": None if cost is None else str(cost), "currency": cur if cost is not None else None,
                   "next": nxt, "dashboard": link}
        urgent = (alerts.quiet_hours is not None
                  and SEVERITY_RANK[severity] >= SEVERITY_RANK[alerts.quiet_hours.urgent_severity])
        # the owner reads a letter, not on-call's lines: no modes, the commands for their scheduler
        mine = owner.squatting(ep, ident, alerts, threshold=thr, currency=cur,
                               next_words=_owner_next(severity, squatting, idle_since),
                               choices=links.mail_lines(ep["cluster"], ep["job_id"], ep.get("user_name"), alerts,
                                                        link_key))
        for channel, recipient in _recipients(alerts, ep.get("user_name")):
            key = f"squatting|{ep['cluster']}|{ep['job_id']}|{episode:%Y-%m-%dT%H:%M:%S}|{severity}|{channel}|{recipient or ''}"
            title, text = mine if recipient else (subject, "\n".join(lines))
            out.append(Alert(key=key, kind="squatting", channel=channel, recipient=recipient, severity=severity,
                             subject=title, body=text, created_at=now,
                             not_before=_not_before(now, alerts, urgent), payload=payload))
    return out


def _stage_starts(idle_since: datetime, squatting) -> tuple[datetime, datetime]:
    """When a finding idle since ``idle_since`` reaches its second warning and preemption."""
    starts = stage_minutes(squatting)
    return (idle_since + timedelta(minutes=starts["second-warning"]),
            idle_since + timedelta(minutes=starts["preempt-eligible"]))


def _owner_next(severity: str, squatting, idle_since) -> str:
    """What happens to the owner's job next, and when, in their words."""
    if squatting is None or idle_since is None:
        return ""
    second, preempt = _stage_starts(idle_since, squatting)
    if severity == "warning":
        return (f"if it stays idle, a second warning at {_ts(second)} UTC, and from {_ts(preempt)} UTC it may be "
                "preempted (stopped, or requeued if it checkpoints) to give its GPUs to waiting work")
    if severity == "second-warning":
        return (f"if it stays idle, from {_ts(preempt)} UTC it may be preempted (stopped, or requeued if it "
                "checkpoints) to give its GPUs to waiting work")
    return ("it may be preempted now (stopped, or requeued if it checkpoints) to give its GPUs to waiting work, "
            "unless it starts using them")


def digest_alerts(episodes: pl.DataFrame, policy, *, now: datetime) -> list[Alert]:
    """The day before's squatting, one message per project (team), once ``digest_hour_utc`` passed.
    ``episodes``: squatting_findings rows of any state."""
    alerts = policy.alerts
    if now.hour < alerts.digest_hour_utc or episodes.is_empty():
        return []
    day = now.date() - timedelta(days=1)
    lo, hi = datetime.combine(day, time()), datetime.combine(now.date(), time())
    seen = episodes.filter((pl.col("first_seen") < hi) & (pl.col("resolved_at").fill_null(pl.col("last_seen")) >= lo))
    out = []
    for (project,), rows in sorted(seen.group_by(["project"]), key=lambda g: str(g[0][0])):
        rows = rows.sort("gpu_hours_idle", "job_id", descending=[True, False], nulls_last=True)
        wasted = rows["gpu_hours_idle"].sum() or 0.0
        body = [f"{rows.height} idle-GPU findings for project {project} on {day}, {wasted:,.2f} GPU-hours wasted:"]
        body += [f"- job {r['job_id']} ({r['user_name']}): {r['severity']}, {r['gpus_idle']} of {r['gpus_total']} "
                 f"GPUs idle since {_ts(r['idle_since'])}, {r['gpu_hours_idle'] or 0:,.2f} GPU-hours"
                 for r in rows.iter_rows(named=True)]
        for channel in alerts.teams.get(project, alerts.on_call):
            out.append(Alert(key=f"digest|{project}|{day}|{channel}", kind="digest", channel=channel,
                             subject=f"idle GPUs digest {day}: {project}", body="\n".join(body), created_at=now,
                             not_before=_not_before(now, alerts, False),
                             payload={"project": project, "day": str(day), "findings": rows.height,
                                      "gpu_hours_idle": wasted}))
    return out


def budget_alerts(burn: pl.DataFrame, policy, *, now: datetime) -> list[Alert]:
    """A node passing each threshold (% of its budget consumed) and a projected exhaustion before
    its period ends. ``burn``: queries.budget_report rows (normalised GPU-hours). Only nodes with a
    budget of their own: an ancestor whose budget is the sum of its descendants' would repeat
    their alerts (budget_own false)."""
    alerts = policy.alerts
    out = []
    for b in burn.sort("node", "period_start").iter_rows(named=True):
        budget = b["budget_gpu_hours"]
        if not budget or b.get("budget_own") is False:
            continue
        pct = 100.0 * b["consumed_gpu_hours"] / budget
        figures = (f"{b['consumed_gpu_hours']:,.1f} of {budget:,.1f} normalised GPU-hours consumed ({pct:.1f} %) "
                   f"in {b['period_start']} .. {b['period_end']}, burning {b['burn_gpu_hours_per_day'] or 0:,.1f}/day")
        # the highest threshold passed only: passing 80 % and 100 % between two cycles is one alert
        # (100 %), and 80 % is not sent after it; each threshold still alerts once (its own key)
        passed = [t for t in sorted(alerts.budget_thresholds_pct) if pct >= t]
        hits = [(f"{passed[-1]:g}", f"budget {b['node']}: {passed[-1]:g} % consumed")] if passed else []
        exhaustion = b.get("projected_exhaustion")
        if b.get("status") == "at-risk" and exhaustion is not None:
            hits.append(("exhaustion", (f"budget {b['node']}: projected to run out {_ts(exhaustion)} UTC, "
                                        f"before its period ends {b['period_end']}")))
        link = (f"{alerts.dashboard_url.rstrip('/')}/budgets?node={b['node']}" if alerts.dashboard_url else None)
        for level, subject in hits:
            # the subject is the subject, not repeated; then what it means for the team's jobs
            body = figures + f"\nfor the team's jobs: {_budget_consequence(b, level)}" + (
                f"\ndashboard: {link}" if link else "")
            for channel in [*alerts.on_call, *(c for c in alerts.teams.get(b["node"], []) if c not in alerts.on_call)]:
                out.append(Alert(key=f"budget|{b['node']}|{b['period_start']}|{level}|{channel}", kind="budget",
                                 channel=channel, severity=level, subject=subject, body=body, created_at=now,
                                 not_before=_not_before(now, alerts, False),
                                 payload={"node": b["node"], "level": level, "consumed_pct": round(pct, 3),
                                          "projected_exhaustion": exhaustion, "dashboard": link}))
    return out


def _budget_consequence(b: dict, level: str) -> str:
    """What a budget threshold means for the node's jobs (design.md: funded vs unfunded), in words."""
    after = f"until the next period starts after {b['period_end']}"
    unfunded = ("new and running jobs are no longer funded: they queue below funded work, start only on GPUs "
                "nobody funded needs, and may be preempted when funded work waits (a job inside its minimum runtime "
                "keeps it)")
    if level == "exhaustion":
        return f"at this burn rate the budget runs out before the period ends; then {unfunded}, {after}"
    if float(level) >= 100:
        return f"{unfunded}, {after}; ask for more budget to be funded again"
    left = max(b["budget_gpu_hours"] - b["consumed_gpu_hours"], 0.0)
    burn = b.get("burn_gpu_hours_per_day") or 0.0
    when = f"in about {left / burn:,.1f} days at this burn rate" if burn > 0 else "not at all while nothing burns"
    return f"still funded; at 100 % (reached {when}) {unfunded}, {after}"


def preemption_alerts(rows: list[dict], policy, *, now: datetime, identities: dict | None = None) -> list[Alert]:
    """One message to the owner of each job gpuledger preempted (``rows``: preempted_jobs.sql), once
    per preemption (alerts.owner.preempted's words). Owners without an address (no owner channel,
    not in ``owners``, no template) hear nothing; the audit has it."""
    alerts = policy.alerts
    out = []
    for r in rows:
        address = owner_address(r.get("user_name"), alerts)
        if not (alerts.owner_channel and address):
            continue
        ident = (identities or {}).get((r["cluster"], r["job_id"]))
        subject, body = owner.preempted(r, ident, alerts, checkpoint_label=policy.enforcement.checkpoint_label)
        held = (None if not (r.get("start_time") and r.get("preempted_at") and r.get("gpus") is not None) else
                round(float(r["gpus"]) * max((r["preempted_at"] - r["start_time"]).total_seconds(), 0) / 3600, 4))
        payload = {"job_id": r["job_id"], "name": (ident or {}).get("name") or r.get("name"), "cluster": r["cluster"],
                   "project": r.get("project"), "owner": r.get("user_name"), "preempted_at": r["preempted_at"],
                   "mode": r.get("mode"), "rule": r.get("rule"), "reason": r["reason"], "gpus": r.get("gpus"),
                   "gpu_model": (ident or {}).get("models") or r.get("gpu_model"),
                   "hosts": (ident or {}).get("hosts"), "gpu_hours_held": held}
        out.append(Alert(key=f"preempted|{r['cluster']}|{r['job_id']}|{r['action_id']}|{alerts.owner_channel}|{address}",
                         kind="preempted", channel=alerts.owner_channel, recipient=address, severity="preempted",
                         subject=subject, body=body, created_at=now, not_before=now, payload=payload))
    return out
