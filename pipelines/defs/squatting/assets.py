"""Squatting findings with their lifecycle. Each materialization evaluates the idle-GPU rules
(facts.findings, computed) at one moment — the data's "now" unless ``as_of`` is given — and
advances the episodes (gpuledger.analytics.squatting_lifecycle): opened, each severity change,
resolved. Evaluations only move forward: one at or before the latest recorded changes nothing.

The findings of exempt jobs (policy.squatting.exempt_*) are stored too, as they were at the
evaluation, apart from the episodes (squatting_exempt_findings, migration 018): enforcement reads
them materialized, and every reader of the episodes keeps seeing no exempt job."""


import dagster as dg
import polars as pl
from gpuledger.pipelines.defs.analytics_deps import INGEST_DEPS
from gpuledger.pipelines.defs.resources import GpuledgerConfig, Warehouse

from gpuledger import facts
from gpuledger import warehouse as wh
from gpuledger.analytics.squatting_lifecycle import advance_lifecycle
from gpuledger.facts.materialize import insert_frame, sql, utc_now
from gpuledger.rules.clock import parse_iso

PACKAGE = "gpuledger.pipelines.defs.squatting"


class SquattingEvaluation(dg.Config):
    as_of: str | None = None  # ISO time, UTC (default: the newest sample or job time)


@dg.asset(deps=INGEST_DEPS, group_name="squatting", kinds={"duckdb", "polars"})
def squatting_findings(context: dg.AssetExecutionContext, config: SquattingEvaluation, warehouse: Warehouse,
                       gpuledger_config: GpuledgerConfig) -> dg.MaterializeResult:
    """Jobs holding idle GPUs: one row per episode (first_seen, last_seen, resolved_at, latest
    severity and evidence; table squatting_findings) and every change (squatting_finding_events)."""
    policy = gpuledger_config.load().policy
    with warehouse.reader() as con:
        now = parse_iso(config.as_of) if config.as_of else facts.data_now(con)
        last = con.execute(sql(PACKAGE, "last_evaluation")).fetchall()[0][0]
        if last is not None and now <= last:
            message = f"already evaluated at {last.isoformat()}; {now.isoformat()} changes nothing"
            context.log.info(message)
            return dg.MaterializeResult(metadata={"evaluated_at_utc": now.isoformat(), "skipped": message})
        every = facts.findings(con, policy=policy, now=now, include_exempt=True, materialized=False).frame
        # the same rows and order as without include_exempt (a filter, then the report's sort)
        findings, exempt = every.filter(~every["exempt"]), every.filter(every["exempt"])
        open_episodes = con.sql(sql(PACKAGE, "open_episodes")).pl()
    episodes, events = advance_lifecycle(open_episodes, findings, now=now)
    with warehouse.writer() as con, wh.transaction(con):
        latest = con.execute(sql(PACKAGE, "last_evaluation")).fetchall()[0][0]
        if latest is not None and latest >= now:  # another run evaluated meanwhile
            raise dg.Failure(f"squatting was evaluated at {latest.isoformat()} meanwhile; nothing to do at "
                             f"{now.isoformat()}")
        con.execute(sql(PACKAGE, "close_open_episodes")).fetchall()
        insert_frame(con, "squatting_findings", episodes)
        insert_frame(con, "squatting_finding_events", events)
        insert_frame(con, "squatting_exempt_findings", exempt.with_columns(evaluated_at=pl.lit(now)))
        con.execute(sql(PACKAGE, "record_exempt_evaluation"),
                    {"evaluated_at": now, "findings": exempt.height}).fetchall()
        con.execute(sql(PACKAGE, "record_evaluation"),
                    {"evaluated_at": now, "findings": findings.height, "recorded_at": utc_now()}).fetchall()
    counts = dict(events["event"].value_counts().rows()) if events.height else {}
    open_now = episodes.filter(episodes["resolved_at"].is_null())
    return dg.MaterializeResult(metadata={
        "evaluated_at_utc": now.isoformat(), "findings": findings.height, "exempt_findings": exempt.height,
        "open_episodes": open_now.height,
        "preempt_eligible": int((open_now["severity"] == "preempt-eligible").sum()) if open_now.height else 0,
        "opened": counts.get("opened", 0), "severity_changed": counts.get("severity-changed", 0),
        "resolved": counts.get("resolved", 0),
    })
