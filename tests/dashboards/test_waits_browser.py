"""Wait times on the pages, in a real headless Chromium (issue 38): the My team section and the
Fair share section draw their tables without an error element, with the CLI's figures; the
screenshots are kept under the test's folder for a person to look at."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.dashboards.test_browser import ERRORS, browser, not_blank, settled  # noqa: F401 - the fixture by name
from tests.helpers.dashboard_rig import Server

SHOTS = Path(__file__).resolve().parents[2] / "reports" / "screenshots"


def _section(page, title: str):
    heading = page.get_by_role("heading", name=title)
    heading.wait_for(timeout=60_000)
    heading.scroll_into_view_if_needed()
    return heading


@pytest.mark.slow
def test_wait_sections_draw_in_chromium(dashboard_warehouse, browser, tmp_path):  # noqa: F811
    server = Server(dashboard_warehouse, tmp_path)
    SHOTS.mkdir(parents=True, exist_ok=True)
    try:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        for path, title in (("my-team", "Wait times"), ("fair-share", "Wait times by project")):
            page.goto(f"{server.url}/{path}")
            settled(page)
            _section(page, title)
            assert page.locator(ERRORS).count() == 0, f"{path}: {page.locator(ERRORS).first.inner_text()}"
            png = page.screenshot(path=str(SHOTS / f"waits-{path}.png"), full_page=True)
            colours, ink = not_blank(png)
            assert colours > 20 and ink > 0.02
        # the fair-share table: a row per project with jobs submitted in the period, headers with units
        grid = page.locator("[data-testid=stDataFrame]").last
        grid.scroll_into_view_if_needed()
        # the grid draws on a canvas (no text to read): its figures are checked in AppTest
        # (tests/dashboards/test_pages.py); here that it drew
        colours, ink = not_blank(grid.screenshot(path=str(SHOTS / "waits-fair-share-table.png")))
        assert colours > 5 and ink > 0.02, (colours, ink)
    finally:
        server.stop()
