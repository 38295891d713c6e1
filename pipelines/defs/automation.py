"""Analytics after ingest, at most five minutes behind (``$GPULEDGER_ANALYTICS_CRON``, default
``*/5 * * * *``): every tick refreshes today's partition of the daily analytics (and, in the first
hour of a day, closes yesterday's). Squatting is evaluated at the data's "now" at the end of every
ingest run (ingest/schedules.py); ``squatting_schedule`` (off by default) evaluates it alone on the
analytics cadence, for a site whose ingest runs less often."""

import os
from datetime import timedelta

import dagster as dg
from gpuledger.pipelines.defs.budgets.assets import budget_snapshots
from gpuledger.pipelines.defs.fairshare.assets import fairshare_snapshots
from gpuledger.pipelines.defs.ingest.schedules import in_flight
from gpuledger.pipelines.defs.run_policy import job_tags
from gpuledger.pipelines.defs.squatting.assets import squatting_findings
from gpuledger.pipelines.defs.usage.assets import job_usage_hourly, project_usage_hourly, utilization_hourly

ANALYTICS_CRON = os.environ.get("GPULEDGER_ANALYTICS_CRON", "*/5 * * * *")
DAILY_ANALYTICS = [job_usage_hourly, project_usage_hourly, utilization_hourly, fairshare_snapshots, budget_snapshots]

analytics_job = dg.define_asset_job(
    "analytics_job", tags=job_tags("analytics_job"), selection=DAILY_ANALYTICS,
    description="Usage, utilization, fair-share and budget snapshots of one day.")
squatting_job = dg.define_asset_job(
    "squatting_job", tags=job_tags("squatting_job"), selection=[squatting_findings])


def days_to_refresh(context: dg.ScheduleEvaluationContext) -> list[str]:
    at = context.scheduled_execution_time
    days = [at.strftime("%Y-%m-%d")]
    if at.hour == 0:  # the day that just ended gets its final refresh
        days.insert(0, (at - timedelta(days=1)).strftime("%Y-%m-%d"))
    return days


@dg.schedule(name="analytics_schedule", job=analytics_job, cron_schedule=ANALYTICS_CRON, execution_timezone="UTC",
             default_status=dg.DefaultScheduleStatus.RUNNING)
def analytics_schedule(context: dg.ScheduleEvaluationContext):
    if in_flight(context, analytics_job.name):
        return dg.SkipReason("the previous analytics run is still going")
    at = context.scheduled_execution_time.isoformat()
    return [dg.RunRequest(run_key=f"analytics-{day}@{at}", partition_key=day) for day in days_to_refresh(context)]


@dg.schedule(name="squatting_schedule", job=squatting_job, cron_schedule=ANALYTICS_CRON, execution_timezone="UTC",
             default_status=dg.DefaultScheduleStatus.STOPPED)
def squatting_schedule(context: dg.ScheduleEvaluationContext):
    if in_flight(context, squatting_job.name):
        return dg.SkipReason("the previous squatting evaluation is still going")
    return dg.RunRequest(run_key=f"squatting@{context.scheduled_execution_time.isoformat()}")
