"""Corrections touch only what changed (issue 21 §3): the correction's exact delta is rounded,
not the whole tree again, so re-pricing one GPU pool moves no cent in another.

October 2026 (744 h), org acme → alpha, beta; whole GPUs GPU-h (H100) and GPU-a (A100) all month.
alpha-1 holds GPU-h Oct 1 00:00–01:00 (1 h), alpha-2 GPU-a Oct 1 00:00–00:20 (1/3 h).
Issued at H100 1.0025, A100 1.00 (the rounding tree: currency → acme | (idle) → project → model):
  root 744 × 1.0025 + 744 × 1.00 = 1,489.86
  acme 1.0025 + 0.3333 = 1.3358 (floor 1.33, rem .58) vs (idle) 1,488.5242 (rem .42): acme 1.34
  under alpha: H100 1.0025 (rem .25), A100 0.3333 (rem .33): A100 takes the cent → 1.00 / 0.34
  idle: H100 743 × 1.0025 = 744.8575 (rem .75), A100 743.6667 (rem .67): H100 744.86, A100 743.66
Re-priced H100 to 1.0010 (A100 unchanged): new total 744 × 1.001 + 744 = 1,488.744 → 1,488.74.
  Re-rounding the whole tree: acme 1.3343 (rem .43) vs (idle) 1,487.4097 (rem .97): acme 1.33,
  under alpha H100 1.00, A100 0.33 (−0.01 on a line whose price did not change), idle A100
  743.67 (+0.01), idle H100 743.74.
  Rounding the delta: exact deltas H100 charge −0.0015, idle H100 −1.1145, A100 0 and 0; root
  1,488.74 − 1,489.86 = −1.12; acme −0.0015 takes the leftover cent → 0; idle H100 −1.12.
  So one correction line: idle H100 −1.12; nothing on A100; the H100 charge stays 1.00 (exact
  1.001, within a cent)."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

import polars as pl

from gpuledger import warehouse
from gpuledger.ledger import periods
from gpuledger.reports.files import write_statement_set
from gpuledger.reports.statement import build_statement
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


def _kinds(frame: pl.DataFrame) -> dict[tuple, Decimal]:
    return {(r["line_kind"], r["project"], r["gpu_model"]): r["amount"] for r in frame.iter_rows(named=True)}


def test_repricing_one_pool_moves_no_cent_in_another(warehouse_file, tmp_path):
    _month(warehouse_file)
    with warehouse.open_writer(warehouse_file) as con:
        periods.close_period(con, "2026-10", now=datetime(2026, 11, 5))
        issued = periods.statement_lines(con, "2026-10")
        assert _kinds(issued) == {("charge", "alpha", "H100"): D("1.00"), ("charge", "alpha", "A100"): D("0.34"),
                                  ("idle", "(idle)", "H100"): D("744.86"), ("idle", "(idle)", "A100"): D("743.66")}
        load(con, CONFIG.replace("H100_PRICE", "1.0010"), at=datetime(2026, 11, 10))
        # what re-rounding the whole tree would have issued (the bug): a cent moved on both A100 lines
        cfg, _ = periods._current_config(con)
        fresh = periods.compute_lines(con, "2026-10", cfg)
        effective = periods._effective([f["project"] for _, f in sorted(periods._issued(con, "2026-10").items())])
        old_way = _kinds(periods._differences(effective, fresh["project"]))
        assert old_way[("credit", "alpha", "A100")] == D("-0.01") and old_way[("debit", "(idle)", "A100")] == D("0.01")
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
    # A100 0.34 + 743.66 = 744.00 = 744 h × 1.00
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
        ("charge", "alpha", "H100"): D("1.00"), ("charge", "alpha", "A100"): D("0.34"),
        ("idle", "(idle)", "H100"): D("744.86"), ("idle", "(idle)", "A100"): D("743.66")}
