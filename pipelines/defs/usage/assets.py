"""Hourly usage and utilization, one UTC day per partition, computed through ``gpuledger.facts``
(never the stored rows; the same functions the CLI and dashboards call); each partition is replaced exactly. A run may
cover a range of days (single-run backfill): each day is computed and replaced on its own."""

import dagster as dg
from gpuledger.pipelines.defs.analytics_deps import INGEST_DEPS
from gpuledger.pipelines.defs.partitions import daily_partitions, partition_windows, single_run
from gpuledger.pipelines.defs.resources import GpuledgerConfig, Warehouse

from gpuledger import facts
from gpuledger.facts.materialize import replace_partition, stamped

GROUP = "usage"


def _materialize_days(context, warehouse: Warehouse, table: str, compute) -> dg.MaterializeResult:
    """For each day of the run: ``compute(con, start, end)`` (a facts.Facts) on a reader, then replace
    the day, its rows stamped with the data's now they were computed at (``covered_until``: the
    running day's rows answer a range into its running hour only while that is still the now)."""
    totals = {"rows": 0, "rows_replaced": 0}
    sums: dict[str, float] = {}
    for _, start, end in partition_windows(context):
        with warehouse.reader() as con:
            answer = compute(con, start, end)
        frame = answer.frame
        with warehouse.writer() as con:
            deleted, inserted = replace_partition(con, table, start.date(),
                                                  stamped(frame, day=start.date(), covered_until=answer.as_of))
        totals["rows"] += inserted
        totals["rows_replaced"] += deleted
        for column in ("gpu_hours_allocated", "gpu_hours_idle", "gpu_hours_capacity"):
            if column in frame.columns:
                sums[column] = sums.get(column, 0.0) + float(frame[column].sum() or 0.0)
    return dg.MaterializeResult(metadata={"table": table, "partitions": len(context.partition_keys),
                                          **totals, **sums})


def _usage(context, warehouse: Warehouse, gpuledger_config: GpuledgerConfig, *, table: str, by: str):
    policy = gpuledger_config.load().policy
    return _materialize_days(context, warehouse, table, lambda con, start, end: facts.usage(
        con, start=start, end=end, by=by, policy=policy, per_hour=True))


@dg.asset(partitions_def=daily_partitions, backfill_policy=single_run, deps=INGEST_DEPS, group_name=GROUP,
          kinds={"duckdb", "polars"})
def job_usage_hourly(context: dg.AssetExecutionContext, warehouse: Warehouse,
                     gpuledger_config: GpuledgerConfig) -> dg.MaterializeResult:
    """Allocated / active / idle / unknown GPU-hours and energy (kWh) per job and hour
    (table usage_hourly_jobs)."""
    return _usage(context, warehouse, gpuledger_config, table="usage_hourly_jobs", by="job")


@dg.asset(partitions_def=daily_partitions, backfill_policy=single_run, deps=INGEST_DEPS, group_name=GROUP,
          kinds={"duckdb", "polars"})
def project_usage_hourly(context: dg.AssetExecutionContext, warehouse: Warehouse,
                         gpuledger_config: GpuledgerConfig) -> dg.MaterializeResult:
    """The same per project and hour (table usage_hourly_projects)."""
    return _usage(context, warehouse, gpuledger_config, table="usage_hourly_projects", by="project")


@dg.asset(partitions_def=daily_partitions, backfill_policy=single_run, deps=INGEST_DEPS, group_name=GROUP,
          kinds={"duckdb", "polars"})
def utilization_hourly(context: dg.AssetExecutionContext, warehouse: Warehouse,
                       gpuledger_config: GpuledgerConfig) -> dg.MaterializeResult:
    """Allocation % and active % of installed capacity per cluster, GPU model and hour
    (table utilization_hourly)."""
    policy = gpuledger_config.load().policy
    return _materialize_days(context, warehouse, "utilization_hourly", lambda con, start, end: (
        facts.utilization(con, start=start, end=end, by="model", policy=policy, materialized=False)))
