"""Money to the cent: half-up (half away from zero), the one rounding rule for every amount shown
or billed. polars' own ``Decimal.round`` rounds half to even (0.005 -> 0.00), so it is never used
on money; Python's ``Decimal.quantize`` with ROUND_HALF_UP is this rule for a single value, and
:func:`half_up_cents` is the same rule over a column (tests/rules/test_money.py: the same cases).
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

import polars as pl

CENT = Decimal("0.01")
RAW = pl.Decimal(38, 12)  # an exact amount before rounding (12 places)
CENTS = pl.Decimal(38, 2)


def cents(value: Decimal) -> Decimal:
    """``value`` rounded to the cent, half away from zero (2.005 -> 2.01, -2.005 -> -2.01)."""
    return value.quantize(CENT, rounding=ROUND_HALF_UP)


def half_up_int_cents(expr: pl.Expr) -> pl.Expr:
    """Integer cents of a Decimal amount, half away from zero (0.005 -> 1, -0.005 -> -1)."""
    half = pl.lit(Decimal("0.5")).cast(RAW)
    in_cents = expr.cast(RAW) * 100
    return (pl.when(in_cents >= 0).then((in_cents + half).floor()).otherwise(-((-in_cents + half).floor()))
            .cast(pl.Int128))


def half_up_cents(expr: pl.Expr) -> pl.Expr:
    """:func:`cents` over a column: a Decimal amount rounded to cents half-up (Decimal(38, 2));
    NULL stays NULL."""
    return (half_up_int_cents(expr).cast(CENTS) * pl.lit(CENT)).cast(CENTS)


def largest_remainder(total: Decimal, weights: list[Decimal]) -> list[Decimal]:
    """``total`` (cents) split in proportion to ``weights``: each part its floor in cents, the
    cents left over one each to the largest remainders; the parts add up to ``total`` exactly."""
    cents = int((total * 100).to_integral_value())
    whole = sum(weights)
    if not weights:
        return []
    if whole == 0:  # nothing to weigh by: all of it in the last part
        return [Decimal(0)] * (len(weights) - 1) + [total]
    raw = [Decimal(cents) * w / whole for w in weights]
    floors = [int(r.to_integral_value(rounding="ROUND_FLOOR")) for r in raw]
    order = sorted(range(len(raw)), key=lambda i: (-(raw[i] - floors[i]), i))
    for i in order[:cents - sum(floors)]:
        floors[i] += 1
    return [Decimal(f) / 100 for f in floors]
