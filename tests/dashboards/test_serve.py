"""`gpuledger dashboards serve` warms before it listens (issue 37): the chart renderer and the
pages' and statement's code are loaded first, so the readiness probe (/_stcore/health) answers only
once the first visitor would find a warm server; then that visitor's page draws without error."""

from __future__ import annotations

import subprocess

import pytest

from tests.helpers.dashboard_rig import BIN, free_port, wait_http


@pytest.mark.slow
def test_serve_warms_before_the_health_probe_answers_and_the_first_visit_draws(dashboard_warehouse, tmp_path):
    port = free_port()
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        proc = subprocess.Popen([str(BIN / "gpuledger"), "dashboards", "serve", "--port", str(port)],
                                cwd=tmp_path, env=dashboard_warehouse.env(), stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        wait_http(f"http://127.0.0.1:{port}/_stcore/health", 120, proc)
        text = log.read_text()
        # the warm-up's line comes before Streamlit says it listens
        assert "dashboards: warm in " in text and text.index("dashboards: warm in ") < text.index("You can now view"), text
        playwright = pytest.importorskip("playwright.sync_api")
        with playwright.sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", headless=True,
                                        args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"http://127.0.0.1:{port}/utilization")
            page.wait_for_selector("[data-testid=stMetric]", timeout=90_000)
            assert page.locator("h1").first.inner_text() == "Utilization"
            assert page.locator("[data-testid=stException]").count() == 0
            browser.close()
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.returncode in (0, -15), proc.returncode
