"""The HTML statement fits a 1,280 px window and A4 portrait, with print CSS, and its PDF (headless
Chromium's print-to-PDF) sits beside the other files, listed in the manifest, byte-identical
across runs (issue 21 §4). Figures: tests/helpers/statement_fixtures.py (total 3,720.00 USD)."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess

import pytest

from gpuledger import warehouse
from gpuledger.reports.files import write_statement_set
from gpuledger.reports.statement import build_statement
from tests.helpers.statement_fixtures import october

pytestmark = pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium: run scripts/install-test-deps.sh")
STEM = "statement-2026-10-acme"
A4_CSS_PX = 794  # 210 mm at 96 px per inch


@pytest.fixture(scope="module")
def statement(tmp_path_factory):
    base = tmp_path_factory.mktemp("html")
    october(base / "w.duckdb")
    with warehouse.open_reader(base / "w.duckdb") as con:
        st = build_statement(con, "2026-10")
    return st, base


def test_the_pdf_is_listed_in_the_manifest_and_byte_stable(statement):
    st, base = statement
    first = write_statement_set(st, base / "a", per_unit=False, pdf=True)
    second = write_statement_set(st, base / "b", per_unit=False, pdf=True)
    listed = {f["path"]: f["sha256"] for f in first["files"]}
    pdf = (base / "a" / f"{STEM}.pdf").read_bytes()
    assert listed[f"{STEM}.pdf"] == hashlib.sha256(pdf).hexdigest()
    assert pdf == (base / "b" / f"{STEM}.pdf").read_bytes() and first == second
    assert b"/CreationDate (D:20261101000000" in pdf  # the statement's own time, not the clock's
    info = subprocess.run(["pdfinfo", str(base / "a" / f"{STEM}.pdf")], capture_output=True, text=True,
                          check=True).stdout
    assert "(A4)" in info and "594.96 x 841.92" in info  # portrait
    text = subprocess.run(["pdftotext", "-layout", str(base / "a" / f"{STEM}.pdf"), "-"], capture_output=True,
                          text=True, check=True).stdout
    assert "3,720.00" in text and "reconciles to the cent" in text
    assert json.loads((base / "a" / "manifest.json").read_text())["files"] == first["files"]


@pytest.mark.slow
def test_the_page_fits_1280_px_and_a4_portrait_without_cutting_a_column(statement):
    from playwright.sync_api import sync_playwright

    st, base = statement
    write_statement_set(st, base / "page", per_unit=False)
    page_file = base / "page" / f"{STEM}.html"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium"), headless=True,
                                    args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(page_file.as_uri())
        # nothing wider than the window: no horizontal scroll, every table inside the body
        assert page.evaluate("document.documentElement.scrollWidth") <= 1280
        widest = page.evaluate("Math.max(...[...document.querySelectorAll('table')].map(t => t.scrollWidth))")
        assert widest <= 1280
        headers = page.locator("table").nth(1).locator("th").all_inner_texts()
        assert "Amount (USD)" in headers and not any("_" in h for h in headers)  # human headers
        # printed on A4 portrait (12 mm margins): the print CSS narrows the tables to the sheet
        page.emulate_media(media="print")
        page.set_viewport_size({"width": A4_CSS_PX - 2 * 45, "height": 1123})
        assert page.evaluate("document.documentElement.scrollWidth") <= A4_CSS_PX - 2 * 45
        browser.close()
