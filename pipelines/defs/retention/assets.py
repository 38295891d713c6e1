"""The daily prune of raw samples (``gpuledger warehouse prune`` on a schedule)."""

import dagster as dg
from gpuledger.pipelines.defs.resources import GpuledgerConfig, Warehouse
from gpuledger.pipelines.defs.run_policy import job_tags
from gpuledger.warehouse.retention import prune_raw_samples


@dg.asset(group_name="retention", kinds={"duckdb"})
def raw_sample_retention(context: dg.AssetExecutionContext, warehouse: Warehouse,
                         gpuledger_config: GpuledgerConfig) -> dg.MaterializeResult:
    """Raw samples older than the retention (days, counted back from the newest sample) whose
    hourly rollup is complete are deleted, an hour per transaction, readers let in between hours;
    reports of those hours read the rollup and do not change (tests/warehouse/test_retention.py)."""
    keep_days = gpuledger_config.load().policy.retention.raw_sample_days
    with warehouse.writer() as con:
        stats = prune_raw_samples(con, keep_days=keep_days)
    context.log.info(f"pruned raw samples before {stats.pruned_before}: {stats.rows_deleted} rows")
    return dg.MaterializeResult(metadata={
        "keep_days": keep_days,
        "pruned_before": str(stats.pruned_before) if stats.pruned_before else "nothing old enough",
        "rows_deleted": stats.rows_deleted, "rows_kept_partial_hours": stats.rows_kept,
        "rollup_hours_completed": stats.hours_completed})


retention_job = dg.define_asset_job(
    "retention_job", tags=job_tags("retention_job"), selection=[raw_sample_retention])


@dg.schedule(name="retention_schedule", job=retention_job, cron_schedule="15 2 * * *", execution_timezone="UTC",
             default_status=dg.DefaultScheduleStatus.RUNNING)
def retention_schedule(context: dg.ScheduleEvaluationContext):
    return dg.RunRequest(run_key=f"retention@{context.scheduled_execution_time:%Y-%m-%d}")
