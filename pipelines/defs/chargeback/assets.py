"""Monthly chargeback statements at project level, one month per partition, from the ledger's
``statement_lines`` (the one place statements are read: a closed month's issued lines and
corrections, an open month computed by queries.chargeback_report). Issued on the 1st for the month
before (chargeback/schedules.py); rematerializing a month replaces its rows exactly. Read through
``gpuledger.ledger.periods.statement_lines``, as the finance statements and dashboards read it."""

import dagster as dg
import polars as pl
from gpuledger.pipelines.defs.analytics_deps import INGEST_DEPS
from gpuledger.pipelines.defs.partitions import monthly_partitions, single_run
from gpuledger.pipelines.defs.resources import GpuledgerConfig, Warehouse
from gpuledger.warehouse.clock import data_now

from gpuledger import warehouse as wh
from gpuledger.config_store import policy_in_force
from gpuledger.facts import statement_views
from gpuledger.facts.materialize import replace_partition, stamped
from gpuledger.ledger.periods import statement_lines
from gpuledger.reports.statement.build import build_statement
from gpuledger.reports.statement.summary import StatementSummary


@dg.asset(partitions_def=monthly_partitions, backfill_policy=single_run, deps=INGEST_DEPS, group_name="chargeback",
          kinds={"duckdb", "polars"})
def chargeback_statements(context: dg.AssetExecutionContext, warehouse: Warehouse,
                          gpuledger_config: GpuledgerConfig) -> dg.MaterializeResult:
    """Charge lines per project, GPU model and tier plus the idle line; Σ amount = Σ capacity ×
    price (table chargeback_statements); and the month's statement as the chargeback page shows it
    (table statement_views, read while as new as the data)."""
    cfg = gpuledger_config.load()
    metadata: dict = {"table": "chargeback_statements", "rows": 0, "rows_replaced": 0, "closed": []}
    for key in context.partition_keys:  # one month, or each month of a single-run backfill
        period = key[:7]  # YYYY-MM-DD partition key -> YYYY-MM
        with warehouse.reader() as con:
            now = data_now(con)
            mark = statement_views.inputs_mark(con, period, now)
            lines = statement_lines(con, period, level="project", policy=cfg.policy, now=now)
            # the chargeback page's view of the month, so its first load reads instead of building:
            # under the policy the page builds with (the warehouse's config in force), which is the
            # pipeline's own unless its config file changed since the last load
            shown = policy_in_force(con)
            view = StatementSummary.of(build_statement(con, period, policy=shown, now=now, history=False,
                                                       lines=lines if shown == cfg.policy else None))
        # Unpriced lines have GPU-hours and no amount; the table's amount is NOT NULL: 0, their kind says why.
        stored = lines.drop("period").with_columns(pl.col("amount").fill_null(0))
        with warehouse.writer() as con, wh.transaction(con):
            deleted, inserted = replace_partition(con, "chargeback_statements", period,
                                                  stamped(stored, period=period))
            statement_views.store(con, view, now=now, mark=mark)
        metadata["rows"] += inserted
        metadata["rows_replaced"] += deleted
        if lines.height and lines["revision"].is_not_null().any():
            metadata["closed"].append(period)
        billed = lines.filter(pl.col("billed").fill_null(True)) if "billed" in lines.columns else lines
        for currency, amount in (billed.group_by("currency").agg(pl.col("amount").sum()).rows()
                                 if lines.height else []):
            if currency:
                metadata[f"amount_{period}_{currency}"] = str(amount)
    metadata["periods"] = ", ".join(key[:7] for key in context.partition_keys)
    metadata["closed"] = ", ".join(metadata["closed"]) or "none"
    return dg.MaterializeResult(metadata=metadata)
