"""The enforcement audit trail in the warehouse (migration 011): planned and applied actions,
warnings issued, and per job the priority gpuledger set and its preemption count.

Writes go through ``warehouse.transaction`` on an ``open_writer`` connection; each function
writes whole rows in one transaction, so a failure leaves nothing half-written.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime

import polars as pl
from gpuledger.enforce.model import (
    HOLD,
    NONE,
    PREEMPT,
    RELEASE,
    SET_PRIORITY,
    WARN,
    Action,
    JobHistory,
    Warning,
)

from gpuledger import warehouse
from gpuledger.heap import collector_paused
from gpuledger.rules.clock import utc_now
from gpuledger.sql import load_sql

DONE = "done"


def _has_tables(con) -> bool:
    return bool(con.execute("SELECT count(*) FROM information_schema.tables "
                            "WHERE table_name = 'enforcement_audit'").fetchone()[0])


def plan_id_for(actions: list[Action], now: datetime) -> str:
    """Same cycle and same actions -> same id: recording a plan twice records it once."""
    digest = hashlib.sha256(repr([(a.action, a.cluster, a.job_id, a.rule, a.priority, a.mode, a.stage, a.reason)
                                  for a in actions]).encode())
    return f"{now:%Y%m%dT%H%M%SZ}-{digest.hexdigest()[:10]}"


def number(actions: list[Action], now: datetime) -> str:
    """Give every action its id ``<plan_id>:<n>``; returns the plan id."""
    for a in actions:
        a.action_id = None
    plan_id = plan_id_for(actions, now)
    for n, a in enumerate(actions):
        a.action_id = f"{plan_id}:{n}"
    return plan_id


def _row(a: Action, *, phase: str, attempt: int, plan_id: str, now: datetime, outcome: str,
         error: str | None = None, backend: str | None = None, dry_run: bool | None = None,
         recorded_at: datetime | None = None, detail: str | None = None, cause: str | None = None) -> list:
    return [a.action_id, phase, attempt, plan_id, now, recorded_at or utc_now(), a.action, a.cluster, a.job_id,
            a.project,
            a.reason, a.rule, a.priority, a.mode, a.funded, a.min_runtime_until, a.warned_at,
            a.dry_run if dry_run is None else dry_run, backend, outcome, error,
            _INPUTS_JSON({**a.figures, TARGET: _target(a)}), detail, cause]


TARGET = "_target"  # in `inputs`: what a backend needs to find the job again (load_plan)
# json.dumps(sort_keys=True, default=str), its encoder built once: a cycle writes one per action
_INPUTS_JSON = json.JSONEncoder(sort_keys=True, default=str).encode


def _target(a: Action) -> dict:
    return {"name": a.name, "namespace": a.namespace, "source": a.source, "kind": a.kind, "stage": a.stage,
            "scheduler_job": a.scheduler_job, "observed": a.observed, "serves": a.serves,
            "idle_since": a.idle_since.strftime("%Y-%m-%dT%H:%M:%S") if a.idle_since else None}


_COLUMNS = ("action_id", "phase", "attempt", "plan_id", "planned_at", "recorded_at", "action", "cluster", "job_id",
            "project", "reason", "rule", "priority", "mode", "funded", "min_runtime_until", "warned_at", "dry_run",
            "backend", "outcome", "error", "inputs", "detail", "cause")


def _insert(con, rows: list[list]) -> None:
    """Many audit rows at once (a cycle plans one per job: thousands), as one polars frame DuckDB
    scans, not row by row. Not pyarrow's own conversion: its first one imports pandas (0.6 s)."""
    if not rows:
        return

    frame = pl.DataFrame(dict(zip(_COLUMNS, map(list, zip(*rows, strict=True)), strict=True)), schema=_types())
    con.register("_audit_rows", frame)
    try:
        con.execute("INSERT OR IGNORE INTO enforcement_audit SELECT * FROM _audit_rows")
    finally:
        con.unregister("_audit_rows")


def _types() -> dict:
    ts, s = pl.Datetime("us"), pl.String
    types = (s, s, pl.Int32, s, ts, ts, s, s, s, s, s, s, pl.Int64, s, pl.Boolean, ts, ts, pl.Boolean, s, s, s, s, s, s)
    return dict(zip(_COLUMNS, types, strict=True))


