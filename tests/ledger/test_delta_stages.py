"""The named stages of a delta correction (ledger.periods, issue 22), each on its own, by hand.

Issued (one pool, USD | H100 | reserved; org acme → alpha, beta): J (alpha) 10.00, K (beta)
5.00 and idle 85.00, each exact to the cent: 100.00. Fresh, J re-priced: 10.006 exact; K and the
idle line unchanged. The pool's new exact total 100.006 rounds half-up to 100.01: its correction
is 1 cent, and it goes to the one leaf whose exact amount moved, J; nothing else gets a line."""

from __future__ import annotations

from decimal import Decimal

import polars as pl

from gpuledger.analytics.money import RAW
from gpuledger.ledger import periods as P
from tests.helpers.analytics_frames import org

D = Decimal
TREE = org([("acme", None, 1), ("alpha", "acme", 1), ("beta", "acme", 1)]).collect()
_SCHEMA = {"line_kind": pl.String, "cluster": pl.String, "job_id": pl.String, "project": pl.String,
           "user_name": pl.String, "gpu_model": pl.String, "tier": pl.String, "currency": pl.String,
           "gpu_hours": pl.Float64, "amount": pl.Decimal(38, 2), "idle_amount_included": pl.Decimal(38, 2),
           "amount_exact": RAW, "idle_amount_exact": RAW}


def _lines(rows, model="H100"):
    """rows: (line_kind, job_id, project, gpu_hours, amount, amount_exact)."""
    return pl.DataFrame([(k, "c1", j, p, None if j is None else "u", model, "reserved", "USD", h, D(a), D(0), D(e),
                          D(0)) for k, j, p, h, a, e in rows], schema=_SCHEMA, orient="row")


ISSUED = _lines([("charge", "J", "alpha", 5.0, "10.00", "10.00"), ("charge", "K", "beta", 2.5, "5.00", "5.00"),
                 ("idle", None, "(idle)", 42.5, "85.00", "85.00")])
FRESH = _lines([("charge", "J", "alpha", 5.0, "10.01", "10.006"), ("charge", "K", "beta", 2.5, "5.00", "5.00"),
                ("idle", None, "(idle)", 42.5, "84.99", "85.00")])


def test_delta_leaves_take_fresh_exact_less_issued_exact():
    got = P.delta_leaves(FRESH, ISSUED)
    deltas = {j: (d, h) for j, d, h in got.select("job_id", "_d_raw", "_d_hours").iter_rows()}
    assert deltas == {"J": (D("0.006"), 0.0), "K": (D(0), 0.0), None: (D(0), 0.0)}
    assert got["_pool"].unique().to_list() == ["USD|H100|reserved"]


def test_pool_root_cents_move_only_pools_that_moved():
    """H100: 100.006 half-up = 100.01, less the 100.00 issued: 1 cent. A100: issued 2.00 where the
    exact 2.005 would round to 2.01 (issued before pool-first rounding), but no exact amount
    moved: no cent."""
    a100 = _lines([("charge", "M", "alpha", 1.0, "2.00", "2.005")], model="A100")
    roots = P.pool_root_cents(P.delta_leaves(pl.concat([FRESH, a100]), pl.concat([ISSUED, a100])))
    assert dict(roots.select("_pool", "_root_amount").iter_rows()) == {"USD|H100|reserved": D(1),
                                                                       "USD|A100|reserved": D(0)}


def test_delta_tree_levels_read_out_per_level():
    levels = P.delta_levels(P.delta_tree(P.delta_leaves(FRESH, ISSUED), TREE))

    def moved(frame: pl.DataFrame) -> pl.DataFrame:
        return frame.filter(pl.col("amount") != 0)

    assert moved(levels["job"]).select("job_id", "amount").rows() == [("J", D("0.01"))]
    assert moved(levels["project"]).select("project", "amount").rows() == [("alpha", D("0.01"))]
    assert sorted(moved(levels["node"]).select("node", "amount").rows()) == [("acme", D("0.01")),
                                                                              ("alpha", D("0.01"))]
    # every leaf and node is there, moved or not: K, beta and the idle line at 0.00
    assert levels["job"].height == 3 and levels["node"]["amount"].sum() == D("0.02")  # acme + alpha


def test_correction_lines_are_debits_and_credits_of_what_moved():
    """+0.01 → a debit; −0.02 → a credit; 0.00 but 0.5 GPU-h more → a debit (hours decide);
    nothing moved → no line."""
    frame = pl.DataFrame({"line_kind": ["charge", "charge", "idle", "charge"], "job_id": ["J", "K", None, "L"],
                          "amount": [D("0.01"), D("-0.02"), D("0"), D("0")], "_d_hours": [0.0, 0.0, 0.5, 0.0],
                          "_d_raw": [D("0.006"), D("-0.02"), D("0"), D("0")], "_di_raw": [D(0)] * 4},
                         schema_overrides={"amount": pl.Decimal(38, 2), "_d_raw": RAW, "_di_raw": RAW})
    template = pl.DataFrame(schema={"line_kind": pl.String, "job_id": pl.String, "gpu_hours": pl.Float64,
                                    "amount": pl.Decimal(38, 2), "amount_exact": RAW, "billed": pl.Boolean})
    out = P.correction_lines(frame, template, {})
    assert out.select("job_id", "line_kind", "correction_of", "amount").rows() == [
        ("J", "debit", "charge", D("0.01")), ("K", "credit", "charge", D("-0.02")), (None, "debit", "idle", D("0"))]
    assert out.columns == [*template.columns, "correction_of"] and out["billed"].all()
    assert out["amount_exact"].to_list() == [D("0.006"), D("-0.02"), D(0)]  # the exact delta beside its cents


def test_an_idle_correction_line_has_one_rounding_for_both_amounts():
    """The amount tree rounded an idle delta to 21.51 and the idle tree to 21.52: the debit line says
    21.51 in both columns (an idle line's cents are all idle); a charge line keeps its own idle cents."""
    frame = pl.DataFrame({"line_kind": ["idle", "charge"], "job_id": [None, "J"],
                          "amount": [D("21.51"), D("3.00")], "idle_amount_included": [D("21.52"), D("0.40")],
                          "_d_hours": [10.0, 1.0], "_d_raw": [D("21.515"), D("3.0")], "_di_raw": [D("21.515"), D("0.4")]},
                         schema_overrides={"amount": pl.Decimal(38, 2), "idle_amount_included": pl.Decimal(38, 2),
                                           "_d_raw": RAW, "_di_raw": RAW})
    template = pl.DataFrame(schema={"line_kind": pl.String, "job_id": pl.String, "gpu_hours": pl.Float64,
                                    "amount": pl.Decimal(38, 2), "idle_amount_included": pl.Decimal(38, 2)})
    out = P.correction_lines(frame, template, {})
    assert out.select("line_kind", "correction_of", "amount", "idle_amount_included").rows() == [
        ("debit", "idle", D("21.51"), D("21.51")), ("debit", "charge", D("3.00"), D("0.40"))]
