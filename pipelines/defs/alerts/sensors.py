"""alerts_sensor: every minute, plan alerts from the materialized squatting findings and budget
burn into the warehouse outbox and deliver what is due (gpuledger.alerts.cycle). The outbox's
idempotency keys make ticks safe to repeat: a tick over an unchanged state sends nothing. The
cursor records the last tick's counts (for the UI), not state the sending depends on."""

import json

import dagster as dg
from gpuledger.pipelines.defs.resources import GpuledgerConfig, Warehouse


@dg.sensor(name="alerts_sensor", minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.RUNNING)
def alerts_sensor(context: dg.SensorEvaluationContext, warehouse: Warehouse, gpuledger_config: GpuledgerConfig):
    from gpuledger.alerts.cycle import run_alert_cycle

    cfg = gpuledger_config.load()
    if not (cfg.policy.alerts.on_call or cfg.policy.alerts.owner_channel):
        return dg.SkipReason("policy.alerts names no on-call or owner channel: nothing to alert")
    report = run_alert_cycle(warehouse.path, cfg.policy, currency=cfg.currency)
    d = report.delivery
    summary = {"planned": report.planned, "new": report.new, "sent": d.sent, "retrying": d.retried,
               "failed": d.failed}
    for error in d.errors:
        context.log.warning(error)
    return dg.SensorResult(skip_reason=dg.SkipReason(json.dumps(summary, sort_keys=True)),
                           cursor=json.dumps(summary, sort_keys=True))
