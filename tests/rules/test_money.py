"""Cents half-up (gpuledger.rules.money): the single-value rule and its column form over the same
amounts, by hand: half a cent rounds away from zero, never to even."""

from __future__ import annotations

from decimal import Decimal

import polars as pl

from gpuledger.rules.money import RAW, cents, half_up_cents

CASES = [  # amount, cents by hand
    ("2.005", "2.01"), ("2.015", "2.02"), ("2.025", "2.03"),  # half to even would give 2.00, 2.02, 2.02
    ("-2.005", "-2.01"), ("0.0049999999", "0.00"), ("0.005", "0.01"), ("-0.005", "-0.01"),
    ("123456789.994999", "123456789.99"), ("0", "0.00"), ("7.1", "7.10"),
    # the guard: within 5e-11 of half a cent is half a cent (raw amounts are exact to 1e-12 per
    # line: 0.926666666667 + 0.598333333333 for an exact 0.9266... + 0.5983... = 1.525)
    ("0.004999999999", "0.01"), ("1.524999999999", "1.53"), ("-1.524999999999", "-1.53"),
    ("1.52499999994", "1.52"), ("0.00499999995", "0.01"), ("0.004999999949", "0.00"),
]


def test_value_and_column_forms_agree_with_the_hand_rounding():
    amounts = [Decimal(a) for a, _ in CASES]
    want = [Decimal(c) for _, c in CASES]
    assert [cents(a) for a in amounts] == want
    column = pl.DataFrame({"a": pl.Series(amounts, dtype=RAW)}).select(half_up_cents(pl.col("a")))["a"].to_list()
    assert column == want


def test_null_stays_null():
    frame = pl.DataFrame({"a": pl.Series([None, Decimal("1.005")], dtype=RAW)})
    assert frame.select(half_up_cents(pl.col("a")))["a"].to_list() == [None, Decimal("1.01")]
