"""Showback of activity: an option beside the statement, never the ledger of record.

Per GPU pool (currency, GPU model, tier) the pool's billed amount (its charges, its idle and the
corrections of both, exactly as the statement bills them) is shown re-weighted by each project's
*active* GPU-hours, so the idle capacity is redistributed to who used the GPUs and the pool's
total is unchanged: Σ showback = Σ billed per pool, to the cent (largest remainder).

Hours without an activity signal (``gpu_hours_unknown``: no samples) weigh as allocated, never as
idle: a project is not discounted because its GPUs were not scraped. Such lines are marked
(``activity``: ``partly unknown`` / ``unknown``), so a reader sees which figures rest on
allocation rather than activity. Units: GPU-hours, money in exact decimals.
"""

from __future__ import annotations

from decimal import Decimal

import polars as pl

from gpuledger.reports.statement import Statement

BASES = ("active",)


def showback_lines(st: Statement, basis: str = "active") -> pl.DataFrame:
    """business_unit, project, gpu_model, tier, currency, gpu_hours (allocated), gpu_hours_active,
    gpu_hours_unknown, weight_gpu_hours (active + unknown), billed (the ledger's charge, with its
    corrections), showback, idle_redistributed (showback − billed), activity (measured /
    partly unknown / unknown)."""
    if basis not in BASES:
        from gpuledger.errors import UsageError

        raise UsageError(f"--showback {basis!r}: choose one of {', '.join(BASES)}")
    lines = st.lines.with_columns(kind=pl.coalesce("correction_of", "line_kind"))
    money = lines.filter(pl.col("kind").is_in(["charge", "idle"]) & pl.col("currency").is_not_null())
    pool = ["currency", "gpu_model", "tier"]
    totals = money.group_by(pool).agg(pl.col("amount").sum().alias("_pool"))
    charges = (money.filter(pl.col("kind") == "charge")
               .group_by("business_unit", "project", *pool)
               .agg(pl.col("amount").sum().alias("billed"), pl.col("gpu_hours").filter(pl.col("line_kind") == "charge")
                    .sum(), pl.col("gpu_hours_active").fill_null(0.0).sum(), pl.col("gpu_hours_unknown").fill_null(0.0)
                    .sum())
               .with_columns(weight_gpu_hours=(pl.col("gpu_hours_active") + pl.col("gpu_hours_unknown")).round(6))
               .join(totals, on=pool, how="left")
               .sort(*pool, "business_unit", "project"))
    shares: list[Decimal] = []
    for _, group in charges.group_by(pool, maintain_order=True):
        from gpuledger.reports.weekly import _largest_remainder

        total = Decimal(group["_pool"][0])
        weights = [Decimal(str(w)) for w in group["weight_gpu_hours"]]
        if sum(weights) == 0:  # nobody used the pool: showback follows the ledger's charges
            weights = [Decimal(b) for b in group["billed"]]
        shares += _largest_remainder(total, weights)
    out = charges.with_columns(showback=pl.Series(shares, dtype=pl.Decimal(38, 2)))
    # a pool nobody charged: its idle stays the org's, as on the statement
    unused = totals.join(charges.select(pool).unique(), on=pool, how="anti").with_columns(
        business_unit=pl.lit("(org)"), project=pl.lit("(idle)"), billed=pl.col("_pool"), showback=pl.col("_pool"),
        gpu_hours=pl.lit(0.0), gpu_hours_active=pl.lit(0.0), gpu_hours_unknown=pl.lit(0.0),
        weight_gpu_hours=pl.lit(0.0))
    out = pl.concat([out, unused.select(out.columns)], how="vertical_relaxed")
    return out.with_columns(
        idle_redistributed=(pl.col("showback") - pl.col("billed")).cast(pl.Decimal(38, 2)),
        activity=pl.when(pl.col("gpu_hours_unknown") <= 1e-9).then(pl.lit("measured"))
        .when(pl.col("gpu_hours_active") > 0).then(pl.lit("partly unknown")).otherwise(pl.lit("unknown")),
    ).select("business_unit", "project", *pool, "gpu_hours", "gpu_hours_active", "gpu_hours_unknown",
             "weight_gpu_hours", "billed", "showback", "idle_redistributed", "activity")
