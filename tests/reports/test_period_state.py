"""One truth about a period's state (issue 21 §2): closed / provisional / corrected said the same
in the manifest, on every line, in the HTML, the XLSX and the terminal; a month with no data, or
whose data ends before the month does, closes only with --provisional; an empty month's
statement says "no data" and exits 1 unless --allow-empty.

Fixture: tests/helpers/statement_fixtures.py. Its November holds only beta-2 (Nov 2 00:00 – Nov 3 00:00),
so the data ends Nov 3 00:00: provisional. September has the inventory's three GPUs (seen from
Sep 1) but no job and no sample: no data."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import openpyxl
import polars as pl
import pytest
from typer.testing import CliRunner

from gpuledger import warehouse
from gpuledger.cli import app
from gpuledger.ledger import periods
from tests.helpers.statement_fixtures import october

DEC5 = datetime(2026, 12, 5)


@pytest.fixture
def month(warehouse_file):
    october(warehouse_file)
    return warehouse_file


def _program(*args):
    return subprocess.run([str(Path(sys.executable).with_name("gpuledger")), *map(str, args)], capture_output=True,
                          text=True, timeout=120, check=False)


def _cli(*args):
    return CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)


@pytest.mark.slow
def test_a_month_closed_provisionally_says_so_in_every_file_and_the_terminal(month, tmp_path):
    with warehouse.open_writer(month) as con, pytest.raises(periods.PeriodError, match="--provisional"):
        periods.close_period(con, "2026-11", now=DEC5)
    with warehouse.open_writer(month) as con:
        done = periods.close_period(con, "2026-11", now=DEC5, allow_provisional=True)
    assert done["provisional"] == "closed provisionally: data through 2026-11-03 00:00 UTC"
    out = tmp_path / "nov"
    result = _cli("report", "statement", "--period", "2026-11", "--out", out, "--warehouse", month)
    assert result.exit_code == 0, result.output
    assert "closed, provisional (revision 0)" in result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert (manifest["status"], manifest["closed"], manifest["provisional"], manifest["corrected"]) == \
        ("closed-provisional", True, True, False)
    lines = pl.read_csv(out / "statement-2026-11-acme.csv")
    assert set(lines["status"]) == {"closed-provisional"} and lines["provisional"].all()
    unit = pl.read_csv(out / "units/product/statement-2026-11-product.csv")
    assert set(unit["status"]) == {"closed-provisional"}
    html = (out / "statement-2026-11-acme.html").read_text()
    assert "closed, provisional (revision 0)" in html and "change as data arrives" not in html
    assert "statement-2026-11-acme.pdf" in {f["path"] for f in manifest["files"]}  # the CLI prints the PDF too
    ws = openpyxl.load_workbook(out / "statement-2026-11-acme.xlsx")["Summary"]
    status = next(r for r in ws.iter_rows() if r[0].value == "Status")[1].value
    assert status.startswith("closed, provisional (revision 0): closed before its data was complete")
    assert not any("change as data arrives" in str(c.value) for r in ws.iter_rows() for c in r)
    # the terminal's chargeback report says the same, and not that lines change
    report = _cli("report", "chargeback", "--period", "2026-11", "--warehouse", month)
    assert report.exit_code == 0 and "closed, provisional (revision 0)" in report.output
    assert "change as data arrives" not in report.output
    listed = _cli("period", "list", "--warehouse", month)
    assert "closed, provisional" in listed.output


@pytest.mark.slow
def test_an_open_and_a_closed_month_state_the_same_everywhere(month, tmp_path):
    out = tmp_path / "open"
    assert _cli("report", "statement", "--period", "2026-10", "--out", out, "--no-pdf", "--warehouse", month
                ).exit_code == 0
    assert json.loads((out / "manifest.json").read_text())["status"] == "open"
    assert set(pl.read_csv(out / "statement-2026-10-acme.csv")["status"]) == {"open"}
    with warehouse.open_writer(month) as con:
        done = periods.close_period(con, "2026-10", now=DEC5)
    assert done["provisional"] is None
    out = tmp_path / "closed"
    result = _cli("report", "statement", "--period", "2026-10", "--out", out, "--no-pdf", "--warehouse", month)
    assert "closed (revision 0)" in result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert (manifest["status"], manifest["provisional"]) == ("closed", False)
    lines = pl.read_csv(out / "statement-2026-10-acme.csv")
    assert set(lines["status"]) == {"closed"} and not lines["provisional"].any()
    assert "closed (revision 0)" in _cli("report", "chargeback", "--period", "2026-10", "--warehouse", month).output


@pytest.mark.slow
def test_a_month_without_data_closes_only_provisionally_and_its_statement_says_no_data(month, tmp_path):
    with warehouse.open_writer(month) as con, pytest.raises(periods.PeriodError, match="no data.*--provisional"):
        periods.close_period(con, "2026-09", now=DEC5)
    # the program as a person runs it: one line, exit 2 (usage) for the close, 1 for the statement
    refused = _program("period", "close", "2026-09", "--warehouse", month)
    assert refused.returncode == 2 and "--provisional" in refused.stderr and "Traceback" not in refused.stderr
    out = tmp_path / "sep"
    empty = _program("report", "statement", "--period", "2026-09", "--out", out, "--warehouse", month)
    assert empty.returncode == 1 and "no data" in empty.stderr and "--allow-empty" in empty.stderr
    assert not (out / "manifest.json").exists()
    closed = _cli("period", "close", "2026-09", "--provisional", "--warehouse", month)
    assert closed.exit_code == 0 and "closed, provisional (closed provisionally: no data" in closed.output
    asked = _cli("report", "statement", "--period", "2026-09", "--out", out, "--allow-empty", "--no-pdf",
                 "--warehouse", month)
    assert asked.exit_code == 0 and "no data" in asked.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["no_data"] and manifest["status"] == "closed-provisional"
    assert "no data: no GPU sample and no job allocated in 2026-09" in (out / "statement-2026-09-acme.html").read_text()
