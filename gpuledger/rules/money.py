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


# Raw amounts are exact to their 12th place per line (GPU-hours are floats cast to RAW, a third of
# an hour is 0.333333333333), so a pool's sum of thirds whose exact total is a half cent can land
# 1e-12 below it (hypothesis found 0.926666666667 + 0.598333333333 = 1.524999999... for an exact
# 1.525). Amounts are rounded to GUARD places first: within 5e-11 of a half cent is the half cent.
# Real amounts (seconds x 6-place prices x MIG sevenths) are multiples of ~4e-11, so no amount that
# is not a half cent is taken for one at this guard.
GUARD = Decimal("1e-10")
_GUARD_UNITS = 10**8  # GUARD in cents


def cents(value: Decimal) -> Decimal:
    """``value`` rounded to the cent, half away from zero (2.005 -> 2.01, -2.005 -> -2.01), after
    rounding to ``GUARD`` places (0.004999999999 is half a cent)."""
    return value.quantize(GUARD, rounding=ROUND_HALF_UP).quantize(CENT, rounding=ROUND_HALF_UP)


def half_up_int_cents(expr: pl.Expr) -> pl.Expr:
    """Integer cents of a Decimal amount, half away from zero (0.005 -> 1, -0.005 -> -1), after
    rounding to ``GUARD`` places (as :func:`cents`)."""
    half = pl.lit(Decimal("0.5")).cast(RAW)
    in_units = expr.cast(RAW) * 100 * _GUARD_UNITS  # in GUARD units, 12 places still

    def away_from_zero(units: pl.Expr) -> pl.Expr:  # units >= 0: to whole GUARD units, then to cents
        whole = (units + half).floor().cast(pl.Int128)
        return (whole + _GUARD_UNITS // 2) // _GUARD_UNITS

    negative = pl.lit(0, pl.Int128) - away_from_zero(-in_units)  # (polars has no neg for Int128)
    return pl.when(in_units >= 0).then(away_from_zero(in_units)).otherwise(negative).cast(pl.Int128)


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