@collector_paused()
def record_plan(con, actions: list[Action], *, now: datetime) -> str:
    """Audit rows for a planned cycle and the warnings it issues (a warning is a notification, so
    it is issued in dry run too: the warning history is what a later preemption relies on)."""
    plan_id = number(actions, now)
    # A `none` row is stored when its reason differs from the job's last one, and so is a dry-run
    # `set-priority` / `hold` / `release` (nothing applies it, so it repeats every cycle): a quiet job costs one row, not
    # one per cycle (explain shows the latest).
    last = {} if not _has_tables(con) else {
        (c, j, act): r for c, j, act, r in con.execute(
            "SELECT cluster, job_id, action, arg_max(reason, planned_at) FROM enforcement_audit "
            "WHERE phase = 'planned' AND (action = 'none' OR (action IN ('set-priority', 'hold', 'release') "
            "AND dry_run)) "
            "AND planned_at <= $now GROUP BY ALL", {"now": now}).fetchall()}
    kept = [a for a in actions
            if not (a.action == NONE or (a.action in (SET_PRIORITY, HOLD, RELEASE) and a.dry_run))
            or last.get((a.cluster, a.job_id, a.action)) != a.reason]
    with warehouse.transaction(con):
        _insert(con, [_row(a, phase="planned", attempt=0, plan_id=plan_id, now=now, outcome="planned")
                      for a in kept])
        warns = [[a.cluster, a.job_id, a.idle_since, a.stage, now, a.action_id] for a in actions
                 if a.action == WARN and a.idle_since is not None and a.stage]
        if warns:
            con.executemany("INSERT OR IGNORE INTO enforcement_warnings VALUES (?, ?, ?, ?, ?, ?)", warns)
    return plan_id


def done_ids(con, action_ids: list[str]) -> set[str]:
    """Actions a non-dry-run apply already finished (never performed twice)."""
    if not action_ids or not _has_tables(con):
        return set()
    # done and unchanged are final (never performed again); skipped is not: another backend may act on it
    rows = con.execute(
        "SELECT DISTINCT action_id FROM enforcement_audit WHERE phase = 'applied' AND NOT dry_run "
        "AND outcome IN ('done', 'unchanged') AND list_contains($ids, action_id)",
        {"ids": action_ids}).fetchall()
    return {r[0] for r in rows}


def record_applied(con, results: list[tuple[Action, str, str | None, str | None, str | None]], *, backend: str,
                   dry_run: bool, now: datetime, applied_at: datetime | None = None) -> None:
    """Audit rows for one apply run, and the job state its real actions changed, in one transaction.
    ``results``: (action, outcome, error, detail — the why of the outcome, kept for explain — and its
    cause, a short name for it); ``now``: the plan's time; ``applied_at``: this run's
    (the wall clock unless the run is given a time) — a warning counts as delivered then, and a
    preemption's cool-down and rolling caps count from then."""
    if not results:
        return
    applied_at = applied_at or utc_now()
    with warehouse.transaction(con):
        attempt = {}
        for aid, n in con.execute(
                "SELECT action_id, max(attempt) FROM enforcement_audit WHERE list_contains($ids, action_id) "
                "GROUP BY action_id", {"ids": [a.action_id for a, *_ in results]}).fetchall():
            attempt[aid] = n
        rows = []
        for a, outcome, error, detail, cause in results:
            plan_id = a.action_id.rsplit(":", 1)[0]
            rows.append(_row(a, phase="applied", attempt=attempt.get(a.action_id, 0) + 1, plan_id=plan_id,
                             now=now, outcome=outcome, error=error, backend=backend, dry_run=dry_run,
                             recorded_at=applied_at, detail=detail, cause=cause))
        _insert(con, rows)
        if dry_run:
            return
        for a, outcome, *_ in results:
            if outcome != DONE:
                continue
            # the first change keeps the job's own (declared) priority, which orders it in its project
            con.execute("INSERT OR IGNORE INTO enforcement_job_state (cluster, job_id, declared_priority) "
                        "SELECT ?, ?, (SELECT priority FROM jobs WHERE cluster = ? AND job_id = ?)",
                        [a.cluster, a.job_id, a.cluster, a.job_id])
            if a.action == SET_PRIORITY:
                con.execute("UPDATE enforcement_job_state SET applied_priority = ?, applied_at = ? "
                            "WHERE cluster = ? AND job_id = ?", [a.priority, applied_at, a.cluster, a.job_id])
            elif a.action in (HOLD, RELEASE):  # a lead's hold as the scheduler has it now
                con.execute("UPDATE enforcement_job_state SET held = ? WHERE cluster = ? AND job_id = ?",
                            [a.action == HOLD, a.cluster, a.job_id])
            elif a.action == PREEMPT:
                con.execute("UPDATE enforcement_job_state SET preemptions = preemptions + 1, "
                            "last_preempted_at = ? WHERE cluster = ? AND job_id = ?",
                            [applied_at, a.cluster, a.job_id])


def load_warnings(con) -> dict[tuple[str, str], list[Warning]]:
    """Every warning planned, with when it reached someone: its action applied for real on the
    scheduler (done), or a squatting alert about the job sent during the idle episode."""
    if not _has_tables(con):
        return {}
    alerts = bool(con.execute("SELECT count(*) FROM information_schema.tables "
                              "WHERE table_name = 'alert_outbox'").fetchone()[0])
    out: dict[tuple[str, str], list[Warning]] = {}
    for cluster, job_id, idle_since, stage, warned_at, delivered in con.execute(
            load_sql(__package__, "warnings_delivered.sql" if alerts else "warnings_applied.sql")).fetchall():
        out.setdefault((cluster, job_id), []).append(Warning(idle_since, stage, warned_at, delivered))
    return out


