"""`gpuledger ingest scrape --every`: the long-running scrape service (the every-minute loop outside
Dagster, README "Pipelines") scrapes the config's targets round after round into a real warehouse
and stops on SIGTERM with exit 0 (what Kubernetes and systemd send), keeping every round stored."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from gpuledger import warehouse
from gpuledger.config import example_config_text
from gpuledger.simulator import build_cluster, start_exporters

GPULEDGER = Path(sys.executable).with_name("gpuledger")


@pytest.mark.slow
def test_scrape_service_runs_rounds_until_sigterm(tmp_path):
    sim = build_cluster(seed=5, gpus=16, start=datetime(2026, 11, 1), days=0.2)
    wh = tmp_path / "gpuledger.duckdb"
    with start_exporters(sim, port=0, nodes=[0, 1]) as live:  # wall clock: a new sample time each round
        config = tmp_path / "gpuledger.yaml"
        targets = ", ".join(f'"{u}"' for u in live.urls)
        config.write_text(example_config_text() + f"\nsources:\n  scrape: {{targets: [{targets}], cluster: c9}}\n")
        env = {**os.environ, "GPULEDGER_CONFIG": str(config), "GPULEDGER_WAREHOUSE": str(wh)}
        proc = subprocess.Popen([str(GPULEDGER), "ingest", "scrape", "--every", "1s"], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            deadline = time.monotonic() + 60

            def rounds() -> int:
                if not wh.exists():
                    return 0
                try:
                    with warehouse.open_reader(wh) as con:
                        # each round stores one sample per GPU of the two nodes' 16
                        return con.execute("SELECT count(*) FROM gpu_samples").fetchone()[0] // 16
                except warehouse.WarehouseError:
                    return 0

            while rounds() < 3:
                assert proc.poll() is None, proc.stdout.read()
                assert time.monotonic() < deadline, "three scrape rounds did not land within 60 s"
                time.sleep(0.5)
            proc.send_signal(signal.SIGTERM)
            out, _ = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0, out
    assert "stopped (SIGTERM)" in out and "round 3:" in out  # no "/count": it runs until stopped
    with warehouse.open_reader(wh) as con:
        clusters = {c for (c,) in con.execute("SELECT DISTINCT cluster FROM gpus").fetchall()}
    assert clusters == {"c9"}  # the config's source, not the default cluster
