"""alert_deliveries: the alert cycle as a run (gpuledger.alerts.cycle) — plan alerts from the
materialized squatting findings and budget burn into the warehouse outbox, deliver what is due.

It runs after each successful squatting evaluation or analytics run (``alerts_after_analytics_sensor``:
the findings and the burn it plans from have just changed), so every send is recorded as a run
with its counts, and a failed delivery is retried by the outbox's backoff at the next run. The
outbox's idempotency keys make runs safe to repeat: a run over an unchanged state sends nothing.
"""

import dagster as dg
from gpuledger.pipelines.defs.automation import analytics_job, squatting_job
from gpuledger.pipelines.defs.ingest.schedules import in_flight
from gpuledger.pipelines.defs.resources import GpuledgerConfig, Warehouse
from gpuledger.pipelines.defs.run_policy import job_tags

from gpuledger.alerts.cycle import run_alert_cycle


@dg.asset(group_name="alerts", kinds={"duckdb"}, deps=["squatting_findings", "budget_snapshots"])
def alert_deliveries(context: dg.AssetExecutionContext, warehouse: Warehouse,
                     gpuledger_config: GpuledgerConfig) -> dg.MaterializeResult:
    """The ``alert_outbox`` after one alert cycle: alerts planned, new, sent, retrying, failed."""
    cfg = gpuledger_config.load()
    if not (cfg.policy.alerts.on_call or cfg.policy.alerts.owner_channel):
        message = "skipped: policy.alerts names no on-call or owner channel: nothing to alert"
        context.log.info(message)
        return dg.MaterializeResult(metadata={"skipped": message, "planned": 0, "new": 0, "sent": 0,
                                              "retrying": 0, "failed": 0})
    report = run_alert_cycle(warehouse.path, cfg.policy, currency=cfg.currency)
    d = report.delivery
    for error in d.errors:
        context.log.warning(error)
    context.log.info(f"alerts: {report.planned} planned, {report.new} new, {d.sent} sent, "
                     f"{d.retried} retrying, {d.failed} failed")
    return dg.MaterializeResult(metadata={"planned": report.planned, "new": report.new, "sent": d.sent,
                                          "retrying": d.retried, "failed": d.failed})


alerts_job = dg.define_asset_job("alerts_job", selection=[alert_deliveries], tags=job_tags("alerts_job"))


@dg.run_status_sensor(name="alerts_after_analytics_sensor", run_status=dg.DagsterRunStatus.SUCCESS,
                      monitored_jobs=[squatting_job, analytics_job], request_job=alerts_job,
                      default_status=dg.DefaultSensorStatus.RUNNING, minimum_interval_seconds=30)
def alerts_after_analytics_sensor(context: dg.RunStatusSensorContext):
    # one alert run per finished evaluation (the run key); none stacked on one not yet finished,
    # which plans from the newest findings anyway
    if in_flight(context, alerts_job.name):
        return dg.SkipReason("an alerts run is still going")
    return dg.RunRequest(run_key=f"alerts-after-{context.dagster_run.run_id}")
