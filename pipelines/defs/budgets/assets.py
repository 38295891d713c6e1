"""Budget snapshots: budget burn computed (facts.budget, never the stored rows) as of each day's end (today: the data's "now"), the
burn-down history per org node and budget period."""

import dagster as dg
from gpuledger.pipelines.defs.analytics_deps import INGEST_DEPS
from gpuledger.pipelines.defs.fairshare.assets import materialize_snapshots
from gpuledger.pipelines.defs.partitions import daily_partitions, single_run
from gpuledger.pipelines.defs.resources import GpuledgerConfig, Warehouse

from gpuledger import facts


@dg.asset(partitions_def=daily_partitions, backfill_policy=single_run, deps=INGEST_DEPS, group_name="budgets",
          kinds={"duckdb", "polars"})
def budget_snapshots(context: dg.AssetExecutionContext, warehouse: Warehouse,
                     gpuledger_config: GpuledgerConfig) -> dg.MaterializeResult:
    """Per org node with a budget period containing the snapshot time: budget, consumed,
    remaining, burn rate (normalised GPU-hours), projected exhaustion, status (table budget_snapshots)."""
    policy = gpuledger_config.load().policy
    return materialize_snapshots(context, warehouse, "budget_snapshots", lambda con, as_of: (
        facts.budget(con, policy=policy, as_of=as_of, materialized=False).frame))
