"""The Situation of one cycle, read from the warehouse: jobs not ended at ``now``, their funding,
their project's fair-share rank, squatting findings, idle GPUs per (cluster, model), and what
enforcement recorded before (warnings, applied priorities, preemption counts).

``now`` may lie in the past (a replayed week): a job is running at ``now`` when it had started and
not ended by then, waiting when it was submitted but not yet started.
"""

from __future__ import annotations

from datetime import datetime

import duckdb
from gpuledger.enforce import audit
from gpuledger.enforce.model import Finding, JobFacts, Situation

from gpuledger.analytics import reports
from gpuledger.analytics.squatting import LOOKBACK
from gpuledger.config import Config

_JOBS = """
SELECT cluster, job_id, project, name, namespace, kind, source, user_name, gpus, gpu_model,
       start_time, submit_time, priority
FROM jobs
WHERE coalesce(submit_time, start_time) <= $now
  AND (end_time IS NULL OR end_time > $now)
  AND (start_time IS NOT NULL OR state IS NULL OR upper(state) IN ('PENDING', 'QUEUED', 'SUSPENDED'))
ORDER BY cluster, job_id
"""

# Whole-GPU equivalents installed at `now` minus those held at `now`, per (cluster, model).
_FREE = """
WITH installed AS (
    SELECT cluster, model, sum(gpu_fraction) AS capacity FROM gpus
    WHERE (first_seen IS NULL OR first_seen <= $now) AND (retired_at IS NULL OR retired_at > $now)
    GROUP BY ALL),
held AS (
    SELECT g.cluster, g.model, sum(a.gpu_fraction * g.gpu_fraction) AS held
    FROM job_allocations a JOIN gpus g USING (gpu_id)
    WHERE a.start_time <= $now AND (a.end_time IS NULL OR a.end_time > $now)
    GROUP BY ALL)
SELECT i.cluster, i.model, greatest(i.capacity - coalesce(h.held, 0), 0)
FROM installed i LEFT JOIN held h USING (cluster, model)
"""


def gather(con: duckdb.DuckDBPyConnection, cfg: Config, *, now: datetime,
           observed: dict[str, dict] | None = None) -> Situation:
    """The Situation at ``now`` (naive UTC). ``observed``: per job id what a backend saw live
    (Backend.observe: ``labels``, ``annotations``, ``requeue_flag``, ``priority``) — the
    checkpointing declaration and the scheduler's current priority."""
    observed = observed or {}
    policy = cfg.policy
    funding = {(r["cluster"], r["job_id"]): r
               for r in reports.funding_report(con, policy=policy, now=now).iter_rows(named=True)}
    tree = reports.fairshare_report(con, policy=policy, as_of=now)
    ranks = {r["node"]: r["fs_rank"] for r in tree.iter_rows(named=True) if r["fs_rank"] is not None}
    findings = [
        Finding(cluster=r["cluster"], job_id=r["job_id"], finding=r["finding"], severity=r["severity"],
                idle_since=r["idle_since"], idle_minutes=float(r["idle_minutes"]), gpus_idle=int(r["gpus_idle"]),
                gpus_total=int(r["gpus_total"]), gpu_hours_idle=float(r["gpu_hours_idle"] or 0),
                idle_cost=None if r["idle_cost"] is None else str(r["idle_cost"]), currency=r["currency"],
                capped=float(r["idle_minutes"]) >= LOOKBACK.total_seconds() / 60 - 1)
        for r in reports.squatters_report(con, policy=policy, now=now, include_exempt=True).iter_rows(named=True)
        if r["idle_since"] is not None
    ]
    jobs = []
    for row in con.execute(_JOBS, {"now": now}).fetchall():
        (cluster, job_id, project, name, namespace, kind, source, user, gpus, model, start, submit,
         priority) = row
        fund = funding.get((cluster, job_id), {})
        seen = observed.get(job_id, {})
        running = start is not None and start <= now
        jobs.append(JobFacts(
            cluster=cluster, job_id=job_id, project=project, running=running, gpus=float(gpus), gpu_model=model,
            name=name, namespace=namespace, kind=kind, source=source, user_name=user,
            start_time=start if running else None, submit_time=submit,
            declared_priority=priority,
            observed_priority=seen["priority"] if seen.get("priority") is not None else priority,
            funded=bool(fund.get("funded")), unfunded_reason=fund.get("unfunded_reason"),
            protected_until=fund.get("protected_until") if running else None, fs_rank=ranks.get(project),
            labels=seen.get("labels") or {}, annotations=seen.get("annotations") or {},
            requeue_flag=seen.get("requeue_flag"),
        ))
    free = {(c, m): float(f) for c, m, f in con.execute(_FREE, {"now": now}).fetchall()}
    return Situation(
        now=now, jobs=jobs, findings=findings, warnings=audit.load_warnings(con),
        history=audit.load_history(con), free_gpus=free, fs_projects=len(ranks),
        data_as_of=reports.data_now(con, wall=now) if _has_data(con, now) else None,
    )


def _has_data(con, now) -> bool:
    return bool(con.execute("SELECT EXISTS (SELECT 1 FROM gpu_samples WHERE ts <= $now) "
                            "OR EXISTS (SELECT 1 FROM jobs WHERE submit_time <= $now)", {"now": now}).fetchone()[0])
