"""Usage checks: idle GPU-hours are never negative (idle = allocated − active − unknown, so a
negative value means activity above the allocation: a bad join or a double-counted sample)."""

import dagster as dg
from gpuledger.pipelines.defs.resources import Warehouse
from gpuledger.pipelines.defs.usage.assets import job_usage_hourly, project_usage_hourly

from gpuledger.facts.materialize import sql

PACKAGE = "gpuledger.pipelines.defs.usage"


def _no_negative_idle(asset, table: str):
    @dg.asset_check(asset=asset, name=f"{table}_no_negative_idle", description=f"{table}: gpu_hours_idle ≥ 0")
    def _check(warehouse: Warehouse) -> dg.AssetCheckResult:
        with warehouse.reader() as con:
            rows, lowest = con.execute(sql(PACKAGE, "no_negative_idle"), {"table_name": table}).fetchall()[0]
        return dg.AssetCheckResult(passed=rows == 0, metadata={"negative_rows": int(rows), "lowest_idle": float(lowest)})

    return _check


job_usage_no_negative_idle = _no_negative_idle(job_usage_hourly, "usage_hourly_jobs")
project_usage_no_negative_idle = _no_negative_idle(project_usage_hourly, "usage_hourly_projects")
