"""Exact money: Decimal columns, prices as of a time, cent rounding that keeps totals.

Raw amounts are polars Decimal(38, 12); lines are rounded to cents with the largest-remainder
method, so the rounded lines of a group add up exactly to the group's rounded total.
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

import polars as pl

RAW = pl.Decimal(38, 12)
CENTS = pl.Decimal(38, 2)


def to_raw(expr: pl.Expr) -> pl.Expr:
    """A float quantity (GPU-hours) as a raw Decimal (12 places)."""
    return expr.cast(RAW)


def price_as_of(
    lf: pl.LazyFrame, rate_card: pl.LazyFrame, *, at: str = "piece_start",
    model_col: str = "model", tier_col: str = "tier",
) -> pl.LazyFrame:
    """Add ``price_per_gpu_hour`` (Decimal) and ``currency`` of the rate in force at column ``at``.

    Backward as-of join on ``effective_from`` by (model, tier): the price that applies at an
    instant is the latest one effective at or before it. Rows with no rate get NULLs.
    """
    rates = rate_card.select(
        pl.col("gpu_model").alias(model_col), pl.col("tier").alias(tier_col),
        pl.col("effective_from").cast(pl.Datetime("us")).alias("_eff"),
        pl.col("price_per_gpu_hour").cast(pl.Decimal(18, 6)), "currency",
    ).sort("_eff")
    return (
        lf.with_columns(pl.col(at).cast(pl.Datetime("us")).alias("_eff"))
        .sort("_eff")
        .join_asof(rates, on="_eff", by=[model_col, tier_col], strategy="backward", check_sortedness=False)
        .drop("_eff")
    )


def round_half_up_cents(value: Decimal) -> Decimal:
    return value.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)


def largest_remainder_cents(lf: pl.LazyFrame, *, raw_col: str, group: list[str], order: list[str],
                            out_col: str = "amount") -> pl.LazyFrame:
    """Round ``raw_col`` to cents so that each ``group`` sums to its total rounded half-up.

    Every line gets its floor in cents; the cents left over go one each to the lines with the
    largest remainders (ties broken by ``order`` columns, so the result is deterministic).
    """
    cents = pl.col(raw_col) * 100
    return (
        lf.with_columns(_floor=cents.floor().cast(pl.Int128))
        .with_columns(_rem=(cents - pl.col("_floor").cast(RAW)).cast(pl.Float64))
        .with_columns(
            _target=(pl.col(raw_col).sum() * 100 + pl.lit(Decimal("0.5")).cast(RAW)).floor().cast(pl.Int128)
            .over(group),
            _floors=pl.col("_floor").sum().over(group),
        )
        .sort([*group, "_rem", *order], descending=[False] * len(group) + [True] + [False] * len(order),
              nulls_last=True)
        .with_columns(_pos=pl.int_range(pl.len()).over(group))
        .with_columns(
            (pl.col("_floor") + (pl.col("_pos") < (pl.col("_target") - pl.col("_floors"))).cast(pl.Int128))
            .alias("_cents")
        )
        .with_columns((pl.col("_cents").cast(CENTS) * pl.lit(Decimal("0.01"))).cast(CENTS).alias(out_col))
        .drop("_floor", "_rem", "_target", "_floors", "_pos", "_cents")
    )
