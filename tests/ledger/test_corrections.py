"""Corrections touch only what changed (issue 21 §3): the correction's exact delta is rounded,
not the whole tree again, so re-pricing one GPU pool moves no cent in another.

October 2026 (744 h), org acme → alpha, beta; whole GPUs GPU-h (H100) and GPU-a (A100) all month.
alpha-1 holds GPU-h Oct 1 00:00–01:00 (1 h), alpha-2 GPU-a Oct 1 00:00–00:20 (1/3 h).
Issued at H100 1.0025, A100 1.00. The rounding tree is pool first (currency → model × tier →
acme | (idle) → project → job), each pool its exact total half-up:
  H100 744 × 1.0025 = 745.86: alpha 1.0025 (floor 1.00, rem .25), idle 743 × 1.0025 = 744.8575
    (floor 744.85, rem .75); one cent left, to idle: 1.00 / 744.86
  A100 744 × 1.00 = 744.00: alpha 0.3333 (rem .33), idle 743.6667 (rem .67): 0.33 / 743.67
  total 745.86 + 744.00 = 1,489.86
  (The tree rounded currency first, as before, made alpha's A100 line 0.34 and idle 743.66, and a
  re-rounding of the whole tree after an H100 reprice moved a cent on both: issue 21's bug.)
Re-priced H100 to 1.0010 (A100 unchanged): pool H100 744 × 1.001 = 744.744 → 744.74; issued
  745.86, so its root is −1.12; exact deltas alpha −0.0015 (−0.15 ¢: floor −1, rem .85), idle
  −1.1145 (−111.45 ¢: floor −112, rem .55): floors −113, one cent back to alpha: alpha 0, idle
  −1.12. No exact amount moved in A100: its root is 0, no line.
  So one correction line: idle H100 −1.12; nothing on A100; the H100 charge stays 1.00 (exact
  1.001, within a cent)."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

import polars as pl

from gpuledger import warehouse
from gpuledger.ledger import periods
from gpuledger.reports.statement.build import build_statement
from gpuledger.reports.statement.files import write_statement_set
from tests.helpers.ledger_fixtures import devices, job, load

D = Decimal
CONFIG = """
currency: USD
org:
  name: acme
  children:
    - {name: alpha, shares: 50}
    - {name: beta, shares: 50}
rate_card:
  - {gpu_model: H100, tier: reserved, price_per_gpu_hour: "H100_PRICE", effective_from: 2026-01-01}
  - {gpu_model: A100, tier: reserved, price_per_gpu_hour: "1.00", effective_from: 2026-01-01}
