"""Fair-share snapshots: reports.fairshare_report as of each day's end (today: as of the data's
"now", replaced on every refresh until the day is over), kept per day for the dashboards' history."""

import dagster as dg

from gpuledger.pipelines.defs.analytics_deps import INGEST_DEPS
from gpuledger.pipelines.defs.partitions import daily_partitions, window
from gpuledger.pipelines.defs.resources import GpuledgerConfig, Warehouse
from gpuledger.pipelines.defs.tables import replace_partition, stamped


def snapshot_time(con, start, end):
    """As of the partition's end, or the data's "now" when that is earlier; None when the data
    ends before the partition starts (nothing to snapshot yet)."""
    from gpuledger.analytics import reports

    now = reports.data_now(con)
    return None if now < start else min(end, now)


@dg.asset(partitions_def=daily_partitions, deps=INGEST_DEPS, group_name="fairshare", kinds={"duckdb", "polars"})
def fairshare_snapshots(context: dg.AssetExecutionContext, warehouse: Warehouse,
                        gpuledger_config: GpuledgerConfig) -> dg.MaterializeResult:
    """Per org node: shares, usage, level fair share, rank, fair-share factor, queue order,
    delivery and occupancy ratios (table fairshare_snapshots)."""
    import polars as pl

    from gpuledger.analytics import reports

    start, end = window(context)
    policy = gpuledger_config.load().policy
    with warehouse.reader() as con:
        as_of = snapshot_time(con, start, end)
        frame = (reports.fairshare_report(con, policy=policy, as_of=as_of).rename({"order": "queue_order"})
                 if as_of else pl.DataFrame())
    with warehouse.writer() as con:
        deleted, inserted = replace_partition(con, "fairshare_snapshots", start.date(),
                                              stamped(frame, day=start.date(), as_of=as_of) if as_of else frame)
    return dg.MaterializeResult(metadata={
        "table": "fairshare_snapshots", "as_of_utc": as_of.isoformat() if as_of else "no data yet",
        "rows": inserted, "rows_replaced": deleted,
    })
