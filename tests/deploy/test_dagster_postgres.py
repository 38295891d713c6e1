"""The production Dagster instance (deploy/kubernetes/base/dagster.yaml, as shipped) on a real
PostgreSQL: dagster-webserver and dagster-daemon as separate processes, a run launched through
GraphQL completes; then the daemon's whole process tree is SIGKILLed while an ingest run is in
progress (a crashed pod), the daemon is restarted, run monitoring fails the stuck run once its
max runtime has passed, and the next ingest_schedule tick runs and succeeds instead of skipping
("the previous ingest run is still going") for ever."""

from __future__ import annotations

import os
import shutil
import time
from datetime import datetime

import pytest

from gpuledger import warehouse
from gpuledger.config import read_config_file
from gpuledger.simulator import build_cluster
from gpuledger.simulator.to_warehouse import write_simulation
from tests.helpers import dagster_rig as rig
from tests.helpers.dagster_rig import REPO, GraphQL, until
from tests.helpers.postgres_rig import PostgresRig, have_postgres

pytestmark = [pytest.mark.slow, pytest.mark.postgres,
              pytest.mark.skipif(not have_postgres(), reason="needs Debian's postgresql (scripts/install-test-deps.sh)")]

STUCK_MAX_RUNTIME_S = 30  # ingest_job's dagster/max_runtime here ($GPULEDGER_INGEST_MAX_RUNTIME_S; 300 s by default)


def _warehouse(path):
    cfg, text, source = read_config_file(None)
    from gpuledger.ledger.config_versions import load_version

    sim = build_cluster(seed=3, gpus=8, start=datetime(2026, 11, 1), days=0.1, config=cfg)
    with warehouse.open_writer(path) as con:
        load_version(con, cfg, text=text, source=source)
        write_simulation(con, sim)


def test_production_instance_survives_a_daemon_crash(tmp_path):
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "deploy/kubernetes/base/dagster.yaml", home / "dagster.yaml")  # as shipped
    wh = tmp_path / "gpuledger.duckdb"
    _warehouse(wh)
    port = rig.free_port()
    with PostgresRig() as pg:
        env = {**os.environ, **pg.env, "DAGSTER_HOME": str(home), "GPULEDGER_WAREHOUSE": str(wh),
               "GPULEDGER_INGEST_CRON": "* * * * *", "DAGSTER_DISABLE_TELEMETRY": "1",
               # the 5-minute schedules (analytics, enforcement) never tick here: see below
               "GPULEDGER_ANALYTICS_CRON": "0 0 1 1 *",
               "GPULEDGER_INGEST_MAX_RUNTIME_S": str(STUCK_MAX_RUNTIME_S)}
        env.pop("GPULEDGER_CONFIG", None)
        log = tmp_path / "dagster.log"
        rig.migrate_instance(env, log)
        web = rig.webserver(env, port, log)
        daemon = rig.daemon(env, log)
        gql = GraphQL(port)
        try:
            deadline = time.monotonic() + 480
            location, repository = gql.location(deadline)
            # Only ingest_schedule ticks here: the 5-minute and daily schedules launch writing runs
            # too, and one of them could take the single writer slot while the test holds the lock
            # in step 2 (the ingest run then waits QUEUED, never STARTED: seen when step 2 fell on
            # a 5-minute tick). Stopped as the UI's toggle does; then none of their runs may be left.
            # A tick evaluated as the stop lands still launches (seen in a fresh clone: the
            # enforcement plan's run created just after the check below, then STARTED behind the
            # test's lock), so the 5-minute ones are moved off the test's time by their cron above.
            others = [s for s in gql.schedules(location, repository) if s != "ingest_schedule"]
            assert "enforcement_plan_schedule" in others and "ingest_schedule" not in others, others
            for schedule in others:
                gql.stop_schedule(location, repository, schedule, deadline)
            until(deadline, "runs of the other schedules to finish",
                  lambda: not [r for r in gql.unfinished_runs() if r[0] != "ingest_job"], 1.0)

            # 1. a run launched through GraphQL completes (of the cluster partition the schedule made)
            tags = rig.ingest_run_tags(gql, location, repository, deadline)
            ok = gql.launch(location, repository, "ingest_job", tags=tags)
            assert gql.finished(ok, deadline)["status"] == "SUCCESS", log.read_text()[-4000:]

            # 2. an ingest run in progress when the daemon dies: the test holds the warehouse's
            # writer lock and launches another ingest run, which waits on the lock in its first
            # step (a scheduled one may come first: every writing run queues behind the one that
            # started); once one is STARTED the daemon, its code server and the run worker are
            # SIGKILLed together.
            with warehouse.open_writer(wh):
                gql.launch(location, repository, "ingest_job", tags=tags)
                stuck = until(deadline, "a scheduled ingest run to start",
                              lambda: gql.runs("ingest_job", ["STARTED"]), 0.5)[0]
                rig.kill_tree(daemon)
            assert gql.run(stuck)["status"] == "STARTED"  # nobody is left to finish it
            killed_at = time.time()
            daemon = rig.daemon(env, log)

            # 3. run monitoring fails it once its max runtime has passed (poll every 15 s)
            failed = until(deadline, "the stuck run to be failed",
                           lambda: (r := gql.run(stuck))["status"] in rig.FINISHED and r, 2.0)
            assert failed["status"] == "FAILURE"
            assert failed["endTime"] - failed["startTime"] >= STUCK_MAX_RUNTIME_S
            assert any("maximum runtime of 30 seconds" in m for m in gql.messages(stuck)), gql.messages(stuck)
            # restart (code location load) + the 30 s limit + one 15 s poll, with room for a busy machine
            assert failed["endTime"] - killed_at < 150

            # 4. the schedule is not stuck: a tick after the failure starts a run that succeeds
            def tick_after_failure():
                state = gql.ticks(location, repository, "ingest_schedule")
                done = [t for t in state["ticks"] if t["status"] == "SUCCESS" and t["runIds"]
                        and t["timestamp"] > failed["endTime"]]
                return done[-1]["runIds"][0] if done else None

            tick_run = until(deadline, "an ingest_schedule tick after the failure", tick_after_failure, 2.0)
            assert gql.finished(tick_run, deadline)["status"] == "SUCCESS", log.read_text()[-4000:]
        finally:
            rig.stop(daemon)
            rig.stop(web)
