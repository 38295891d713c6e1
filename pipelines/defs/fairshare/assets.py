"""Fair-share snapshots: the fair-share tree computed (facts.fairshare, never the stored rows) as of each day's end (today: as of the data's
"now", replaced on every refresh until the day is over), kept per day for the dashboards' history."""

import dagster as dg
import polars as pl
from gpuledger.pipelines.defs.analytics_deps import INGEST_DEPS
from gpuledger.pipelines.defs.partitions import daily_partitions, partition_windows, single_run
from gpuledger.pipelines.defs.resources import GpuledgerConfig, Warehouse

from gpuledger import facts
from gpuledger.facts.materialize import replace_partition, stamped


def snapshot_time(con, start, end):
    """As of the partition's end, or the data's "now" when that is earlier; None when the data
    ends before the partition starts (nothing to snapshot yet)."""
    now = facts.data_now(con)
    return None if now < start else min(end, now)


def materialize_snapshots(context, warehouse: Warehouse, table: str, report) -> dg.MaterializeResult:
    """For each day of the run: ``report(con, as_of)`` as of the day's snapshot time, replacing
    the day's rows (no rows for a day the data has not reached)."""
    rows = replaced = 0
    taken = []
    for _, start, end in partition_windows(context):
        with warehouse.reader() as con:
            as_of = snapshot_time(con, start, end)
            frame = report(con, as_of) if as_of else pl.DataFrame()
        with warehouse.writer() as con:
            deleted, inserted = replace_partition(con, table, start.date(),
                                                  stamped(frame, day=start.date(), as_of=as_of) if as_of else frame)
        rows, replaced = rows + inserted, replaced + deleted
        if as_of:
            taken.append(as_of.isoformat())
    return dg.MaterializeResult(metadata={
        "table": table, "partitions": len(context.partition_keys), "rows": rows, "rows_replaced": replaced,
        "as_of_utc": ", ".join(taken) if taken else "no data yet"})


@dg.asset(partitions_def=daily_partitions, backfill_policy=single_run, deps=INGEST_DEPS, group_name="fairshare",
          kinds={"duckdb", "polars"})
def fairshare_snapshots(context: dg.AssetExecutionContext, warehouse: Warehouse,
                        gpuledger_config: GpuledgerConfig) -> dg.MaterializeResult:
    """Per org node: shares, usage, level fair share, rank, fair-share factor, queue order,
    delivery and occupancy ratios (table fairshare_snapshots)."""
    policy = gpuledger_config.load().policy
    return materialize_snapshots(context, warehouse, "fairshare_snapshots", lambda con, as_of: (
        facts.fairshare(con, policy=policy, as_of=as_of, materialized=False).frame.rename({"order": "queue_order"})))
