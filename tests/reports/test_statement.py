"""Finance statements (issue 11 §1): a simulated month reconciles to the cent, the workbook's
sheets add up to the CSV, the HTML renders in a real headless Chromium, regeneration is
byte-identical, a closed month reads its frozen lines. Figures derived in tests/helpers/statement_fixtures.py."""

from __future__ import annotations

import json
import os
import shutil
from datetime import datetime
from decimal import Decimal
from pathlib import Path

import polars as pl
import pytest

from gpuledger import warehouse
from gpuledger.ledger import periods
from gpuledger.reports.files import write_statement_set
from gpuledger.reports.statement import build_statement
from tests.helpers.alert_receivers import receivers_fixture  # noqa: F401
from tests.helpers.statement_fixtures import october

D = Decimal


@pytest.fixture
def month(warehouse_file):
    october(warehouse_file)
    return warehouse_file


def _write(path: Path, out: Path, node: str | None = None) -> dict:
    with warehouse.open_reader(path) as con:
        st = build_statement(con, "2026-10", node=node)
    return write_statement_set(st, out, per_unit=node is None)


def _all_bytes(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_statement_reconciles_to_the_cent_and_every_file_agrees(month, tmp_path):
    out = tmp_path / "oct"
    manifest = _write(month, out)
    lines = pl.read_csv(out / "statement-2026-10-acme.csv", schema_overrides={"amount": pl.String})
    amounts = {(r["line_kind"], r["project"], r["gpu_model"]): D(r["amount"]) for r in lines.iter_rows(named=True)}
    assert amounts == {("charge", "alpha", "H100"): D("480.00"), ("charge", "gamma", "H100"): D("48.00"),
                       ("charge", "beta", "A100"): D("240.00"), ("idle", "(idle)", "H100"): D("2448.00"),
                       ("idle", "(idle)", "A100"): D("504.00")}
    # active and efficiency beside the charge: gamma-1 is active 12 of its 24 h; the others unknown
    gamma = lines.filter(pl.col("project") == "gamma").row(0, named=True)
    assert gamma["gpu_hours_active"] == 12.0 and gamma["efficiency_ratio"] == 0.5
    assert lines.filter(pl.col("project") == "alpha")["efficiency_ratio"].is_null().all()
    # the reconciliation, stated: 768.00 + 2952.00 = 3720.00 = 2232 GPU-hours of capacity × price
    (rec,) = manifest["reconciliation"]
    assert (rec["charges"], rec["idle"], rec["total"], rec["capacity_amount"]) == \
        ("768.00", "2952.00", "3720.00", "3720.00")
    assert rec["reconciles"] and "reconciles to the cent" in rec["statement"]
    assert manifest["totals"] == {"USD": "3720.00"}
    assert manifest["status"] == "open" and not manifest["closed"] and not manifest["provisional"]
    assert manifest["config_version"] == 1 and manifest["business_units"] == ["product", "research"]
    html = (out / "statement-2026-10-acme.html").read_text()
    assert rec["statement"].replace("×", "&times;") in html or rec["statement"] in html
    # every file listed with its sha256
    import hashlib

    for f in manifest["files"]:
        assert hashlib.sha256((out / f["path"]).read_bytes()).hexdigest() == f["sha256"]
    assert {"units/research/statement-2026-10-research.csv", "statement-2026-10-acme.xlsx",
            "statement-2026-10-acme.parquet"} <= {f["path"] for f in manifest["files"]}
    # Parquet holds the same lines as the CSV, amounts exact
    parquet = pl.read_parquet(out / "statement-2026-10-acme.parquet")
    assert parquet["amount"].sum() == D("3720.00")
    # per partition and per host (sreport cannot split them so): gpu 240 H100 + 240 A100, debug 24 H100
    part = pl.read_csv(out / "statement-2026-10-acme-by-partition.csv")
    assert {(r["partition"], r["gpu_model"]): r["gpu_hours"] for r in part.iter_rows(named=True)} == \
        {("debug", "H100"): 24.0, ("gpu", "A100"): 240.0, ("gpu", "H100"): 240.0}
    host = pl.read_csv(out / "statement-2026-10-acme-by-host.csv")
    assert dict(host.select("host", "gpu_hours").iter_rows()) == {"node-a": 240.0, "node-h1": 240.0, "node-h2": 24.0}
    # a business unit's own statement: research = alpha 480.00 + gamma 48.00
    research = pl.read_csv(out / "units/research/statement-2026-10-research.csv", schema_overrides={"amount": pl.String})
    assert sum(D(a) for a in research["amount"]) == D("528.00")
    # ... tied out on its own paper: 528.00 of acme's 3,720.00 is 14.2 %; alpha 480.00 + gamma 48.00
    tie = ("research owes 528.00 USD: 14.2% of acme's 3,720.00 USD; its 2 project(s)' subtotals add up to "
           "528.00 USD — reconciles to the cent")
    unit_html = (out / "units/research/statement-2026-10-research.html").read_text()
    assert tie.replace("'", "&#39;") in unit_html
    assert "<td>alpha</td><td>USD</td><td class=\"num\">240.000</td><td class=\"num\">480.00</td>" in unit_html
    import openpyxl

    summary = openpyxl.load_workbook(out / "units/research/statement-2026-10-research.xlsx")["Summary"]
    cells = [c.value for row in summary.iter_rows() for c in row if c.value is not None]
    assert tie in cells and "gamma" in cells
    assert D("48.00") in [D(str(v)) for v in cells if isinstance(v, int | float | D) and not isinstance(v, bool)]


def test_workbook_sheets_add_up_to_the_csv(month, tmp_path):
    import openpyxl

    out = tmp_path / "oct"
    _write(month, out)
    lines = pl.read_csv(out / "statement-2026-10-acme.csv", schema_overrides={"amount": pl.String})
    wb = openpyxl.load_workbook(out / "statement-2026-10-acme.xlsx")
    assert wb.sheetnames == ["Summary", "product", "research", "Idle and memo", "By partition", "By host"]
    for sheet, unit in (("product", "product"), ("research", "research"), ("Idle and memo", "(org)")):
        ws = wb[sheet]
        head = next(c.row for c in ws["A"] if c.value == "Line")  # below the sheet's title block
        header = [c.value for c in ws[head]]
        rows = [dict(zip(header, (c.value for c in row), strict=True)) for row in ws.iter_rows(min_row=head + 1)
                if row[0].value not in (None, "Total")]
        totals = [dict(zip(header, (c.value for c in row), strict=True)) for row in ws.iter_rows(min_row=head + 1)
                  if row[0].value == "Total"]
        expected = sum(D(a) for a in lines.filter(pl.col("business_unit") == unit)["amount"])
        # numbers are numbers (no formulas): each line's amount and the sheet's total row
        assert all(isinstance(r["Amount (USD)"], int | float | D) for r in rows)
        assert D(str(sum(D(str(r["Amount (USD)"])) for r in rows))) == expected
        assert D(str(totals[0]["Amount (USD)"])) == expected
        amount_cell = next(c for c in ws[head + 1] if header[c.column - 1] == "Amount (USD)")
        assert '"USD"' in amount_cell.number_format
    summary = wb["Summary"]
    head = next(c.row for c in summary["A"] if c.value == "Business unit")
    amount_col = [c.value for c in summary[head]].index("Amount (USD)")  # the total sits under Amount
    owed = next(r for r in summary.iter_rows() if r[0].value == "Total owed (Σ business units)")
    assert D(str(owed[amount_col].value)) == D("3720.00")
    rec_head = next(c.row for c in summary["A"] if c.value == "Currency")
    rec = dict(zip((c.value for c in summary[rec_head]), (c.value for c in summary[rec_head + 1]), strict=True))
    assert rec["Reconciles"] == "yes, to the cent" and D(str(rec["Difference"])) == D("0.00")


@pytest.mark.slow
def test_regenerating_gives_byte_identical_files_and_a_closed_month_reads_its_frozen_lines(month, tmp_path):
    import time
    import zipfile

    first, second = tmp_path / "a", tmp_path / "b"
    _write(month, first)
    real = time.time
    with pytest.MonkeyPatch.context() as mp:  # the second run a day later by the clock
        mp.setattr(time, "time", lambda: real() + 86400)
        _write(month, second)
    assert _all_bytes(first) == _all_bytes(second)
    # the workbook's zip entries carry the statement's own time (the data's end), not the clock's
    stamps = {i.date_time for i in zipfile.ZipFile(first / "statement-2026-10-acme.xlsx").infolist()}
    assert stamps == {(2026, 11, 1, 0, 0, 0)}
    with warehouse.open_writer(month) as con:
        periods.close_period(con, "2026-10", by="finance", now=datetime(2026, 11, 5))
    closed_a, closed_b = tmp_path / "closed-a", tmp_path / "closed-b"
    m = _write(month, closed_a)
    _write(month, closed_b)
    assert _all_bytes(closed_a) == _all_bytes(closed_b)
    assert m["closed"] and m["revision"] == 0 and m["status"] == "closed" and m["totals"] == {"USD": "3720.00"}
    lines = pl.read_csv(closed_a / "statement-2026-10-acme.csv")
    assert set(lines["revision"].to_list()) == {0}  # the issued lines, not a recomputation
    # the same figures as the computed statement, only the revision differs
    assert (closed_a / "statement-2026-10-acme.csv").read_bytes() != (first / "statement-2026-10-acme.csv").read_bytes()


@pytest.mark.slow
def test_one_node_with_the_cli(month, tmp_path):
    from typer.testing import CliRunner

    from gpuledger.cli import app

    out = tmp_path / "product"
    result = CliRunner().invoke(app, ["report", "statement", "--period", "2026-10", "--node", "product",
                                      "--out", str(out), "--warehouse", str(month)])
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["scope"] == "product" and manifest["totals"] == {"USD": "240.00"}
    assert not (out / "units").exists()
    bad = CliRunner().invoke(app, ["report", "statement", "--period", "2026-13", "--out", str(out),
                                   "--warehouse", str(month)])
    assert bad.exit_code != 0


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium: run scripts/install-test-deps.sh")
def test_html_statement_renders_in_headless_chromium(month, tmp_path):
    from playwright.sync_api import sync_playwright

    out = tmp_path / "oct"
    _write(month, out)
    page_file = out / "statement-2026-10-acme.html"
    errors: list[str] = []
    requests: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium"), headless=True,
                                    args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("request", lambda r: requests.append(r.url))
        page.goto(page_file.as_uri())
        assert page.locator("svg").count() == 3  # by model × tier: GPU-hours, amount; month over month
        assert "3,720.00" in page.inner_text("body")
        shot = tmp_path / "statement.png"
        page.screenshot(path=str(shot), full_page=True)
        browser.close()
    assert errors == []
    assert requests == [page_file.as_uri()]  # self-contained: nothing fetched beside the page
    from PIL import Image

    image = Image.open(shot).convert("L")
    low, high = image.getextrema()
    colors = image.getcolors(maxcolors=1 << 16)
    assert high - low > 100 and (colors is None or len(colors) > 10)  # not blank


@pytest.mark.slow
def test_a_corrected_month_states_its_corrections_and_still_reconciles(month, tmp_path):
    """Closed at 2.00 / 1.00 (3720.00), then re-priced from Oct 6 00:00 (120 h in) to H100 2.50,
    A100 0.80 and corrected. The whole month at the new rate card is its capacity × price:
      H100: 2 GPUs × 120 h × 2.00 + 2 × 624 h × 2.50 = 480.00 + 3120.00 = 3600.00
      A100:     1 × 120 h × 1.00 + 1 × 624 h × 0.80 = 120.00 +  499.20 =  619.20
    total 4219.20, so the corrections net +499.20 (alpha's charge +60.00 among them: 120 h at
    2.50 instead of 2.00), and issued + corrections reconcile to it."""
    from tests.helpers.ledger_fixtures import load
    from tests.helpers.statement_fixtures import CONFIG

    with warehouse.open_writer(month) as con:
        periods.close_period(con, "2026-10", by="finance", now=datetime(2026, 11, 5))
        load(con, CONFIG + '  - {gpu_model: H100, tier: reserved, price_per_gpu_hour: "2.50", effective_from: '
             '2026-10-06}\n  - {gpu_model: A100, tier: reserved, price_per_gpu_hour: "0.80", effective_from: '
             '2026-10-06}\n', at=datetime(2026, 11, 10))
        fixed = periods.correct_period(con, "2026-10", reason="October prices", by="finance",
                                       now=datetime(2026, 11, 10))
    assert fixed["net"] == {"USD": "499.20"}
    manifest = _write(month, tmp_path / "oct")
    (rec,) = manifest["reconciliation"]
    assert manifest["revision"] == 1 and manifest["config_version"] == 2
    assert (rec["charges"], rec["idle"], rec["corrections"], rec["total"], rec["capacity_amount"]) == \
        ("768.00", "2952.00", "499.20", "4219.20", "4219.20")
    assert rec["reconciles"] and manifest["totals"] == {"USD": "4219.20"}
    lines = pl.read_csv(tmp_path / "oct" / "statement-2026-10-acme.csv", schema_overrides={"amount": pl.String})
    debit = lines.filter((pl.col("line_kind") == "debit") & (pl.col("project") == "alpha"))
    assert debit["amount"].to_list() == ["60.00"] and debit["correction_of"].to_list() == ["charge"]


def test_every_line_has_a_sheet_even_a_project_outside_the_tree(month, tmp_path):
    """A job whose project the org tree lacks (stray-1: 10 h on GPU-h2, Oct 20 00:00–10:00, at 2.00
    = 20.00, taken out of idle, so still 3720.00 in all) gets a sheet of its own: the workbook
    still adds up to the CSV."""
    import openpyxl

    from tests.helpers.ledger_fixtures import job

    with warehouse.open_writer(month) as con:
        gpu = con.execute("SELECT gpu_id FROM gpus WHERE gpu_uuid = 'GPU-h2'").fetchall()[0][0]
        job(con, "stray-1", "stray", gpu, datetime(2026, 10, 20), datetime(2026, 10, 20, 10))
    out = tmp_path / "oct"
    manifest = _write(month, out)
    assert manifest["totals"] == {"USD": "3720.00"} and manifest["reconciliation"][0]["reconciles"]
    lines = pl.read_csv(out / "statement-2026-10-acme.csv", schema_overrides={"amount": pl.String})
    wb = openpyxl.load_workbook(out / "statement-2026-10-acme.xlsx")
    total = D(0)
    for name in wb.sheetnames[1:]:
        ws = wb[name]
        head = next((c.row for c in ws["A"] if c.value == "Line"), None)  # below the sheet's title block
        if head is None:
            continue
        header = [c.value for c in ws[head]]
        rows = [dict(zip(header, (c.value for c in row), strict=True)) for row in ws.iter_rows(min_row=head + 1)]
        total += sum(D(str(r["Amount (USD)"])) for r in rows
                     if r["Line"] not in (None, "Total") and r["Amount (USD)"] is not None)
    assert total == sum(D(a) for a in lines["amount"].drop_nulls())
    assert "Projects outside the tree" in wb.sheetnames
    stray = lines.filter(pl.col("project") == "stray")
    assert stray.select("business_unit", "amount").rows() == [("(unassigned)", "20.00")]


def test_the_statement_email_as_received_states_the_figures_and_carries_the_files(warehouse_file, tmp_path,
                                                                                  receivers, monkeypatch):
    """`report statement --email` through the real SMTP receiver (aiosmtpd): the subject names the
    month, scope and state; the body the state's sentence, the total with its currency and
    thousands separator (3,720.00 USD: tests/helpers/statement_fixtures.py), the reconciliation
    per currency and per pool; the set's HTML, XLSX and CSVs (the FOCUS one included) are attached (no PDF here: --no-pdf)."""
    from typer.testing import CliRunner

    from gpuledger.cli import app
    from tests.helpers.alert_receivers import wait_for
    from tests.helpers.ledger_fixtures import load
    from tests.helpers.statement_fixtures import CONFIG

    _, mails = receivers
    october(warehouse_file)
    monkeypatch.setenv("GPULEDGER_ALERT_FINANCE_MAIL_URL", os.environ["GPULEDGER_ALERT_ONCALL_MAIL_URL"])
    with warehouse.open_writer(warehouse_file) as con:
        load(con, CONFIG + "policy:\n  reports:\n    finance_channel: finance-mail\n", at=datetime(2026, 9, 30, 1))
    result = CliRunner().invoke(app, ["report", "statement", "--period", "2026-10", "--out", str(tmp_path / "o"),
                                      "--no-pdf", "--email", "--warehouse", str(warehouse_file)])
    assert result.exit_code == 0, result.output
    wait_for(lambda: len(mails) == 1, "the statement e-mail")
    mail = mails[0]
    assert mail["Subject"] == "GPU statement 2026-10 for acme: open"
    plain = next(p for p in mail.walk() if p.get_content_type() == "text/plain").get_payload(decode=True).decode()
    lines = plain.splitlines()
    assert "total owed: 3,720.00 USD" in lines
    assert any(x.startswith("USD: charges 768.00 + idle 2,952.00 = 3,720.00") for x in lines)
    assert any("USD H100 / reserved: billed 2,976.00" in x and "reconciles to the cent" in x for x in lines)
    attached = sorted(p.get_filename() for p in mail.walk() if p.get_filename())
    assert attached == ["statement-2026-10-acme-by-host.csv", "statement-2026-10-acme-by-partition.csv",
                        "statement-2026-10-acme-energy-by-job.csv", "statement-2026-10-acme-focus.csv", "statement-2026-10-acme.csv", "statement-2026-10-acme.html",
                        "statement-2026-10-acme.xlsx"]


def test_the_months_history_shows_this_month_as_the_statement_has_it(month):
    # an open October as of Oct 6 00:00 (120 h in): capacity so far 2 H100 × 120 h × 2.00 + 1 A100 ×
    # 120 h × 1.00 = 480.00 + 120.00 = 600.00, every hour billed (charges + idle). The history's
    # October is the statement's own lines, so it says 600.00 too — not the whole month to the
    # data's end (3720.00: tests/helpers/statement_fixtures.py)
    from datetime import datetime

    with warehouse.open_reader(month) as con:
        st = build_statement(con, "2026-10", now=datetime(2026, 10, 6))
    assert st.totals() == {"USD": D("600.00")}
    october_rows = st.history.filter(pl.col("period") == "2026-10")
    assert sum(october_rows["amount"].to_list(), D(0)) == D("600.00")


def _manifest_holds(folder: Path, manifest: dict) -> None:
    """Every file the manifest lists has the sha256 and size it lists."""
    import hashlib

    for f in manifest["files"]:
        data = (folder / f["path"]).read_bytes()
        assert (hashlib.sha256(data).hexdigest(), len(data)) == (f["sha256"], f["bytes"]), f["path"]


@pytest.mark.slow
def test_a_closed_months_files_do_not_change_after_a_share_inventory_price_or_tree_change(month, tmp_path):
    # issue 36: a closed month's files are written from what was stored at its close (lines, usage,
    # energy, business units, capacity, history, notes), never recomputed: a config loaded afterwards
    # with other shares, a new October price, a site PUE and beta moved under research, and a fourth
    # H100 in the inventory for October (recomputed, capacity would be 3 × 744 h of H100), change none
    # of their bytes; the manifest written at the close still holds for every file
    from gpuledger.reports import closing
    from tests.helpers.ledger_fixtures import devices, load

    with warehouse.open_writer(month) as con:
        closing.close(con, "2026-10", by="finance", now=datetime(2026, 11, 5))
    before, before_node = tmp_path / "before", tmp_path / "before-node"
    manifest = _write(month, before)
    node_manifest = _write(month, before_node, node="research")
    assert manifest["reconciliation"][0]["capacity_amount"] == "3720.00"  # 1488 h × 2.00 + 744 h × 1.00
    changed = """
currency: USD
org:
  name: acme
  children:
    - name: research
      shares: 30
      children:
        - {name: alpha, shares: 70}
        - {name: beta, shares: 1}
    - name: product
      shares: 70
      children:
        - {name: gamma, shares: 30}
        - {name: omega, shares: 1}
rate_card:
  - {gpu_model: H100, tier: reserved, price_per_gpu_hour: "2.00", effective_from: 2026-01-01}
  - {gpu_model: H100, tier: reserved, price_per_gpu_hour: "3.00", effective_from: 2026-10-01}
  - {gpu_model: A100, tier: reserved, price_per_gpu_hour: "1.00", effective_from: 2026-01-01}
clusters:
  c1: {pue: 1.5, grid_intensity: {kg_co2e_per_kwh: 0.4}}
"""
    with warehouse.open_writer(month) as con:
        load(con, changed, at=datetime(2026, 11, 6))
        devices(con, [("GPU-h4", "node-h4", "H100")])
    # the change is real: October as computed today is priced and shaped differently
    with warehouse.open_reader(month) as con:
        assert periods.compute_lines(con, "2026-10", periods._current_config(con)[0])["project"]["amount"].sum() \
            != D("3720.00")
    after, after_node = tmp_path / "after", tmp_path / "after-node"
    assert _write(month, after) == manifest
    assert _write(month, after_node, node="research") == node_manifest
    _manifest_holds(after, manifest)
    assert _all_bytes(before) == _all_bytes(after) and _all_bytes(before_node) == _all_bytes(after_node)


@pytest.mark.slow
def test_a_closed_statement_as_stored_is_the_one_computed_at_the_close(month, tmp_path):
    # stored and read back, the statement writes the bytes the computed one does (a node's too)
    from gpuledger.reports.statement import freeze_statement

    with warehouse.open_writer(month) as con:
        periods.close_period(con, "2026-10", by="finance", now=datetime(2026, 11, 5))  # nothing stored
    computed, computed_node = tmp_path / "computed", tmp_path / "computed-node"
    _write(month, computed), _write(month, computed_node, node="product")
    with warehouse.open_writer(month) as con:
        freeze_statement(con, "2026-10")
        assert con.execute("SELECT revision FROM closed_statements").fetchall() == [(0,)]
    stored, stored_node = tmp_path / "stored", tmp_path / "stored-node"
    _write(month, stored), _write(month, stored_node, node="product")
    assert _all_bytes(computed) == _all_bytes(stored) and _all_bytes(computed_node) == _all_bytes(stored_node)


@pytest.mark.slow
def test_a_correction_stores_the_statement_anew_and_an_edited_one_is_refused(month, tmp_path):
    from gpuledger.errors import RunError
    from gpuledger.reports import closing
    from tests.helpers.ledger_fixtures import load
    from tests.helpers.statement_fixtures import CONFIG

    with warehouse.open_writer(month) as con:
        closing.close(con, "2026-10", by="finance", now=datetime(2026, 11, 5))
        # A100 at 1.50 from October: the 744 A100-hours cost 372.00 more (3720.00 -> 4092.00)
        load(con, CONFIG.replace('price_per_gpu_hour: "1.00"', 'price_per_gpu_hour: "1.50"'),
             at=datetime(2026, 11, 6))
        done = closing.correct(con, "2026-10", reason="A100 rate", by="finance", now=datetime(2026, 11, 7))
        assert done["revision"] == 1
        assert con.execute("SELECT revision FROM closed_statements ORDER BY revision").fetchall() == [(0,), (1,)]
    m = _write(month, tmp_path / "corrected")
    assert m["revision"] == 1 and m["corrected"] and m["totals"] == {"USD": "4092.00"}
    # capacity as of the correction, priced by its config: 1488 h × 2.00 + 744 h × 1.50
    assert m["reconciliation"][0]["capacity_amount"] == "4092.00" and m["reconciliation"][0]["reconciles"]
    with warehouse.open_writer(month) as con:
        con.execute("UPDATE closed_statements SET facts_json = replace(facts_json, '4092', '4093')")
    with warehouse.open_reader(month) as con, pytest.raises(RunError, match="stored statement does not match"):
        build_statement(con, "2026-10")


@pytest.mark.slow
def test_the_statement_shows_each_projects_p50_and_p90_wait(warehouse_file, tmp_path):
    """October's jobs with a submission (the fixture's own record none): alpha waits 60, 120 and
    600 s -> p50 120, p90 at 0.9 × 2 = 1.8: 120 + 0.8 × 480 = 504; gamma one job, submitted Oct 31
    23:00 and never started: at the month's end (Nov 1 00:00) 3,600 s so far, p50 = p90 = 3,600."""
    from datetime import timedelta

    from gpuledger.reports.files import render_html
    from gpuledger.reports.statement import build_statement

    october(warehouse_file)
    day = datetime(2026, 10, 20)
    with warehouse.open_writer(warehouse_file) as con:
        rows = [("w1", "alpha", day, day + timedelta(seconds=60)), ("w2", "alpha", day, day + timedelta(seconds=120)),
                ("w3", "alpha", day, day + timedelta(seconds=600)),
                ("w4", "gamma", datetime(2026, 10, 31, 23), None)]
        for job_id, project, submit, start in rows:
            con.execute("INSERT INTO jobs (cluster, job_id, project, gpu_model, gpus, submit_time, start_time, end_time, "
                        "state, source, updated_at) VALUES ('c1', ?, ?, 'H100', 1, ?, ?, ?, 'X', 'test', ?)",
                        [job_id, project, submit, start, None if start is None else start + timedelta(minutes=1),
                         datetime(2026, 10, 31, 23)])
    with warehouse.open_reader(warehouse_file) as con:
        st = build_statement(con, "2026-10")
    # the month's waits as of its end (Nov 1 00:00): gamma's job has waited 1 h so far
    assert st.waits.rows() == [("alpha", 3, 0, 120, 504), ("gamma", 1, 1, 3600, 3600)]
    html = render_html(st)
    assert "Wait times per project" in html and "<th>Wait p90 (s)</th>" in html and ">504<" in html
    assert st.for_unit("research").waits.height == 2 and st.for_unit("product").waits.height == 0
    from openpyxl import load_workbook

    from gpuledger.reports.workbook import write_xlsx

    sheet = load_workbook(write_xlsx(st, tmp_path / "s.xlsx"))["Wait times"]
    cells = [[c for c in row if c is not None] for row in sheet.iter_rows(values_only=True)]
    assert ["Project", "Jobs submitted", "Still waiting", "Wait p50 (s)", "Wait p90 (s)"] in cells
    assert ["alpha", 3, 0, 120, 504] in cells and ["gamma", 1, 1, 3600, 3600] in cells
    # closed, the month keeps the waits of its close: a job of October ingested later moves nothing
    from gpuledger.reports import closing

    with warehouse.open_writer(warehouse_file) as con:
        closing.close(con, "2026-10", by="finance", now=datetime(2026, 11, 5))
        con.execute("INSERT INTO jobs (cluster, job_id, project, gpu_model, gpus, submit_time, start_time, end_time, "
                    "state, source, updated_at) VALUES ('c1', 'late', 'alpha', 'H100', 1, ?, ?, ?, 'X', 'test', ?)",
                    [day, day + timedelta(hours=5), day + timedelta(hours=6), datetime(2026, 11, 5)])
    with warehouse.open_reader(warehouse_file) as con:
        closed = build_statement(con, "2026-10")
    assert closed.closed and closed.waits.rows() == [("alpha", 3, 0, 120, 504), ("gamma", 1, 1, 3600, 3600)]
