"""The dashboards in a real browser: Debian's headless Chromium (driven by Playwright) against a
running `streamlit run` server on the small simulated warehouse.

* every page loads, draws its title and figures, shows no error element, and its screenshot is
  not blank;
* sign-in end to end: a local OIDC provider (oidc-provider-mock), the app with an `[auth]` section,
  Chromium clicking "Log in" and authorizing as a user: a lead of one team sees that team's jobs
  and not another team's; finance sees all;
* the dashboard keeps answering while an ingest and an analytics run write the warehouse.
"""

from __future__ import annotations

import io
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from gpuledger import warehouse
from tests.dashboards.test_pages import check_queue_sentences
from tests.helpers.dashboard_rig import BIN, LEADS, Server, free_port, run_cli, wait_http

pytestmark = pytest.mark.slow

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
PAGES = {"utilization": "Utilization", "fair-share": "Fair share", "budgets": "Budgets", "chargeback": "Chargeback",
         "squatters": "Squatters", "my-team": "My team", "enforcement": "Enforcement", "what-if": "What-if"}
ERRORS = "[data-testid=stException], [data-testid=stAlertContentError]"


@pytest.fixture(scope="module")
def browser():
    playwright = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.skip("no Debian chromium: run scripts/install-test-deps.sh")
    with playwright.sync_playwright() as p:
        chrome = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                   args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
        yield chrome
        chrome.close()


def settled(page, deadline_s: float = 90) -> None:
    """Wait until the script run is over: a title is drawn and Streamlit's running indicator is
    gone (polled, with a deadline)."""
    page.wait_for_selector("h1", timeout=deadline_s * 1000)
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if page.locator("[data-testid=stStatusWidget]").count() == 0 and page.locator(
                "[data-testid=stSkeleton]").count() == 0:
            return
        time.sleep(0.2)
    raise TimeoutError(f"{page.url} still running after {deadline_s} s")


