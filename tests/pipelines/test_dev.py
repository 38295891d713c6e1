"""A real `dagster dev` (webserver + daemon) on a free port with a temporary DAGSTER_HOME: a run
launched through its GraphQL API and a scheduled tick both end in success; every process the test
started is stopped."""

from __future__ import annotations

import os
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from gpuledger import warehouse
from gpuledger.config import read_config_file
from gpuledger.simulator import build_cluster
from gpuledger.simulator.to_warehouse import write_simulation
from tests.helpers import dagster_rig as rig
from tests.helpers.dagster_rig import LOCATION_MODULE, GraphQL, until


@pytest.mark.slow
def test_dagster_dev_runs_a_launched_run_and_a_scheduled_tick(tmp_path):
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    wh = tmp_path / "gpuledger.duckdb"
    cfg, text, source = read_config_file(None)
    from gpuledger.ledger.config_versions import load_version

    sim = build_cluster(seed=3, gpus=8, start=datetime(2026, 11, 1), days=0.1, config=cfg)
    with warehouse.open_writer(wh) as con:
        load_version(con, cfg, text=text, source=source)
        write_simulation(con, sim)

    port = rig.free_port()
    env = {**os.environ, "DAGSTER_HOME": str(home), "GPULEDGER_WAREHOUSE": str(wh),
           "GPULEDGER_INGEST_CRON": "* * * * *", "DAGSTER_DISABLE_TELEMETRY": "1"}
    env.pop("GPULEDGER_CONFIG", None)
    log = tmp_path / "dagster-dev.log"
    dagster = Path(sys.executable).with_name("dagster")
    proc = rig.start([str(dagster), "dev", "-m", LOCATION_MODULE, "--host", "127.0.0.1", "--port", str(port)],
                     env, log)
    gql = GraphQL(port)
    try:
        deadline = time.monotonic() + 420
        location, repository = gql.location(deadline)

        # A launched run: November's statement, its asset and two checks in separate processes.
        run_id = gql.launch(location, repository, "statements_job", tags={"dagster/partition": "2026-11-01"})
        assert gql.finished(run_id, deadline)["status"] == "SUCCESS", log.read_text()[-4000:]

        # A scheduled tick: ingest_schedule every minute, on by default; its run succeeds.
        def ticked_run():
            state = gql.ticks(location, repository, "ingest_schedule")
            assert state["status"] == "RUNNING"
            done = [t for t in state["ticks"] if t["status"] == "SUCCESS" and t["runIds"]]
            return done[0]["runIds"][0] if done else None

        tick_run = until(deadline, "a successful ingest_schedule tick", ticked_run, interval=2.0)
        assert gql.finished(tick_run, deadline)["status"] == "SUCCESS", log.read_text()[-4000:]
    finally:
        rig.stop(proc)  # SIGINT to the group (Ctrl-C), then SIGKILL; asserts nothing of it survives
    with warehouse.open_reader(wh) as con:
        assert con.execute("SELECT count(*) FROM chargeback_statements WHERE period = '2026-11'").fetchone()[0] > 0
