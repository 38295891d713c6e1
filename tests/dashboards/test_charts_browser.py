"""Every chart of gpuledger.dashboards.charts drawn by Streamlit in Debian's headless Chromium at 1,
3 and 50 rows (tests/dashboards/chart_gallery.py) and measured in the SVG the server drew (vl-convert,
shown inline by ``ui.chart``, so Chromium lays out its text elements with its own fonts): the plot area
keeps its size (a bar row each, never squashed), every title and axis title lies inside the chart,
every axis title names a unit, no two labels of an axis overlap, a number axis thins its labels
evenly (never "0, 20,000, 60,000"), and a legend lists every series or says that it shows the top
ones."""

from __future__ import annotations

import itertools
import subprocess
from pathlib import Path

import pytest
from gpuledger.dashboards import charts

from tests.helpers.dashboard_rig import BIN, free_port, wait_http

pytestmark = pytest.mark.slow

GALLERY = Path(__file__).with_name("chart_gallery.py")
CHROMIUM = Path("/usr/bin/chromium")
# charts whose plot height follows the row count (one band per row), and the px per row
BANDS = {"idle_heatmap": 18, "budget_vs_consumed": charts.ROW_PX, "amount_bars": charts.ROW_PX,
         "whatif_delivery": charts.ROW_PX}
# charts whose legend has one entry per row (series) in the gallery
SERIES = {"pct_over_time", "stacked_hours", "ratio_over_time"}

MEASURE = """() => Array.from(document.querySelectorAll('h4')).filter(h => h.innerText.startsWith('chart: '))
  .map(h => {
    const block = h.closest('[data-testid=stVerticalBlock] > div, [data-testid=stElementContainer]');
    let el = block; let chart = null;
    while (el && !chart) { el = el.nextElementSibling; chart = el && el.querySelector('[data-testid=glChart]'); }
    const svg = chart && chart.querySelector('svg.marks');
    if (!svg) return {name: h.innerText.slice(7), svg: null};
    const box = r => { const b = r.getBoundingClientRect(); return [b.left, b.top, b.right, b.bottom]; };
    const visible = t => t.textContent.trim() && getComputedStyle(t).opacity !== '0' && t.getAttribute('opacity') !== '0';
    const texts = sel => Array.from(svg.querySelectorAll(sel)).filter(visible).map(t => ({text: t.textContent, box: box(t)}));
    return {
      name: h.innerText.slice(7), svg: box(svg),
      plot: box(svg.querySelector('g.mark-group.role-frame.root > g > path.background')),
      title: texts('g.role-title text'),
      axisTitles: texts('g.role-axis-title text'),
      axes: Array.from(svg.querySelectorAll('g.role-axis')).map(a =>
        Array.from(a.querySelectorAll('g.role-axis-label text')).filter(visible).map(t => box(t))),
      axisLabels: Array.from(svg.querySelectorAll('g.role-axis')).map(a =>
        Array.from(a.querySelectorAll('g.role-axis-label text')).filter(visible).map(t => t.textContent.trim())),
      axisTitleBoxes: Array.from(svg.querySelectorAll('g.role-axis')).map(a =>
        Array.from(a.querySelectorAll('g.role-axis-title text')).filter(visible).map(t => box(t))),
      legendTitles: texts('g.role-legend-title text').map(t => t.text),
      legendLabels: texts('g.role-legend-label text').map(t => t.text),
      allText: texts('text'),
      bars: Array.from(svg.querySelectorAll('g.mark-rect path')).map(p => box(p)),
    };
  })"""


@pytest.fixture(scope="module")
def gallery(tmp_path_factory):
    playwright = pytest.importorskip("playwright.sync_api")
    if not CHROMIUM.exists():
        pytest.skip("no Debian chromium: run scripts/install-test-deps.sh")
    port = free_port()
    log = open(tmp_path_factory.mktemp("gallery") / "streamlit.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([str(BIN / "streamlit"), "run", str(GALLERY), "--server.headless", "true",
                             "--server.port", str(port), "--server.address", "127.0.0.1",
                             "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none"],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_http(f"http://127.0.0.1:{port}/_stcore/health", 90, proc)
        with playwright.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                        args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
            page = browser.new_page(viewport={"width": 1200, "height": 900})

            def measure(rows: int) -> dict[str, dict]:
                page.goto(f"http://127.0.0.1:{port}/?rows={rows}")
                page.get_by_text("end of gallery").wait_for(timeout=90_000)
                page.wait_for_function("() => document.querySelectorAll('[data-testid=glChart] svg.marks "
                                       "g.role-frame.root').length >= 10", timeout=90_000)
                # no Vega in the browser: every chart is the server's SVG
                assert page.locator("[data-testid=stVegaLiteChart]").count() == 0
                return {m["name"]: m for m in page.evaluate(MEASURE)}

            yield measure
            browser.close()
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


def _inside(inner, outer, slack=1.0) -> bool:
    return (inner[0] >= outer[0] - slack and inner[1] >= outer[1] - slack and inner[2] <= outer[2] + slack
            and inner[3] <= outer[3] + slack)


def _overlap(a, b) -> bool:
    return a[0] < b[2] - 0.5 and b[0] < a[2] - 0.5 and a[1] < b[3] - 0.5 and b[1] < a[3] - 0.5


