"""Statements on the 1st of each month (01:00 UTC) for the month before."""

from datetime import timedelta

import dagster as dg
from gpuledger.pipelines.defs.run_policy import job_tags
from gpuledger.pipelines.defs.chargeback.assets import chargeback_statements

statements_job = dg.define_asset_job(
    "statements_job", tags=job_tags("statements_job"), selection=[chargeback_statements])


@dg.schedule(name="statements_schedule", job=statements_job, cron_schedule="0 1 1 * *", execution_timezone="UTC",
             default_status=dg.DefaultScheduleStatus.RUNNING)
def statements_schedule(context: dg.ScheduleEvaluationContext):
    month_before = (context.scheduled_execution_time.replace(day=1) - timedelta(days=1)).strftime("%Y-%m-01")
    return dg.RunRequest(run_key=f"statement@{month_before[:7]}", partition_key=month_before)
