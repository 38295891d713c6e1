"""Exact money: Decimal columns, prices as of a time, cent rounding that keeps totals.

Raw amounts are polars Decimal(38, 12). Rounding to the cent is half-up (the rule and its
column form: gpuledger.rules.money); here the largest-remainder split that rounds a total
top-down through a tree of lines, so every node is within a cent of its exact amount and children
add up to their parent exactly.
"""

from __future__ import annotations

from decimal import Decimal

import polars as pl

from gpuledger.analytics.collect import ENGINE
from gpuledger.rules.money import CENTS, RAW, half_up_cents, half_up_int_cents  # noqa: F401  (the rule; analytics import it from here)



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


def _split_cents(lf: pl.LazyFrame, *, raw_col: str, group: list[str], order: list[str],
                 target: pl.Expr) -> pl.LazyFrame:
    """Add integer ``_cents``: each row its floor in cents, then the ``target`` cents of its
    ``group`` left over go one each to the largest remainders (ties by ``order``)."""
    cents = pl.col(raw_col) * 100
    desc = [False] * len(group) + [True] + [False] * len(order)
    return (
        lf.with_columns(_floor=cents.floor().cast(pl.Int128))
        .with_columns(_rem=(cents - pl.col("_floor").cast(RAW)).cast(pl.Float64), _target=target)
        .with_columns(_floors=pl.col("_floor").sum().over(group) if group else pl.col("_floor").sum())
        .sort([*group, "_rem", *order], descending=desc, nulls_last=True)
        .with_columns(_pos=pl.int_range(pl.len()).over(group) if group else pl.int_range(pl.len()))
        .with_columns(_cents=pl.col("_floor")
                      + (pl.col("_pos") < (pl.col("_target") - pl.col("_floors"))).cast(pl.Int128))
        .drop("_floor", "_rem", "_target", "_floors", "_pos")
    )


def _cents_col(name: str) -> pl.Expr:
    return (pl.col("_cents").cast(CENTS) * pl.lit(Decimal("0.01"))).cast(CENTS).alias(name)




def round_tree(leaves: pl.LazyFrame, *, path: list[str], amounts: dict[str, str],
               sums: list[str] = (), root_cents: pl.LazyFrame | None = None) -> list[pl.LazyFrame]:
    """Round a tree of amounts top-down: the root is its exact total rounded half-up; each node's
    cents are split among its children by largest remainder of their exact amounts.

    ``leaves`` has one row per leaf, the ``path`` columns (non-NULL strings: root first, leaf
    last; a level a branch does not have repeats a placeholder, a pass-through node) and the raw
    columns of ``amounts`` ({raw column: rounded column}, each rounded on its own). Returns one
    frame per level k: path[:k+1], each raw column (Σ exact), its rounded column (Decimal
    cents) and the ``sums`` columns summed (each level materialised). Every node is within a cent of its exact amount (a
    child gets its floor or one cent more, and only one with a remainder gets more) and the
    children of a node add up to it exactly.

    ``root_cents`` (path[0] and one integer-cents column ``_root_<rounded column>`` per amount)
    gives the roots' cents instead: a correction's delta tree is rounded to what makes the
    corrected total the new exact total rounded half-up (ledger.periods).
    """
    levels: list[pl.LazyFrame] = []
    for k in range(len(path)):
        keys = path[: k + 1]
        nodes = leaves.group_by(keys).agg(*(pl.col(c).sum() for c in [*amounts, *sums]))
        for raw, out in amounts.items():
            if k == 0 and root_cents is not None:
                nodes = (nodes.join(root_cents.select(path[0], pl.col(f"_root_{out}").cast(pl.Int128).alias("_cents")),
                                    on=path[0], how="left")
                         .with_columns(pl.col("_cents").fill_null(half_up_int_cents(pl.col(raw)))))
            elif k == 0:
                nodes = nodes.with_columns(_cents=half_up_int_cents(pl.col(raw)))
            else:
                parent = levels[-1].select(*path[:k], (pl.col(out).cast(RAW) * 100).cast(pl.Int128)
                                           .alias("_parent"))
                nodes = _split_cents(nodes.join(parent, on=path[:k], how="left"), raw_col=raw,
                                     group=path[:k], order=[path[k]], target=pl.col("_parent")).drop("_parent")
            nodes = nodes.with_columns(_cents_col(out)).drop("_cents")
        levels.append(nodes.collect(engine=ENGINE).lazy())  # each level feeds the next: computed once
    return levels