def not_blank(png: bytes) -> tuple[int, float]:
    """(distinct colours, share of pixels that are not the background) of a screenshot."""
    from PIL import Image

    img = Image.open(io.BytesIO(png)).convert("RGB")
    small = img.resize((img.width // 4, img.height // 4))
    pixels = list(small.getdata())
    background = max(set(pixels), key=pixels.count)
    return len(set(pixels)), sum(p != background for p in pixels) / len(pixels)


@pytest.fixture(scope="module")
def local_server(dashboard_warehouse, tmp_path_factory):
    """One local-mode server (no sign-in) for the tests that only read pages: a Streamlit start and
    its first page loads paid once. /what-if reads reports/whatif/*.json under the server's folder
    (GPULEDGER_WHATIF_DIR's default)."""
    folder = tmp_path_factory.mktemp("local-server")
    (folder / "reports" / "whatif").mkdir(parents=True)
    run_cli(dashboard_warehouse, "whatif", "schedule", "--format", "json",
            "--out", str(folder / "reports" / "whatif" / "schedule.json"), "--no-progress")
    server = Server(dashboard_warehouse, folder)
    yield server
    server.stop()


def test_every_page_in_chromium_draws_without_error(dashboard_warehouse, browser, local_server, tmp_path):
    server = local_server
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        for path, title in PAGES.items():
            page.goto(f"{server.url}/{path}")
            settled(page)
            page.wait_for_selector("[data-testid=stMetric]", timeout=60_000)
            assert page.locator("h1").first.inner_text() == title
            assert page.locator(ERRORS).count() == 0, f"{path}: {page.locator(ERRORS).first.inner_text()}"
            assert page.url == f"{server.url}/{path}" and page.get_by_text("Page not found").count() == 0
            png = page.screenshot(path=str(tmp_path / f"{path}.png"), full_page=True)
            colours, ink = not_blank(png)
            assert colours > 20 and ink > 0.02, f"{path}: screenshot looks blank ({colours} colours, {ink:.1%} ink)"
        # an alert's link opens its finding's history
        with warehouse.open_reader(dashboard_warehouse.warehouse) as con:
            cluster, job = con.execute("SELECT cluster, job_id FROM squatting_findings WHERE resolved_at IS NULL "
                                       "ORDER BY job_id DESC LIMIT 1").fetchall()[0]  # not the page's default (worst first)
        page.goto(f"{server.url}/squatters?cluster={cluster}&job={job}")
        settled(page)
        page.get_by_text("A finding's history").wait_for(timeout=60_000)
        with warehouse.open_reader(dashboard_warehouse.warehouse) as con:
            (name,) = con.execute("SELECT coalesce(name, job_id) FROM jobs WHERE cluster = ? AND job_id = ?",
                                  [cluster, job]).fetchone()
        picked = page.locator("input[aria-label=Job]").input_value()  # the job by its name, the id beside
        assert picked == (f"{cluster}/{job}" if name == job else f"{name} ({cluster}/{job})"), picked
        for path in ("utilization", "fair-share", "budgets", "chargeback", "what-if"):
            page.goto(f"{server.url}/{path}")
            settled(page)
            # the server's SVG, in the page (no Vega element)
            page.wait_for_selector("[data-testid=glChart] svg.marks", timeout=60_000)
            assert page.locator("[data-testid=stVegaLiteChart]").count() == 0
    finally:
        page.close()


def _provider(tmp_path: Path) -> tuple[subprocess.Popen, str]:
    if not (BIN / "oidc-provider-mock").exists():
        pytest.skip("oidc-provider-mock is not installed: pip install -e '.[dev]'")
    port = free_port()
    log = open(tmp_path / "oidc.log", "w")  # noqa: SIM115 - lives as long as the process
    proc = subprocess.Popen([str(BIN / "oidc-provider-mock"), "--port", str(port)], stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    wait_http(f"{url}/.well-known/openid-configuration", 60, proc)
    return proc, url


def _sign_in(browser, server: Server, email: str, start: str = ""):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.goto(f"{server.url}{start}")
    page.get_by_role("button", name="Log in").click()
    page.wait_for_selector("input[name=sub]", timeout=60_000)  # the provider's authorization form
    page.fill("input[name=sub]", email)  # the mock makes a user whose e-mail claim is the subject
    page.get_by_role("button", name="Authorize").click()
    page.wait_for_url(f"{server.url}/**", timeout=60_000)
    page.wait_for_selector("text=Signed in as", timeout=60_000)
    return context, page


def _cells(page) -> set[str]:
    """Text of every data-grid cell on the page (the grid keeps an accessible table beside its canvas)."""
    return {t.strip() for t in page.locator("[data-testid=stDataFrame] td").all_text_contents()}


def _cells_showing(page, wanted: set[str], deadline_s: float = 60) -> set[str]:
    """The grid cells once ``wanted`` are all among them, or as they are at the deadline: a page can
    rerun right after the status widget goes (a loaded machine showed the first of its tables
    before the rest), so one read can come too early."""
    end = time.monotonic() + deadline_s
    while True:
        cells = _cells(page)
        if wanted <= cells or time.monotonic() > end:
            return cells
        time.sleep(0.5)


def _open_jobs(rig, projects) -> set[str]:
    from gpuledger.analytics.queries import data_now

    with warehouse.open_reader(rig.warehouse) as con:
        now = data_now(con)
        rows = con.execute(
            # the pages show a job by its name (the id in a column further right, off-screen)
            "SELECT coalesce(name, job_id) FROM jobs WHERE list_contains(?::VARCHAR[], project) "
            "AND (end_time IS NULL OR end_time > ?) "
            "AND coalesce(submit_time, start_time) <= ?", [list(projects), now, now]).fetchall()
    return {r[0] for r in rows}


def test_sign_in_end_to_end_lead_sees_own_team_finance_sees_all(dashboard_warehouse, browser, tmp_path):
    provider, issuer = _provider(tmp_path)
    port = free_port()
    (tmp_path / ".streamlit").mkdir()
    (tmp_path / ".streamlit" / "secrets.toml").write_text(
        "[auth]\n"
        f'redirect_uri = "http://127.0.0.1:{port}/oauth2callback"\n'
        'cookie_secret = "a-long-random-test-secret-0123456789"\n'
        'client_id = "gpuledger-dashboard"\n'
        'client_secret = "test-client-secret"\n'
        f'server_metadata_url = "{issuer}/.well-known/openid-configuration"\n')
    server = Server(dashboard_warehouse, tmp_path, port=port)
    try:
        # signed out: only the login
        page = browser.new_page()
        page.goto(f"{server.url}/my-team")
        page.get_by_role("button", name="Log in").wait_for(timeout=60_000)
        assert page.locator("[data-testid=stMetric]").count() == 0
        assert page.get_by_text("Page not found").count() == 0
        page.close()

        vision, llm = LEADS["vision-lead@example.com"], LEADS["llm-lead@example.com"]
        vision_jobs, llm_jobs = _open_jobs(dashboard_warehouse, vision), _open_jobs(dashboard_warehouse, llm)
        assert vision_jobs and llm_jobs

        context, page = _sign_in(browser, server, "vision-lead@example.com")
        page.goto(f"{server.url}/my-team")
        settled(page)
        page.wait_for_selector("[data-testid=stDataFrame] td", state="attached", timeout=60_000)
        cells = _cells_showing(page, vision_jobs)
        assert vision_jobs <= cells, vision_jobs - cells
        assert not (llm_jobs - vision_jobs) & cells, (llm_jobs - vision_jobs) & cells  # a name both teams use says nothing
        assert not set(llm) & cells
        page.goto(f"{server.url}/enforcement")
        settled(page)
        assert not set(llm) & _cells(page)
        assert page.locator(ERRORS).count() == 0
        context.close()

        # an alert's deep link opened signed out lands, after the provider's redirects, on that page and job
        with warehouse.open_reader(dashboard_warehouse.warehouse) as con:
            cluster, job = con.execute("SELECT cluster, job_id FROM squatting_findings WHERE resolved_at IS NULL "
                                       "ORDER BY job_id DESC LIMIT 1").fetchall()[0]
        context, page = _sign_in(browser, server, "finance@example.com", f"/squatters?cluster={cluster}&job={job}")
        page.wait_for_url(f"{server.url}/squatters**", timeout=60_000)
        page.get_by_text("A finding's history").wait_for(timeout=60_000)
        with warehouse.open_reader(dashboard_warehouse.warehouse) as con:
            (name,) = con.execute("SELECT coalesce(name, job_id) FROM jobs WHERE cluster = ? AND job_id = ?",
                                  [cluster, job]).fetchone()
        picked = page.locator("input[aria-label=Job]").input_value()  # the job by its name, the id beside
        assert picked == (f"{cluster}/{job}" if name == job else f"{name} ({cluster}/{job})"), picked
        page.goto(f"{server.url}/enforcement")
        settled(page)
        page.wait_for_selector("[data-testid=stDataFrame] td", state="attached", timeout=60_000)
        shown = page.locator("[data-testid=stMetric]").first.inner_text()
        with warehouse.open_reader(dashboard_warehouse.warehouse) as con:
            count = con.execute("SELECT count(*) FROM enforcement_audit").fetchall()[0][0]
        assert f"{count} rows" in shown
        page.goto(f"{server.url}/my-team")
        settled(page)
        page.get_by_text("Team (org node").wait_for(timeout=30_000)  # finance picks any team
        context.close()
    finally:
        server.stop()
        provider.terminate()
        provider.wait(10)


def test_dashboard_keeps_answering_while_ingest_and_analytics_write(dashboard_warehouse, browser, tmp_path):
    """A copy of the warehouse, the server on it with no cache (TTL 0 s, every load reads the
    file), and a writer process: a simulated day appended (ingest), then the pipelines' run-once
    (analytics). Every page load during the writes must answer within a few seconds."""
    import urllib.request

    from streamlit.testing.v1 import AppTest  # noqa: F401 - the server is real; AppTest not used here

    rig = dashboard_warehouse
    folder = tmp_path / "copy"
    folder.mkdir()
    (folder / "dagster").mkdir()
    shutil.copy(rig.warehouse, folder / "gpuledger.duckdb")
    shutil.copy(rig.config, folder / "gpuledger.yaml")
    copy = type(rig)(folder, folder / "gpuledger.duckdb", folder / "gpuledger.yaml")
    server = Server(copy, tmp_path, env={"GPULEDGER_DASHBOARD_TTL_S": "0"})

    durations: list[float] = []
    writer_done = threading.Event()
    failures: list[str] = []

    def write() -> None:
        try:
            run_cli(copy, "simulate", "warehouse", "--gpus", "16", "--days", "1", "--seed", "4",
                    "--start", "2026-11-03T00:00:00")
            run_cli(copy, "pipelines", "run-once")
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(str(exc))
        finally:
            writer_done.set()

    try:
        with urllib.request.urlopen(f"{server.url}/_stcore/health", timeout=5):
            pass
        page = browser.new_page()
        thread = threading.Thread(target=write, daemon=True)
        thread.start()
        loads = 0
        deadline = time.monotonic() + 540
        while not writer_done.is_set() and time.monotonic() < deadline:
            for path in ("utilization", "squatters"):
                started = time.monotonic()
                page.goto(f"{server.url}/{path}")
                settled(page, 60)
                page.wait_for_selector("[data-testid=stMetric]", timeout=60_000)
                assert page.locator(ERRORS).count() == 0, page.locator(ERRORS).first.inner_text()
                durations.append(time.monotonic() - started)
                loads += 1
        thread.join(60)
        page.close()
        print(f"{loads} page loads while the writer ran; slowest {max(durations):.1f} s, median "
              f"{sorted(durations)[len(durations) // 2]:.1f} s")
        assert not failures, failures
        assert writer_done.is_set(), "the writer did not finish in time"
        assert loads >= 4, f"only {loads} page loads happened while the writer ran"
        assert max(durations) < 30, durations  # a reader waits for one writer chunk, never for the whole run
        with warehouse.open_reader(copy.warehouse) as con:  # and the writes landed
            assert con.execute("SELECT max(hour) FROM utilization_hourly").fetchall()[0][0].day == 3
    finally:
        server.stop()


#: per page, columns a reader needs without scrolling sideways, all in one table (issue 37)
KEY_COLUMNS = {
    "squatters": {"job", "severity", "project", "owner"},
    "budgets": {"org node", "period from", "period to", "status"},
    "fair-share": {"position", "project", "why: share vs usage of the parent → LF, place"},
    "chargeback": {"project", "line"},
    "enforcement": {"cycle (UTC)", "job", "action", "phase", "outcome", "reason", "why this outcome"},
}


def test_key_columns_are_visible_at_1400_px_without_scrolling(dashboard_warehouse, browser, local_server):
    """The data grid draws only the columns in view (its accessible table lists just those): each
    page has a table showing all of its key columns at 1,400 px before any sideways scroll."""
    server = local_server
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        for path, wanted in KEY_COLUMNS.items():
            page.goto(f"{server.url}/{path}")
            settled(page)
            shown: list = []
            end = time.monotonic() + 60  # the grids draw after the script run: poll, with a deadline
            while time.monotonic() < end:
                shown = page.evaluate("() => Array.from(document.querySelectorAll('[data-testid=stDataFrame]'))"
                                      ".map(g => Array.from(g.querySelectorAll('th')).map(t => t.textContent.trim()))")
                if any(wanted <= set(grid) for grid in shown):
                    break
                time.sleep(0.3)
            assert any(wanted <= set(grid) for grid in shown), (path, wanted, shown)
            if path == "fair-share":  # the queue sentences as drawn: each one's usage is of its parent
                drawn = [t for t in _cells(page) if " vs usage " in t]
                assert drawn and check_queue_sentences(drawn, _snapshot(dashboard_warehouse)) >= len(drawn)
    finally:
        page.close()


def _snapshot(rig):
    """The fair-share tree the page shows (as of the data's end, through the read model)."""
    from gpuledger.dashboards import queries

    from gpuledger.analytics.queries import data_now

    with warehouse.open_reader(rig.warehouse) as con:
        end = data_now(con)
    return queries.fairshare_latest(str(rig.warehouse), end)