def _calendar_points(texts: list[str]) -> list | None:
    """A time axis's labels as points to step between (hours, or months for "Nov 2026"), None if
    they are not dates. Labels without a year ("03 Nov") roll into the next year after December."""
    from datetime import datetime

    for fmt in ("%d %b %H:%M", "%d %b", "%b %Y"):
        try:
            parsed = [datetime.strptime(t, fmt) for t in texts]
        except ValueError:
            continue
        if fmt == "%b %Y":
            return [d.year * 12 + d.month for d in parsed]
        points, year = [], 2000
        for d in parsed:
            d = d.replace(year=year)
            if points and d < points[-1]:
                year += 1
                d = d.replace(year=year)
            points.append(d)
        return [round((d - points[0]).total_seconds() / 3600) for d in points]
    return None


@pytest.mark.parametrize("rows", [1, 3, 50])
def test_every_chart_is_legible_at_this_many_rows(gallery, rows):
    drawn = gallery(rows)
    assert set(drawn) >= {"pct_over_time", "stacked_hours", "idle_heatmap", "ratio_over_time", "budget_vs_consumed",
                          "burn_down", "amount_bars", "whatif_delivery", "whatif_waits", "whatif_sweep"}
    for name, m in drawn.items():
        assert m["svg"], f"{name}: no SVG drawn"
        plot_w, plot_h = m["plot"][2] - m["plot"][0], m["plot"][3] - m["plot"][1]
        # the plot area: never squashed, and a band chart has a row of room per row
        assert plot_w >= 600, (name, rows, plot_w)
        assert plot_h >= charts.MIN_PLOT_PX - 1, (name, rows, plot_h)
        if name in BANDS:
            assert plot_h >= BANDS[name] * rows - 1, (name, rows, plot_h)
        # every text inside the chart's own SVG: the title, axis titles, legend titles are not cut
        for text in m["allText"]:
            assert _inside(text["box"], m["svg"]), (name, rows, text["text"], text["box"], m["svg"])
        assert [t["text"] for t in m["title"]][:1] and m["title"][0]["text"].strip(), (name, "no title")
        # every axis titled; the measured ones (all but a band of names) with a unit in parentheses
        assert len(m["axisTitles"]) >= 2 and all(t["text"].strip() for t in m["axisTitles"]), (name, m["axisTitles"])
        with_unit = [t["text"] for t in m["axisTitles"] if t["text"].rstrip().endswith(")")]
        assert len(with_unit) >= (1 if name in BANDS or name.startswith("whatif") else 2), (name, m["axisTitles"])
        # no two labels of one axis overlap (Vega hides the ones it drops: opacity 0)
        for labels, titles in zip(m["axes"], m["axisTitleBoxes"], strict=True):
            for i, a in enumerate(labels):
                for b in labels[i + 1:] + titles:  # nor an axis title lie on its labels
                    assert not _overlap(a, b), (name, rows, a, b)
        # a number axis keeps evenly spaced labels: Vega's "greedy" thinning keeps a narrow "0" and
        # the next label, then every other one (0, 20,000, 60,000, 100,000 on chargeback's bars)
        for texts in m["axisLabels"]:
            numbers = [t.replace(",", "").rstrip("%") for t in texts]
            if len(numbers) >= 3 and all(n.lstrip("-").replace(".", "", 1).isdigit() for n in numbers):
                steps = {round(float(b) - float(a), 6) for a, b in zip(numbers, numbers[1:])}
                assert len(steps) == 1, (name, rows, texts)
            # a time axis likewise: one calendar step between labels (never "01 Nov 00:00, 02 Nov
            # 12:00, 03 Nov 12:00", which thinning by label width left on 7 days of hours)
            times = _calendar_points(texts)
            if times is not None and len(times) >= 3:
                assert len({b - a for a, b in itertools.pairwise(times)}) == 1, (name, rows, texts)
        # a legend per series: every series listed, or the top ones and a title that says so
        if name in SERIES:
            entries = [t for t in m["legendLabels"] if t not in ("allocated", "active")]
            if rows <= charts.LEGEND_MAX:
                assert len(entries) == rows, (name, rows, entries)
            else:
                assert len(entries) == charts.LEGEND_MAX, (name, rows, entries)
                assert any(f"of {rows}" in t for t in m["legendTitles"]), (name, m["legendTitles"])


def test_a_budget_bar_is_its_share_of_that_budget(gallery):
    # the gallery's first node has used 1/6 of its budget: its bar covers 1/6 (16.7 %) of the axis,
    # whatever the other bars (40 % each), and the axis ends at 100 % (no bar is over)
    for rows in (1, 3):
        m = gallery(rows)["budget_vs_consumed"]
        plot_w = m["plot"][2] - m["plot"][0]
        first = min(m["bars"], key=lambda b: b[1])  # the top bar: the first node
        assert (first[2] - first[0]) / plot_w == pytest.approx(1 / 6, abs=0.005), (rows, first, m["plot"])
        (numbers,) = [a for a in m["axisLabels"] if a and all(t.replace(",", "").isdigit() for t in a)]
        assert numbers[-1] == "100", (rows, m["axisLabels"])
