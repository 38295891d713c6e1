"""`make dev`'s preparation and alert receiver: the generated config loads, has budgets for the
current month and sends alerts to the local receiver's channel; the receiver, sent an alert by
apprise exactly as the pipelines send one, writes it as a person reads it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpuledger.config import load_config
from tests.helpers.dagster_rig import free_port

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_dev_config_has_this_month_budgets_and_the_receiver_channel(tmp_path):
    sim_start = "2026-10-31T22:00:00"  # a start in an earlier month than today
    subprocess.run([sys.executable, str(REPO / "scripts/dev_setup.py"), "--out", str(tmp_path), "--gpus", "16",
                    "--port", "9400", "--sim-start", sim_start, "--dashboard-url", "http://127.0.0.1:8599"],
                   check=True, capture_output=True, timeout=300)
    cfg = load_config(tmp_path / "gpuledger.yaml")
    periods = {str(b.period) for b in cfg.budgets}
    this_month = datetime.now(UTC).strftime("%Y-%m")
    assert {"2026-10", "2026-11", this_month} <= periods  # from the simulated start's month to today's
    by_node = {b.node: b.gpu_hours for b in cfg.budgets if str(b.period) == this_month}
    assert by_node["llm-pretrain"] == 102000  # the example's November figure repeated
    assert cfg.policy.alerts.on_call == ["dev-alerts"]
    assert cfg.policy.alerts.dashboard_url == "http://127.0.0.1:8599"
    assert [t.split(":")[-1] for t in cfg.sources.scrape.targets] == ["9400/metrics", "9401/metrics"]
    assert (tmp_path / "incoming" / "simulated-jobs.csv").stat().st_size > 0


@pytest.mark.parametrize("inherited", ["signal.signal(signal.SIGTERM, signal.SIG_IGN)",
                                       "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})"],
                         ids=["sigterm-ignored", "sigterm-blocked"])
def test_receiver_writes_each_alert_readably(tmp_path, inherited):
    import apprise

    port = free_port()
    out = tmp_path / "alerts.txt"
    # started with SIGTERM ignored or blocked, as a parent passes either on across exec (a test
    # worker of this suite did: the receiver then outlived SIGTERM and this test waited 60 s each run)
    argv = [sys.executable, str(REPO / "scripts/dev_alert_receiver.py"), "--port", str(port), "--out", str(out)]
    start = f"import os, signal; {inherited}; os.execv({argv[0]!r}, {argv!r})"
    receiver = subprocess.Popen([sys.executable, "-c", start], stdout=subprocess.PIPE, text=True,
                                env=os.environ.copy())
    try:
        assert "alert receiver on" in receiver.stdout.readline()  # listening
        sender = apprise.Apprise()
        sender.add(f"json://127.0.0.1:{port}/alerts")
        assert sender.notify(title="[warning] job alpha-1 (alpha) holds 1 idle GPUs",
                             body="idle since 09:00 UTC\nsee http://127.0.0.1:8501/squatters")
        deadline = time.monotonic() + 30
        while "alpha-1" not in out.read_text() and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        receiver.terminate()
        try:
            stopped = receiver.wait(timeout=30)
        except subprocess.TimeoutExpired:
            receiver.kill()
            receiver.wait()
            stopped = None
    assert stopped == 0  # SIGTERM is a clean stop whatever the receiver inherited
    text = out.read_text()
    lines = text.splitlines()
    assert lines[0].endswith("UTC  [info] [warning] job alpha-1 (alpha) holds 1 idle GPUs")
    assert lines[1:3] == ["    idle since 09:00 UTC", "    see http://127.0.0.1:8501/squatters"]
