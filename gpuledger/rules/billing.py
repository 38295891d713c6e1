"""Which chargeback lines are billed: the one rule behind every statement total.

A line is billed when its kind is ``charge`` or ``idle``; the other kinds (``over-allocated``,
``capacity-unknown``, ``unpriced``) are memo lines, shown but never summed into what anybody owes.
A closed month changes only by ``credit`` / ``debit`` lines, each naming the kind of line it
corrects (``correction_of``): a correction is billed exactly when the line it corrects is, so
correcting a memo line moves no total.

Both forms (polars over a frame, SQL over a table) come from :data:`BILLED_KINDS`;
tests/rules/test_billing.py runs them over the same lines.
"""

from __future__ import annotations

import polars as pl

LINE_KINDS = ("charge", "idle", "over-allocated", "capacity-unknown", "unpriced")
BILLED_KINDS = ("charge", "idle")  # the statement's total; the other kinds are memo lines
CORRECTION_KINDS = ("credit", "debit")
MEMO_KINDS = tuple(k for k in LINE_KINDS if k not in BILLED_KINDS)  # shown, never summed into a total


def billed(frame: pl.DataFrame | pl.LazyFrame) -> pl.Expr:
    """True on the lines of ``frame`` that make a statement's total (see the module docstring);
    a frame without ``correction_of`` holds no corrections."""
    names = frame.collect_schema().names()
    return billed_expr(has_corrections="correction_of" in names)


def billed_expr(*, has_corrections: bool = True) -> pl.Expr:
    """:func:`billed` over columns ``line_kind`` (and ``correction_of``)."""
    kind = pl.coalesce("correction_of", "line_kind") if has_corrections else pl.col("line_kind")
    return kind.is_in(BILLED_KINDS)


def billed_sql(line_kind: str = "line_kind", correction_of: str | None = "correction_of") -> str:
    """SQL of :func:`billed`: ``line_kind`` and ``correction_of`` are SQL expressions."""
    kind = f"coalesce({correction_of}, {line_kind})" if correction_of else line_kind
    return f"({kind} IN ({', '.join(repr(k) for k in BILLED_KINDS)}))"


def billed_kind() -> pl.Expr:
    """The kind a line counts as in a total: a correction counts as the kind it corrects."""
    return pl.coalesce("correction_of", "line_kind")
