"""One alert cycle: plan from the warehouse (open squatting episodes, the day's digest, budget
burn), write the new alerts to the outbox, deliver what is due. The CLI (`gpuledger alerts run`)
and the Dagster sensor (pipelines/defs/alerts) both run this."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import polars as pl

from gpuledger import facts, warehouse
from gpuledger.alerts.links import secret
from gpuledger.alerts.outbox import DeliveryReport, deliver, enqueue
from gpuledger.alerts.plan import budget_alerts, digest_alerts, preemption_alerts, squatting_alerts
from gpuledger.channels import notifier_for as default_notifier
from gpuledger.enforce.team_store import load_owner_choices
from gpuledger.sql import load_sql


@dataclass
class CycleReport:
    planned: int
    new: int
    delivery: DeliveryReport


def plan_alerts(con, policy, *, now: datetime, currency: str = "USD") -> list:
    """Every alert the warehouse's state calls for at ``now`` (the data's "now")."""
    # the findings as of `now` (facts.findings): the pipeline's latest evaluation at or
    # before `now`, its episodes as they were then, when it is recent; otherwise the rules
    # evaluated at `now` (an `alerts run --now T` plans from the findings as of T, never later ones)
    found = facts.findings(con, policy=policy, now=now)
    open_now = kept_out(con, found.frame, now)
    episodes = facts.finding_episodes(con, at=now) if found.source == facts.MATERIALIZED else None
    preempted = preempted_jobs(con, since=now - PREEMPTION_NOTICE_WINDOW)
    keys = [f"{c}/{j}" for c, j in open_now.select("cluster", "job_id").iter_rows()] if open_now.height else []
    identities = job_identities(con, keys + [f"{r['cluster']}/{r['job_id']}" for r in preempted])

    alerts = squatting_alerts(open_now, policy, now=now, squatting=policy.squatting,
                              enforcement=policy.enforcement, currency=currency,
                              enforcement_log=enforcement_log(con, now=now), identities=identities,
                              link_key=secret() if policy.alerts.self_service.url else None)
    if episodes is not None:
        alerts += digest_alerts(episodes, policy, now=now)
    alerts += budget_alerts(facts.budget(con, policy=policy, as_of=now).frame, policy, now=now)
    alerts += preemption_alerts(preempted, policy, now=now, identities=identities)
    return alerts


def kept_out(con, findings, now: datetime):
    """The findings without the jobs their owners keep at ``now`` (a squatting alert's keep: no
    warning escalates while it lasts; enforce.team_store)."""
    kept = {k for k, c in load_owner_choices(con, now).items() if c.kept_until is not None}
    if not kept or not findings.height:
        return findings

    keys = pl.DataFrame(sorted(kept), schema={"cluster": pl.String, "job_id": pl.String}, orient="row")
    return findings.join(keys, on=["cluster", "job_id"], how="anti")


#: how far back a preemption is still told to its owner (a first alert cycle after a long pause
#: does not mail a month of history; each preemption is told once, by its key)
PREEMPTION_NOTICE_WINDOW = timedelta(days=2)


def job_identities(con, keys: list[str]) -> dict[tuple[str, str], dict]:
    """(cluster, job_id) -> what people know the job by (name, scheduler id, models, hosts), for the
    ``keys`` ('cluster/job_id') an alert is about."""
    if not keys:
        return {}
    cur = con.execute(load_sql(__package__, "job_identities.sql"), {"keys": sorted(set(keys))})
    names = [d[0] for d in cur.description]
    return {(r[0], r[1]): dict(zip(names, r, strict=True)) for r in cur.fetchall()}


def preempted_jobs(con, *, since: datetime) -> list[dict]:
    """Jobs gpuledger preempted for real since ``since`` (the audit's wall clock), with their owners."""
    cur = con.execute(load_sql(__package__, "preempted_jobs.sql"), {"since": since})
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def enforcement_log(con, *, now: datetime) -> dict[tuple[str, str], str]:
    """(cluster, job_id) -> the latest warn / preempt action gpuledger.enforce recorded for the job
    up to ``now`` (table enforcement_audit), in words: what the alert says enforcement did."""
    rows = con.execute(
        "SELECT cluster, job_id, action, planned_at, outcome, dry_run FROM enforcement_audit "
        "WHERE action IN ('warn', 'preempt') AND planned_at <= ? "
        "QUALIFY row_number() OVER (PARTITION BY cluster, job_id ORDER BY planned_at DESC, phase DESC, attempt DESC) = 1",
        [now]).fetchall()
    words = {"warn": "warned", "preempt": "preemption"}
    return {(c, j): f"{words[a]} {outcome}{' (dry run)' if dry and outcome != 'dry-run' else ''} at "
                    f"{at:%Y-%m-%d %H:%M} UTC" for c, j, a, at, outcome, dry in rows}


def run_alert_cycle(path, policy, *, now: datetime | None = None, clock: datetime | None = None,
                    notifier_for=None, currency: str = "USD") -> CycleReport:
    """Plan at ``now`` (default: the data's newest time), enqueue, deliver at ``clock`` (default:
    the wall clock)."""
    with warehouse.open_reader(path) as con:
        now = now or facts.data_now(con)
        alerts = plan_alerts(con, policy, now=now, currency=currency)
    new = enqueue(path, alerts)
    report = deliver(path, notifier_for or default_notifier, now=clock, max_attempts=policy.alerts.max_attempts,
                     retry_base_seconds=policy.alerts.retry_base_seconds)
    return CycleReport(planned=len(alerts), new=new, delivery=report)
