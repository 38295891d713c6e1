"""Which lines are billed (gpuledger.rules.billing): the polars and SQL forms over the same lines,
and the dashboards' chargeback page, which summed corrections of memo lines, now agreeing."""

from __future__ import annotations

from decimal import Decimal

import duckdb
import polars as pl

from gpuledger.rules.billing import billed, billed_expr, billed_sql

# (line_kind, correction_of, billed?) by the rule: charge and idle lines, and corrections of those
LINES = [
    ("charge", None, True),
    ("idle", None, True),
    ("over-allocated", None, False),
    ("capacity-unknown", None, False),
    ("unpriced", None, False),
    ("credit", "charge", True),
    ("debit", "idle", True),
    ("credit", "over-allocated", False),  # correcting a memo line moves no total
    ("debit", "unpriced", False),
]


def _frame() -> pl.DataFrame:
    return pl.DataFrame([(k, c) for k, c, _ in LINES], schema={"line_kind": pl.String, "correction_of": pl.String},
                        orient="row")


def test_polars_and_sql_forms_agree_with_the_rule():
    frame = _frame()
    want = [b for *_, b in LINES]
    assert frame.select(billed(frame))["correction_of"].to_list() == want
    con = duckdb.connect()
    con.register("lines", frame.with_row_index("i").to_arrow())
    assert [r[0] for r in con.execute(f"SELECT {billed_sql()} FROM lines ORDER BY i").fetchall()] == want


def test_a_frame_without_corrections_bills_by_its_kind():
    frame = _frame().drop("correction_of").head(5)
    assert frame.select(billed(frame)).to_series().to_list() == [True, True, False, False, False]
    assert frame.select(billed_expr(has_corrections=False)).to_series().to_list() == [True, True, False, False, False]


def test_dashboard_chargeback_totals_leave_out_corrections_of_memo_lines():
    # the page filtered line_kind IN (charge, idle, credit, debit): a credit of an over-allocated
    # (memo) line was in its bars though no statement total counts it
    from gpuledger.dashboards.queries import billed_lines

    lines = _frame().with_columns(amount=pl.Series([Decimal(x) for x in
                                                    ("10.00", "2.50", "4.00", "0", "0", "-1.00", "0.25", "-4.00", "0")]),
                                  currency=pl.lit("USD"))
    kept = billed_lines(lines)
    # 10.00 + 2.50 - 1.00 + 0.25 = 11.75: the -4.00 credit of the memo line is not billed
    assert kept["amount"].sum() == Decimal("11.75")
    assert kept.height == 4
