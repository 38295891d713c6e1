"""Enforcement runs right after the squatting evaluation's cadence (``$GPULEDGER_ANALYTICS_CRON``):
the plan every tick; the apply job on the same cadence, a no-op until the config enables it."""

import dagster as dg
from gpuledger.pipelines.defs.run_policy import job_tags

from gpuledger.pipelines.defs.automation import ANALYTICS_CRON
from gpuledger.pipelines.defs.enforcement.assets import enforcement_actions, enforcement_plan
from gpuledger.pipelines.defs.ingest.schedules import in_flight

enforcement_plan_job = dg.define_asset_job(
    "enforcement_plan_job", tags=job_tags("enforcement_plan_job"), selection=[enforcement_plan])
enforcement_apply_job = dg.define_asset_job(
    "enforcement_apply_job", tags=job_tags("enforcement_apply_job"), selection=[enforcement_actions])


@dg.schedule(name="enforcement_plan_schedule", job=enforcement_plan_job, cron_schedule=ANALYTICS_CRON,
             execution_timezone="UTC", default_status=dg.DefaultScheduleStatus.RUNNING)
def enforcement_plan_schedule(context: dg.ScheduleEvaluationContext):
    if in_flight(context, enforcement_plan_job.name):
        return dg.SkipReason("the previous enforcement plan is still going")
    return dg.RunRequest(run_key=f"enforcement-plan@{context.scheduled_execution_time.isoformat()}")


@dg.schedule(name="enforcement_apply_schedule", job=enforcement_apply_job, cron_schedule=ANALYTICS_CRON,
             execution_timezone="UTC", default_status=dg.DefaultScheduleStatus.RUNNING)
def enforcement_apply_schedule(context: dg.ScheduleEvaluationContext):
    if in_flight(context, enforcement_apply_job.name) or in_flight(context, enforcement_plan_job.name):
        return dg.SkipReason("a plan or an apply is still going")
    return dg.RunRequest(run_key=f"enforcement-apply@{context.scheduled_execution_time.isoformat()}")