"""


def _month(path) -> None:
    with warehouse.open_writer(path) as con:
        load(con, CONFIG.replace("H100_PRICE", "1.0025"), at=datetime(2026, 9, 30))
        ids = devices(con, [("GPU-h", "node-h", "H100"), ("GPU-a", "node-a", "A100")])
        job(con, "alpha-1", "alpha", ids["GPU-h"], datetime(2026, 10, 1), datetime(2026, 10, 1, 1))
        job(con, "alpha-2", "alpha", ids["GPU-a"], datetime(2026, 10, 1), datetime(2026, 10, 1, 0, 20), model="A100")
        job(con, "beta-9", "beta", ids["GPU-a"], datetime(2026, 11, 2), datetime(2026, 11, 3), model="A100")


def corrected_october(path) -> None:
    """October closed by alice on Nov 5, corrected by bob on Nov 10 ("H100 price": 1.0025 -> 1.0010)."""
    _month(path)
    with warehouse.open_writer(path) as con:
        periods.close_period(con, "2026-10", by="alice", now=datetime(2026, 11, 5))
        load(con, CONFIG.replace("H100_PRICE", "1.0010"), at=datetime(2026, 11, 10))
        periods.correct_period(con, "2026-10", reason="H100 price", by="bob", now=datetime(2026, 11, 10))


def _kinds(frame: pl.DataFrame) -> dict[tuple, Decimal]:
    return {(r["line_kind"], r["project"], r["gpu_model"]): r["amount"] for r in frame.iter_rows(named=True)}


def test_repricing_one_pool_moves_no_cent_in_another(warehouse_file, tmp_path):
    _month(warehouse_file)
    with warehouse.open_writer(warehouse_file) as con:
        periods.close_period(con, "2026-10", now=datetime(2026, 11, 5))
        issued = periods.statement_lines(con, "2026-10")
        assert _kinds(issued) == {("charge", "alpha", "H100"): D("1.00"), ("charge", "alpha", "A100"): D("0.33"),
                                  ("idle", "(idle)", "H100"): D("744.86"), ("idle", "(idle)", "A100"): D("743.67")}
        load(con, CONFIG.replace("H100_PRICE", "1.0010"), at=datetime(2026, 11, 10))
        done = periods.correct_period(con, "2026-10", reason="H100 price", now=datetime(2026, 11, 10))
        assert done["net"] == {"USD": "-1.12"}
        lines = periods.statement_lines(con, "2026-10")
        fixes = lines.filter(pl.col("revision") == 1)
        assert _kinds(fixes) == {("credit", "(idle)", "H100"): D("-1.12")}
        assert fixes["correction_of"].to_list() == ["idle"]
        # the job and node levels come from the same delta tree: the same one line, the same cents
        jobs = periods.statement_lines(con, "2026-10", level="job").filter(pl.col("revision") == 1)
        nodes = periods.statement_lines(con, "2026-10", level="node").filter(pl.col("revision") == 1)
        assert jobs.select("line_kind", "project", "gpu_model", "amount").rows() == \
            [("credit", "(idle)", "H100", D("-1.12"))]
        assert nodes.select("node", "amount").rows() == [("(idle)", D("-1.12"))]
        assert "amount_exact" not in lines.columns  # stored to take deltas from, never shown
        st = build_statement(con, "2026-10")
    manifest = write_statement_set(st, tmp_path / "oct")
    (rec,) = manifest["reconciliation"]
    assert (rec["total"], rec["capacity_amount"], rec["reconciles"]) == ("1488.74", "1488.74", True)
    # per GPU pool: H100 1.00 + 744.86 − 1.12 = 743.74 + 1.00 = 744.74 = 744 h × 1.001 (744.744);
    # A100 0.33 + 743.67 = 744.00 = 744 h × 1.00
    pools = {(p["gpu_model"], p["billed"], p["capacity_amount"], p["difference"])
             for p in manifest["reconciliation_per_pool"]}
    assert pools == {("H100", "744.74", "744.74", "0.00"), ("A100", "744.00", "744.00", "0.00")}
    # the charts count the correction toward what it corrects: the H100 bar is 744.74, not the issued 745.86
    html = (tmp_path / "oct" / "statement-2026-10-acme.html").read_text()
    assert "corrections included" in html and "744.74 USD</text>" in html and "745.86 USD</text>" not in html
    csv = (tmp_path / "oct" / "statement-2026-10-acme.csv").read_text()
    assert "-0.0," not in csv and "-0.000000" not in csv  # no negative zero


def test_a_second_correction_takes_its_delta_from_what_was_issued_so_far(warehouse_file):
    """Back to 1.0025 after the 1.0010 correction: the delta is +1.12 on idle H100 again and the
    total is the first issue's 1,489.86; every line back to its first cents."""
    _month(warehouse_file)
    with warehouse.open_writer(warehouse_file) as con:
        periods.close_period(con, "2026-10", now=datetime(2026, 11, 5))
        load(con, CONFIG.replace("H100_PRICE", "1.0010"), at=datetime(2026, 11, 10))
        periods.correct_period(con, "2026-10", reason="H100 price", now=datetime(2026, 11, 10))
        load(con, CONFIG.replace("H100_PRICE", "1.0025") + "\n", at=datetime(2026, 11, 11))
        done = periods.correct_period(con, "2026-10", reason="H100 price back", now=datetime(2026, 11, 11))
        assert done["net"] == {"USD": "1.12"} and done["revision"] == 2
        lines = periods.statement_lines(con, "2026-10")
    net = lines.with_columns(kind=pl.coalesce("correction_of", "line_kind")).group_by("kind", "project", "gpu_model") \
        .agg(pl.col("amount").sum())
    assert {(k, p, m): a for k, p, m, a in net.iter_rows()} == {
        ("charge", "alpha", "H100"): D("1.00"), ("charge", "alpha", "A100"): D("0.33"),
        ("idle", "(idle)", "H100"): D("744.86"), ("idle", "(idle)", "A100"): D("743.67")}


