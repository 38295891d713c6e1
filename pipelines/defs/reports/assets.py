"""Statement files in a folder (``$GPULEDGER_STATEMENTS_DIR``, default ``data/statements``):
``<folder>/<YYYY-MM>/`` per month (gpuledger.reports: CSV, Parquet, XLSX, HTML, manifest.json) and
``<folder>/weekly/<YYYY-Www>/`` per week. Rematerializing rewrites the same bytes for the same data
and config; a closed month reads its frozen lines. With ``policy.reports.finance_channel`` set the
monthly files are e-mailed to finance (the channel's URL from the environment)."""

import os
from pathlib import Path

import dagster as dg
from gpuledger.pipelines.defs.chargeback.assets import chargeback_statements
from gpuledger.pipelines.defs.partitions import PARTITIONS_START, monthly_partitions
from gpuledger.pipelines.defs.resources import GpuledgerConfig, Warehouse

from gpuledger.reports.statement.build import build_statement
from gpuledger.reports.statement.delivery import email_statement
from gpuledger.reports.statement.files import write_statement_set
from gpuledger.reports.statement.pdf import chromium
from gpuledger.reports.weekly import build_weekly, write_weekly

STATEMENTS_DIR_ENV = "GPULEDGER_STATEMENTS_DIR"
weekly_partitions = dg.WeeklyPartitionsDefinition(start_date=PARTITIONS_START, timezone="UTC", day_offset=1)


def statements_dir() -> Path:
    return Path(os.environ.get(STATEMENTS_DIR_ENV, "data/statements")).absolute()


class StatementDelivery(dg.Config):
    email: bool = True  # e-mail to policy.reports.finance_channel when one is configured


@dg.asset(partitions_def=monthly_partitions, deps=[chargeback_statements], group_name="reports",
          kinds={"duckdb", "polars"})
def finance_statement_files(context: dg.AssetExecutionContext, config: StatementDelivery, warehouse: Warehouse,
                            gpuledger_config: GpuledgerConfig) -> dg.MaterializeResult:
    """The month's finance statement for the org and every business unit, reconciled, with a
    manifest of SHA-256s."""
    period = context.partition_key[:7]
    policy = gpuledger_config.load().policy
    out = statements_dir() / period
    with warehouse.reader() as con:
        st = build_statement(con, period, policy=policy)
    manifest = write_statement_set(st, out, pdf=chromium() is not None)  # the PDF where Chromium is installed
    emailed = None
    if config.email and policy.reports.finance_channel:
        emailed = email_statement(policy, manifest, out)
    return dg.MaterializeResult(metadata={
        "folder": str(out), "status": manifest["status"], "files": len(manifest["files"]),
        "config_version": manifest["config_version"], "reconciles": all(r["reconciles"] for r in manifest["reconciliation"]),
        **{f"total_{c}": a for c, a in manifest["totals"].items()}, "emailed_to": emailed or "nobody"})


@dg.asset(partitions_def=weekly_partitions, group_name="reports", kinds={"duckdb", "polars"})
def weekly_summary_files(context: dg.AssetExecutionContext, warehouse: Warehouse,
                         gpuledger_config: GpuledgerConfig) -> dg.MaterializeResult:
    """GPU-hours, spend, budget burn and top squatters per business unit for one ISO week."""
    start = context.partition_time_window.start
    week = f"{start.isocalendar().year}-W{start.isocalendar().week:02d}"
    out = statements_dir() / "weekly" / week
    with warehouse.reader() as con:
        summary = build_weekly(con, week, policy=gpuledger_config.load().policy)
    manifest = write_weekly(summary, out)
    return dg.MaterializeResult(metadata={"folder": str(out), "week": week, "files": len(manifest["files"]),
                                          "business_units": summary.units.height,
                                          "squatters": summary.squatters.height})
