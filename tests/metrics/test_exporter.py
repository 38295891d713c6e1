"""gpuledger's Prometheus figures (issue 21 §7): names `promtool check metrics` accepts, a 0 sample
for an empty state, exhaustion only within the budget's period, `metrics serve` on 127.0.0.1 by
default and stopping within a second on SIGTERM / SIGINT. Fixture: tests/helpers/statement_fixtures.py
(beta's November budget 100 h, 24 used by Nov 3, burning 12 h/day: exhausts Nov 9 08:00)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from calendar import timegm
from datetime import datetime

import pytest
import requests

from gpuledger import warehouse
from gpuledger.metrics.exporter import compute_figures
from tests.helpers.ledger_fixtures import load
from tests.helpers.prometheus_rig import free_port
from tests.helpers.statement_fixtures import CONFIG, october
from tests.helpers.timing import LOAD_SLACK_S


def _exposition(path) -> str:
    from prometheus_client import CollectorRegistry, generate_latest

    from gpuledger.metrics.exporter import LedgerCollector

    registry = CollectorRegistry()
    registry.register(LedgerCollector(path, cache_s=0))
    return generate_latest(registry).decode()


@pytest.fixture
def month(warehouse_file):
    october(warehouse_file)
    return warehouse_file


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool: run scripts/install-test-deps.sh")
def test_promtool_accepts_every_name_and_empty_states_are_zero(month):
    text = _exposition(month)
    lint = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60,
                          check=False)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    samples = dict(line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#"))
    # the outbox is empty and nobody squats: zeros, so Grafana shows 0 rather than "No data"
    for status in ("failed", "pending", "sent"):
        assert float(samples[f'gpuledger_alerts_outbox{{status="{status}"}}']) == 0.0
    for project in ("alpha", "beta", "gamma"):
        assert float(samples[f'gpuledger_wasted_gpu_seconds{{project="{project}"}}']) == 0.0
    # 76 GPU-hours left = 273,600 GPU-seconds
    assert float(samples['gpuledger_budget_remaining_gpu_seconds{node="beta"}']) == 76 * 3600


def test_exhaustion_only_within_the_budgets_period(month):
    figures = {name: samples for name, _, samples in compute_figures(month)}
    exhaustion = {lab["node"]: v for lab, v in figures["gpuledger_budget_projected_exhaustion_timestamp_seconds"]}
    assert exhaustion["beta"] == timegm(datetime(2026, 11, 9, 8).timetuple())
    # 12 h/day from 24 used: a 400 h budget lasts to Dec 2 08:00, after November: not exported
    with warehouse.open_writer(month) as con:
        load(con, CONFIG.replace("period: 2026-11, gpu_hours: 100", "period: 2026-11, gpu_hours: 400"),
             at=datetime(2026, 11, 3))
    figures = {name: samples for name, _, samples in compute_figures(month)}
    assert figures["gpuledger_budget_projected_exhaustion_timestamp_seconds"] == []


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 0), (signal.SIGINT, 130)])
def test_serve_binds_loopback_by_default_and_stops_within_a_second(month, signum, code):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "gpuledger.cli", "metrics", "serve", "--port", str(port),
                             "--cache-seconds", "0", "--warehouse", str(month)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env={**os.environ})
    try:
        line = proc.stderr.readline()
        assert f"http://127.0.0.1:{port}/metrics" in line, line
        assert "gpuledger_squatters" in requests.get(f"http://127.0.0.1:{port}/metrics", timeout=30).text
        proc.send_signal(signum)
        assert proc.wait(timeout=LOAD_SLACK_S) == code  # without the handler it never stops
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_enforcement_outcomes_are_counted_by_action_outcome_and_cause(month):
    """Three applied actions of one real run: a preemption done, one refused for another cluster,
    a priority done — counted by (action, outcome, cause); the cause falls back to the outcome."""
    from gpuledger.enforce import audit
    from gpuledger.enforce.model import Action

    at = datetime(2026, 11, 3)
    acts = [Action(action=a, cluster=c, job_id=j, project="alpha", reason="r", rule="t", dry_run=False)
            for a, c, j in (("preempt", "c1", "1"), ("preempt", "other", "1"), ("set-priority", "c1", "2"))]
    with warehouse.open_writer(month) as con:
        audit.record_plan(con, acts, now=at)
        audit.record_applied(con, [(acts[0], "done", None, "job 1 cancelled", None),
                                   (acts[1], "refused", None, "decided for cluster other ...", "other-cluster"),
                                   (acts[2], "done", None, "job 2 Nice=-5", None)],
                             backend="slurm", dry_run=False, now=at)
    figures = {name: samples for name, _, samples in compute_figures(month)}
    got = {(lab["action"], lab["outcome"], lab["cause"], lab["dry_run"]): v
           for lab, v in figures["gpuledger_enforcement_actions_total"]}
    assert got == {("preempt", "done", "done", "false"): 1.0, ("preempt", "refused", "other-cluster", "false"): 1.0,
                   ("set-priority", "done", "done", "false"): 1.0}
    assert 'gpuledger_enforcement_actions_total{action="preempt",cause="other-cluster",dry_run="false",' \
           'outcome="refused"} 1.0' in _exposition(month)


def test_wait_gauge_is_scraped_per_project_class_and_quantile(month):
    """Three alpha training jobs submitted on Nov 2, within the 7 days before the data's now (Nov 3):
    waits 600, 1,800 and 3,600 s -> p50 1,800; p90 at position 0.9 × 2 = 1.8: 1,800 + 0.8 × 1,800
    = 3,240; the longest 3,600. The fixture's own jobs record no submission: no wait to count."""
    from gpuledger.metrics.exporter import make_server

    day = datetime(2026, 11, 2)
    with warehouse.open_writer(month) as con:
        for n, (submit_h, wait_min) in enumerate(((10, 10), (11, 30), (12, 60))):
            submit = day.replace(hour=submit_h)
            con.execute("INSERT INTO jobs (cluster, job_id, project, kind, gpu_model, gpus, submit_time, start_time, "
                        "end_time, state, source, updated_at) VALUES ('c1', ?, 'alpha', 'training', 'H100', 8, ?, "
                        "? + to_minutes(?::BIGINT), ?, 'COMPLETED', 'test', ?)",
                        [f"wait-{n}", submit, submit, wait_min, day.replace(hour=14), datetime(2026, 11, 3)])
    server = make_server(month, port=free_port(), cache_s=0)
    import threading

    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        text = requests.get(f"http://127.0.0.1:{server.server_address[1]}/metrics", timeout=60).text
    finally:
        server.shutdown()
    samples = dict(line.rsplit(" ", 1) for line in text.splitlines() if line.startswith("gpuledger_job_wait_seconds{"))
    alpha = {q: float(samples[f'gpuledger_job_wait_seconds{{class="training",project="alpha",quantile="{q}"}}'])
             for q in ("0.5", "0.9", "1")}
    assert alpha == {"0.5": 1800.0, "0.9": pytest.approx(3240.0), "1": 3600.0}
    assert len(samples) == 3, samples  # alpha/training only, three quantiles
