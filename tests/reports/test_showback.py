"""Showback of activity (issue 21 §8): an option beside the statement, reconciling per pool.

October (tests/helpers/statement_fixtures.py). Pool H100 / reserved bills alpha 480.00 + gamma
48.00 + idle 2,448.00 = 2,976.00. Weights (active + no-signal GPU-hours): alpha 0 active + 240
unknown = 240 (not discounted for having no samples), gamma 12 active + 0 = 12; so alpha
2,976 × 240/252 = 2,834.2857 -> 2,834.29, gamma 2,976 × 12/252 = 141.7142 -> 141.71 (Σ 2,976.00).
Pool A100 / reserved: beta 240.00 + idle 504.00 = 744.00, all beta's (240 unknown)."""

from __future__ import annotations

import json
from decimal import Decimal

import polars as pl
from typer.testing import CliRunner

from gpuledger.cli import app
from tests.helpers.statement_fixtures import october

D = Decimal


def test_showback_reweights_by_activity_and_reconciles(warehouse_file, tmp_path):
    october(warehouse_file)
    out = tmp_path / "oct"
    result = CliRunner().invoke(app, ["report", "statement", "--period", "2026-10", "--out", str(out), "--no-pdf",
                                      "--showback", "active", "--warehouse", str(warehouse_file)])
    assert result.exit_code == 0, result.output
    sb = pl.read_csv(out / "showback-active-2026-10-acme.csv",
                     schema_overrides={"billed": pl.String, "showback": pl.String, "idle_redistributed": pl.String})
    got = {r["project"]: (D(r["billed"]), D(r["showback"]), D(r["idle_redistributed"]), r["activity"])
           for r in sb.iter_rows(named=True)}
    assert got == {"alpha": (D("480.00"), D("2834.29"), D("2354.29"), "unknown"),
                   "gamma": (D("48.00"), D("141.71"), D("93.71"), "measured"),
                   "beta": (D("240.00"), D("744.00"), D("504.00"), "unknown")}
    assert sum(v[1] for v in got.values()) == D("3720.00")  # the ledger's total, unchanged
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["totals"] == {"USD": "3720.00"}  # the statement stays the ledger of record
    assert "showback-active-2026-10-acme.csv" in {f["path"] for f in manifest["files"]}
    plain = CliRunner().invoke(app, ["report", "statement", "--period", "2026-10", "--out", str(tmp_path / "p"),
                                     "--no-pdf", "--warehouse", str(warehouse_file)])
    assert plain.exit_code == 0 and not list((tmp_path / "p").glob("showback-*"))  # never the default
