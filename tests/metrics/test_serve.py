"""`gpuledger metrics serve` scraped by a real Prometheus (issue 11 §3): a PromQL query on a
gpuledger figure answers the value the analytics compute; the Grafana dashboard shipped asks
only for metrics the exporter serves, beside DCGM's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from gpuledger import warehouse
from gpuledger.analytics import queries
from tests.helpers.prometheus_rig import PrometheusRig, free_port, have_prometheus
from tests.helpers.statement_fixtures import october

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "gpuledger.json"


def _serve(path: Path, port: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "gpuledger.cli", "metrics", "serve", "--port", str(port),
                             "--address", "127.0.0.1", "--cache-seconds", "0", "--warehouse", str(path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ})


@pytest.mark.slow
@pytest.mark.prometheus
@pytest.mark.skipif(not have_prometheus(), reason="prometheus: run scripts/install-test-deps.sh")
def test_prometheus_scrapes_gpuledger_and_answers_with_the_analytics_values(warehouse_file, tmp_path):
    october(warehouse_file)
    with warehouse.open_reader(warehouse_file) as con:
        fs = queries.fairshare_report(con)
        burn = queries.budget_report(con)
    factor = {r["node"]: r["fairshare_factor"] for r in fs.iter_rows(named=True) if r["fairshare_factor"] is not None}
    port = free_port()
    server = _serve(warehouse_file, port)
    try:
        with PrometheusRig(tmp_path / "prom", [f"http://127.0.0.1:{port}/metrics"]) as prom:
            prom.wait_for(lambda: prom.scalar('gpuledger_fairshare_factor{node="alpha"}') is not None, 60,
                          "a scrape of gpuledger metrics")
            for node, value in factor.items():
                assert prom.scalar(f'gpuledger_fairshare_factor{{node="{node}"}}') == pytest.approx(value, abs=1e-9)
            remaining = {r["node"]: r["remaining_gpu_hours"] for r in burn.iter_rows(named=True)}
            # as of the data's end (Nov 3): beta's November 100, 24 used by beta-2 (Nov 2-3), rolled up
            assert remaining == {"acme": 76.0, "product": 76.0, "beta": 76.0}
            for node, value in remaining.items():
                assert prom.scalar(f'gpuledger_budget_remaining_gpu_seconds{{node="{node}"}}') == \
                    pytest.approx(value * 3600, abs=1e-3)
            assert prom.scalar('sum(gpuledger_squatters)') == 0.0
            served = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    finally:
        server.terminate()
        server.wait(timeout=20)
    # every family is declared (# TYPE) even when it has no sample now (no squatters, empty outbox)
    names = {line.split()[2] for line in served.splitlines() if line.startswith("# TYPE gpuledger_")}
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    import re

    used = {m for e in exprs for m in re.findall(r"\b(gpuledger_[a-z0-9_]+)", e)}  # co2e: digits too
    assert used and used <= names, used - names
    assert any("DCGM_FI_" in e for e in exprs)  # beside the DCGM panels


def test_dashboard_json_is_a_grafana_dashboard():
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["title"] and dashboard["panels"] and dashboard["schemaVersion"] >= 36
    assert {p["datasource"]["uid"] for p in dashboard["panels"] if "datasource" in p} == {"${datasource}"}
