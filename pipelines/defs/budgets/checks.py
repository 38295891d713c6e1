"""Budget checks: the snapshots are consistent down the org tree (see tree_consistency.sql)."""

import dagster as dg
from gpuledger.pipelines.defs.budgets.assets import budget_snapshots
from gpuledger.pipelines.defs.resources import Warehouse

from gpuledger.facts.materialize import sql

PACKAGE = "gpuledger.pipelines.defs.budgets"


@dg.asset_check(asset=budget_snapshots, description="consumption rolls up the tree, remaining = budget − "
                "consumed, no node promises its children more than its own budget")
def budgets_consistent_down_tree(warehouse: Warehouse) -> dg.AssetCheckResult:
    with warehouse.reader() as con:
        below, mismatch, over = con.execute(sql(PACKAGE, "tree_consistency")).fetchall()[0]
    return dg.AssetCheckResult(passed=(below, mismatch, over) == (0, 0, 0), metadata={
        "consumed_below_children": int(below), "remaining_mismatch": int(mismatch), "over_promised": int(over)})