def test_a_month_issued_before_pool_first_rounding_keeps_its_cents_where_nothing_moved(warehouse_file, tmp_path,
                                                                                      monkeypatch):
    """A month issued by the currency-first tree (before 2026-12) can hold a pool whose cents are
    not its exact total half-up. Here, as such an issue (its cents set by hand, the exact amounts
    as computed): alpha H100 1.01, alpha A100 0.33, idle H100 744.86, idle A100 743.66 — total
    1,489.86 as before, but pool H100 745.87 (exact 745.86) and A100 743.99 (exact 744.00).
    Re-priced H100 to 1.0010: pool H100's root is 744.74 − 745.87 = −1.13; deltas alpha −0.15 ¢
    (floor −1), idle −111.45 ¢ (floor −112): floors −113 = the root, so alpha −0.01 (1.00, exact
    1.001) and idle −1.12. Pool A100: nothing moved, no cent (its 0.33 / 743.66 stand, and the
    statement says the pool differs by −0.01 because it was issued before pools were rounded
    first)."""
    _month(warehouse_file)
    real = periods.compute_lines
    shift = {("charge", "alpha", "H100"): D("0.01"), ("idle", "(idle)", "A100"): D("-0.01"),
             "alpha": D("0.01"), "acme": D("0.01"), "(idle)": D("-0.01")}  # node lines: their pools summed

    def issued_currency_first(con, period, cfg, *, now=None):
        frames = real(con, period, cfg, now=now)
        for level, frame in frames.items():
            keys = ["node"] if level == "node" else ["line_kind", "project", "gpu_model"]
            moved = [shift.get(k[0] if level == "node" else k, D(0)) for k in frame.select(keys).iter_rows()]
            frames[level] = frame.with_columns(
                (pl.col("amount") + pl.Series(moved, dtype=pl.Decimal(38, 2))).cast(frame.schema["amount"]))
        return frames

    with warehouse.open_writer(warehouse_file) as con:
        monkeypatch.setattr(periods, "compute_lines", issued_currency_first)
        periods.close_period(con, "2026-10", now=datetime(2026, 11, 5))
        monkeypatch.setattr(periods, "compute_lines", real)
        assert _kinds(periods.statement_lines(con, "2026-10")) == {
            ("charge", "alpha", "H100"): D("1.01"), ("charge", "alpha", "A100"): D("0.33"),
            ("idle", "(idle)", "H100"): D("744.86"), ("idle", "(idle)", "A100"): D("743.66")}
        load(con, CONFIG.replace("H100_PRICE", "1.0010"), at=datetime(2026, 11, 10))
        done = periods.correct_period(con, "2026-10", reason="H100 price", now=datetime(2026, 11, 10))
        assert done["net"] == {"USD": "-1.13"}
        fixes = periods.statement_lines(con, "2026-10").filter(pl.col("revision") == 1)
        assert _kinds(fixes) == {("credit", "alpha", "H100"): D("-0.01"), ("credit", "(idle)", "H100"): D("-1.12")}
        st = build_statement(con, "2026-10")
    pools = {p.gpu_model: (p.billed, p.difference, p.sentence()) for p in st.pools}
    assert pools["H100"][:2] == (D("744.74"), D("0.00")) and "reconciles to the cent" in pools["H100"][2]
    assert pools["A100"][:2] == (D("743.99"), D("-0.01"))
    assert "issued before pools were rounded first" in pools["A100"][2]
    # the currency: billed 744.74 + 743.99 = 1,488.73 against the pools' capacity 744.74 + 744.00 =
    # 1,488.74: the A100 pool's −0.01, and the sentence says whose (it said "DOES NOT reconcile")
    (usd,) = st.reconciliation
    assert (usd.total, usd.capacity_amount, usd.difference) == (D("1488.73"), D("1488.74"), D("-0.01"))
    assert "differs by -0.01: the sum of its pools' rounding, issued before pools were rounded first" in usd.sentence()
    assert "DOES NOT" not in usd.sentence()


def test_a_month_closed_before_exact_amounts_were_stored_says_how_it_is_corrected(warehouse_file, monkeypatch):
    """Closed by a gpuledger that stored no exact amounts (simulated: the close's lines without
    them): a correction is the difference of the rounded lines, and the statement, the correction's
    summary and `period correct` say so. The H100 reprice of the module docstring then gives the
    same one line here (the pools are rounded on their own, so A100 does not move either)."""
    from typer.testing import CliRunner

    from gpuledger.cli import app

    _month(warehouse_file)
    real = periods.compute_lines

    def without_exact(con, period, cfg, *, now=None):
        return {lvl: f.drop(*periods.EXACT) for lvl, f in real(con, period, cfg, now=now).items()}

    with warehouse.open_writer(warehouse_file) as con:
        monkeypatch.setattr(periods, "compute_lines", without_exact)
        periods.close_period(con, "2026-10", now=datetime(2026, 11, 5))
        monkeypatch.setattr(periods, "compute_lines", real)
        assert not periods.exact_stored(con, "2026-10")
        assert any(n.startswith("exact amounts: 2026-10 was closed before") for n in build_statement(con, "2026-10").notes)
        load(con, CONFIG.replace("H100_PRICE", "1.0010"), at=datetime(2026, 11, 10))
    result = CliRunner().invoke(app, ["period", "correct", "2026-10", "--reason", "H100 price",
                                      "--warehouse", str(warehouse_file)])
    assert result.exit_code == 0, result.output
    assert "difference of the rounded lines" in " ".join(result.output.split())
    with warehouse.open_reader(warehouse_file) as con:
        assert _kinds(periods.statement_lines(con, "2026-10").filter(pl.col("revision") == 1)) == {
            ("credit", "(idle)", "H100"): D("-1.12")}


def test_a_month_closed_now_stores_exact_amounts_and_says_nothing_of_a_fallback(warehouse_file):
    _month(warehouse_file)
    with warehouse.open_writer(warehouse_file) as con:
        periods.close_period(con, "2026-10", now=datetime(2026, 11, 5))
        assert periods.exact_stored(con, "2026-10")
        assert not any(n.startswith("exact amounts:") for n in build_statement(con, "2026-10").notes)
