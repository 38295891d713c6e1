"""Chargeback checks: every stored month reconciles to the cent — Σ charges + idle (+ corrections)
= Σ installed capacity × price (analytics.chargeback.chargeback_totals) over the month, or up to
the data's "now" for a month still open (as the statement counts it), plus what the statement's
memo lines state beyond capacity (over-allocated, charges of clusters of unknown capacity) — and
no idle line is negative."""

import dagster as dg
from gpuledger.pipelines.defs.chargeback.assets import chargeback_statements
from gpuledger.pipelines.defs.resources import Warehouse

from gpuledger.analytics.chargeback import chargeback_totals
from gpuledger.analytics.load import load_tables
from gpuledger.facts import data_now
from gpuledger.rules.billing import billed_sql
from gpuledger.sql import load_sql

PACKAGE = "gpuledger.pipelines.defs.chargeback"


def statement_totals() -> str:
    """statement_totals.sql with the billed-line rule (gpuledger.rules.billing) filled in."""
    return load_sql(PACKAGE, "statement_totals.sql", billed=billed_sql())


@dg.asset_check(asset=chargeback_statements, description="Σ charges + idle = Σ capacity × price, per month "
                "and currency, to the cent")
def chargeback_reconciles(warehouse: Warehouse) -> dg.AssetCheckResult:
    mismatches, checked = [], 0
    with warehouse.reader() as con:
        stored = con.execute(statement_totals()).fetchall()
        now = data_now(con)
        capacity: dict = {}
        for period, start, end, currency, amount, _, beyond_capacity in stored:
            if period not in capacity:
                end = min(end, now)  # a month still open is stated up to the data's "now"
                t = load_tables(con, start=start, end=end, samples=False)
                capacity[period] = dict(chargeback_totals(t.gpus, t.rate_card, start=start, end=end)
                                        .select("currency", "capacity_amount").collect().rows())
            expected = capacity[period].get(currency, 0 if beyond_capacity else None)
            expected = None if expected is None else expected + beyond_capacity
            checked += 1
            if expected is None or amount != expected:
                mismatches.append(f"{period} {currency}: statement {amount} vs capacity × price {expected}")
    return dg.AssetCheckResult(passed=not mismatches, metadata={
        "months_currencies_checked": checked, "mismatches": "; ".join(mismatches) or "none"})


@dg.asset_check(asset=chargeback_statements, description="no negative idle line in any stored month")
def chargeback_no_negative_idle(warehouse: Warehouse) -> dg.AssetCheckResult:
    with warehouse.reader() as con:
        stored = con.execute(statement_totals()).fetchall()
    negative = {f"{period} {currency}": int(n) for period, _, _, currency, _, n, _ in stored if n}
    return dg.AssetCheckResult(passed=not negative, severity=dg.AssetCheckSeverity.WARN,
                               metadata={"negative_idle_lines": str(negative) if negative else "none"})
