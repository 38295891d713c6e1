"""The monthly statement on the 1st (02:00 UTC, after chargeback_statements at 01:00) for the month
before; the weekly summary on Mondays (03:00 UTC) for the week that just ended."""

from datetime import timedelta

import dagster as dg
from gpuledger.pipelines.defs.run_policy import job_tags
from gpuledger.pipelines.defs.reports.assets import finance_statement_files, weekly_summary_files

finance_statement_job = dg.define_asset_job(
    "finance_statement_job", tags=job_tags("finance_statement_job", writes_warehouse=False),
    selection=[finance_statement_files])
weekly_summary_job = dg.define_asset_job(
    "weekly_summary_job", tags=job_tags("weekly_summary_job", writes_warehouse=False),
    selection=[weekly_summary_files])


@dg.schedule(name="finance_statement_schedule", job=finance_statement_job, cron_schedule="0 2 1 * *",
             execution_timezone="UTC", default_status=dg.DefaultScheduleStatus.RUNNING)
def finance_statement_schedule(context: dg.ScheduleEvaluationContext):
    month_before = (context.scheduled_execution_time.replace(day=1) - timedelta(days=1)).strftime("%Y-%m-01")
    return dg.RunRequest(run_key=f"finance-statement@{month_before[:7]}", partition_key=month_before)


@dg.schedule(name="weekly_summary_schedule", job=weekly_summary_job, cron_schedule="0 3 * * 1",
             execution_timezone="UTC", default_status=dg.DefaultScheduleStatus.RUNNING)
def weekly_summary_schedule(context: dg.ScheduleEvaluationContext):
    monday = context.scheduled_execution_time.date() - timedelta(days=7)  # the week that just ended
    return dg.RunRequest(run_key=f"weekly-summary@{monday}", partition_key=monday.strftime("%Y-%m-%d"))
