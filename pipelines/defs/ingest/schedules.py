"""Ingest automation: the live sources every minute (``$GPULEDGER_INGEST_CRON``, a cron string,
default ``* * * * *``), and yesterday's Prometheus backfill partition at 00:30 UTC (off by default:
turn it on where a Prometheus holds what the live scrape may have missed)."""

import os
from datetime import timedelta

import dagster as dg
from gpuledger.pipelines.defs.run_policy import job_tags
from gpuledger.pipelines.defs.ingest.assets import INGEST_ASSETS, prometheus_samples

INGEST_CRON_ENV = "GPULEDGER_INGEST_CRON"
INGEST_CRON = os.environ.get(INGEST_CRON_ENV, "* * * * *")
_IN_FLIGHT = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
              dg.DagsterRunStatus.STARTED]

# In one process: a round every minute cannot afford a fresh interpreter per step (seconds each
# on a small machine); the steps are short and write through the same writer lock anyway.
ingest_job = dg.define_asset_job(
    "ingest_job", tags=job_tags("ingest_job"), selection=INGEST_ASSETS, executor_def=dg.in_process_executor,
    description="Reference tables, one DCGM scrape round, Kubernetes, Slurm.")
prometheus_backfill_job = dg.define_asset_job(
    "prometheus_backfill_job", tags=job_tags("prometheus_backfill_job"), selection=[prometheus_samples])


def in_flight(context, job_name: str) -> int:
    """Runs of ``job_name`` not finished yet (a slow round is not stacked on by the next tick)."""
    return len(context.instance.get_run_records(
        dg.RunsFilter(job_name=job_name, statuses=_IN_FLIGHT), limit=1))


@dg.schedule(name="ingest_schedule", job=ingest_job, cron_schedule=INGEST_CRON, execution_timezone="UTC",
             default_status=dg.DefaultScheduleStatus.RUNNING)
def ingest_schedule(context: dg.ScheduleEvaluationContext):
    if in_flight(context, ingest_job.name):
        return dg.SkipReason("the previous ingest run is still going")
    return dg.RunRequest(run_key=f"ingest@{context.scheduled_execution_time.isoformat()}")


@dg.schedule(name="prometheus_backfill_schedule", job=prometheus_backfill_job, cron_schedule="30 0 * * *",
             execution_timezone="UTC", default_status=dg.DefaultScheduleStatus.STOPPED)
def prometheus_backfill_schedule(context: dg.ScheduleEvaluationContext):
    day = (context.scheduled_execution_time - timedelta(days=1)).strftime("%Y-%m-%d")
    return dg.RunRequest(run_key=f"prometheus@{day}", partition_key=day)
