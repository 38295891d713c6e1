"""Hourly usage and utilization, one UTC day per partition, from ``gpuledger.analytics.reports``
(the same functions the CLI and dashboards call); each partition is replaced exactly."""

import dagster as dg

from gpuledger.pipelines.defs.analytics_deps import INGEST_DEPS
from gpuledger.pipelines.defs.partitions import daily_partitions, window
from gpuledger.pipelines.defs.resources import GpuledgerConfig, Warehouse
from gpuledger.pipelines.defs.tables import replace_partition, stamped

GROUP = "usage"


def _usage(context, warehouse: Warehouse, gpuledger_config: GpuledgerConfig, *, table: str, by: str):
    from gpuledger.analytics import reports

    start, end = window(context)
    policy = gpuledger_config.load().policy
    with warehouse.reader() as con:
        frame = reports.usage_report(con, start=start, end=end, by=by, policy=policy, per_hour=True)
    with warehouse.writer() as con:
        deleted, inserted = replace_partition(con, table, start.date(), stamped(frame, day=start.date()))
    return dg.MaterializeResult(metadata={
        "table": table, "rows": inserted, "rows_replaced": deleted,
        "gpu_hours_allocated": float(frame["gpu_hours_allocated"].sum() or 0.0),
        "gpu_hours_idle": float(frame["gpu_hours_idle"].sum() or 0.0),
    })


@dg.asset(partitions_def=daily_partitions, deps=INGEST_DEPS, group_name=GROUP, kinds={"duckdb", "polars"})
def job_usage_hourly(context: dg.AssetExecutionContext, warehouse: Warehouse,
                     gpuledger_config: GpuledgerConfig) -> dg.MaterializeResult:
    """Allocated / active / idle / unknown GPU-hours and energy (kWh) per job and hour
    (table usage_hourly_jobs)."""
    return _usage(context, warehouse, gpuledger_config, table="usage_hourly_jobs", by="job")


@dg.asset(partitions_def=daily_partitions, deps=INGEST_DEPS, group_name=GROUP, kinds={"duckdb", "polars"})
def project_usage_hourly(context: dg.AssetExecutionContext, warehouse: Warehouse,
                         gpuledger_config: GpuledgerConfig) -> dg.MaterializeResult:
    """The same per project and hour (table usage_hourly_projects)."""
    return _usage(context, warehouse, gpuledger_config, table="usage_hourly_projects", by="project")


@dg.asset(partitions_def=daily_partitions, deps=INGEST_DEPS, group_name=GROUP, kinds={"duckdb", "polars"})
def utilization_hourly(context: dg.AssetExecutionContext, warehouse: Warehouse,
                       gpuledger_config: GpuledgerConfig) -> dg.MaterializeResult:
    """Allocation % and active % of installed capacity per cluster, GPU model and hour
    (table utilization_hourly)."""
    from gpuledger.analytics import reports

    start, end = window(context)
    policy = gpuledger_config.load().policy
    with warehouse.reader() as con:
        frame = reports.utilization_report(con, start=start, end=end, by="model", policy=policy)
    with warehouse.writer() as con:
        deleted, inserted = replace_partition(con, "utilization_hourly", start.date(),
                                              stamped(frame, day=start.date()))
    capacity = float(frame["gpu_hours_capacity"].sum() or 0.0)
    allocated = float(frame["gpu_hours_allocated"].sum() or 0.0)
    return dg.MaterializeResult(metadata={
        "table": "utilization_hourly", "rows": inserted, "rows_replaced": deleted,
        "gpu_hours_capacity": capacity,
        "allocation_pct": round(100.0 * allocated / capacity, 2) if capacity else None,
    })


__all__ = ["job_usage_hourly", "project_usage_hourly", "utilization_hourly"]
