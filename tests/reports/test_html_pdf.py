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
from gpuledger.reports.statement.build import build_statement
from gpuledger.reports.statement.files import write_statement_set
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


@pytest.mark.slow
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


def _pages(pdf) -> list[str]:
    """The text of each page of ``pdf`` (pdftotext, page by page)."""
    info = subprocess.run(["pdfinfo", str(pdf)], capture_output=True, text=True, check=True).stdout
    count = int(next(ln.split()[-1] for ln in info.splitlines() if ln.startswith("Pages:")))
    return [subprocess.run(["pdftotext", "-layout", "-f", str(n), "-l", str(n), str(pdf), "-"], capture_output=True,
                           text=True, check=True).stdout for n in range(1, count + 1)]


@pytest.mark.slow
def test_a_corrected_month_on_paper_says_why_who_and_when_and_every_page_what_it_is(tmp_path):
    """Closed by alice on Nov 5, corrected by bob on Nov 10 ("H100 price"): the PDF says both, who and
    when, and every page carries the statement, its state and page x of y; a final one no watermark."""
    from tests.ledger.test_corrections import corrected_october

    path = tmp_path / "w.duckdb"
    corrected_october(path)
    with warehouse.open_reader(path) as con:
        st = build_statement(con, "2026-10")
    write_statement_set(st, tmp_path / "out", per_unit=False, pdf=True)
    (pdf,) = (tmp_path / "out").glob("*.pdf")
    (tmp_path / "png").mkdir()
    pages = _pages(pdf)
    assert "closed 2026-11-05 00:00 UTC by alice (revision 0)" in pages[0]
    assert "corrected 2026-11-10 00:00 UTC by bob (revision 1): H100 price" in pages[0]
    for n, text in enumerate(pages, start=1):
        assert f"GPU statement 2026-10 — {st.scope}" in text and "closed, corrected (revision 1)" in text, (n, text)
        assert f"page {n} of {len(pages)}" in text, (n, text)
    assert st.state.mark is None and _watermark_pixels(pdf, tmp_path / "png") == [0] * len(pages)  # final


@pytest.mark.slow
def test_a_provisional_pdf_carries_its_watermark_on_every_page(statement, tmp_path_factory):
    """November of the fixture is open with data through Nov 3: provisional, so every page is marked."""
    st, base = statement
    with warehouse.open_reader(base / "w.duckdb") as con:
        november = build_statement(con, "2026-11")
    assert november.provisional and november.state.mark == "PROVISIONAL"
    write_statement_set(november, base / "nov", per_unit=False, pdf=True)
    (pdf,) = (base / "nov").glob("*.pdf")
    pages = _pages(pdf)
    for n, text in enumerate(pages, start=1):
        assert "provisional (open, not yet closed)" in text and f"page {n} of {len(pages)}" in text, (n, text)
    # the watermark is rotated text, which pdftotext leaves out: look at each printed page instead —
    # its colour, rgba(190, 90, 0, 0.13) on white, is (246, 234, 222), drawn on no page of a final one
    assert all(n > 2000 for n in _watermark_pixels(pdf, tmp_path_factory.mktemp("png"))), "no watermark"
    # October of the fixture is open with its data complete: not final either, a draft
    assert st.state.mark == "DRAFT"


def _watermark_pixels(pdf, folder) -> list[int]:
    """Per page of ``pdf`` (rendered at 50 dpi by pdftoppm), how many pixels have the watermark's colour."""
    from PIL import Image

    subprocess.run(["pdftoppm", "-r", "50", "-png", str(pdf), str(folder / "p")], check=True, capture_output=True)
    out = []
    for png in sorted(folder.glob("p-*.png")):
        img = Image.open(png).convert("RGB")
        out.append(sum(1 for r, g, b in img.getdata() if abs(r - 246) <= 6 and abs(g - 234) <= 6 and abs(b - 222) <= 6))
    return out
