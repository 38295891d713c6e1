"""The statement workbook as a finance analyst opens it (issue 21 §1): read back with openpyxl
(human headers, every column as wide as its widest formatted value, totals under their own
columns, frozen headers, auto-filter, print setup, a tie-out of each business unit to the org
total) and rendered by LibreOffice Calc to PDF (no ``###``: a number too wide for its column).

Figures: tests/helpers/statement_fixtures.py (October 2026: research 528.00, product 240.00, idle
2,952.00, total 3,720.00 = capacity 2,232 GPU-hours × price)."""

from __future__ import annotations

import shutil
import subprocess
from decimal import Decimal
from pathlib import Path

import pytest

from gpuledger import warehouse
from gpuledger.reports.files import write_statement_set
from gpuledger.reports.statement import build_statement
from gpuledger.reports.workbook import shown
from tests.helpers.statement_fixtures import october

D = Decimal
XLSX = "statement-2026-10-acme.xlsx"


@pytest.fixture(scope="module")
def statement_dir(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("workbook")
    october(base / "w.duckdb")
    with warehouse.open_reader(base / "w.duckdb") as con:
        st = build_statement(con, "2026-10")
    write_statement_set(st, base / "out")
    return base / "out"


def _header_row(ws, first: str) -> int:
    return next(c.row for c in ws["A"] if c.value == first)


def test_formatted_values_fit_their_columns(statement_dir):
    import openpyxl
    from openpyxl.utils import get_column_letter

    wb = openpyxl.load_workbook(statement_dir / XLSX)
    checked = 0
    for ws in wb.worksheets:
        for row in ws.iter_rows():
            for cell in row:
                if not isinstance(cell.value, int | float | D) or isinstance(cell.value, bool):
                    continue
                width = ws.column_dimensions[get_column_letter(cell.column)].width
                text = shown(cell.value, cell.number_format)
                # a number wider than its column prints ### (text would run on; numbers do not)
                assert width >= len(text) + 1, (ws.title, cell.coordinate, text, width)
                checked += 1
    assert checked > 40
    # the formatted text is the number format's (sanity of the measure itself)
    assert shown(D("2952.00"), '#,##0.00 "USD"') == "2,952.00 USD"
    assert shown(0.5, "0.0%") == "50.0%" and shown(1224.0, "#,##0.000") == "1,224.000"


def test_human_headers_totals_under_their_columns_frozen_filtered_printable(statement_dir):
    import openpyxl

    wb = openpyxl.load_workbook(statement_dir / XLSX)
    assert wb.sheetnames == ["Summary", "product", "research", "Idle and memo", "By partition", "By host"]
    ws = wb["research"]
    # above the table: what the sheet is (printed or forwarded alone), then the table
    assert ws["A1"].value == "research — GPU statement 2026-10 — acme"
    assert (ws["A3"].value, ws["B3"].value) == ("Status", "open (computed, not yet closed)")
    head = _header_row(ws, "Line")
    header = [c.value for c in ws[head]]
    assert header == ["Line", "Project", "GPU model", "Tier", "Currency", "Allocated (GPU-h)", "Active (GPU-h)",
                      "Activity unknown (GPU-h)", "Efficiency (%)", "Facility energy (kWh)", "Emissions (kgCO2e)",
                      "Amount (USD)", "Revision", "Corrects", "Note"]
    assert not any("_" in h for h in header)  # machine names stay in the CSV / Parquet
    assert ws.freeze_panes == f"A{head + 1}" and ws.auto_filter.ref == f"A{head}:O{head + 2}"
    assert ws.print_title_rows == f"${head}:${head}"
    # lines alpha 480.00 and gamma 48.00, then the total 528.00 in the Amount column, 264 GPU-h in hours'
    total = next(r for r in ws.iter_rows(min_row=head + 1) if r[0].value == "Total")
    by_header = dict(zip(header, (c.value for c in total), strict=True))
    assert D(str(by_header["Amount (USD)"])) == D("528.00") and by_header["Allocated (GPU-h)"] == 264.0
    assert by_header["Currency"] == "USD" and by_header["Activity unknown (GPU-h)"] is None
    for sheet in wb.worksheets:
        ps = sheet.page_setup
        assert (ps.orientation, ps.paperSize, ps.fitToWidth, ps.fitToHeight) == ("landscape", 9, 1, 0)
        assert sheet.sheet_properties.pageSetUpPr.fitToPage
        # every printed page: the statement and its state above, the sheet and page x of y below
        assert sheet.oddHeader.left.text == "GPU statement 2026-10 — acme", sheet.title
        assert sheet.oddHeader.right.text == "OPEN (COMPUTED, NOT YET CLOSED)", sheet.title  # a draft: loud
        assert (sheet.oddFooter.left.text, sheet.oddFooter.right.text) == ("&A", "page &P of &N")


def test_summary_ties_each_business_unit_out_to_the_org_total(statement_dir):
    import openpyxl

    ws = openpyxl.load_workbook(statement_dir / XLSX)["Summary"]
    head = _header_row(ws, "Business unit")
    header = [c.value for c in ws[head] if c.value is not None]
    assert header == ["Business unit", "Sheet", "Currency", "Allocated (GPU-h)", "Active (GPU-h)",
                      "Activity unknown (GPU-h)", "Amount (USD)"]
    amount_col = header.index("Amount (USD)")
    rows = {}
    for r in ws.iter_rows(min_row=head + 1, max_row=head + 8):
        if r[0].value:
            rows[r[0].value] = r
    # product 240.00 + research 528.00 + idle 2,952.00 = 3,720.00 = capacity × price, difference 0.00
    got = {k: D(str(v[amount_col].value)) for k, v in rows.items() if v[amount_col].value is not None}
    assert got == {"product": D("240.00"), "research": D("528.00"), "idle capacity and memo lines": D("2952.00"),
                   "Total owed (Σ business units)": D("3720.00"), "Capacity × price + over-allocated": D("3720.00"),
                   "Difference (0.00: ties out)": D("0.00")}
    # "total owed" sits under the Amount header, not under an hours column
    assert rows["Total owed (Σ business units)"][amount_col].column_letter == ws.cell(head, amount_col + 1).column_letter
    assert rows["research"][1].value == "research" and rows["idle capacity and memo lines"][1].value == "Idle and memo"
    status = next(r for r in ws.iter_rows() if r[0].value == "Status")
    assert status[1].value.startswith("open (computed, not yet closed)")
    assert status[1].fill.fgColor.rgb.endswith("EEEEEE") and status[1].font.bold  # a draft's grey, not plain text
    # its own tables: a verdict beside a right-aligned difference keeps a space ("0.00 USDyes" before),
    # and each number column's header sits over its numbers
    verdicts = [c for row in ws.iter_rows() for c in row if c.value == "yes, to the cent"]
    assert verdicts and all(c.alignment.indent >= 1 and c.alignment.horizontal == "left" for c in verdicts)
    rec = _header_row(ws, "Currency")
    heads = {c.value: c for c in ws[rec] if c.value}
    assert heads["Charges"].alignment.horizontal == "right" and heads["Reconciles"].alignment.indent >= 1


@pytest.mark.skipif(shutil.which("soffice") is None or shutil.which("pdftotext") is None,
                    reason="LibreOffice / poppler: run scripts/install-test-deps.sh")
@pytest.mark.slow
def test_libreoffice_renders_every_amount_without_hashes(statement_dir, tmp_path):
    """Calc prints ### for a number wider than its column: the PDF it renders must show every
    amount and total as digits."""
    profile = tmp_path / "lo-profile"  # a private profile: parallel runs do not share a lock
    subprocess.run(["soffice", f"-env:UserInstallation={profile.as_uri()}", "--headless", "--convert-to", "pdf",
                    "--outdir", str(tmp_path), str(statement_dir / XLSX)], check=True, capture_output=True,
                   timeout=120)
    text = subprocess.run(["pdftotext", "-layout", str(tmp_path / XLSX.replace(".xlsx", ".pdf")), "-"],
                          check=True, capture_output=True, text=True).stdout
    assert "###" not in text
    for figure in ("3,720.00 USD", "2,952.00 USD", "528.00 USD", "240.00 USD", "2,232.000", "1,224.000", "50.0%"):
        assert figure in text, figure
    assert "Amount (USD)" in text and "page 1 of 6" in text


@pytest.mark.skipif(shutil.which("soffice") is None or shutil.which("pdftotext") is None,
                    reason="LibreOffice / poppler: run scripts/install-test-deps.sh")
@pytest.mark.slow
def test_a_corrected_workbook_printed_by_calc_says_why_who_when_on_pages_that_say_what_they_are(tmp_path):
    """Closed by alice on Nov 5, corrected by bob on Nov 10 ("H100 price"): Calc's PDF of the
    workbook names both revisions, and every page its statement, state and page x of y."""
    from tests.ledger.test_corrections import corrected_october
    from tests.reports.test_html_pdf import _pages

    path = tmp_path / "w.duckdb"
    corrected_october(path)
    with warehouse.open_reader(path) as con:
        st = build_statement(con, "2026-10")
    write_statement_set(st, tmp_path / "out", per_unit=False)
    (xlsx,) = (tmp_path / "out").glob("*.xlsx")
    profile = tmp_path / "lo-profile"
    subprocess.run(["soffice", f"-env:UserInstallation={profile.as_uri()}", "--headless", "--convert-to", "pdf",
                    "--outdir", str(tmp_path), str(xlsx)], check=True, capture_output=True, timeout=120)
    pages = _pages(tmp_path / xlsx.name.replace(".xlsx", ".pdf"))
    whole = " ".join(" ".join(p.split()) for p in pages)
    assert "closed 2026-11-05 00:00 UTC by alice (revision 0)" in whole
    assert "corrected 2026-11-10 00:00 UTC by bob (revision 1): H100 price" in whole
    assert len(pages) >= 3  # the Summary and a sheet per business unit at least
    for n, text in enumerate(pages, start=1):
        flat = " ".join(text.split())
        assert f"GPU statement 2026-10 — {st.scope}" in flat and "closed, corrected (revision 1)" in flat, (n, flat)
        assert f"page {n} of {len(pages)}" in flat, (n, flat)
