"""Budget snapshots: reports.budget_report as of each day's end (today: the data's "now"), the
burn-down history per org node and budget period."""

import dagster as dg

from gpuledger.pipelines.defs.analytics_deps import INGEST_DEPS
from gpuledger.pipelines.defs.fairshare.assets import snapshot_time
from gpuledger.pipelines.defs.partitions import daily_partitions, window
from gpuledger.pipelines.defs.resources import GpuledgerConfig, Warehouse
from gpuledger.pipelines.defs.tables import replace_partition, stamped


@dg.asset(partitions_def=daily_partitions, deps=INGEST_DEPS, group_name="budgets", kinds={"duckdb", "polars"})
def budget_snapshots(context: dg.AssetExecutionContext, warehouse: Warehouse,
                     gpuledger_config: GpuledgerConfig) -> dg.MaterializeResult:
    """Per org node with a budget period containing the snapshot time: budget, consumed,
    remaining, burn rate (normalised GPU-hours), projected exhaustion, status (table budget_snapshots)."""
    import polars as pl

    from gpuledger.analytics import reports

    start, end = window(context)
    policy = gpuledger_config.load().policy
    with warehouse.reader() as con:
        as_of = snapshot_time(con, start, end)
        frame = reports.budget_report(con, policy=policy, as_of=as_of) if as_of else pl.DataFrame()
    with warehouse.writer() as con:
        deleted, inserted = replace_partition(con, "budget_snapshots", start.date(),
                                              stamped(frame, day=start.date(), as_of=as_of) if as_of else frame)
    statuses = frame["status"].value_counts().rows() if frame.height else []
    return dg.MaterializeResult(metadata={
        "table": "budget_snapshots", "as_of_utc": as_of.isoformat() if as_of else "no data yet",
        "rows": inserted, "rows_replaced": deleted, **{f"nodes_{s}": n for s, n in statuses if s},
    })