def recent_preemptions(con, *, since: datetime) -> list[tuple[str, str, str | None, datetime]]:
    """(cluster, job_id, project, when) of every preemption performed (not dry run) since
    ``since``, across all apply runs — the rolling caps count these."""
    if not _has_tables(con):
        return []
    return con.execute(
        "SELECT cluster, job_id, project, recorded_at FROM enforcement_audit WHERE phase = 'applied' "
        "AND action = 'preempt' AND outcome = 'done' AND NOT dry_run AND recorded_at >= $since "
        "ORDER BY recorded_at", {"since": since}).fetchall()


def load_history(con) -> dict[tuple[str, str], JobHistory]:
    if not _has_tables(con):
        return {}
    held = bool(con.execute("SELECT count(*) FROM information_schema.columns WHERE table_name = "
                            "'enforcement_job_state' AND column_name = 'held'").fetchone()[0])  # migration 028
    return {(c, j): JobHistory(applied_priority=ap, declared_priority=dp, preemptions=n or 0,
                               last_preempted_at=lp, held=bool(h))
            for c, j, ap, dp, n, lp, h in con.execute(
                "SELECT cluster, job_id, applied_priority, declared_priority, preemptions, last_preempted_at, "
                f"{'held' if held else 'false'} FROM enforcement_job_state").fetchall()}


def job_rows(con, job_id: str, cluster: str | None = None, limit: int = 5000) -> list[dict]:
    """The newest audit rows of a job, newest first (for explain)."""
    if not _has_tables(con):
        return []
    cur = con.execute(
        "SELECT * FROM enforcement_audit WHERE job_id = $job AND ($cluster IS NULL OR cluster = $cluster) "
        "ORDER BY planned_at DESC, recorded_at DESC, phase DESC LIMIT $limit",
        {"job": job_id, "cluster": cluster, "limit": limit})
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def preemption_counts(con) -> list[tuple[str, str, int, datetime | None, str | None]]:
    """(cluster, job_id, preemptions, last, why the last one was done) for every job preempted at
    least once, most first."""
    if not _has_tables(con):
        return []
    return con.execute(load_sql(__package__, "preemption_counts.sql")).fetchall()


def preemptions_not_done(con, limit: int = 200) -> list[tuple]:
    """(when, cluster, job_id, outcome, cause, why) of the newest real (not dry-run) preemptions an
    apply run refused, skipped or failed, newest first: why the job was left alone."""
    if not _has_tables(con):
        return []
    return con.execute(
        "SELECT recorded_at, cluster, job_id, outcome, coalesce(cause, outcome), "
        "coalesce(detail, error, 'no reason was recorded (applied before migration 020)') FROM enforcement_audit "
        "WHERE phase = 'applied' AND action = 'preempt' AND NOT dry_run AND outcome IN ('refused', 'skipped', "
        "'error') ORDER BY recorded_at DESC, action_id LIMIT $limit", {"limit": limit}).fetchall()


def load_plan(con, plan_id: str | None = None) -> tuple[str | None, datetime | None, list[Action]]:
    """(plan_id, planned_at, actions) of a recorded plan, the newest when ``plan_id`` is None
    (its ``none`` rows are left out: nothing to act on)."""
    if not _has_tables(con):
        return None, None, []
    if plan_id is None:
        row = con.execute("SELECT plan_id FROM enforcement_audit WHERE phase = 'planned' "
                          "ORDER BY planned_at DESC, recorded_at DESC LIMIT 1").fetchone()
        if row is None:
            return None, None, []
        plan_id = row[0]
    cur = con.execute("SELECT * FROM enforcement_audit WHERE plan_id = $p AND phase = 'planned' AND action <> 'none' "
                      "ORDER BY attempt, action_id", {"p": plan_id})
    names = [d[0] for d in cur.description]
    actions, planned_at = [], None
    for values in cur.fetchall():
        r = dict(zip(names, values, strict=True))
        planned_at = r["planned_at"]
        figures = json.loads(r["inputs"] or "{}")
        target = figures.pop(TARGET, {}) or {}
        idle = target.get("idle_since")
        actions.append(Action(
            action=r["action"], cluster=r["cluster"], job_id=r["job_id"], project=r["project"], reason=r["reason"],
            rule=r["rule"], priority=r["priority"], mode=r["mode"], funded=r["funded"],
            min_runtime_until=r["min_runtime_until"], warned_at=r["warned_at"], dry_run=r["dry_run"],
            name=target.get("name"), namespace=target.get("namespace"), source=target.get("source"),
            kind=target.get("kind"), stage=target.get("stage"), scheduler_job=target.get("scheduler_job"),
            idle_since=datetime.strptime(idle, "%Y-%m-%dT%H:%M:%S") if idle else None,
            figures=figures, observed=target.get("observed"), serves=target.get("serves"),
            action_id=r["action_id"]))
    actions.sort(key=lambda a: int(a.action_id.rsplit(":", 1)[1]))
    return plan_id, planned_at, actions
