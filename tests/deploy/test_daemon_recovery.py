"""Crash recovery by itself (issue 35), on the production instance (deploy/kubernetes/base/
dagster.yaml as shipped) on a real PostgreSQL, with the daemon started as the manifests start it
(`gpuledger pipelines daemon`): an ingest run is in flight when the daemon's whole process tree
is SIGKILLed (a crashed pod); while it is down, `gpuledger metrics serve` shows the stall (a run
STARTED with no worker) and a real Prometheus scraping it fires the chart's
GpuledgerPipelineRunStuck expression on it; at restart the wrapper fails the dead run at once
(not at ingest's 5-minute max runtime) and the run-retry daemon relaunches it: the next writing
run starts within a minute of the restart."""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest

from gpuledger import warehouse
from tests.deploy.test_dagster_postgres import _warehouse
from tests.deploy.test_helm import render as helm_render
from tests.helpers import dagster_rig as rig
from tests.helpers.dagster_rig import BIN, REPO, GraphQL, until
from tests.helpers.postgres_rig import PostgresRig, have_postgres
from tests.helpers.prometheus_rig import PrometheusRig, have_prometheus

pytestmark = [pytest.mark.slow, pytest.mark.postgres,
              pytest.mark.skipif(not have_postgres() or not have_prometheus(),
                                 reason="needs Debian's postgresql and prometheus (scripts/install-test-deps.sh)")]


def rule_expr(alert: str, *sets: str) -> str:
    (rule,) = [o for o in helm_render("metrics.prometheusRule.enabled=true", *sets) if o["kind"] == "PrometheusRule"]
    return next(r["expr"] for g in rule["spec"]["groups"] for r in g["rules"] if r.get("alert") == alert)


def wrapper(env: dict, log) -> subprocess.Popen:
    return rig.start([str(BIN / "gpuledger"), "pipelines", "daemon"], env, log)


def test_a_killed_daemons_run_is_failed_and_retried_when_it_restarts(tmp_path):
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "deploy/kubernetes/base/dagster.yaml", home / "dagster.yaml")  # as shipped
    wh = tmp_path / "gpuledger.duckdb"
    _warehouse(wh)
    port, metrics_port = rig.free_port(), rig.free_port()
    with PostgresRig() as pg:
        # ingest's max runtime stays the shipped 300 s: run monitoring cannot be what frees the slot
        env = {**os.environ, **pg.env, "DAGSTER_HOME": str(home), "GPULEDGER_WAREHOUSE": str(wh),
               "GPULEDGER_INGEST_CRON": "* * * * *", "DAGSTER_DISABLE_TELEMETRY": "1",
               # the 5-minute schedules never tick here (a tick racing the stop below could take the
               # writer slot behind the test's lock: test_dagster_postgres)
               "GPULEDGER_ANALYTICS_CRON": "0 0 1 1 *"}
        for name in ("GPULEDGER_CONFIG", "GPULEDGER_INGEST_MAX_RUNTIME_S", "GPULEDGER_STATEFULSET"):
            env.pop(name, None)
        log = tmp_path / "dagster.log"
        rig.migrate_instance(env, log)
        web = rig.webserver(env, port, log)
        daemon = wrapper(env, log)
        gql = GraphQL(port)
        metrics = None
        try:
            deadline = time.monotonic() + 480
            location, repository = gql.location(deadline)
            for schedule in [s for s in gql.schedules(location, repository) if s != "ingest_schedule"]:
                gql.stop_schedule(location, repository, schedule, deadline)  # only ingest ticks (as test_dagster_postgres)
            until(deadline, "runs of the other schedules to finish",
                  lambda: not [r for r in gql.unfinished_runs() if r[0] != "ingest_job"], 1.0)

            # 1. an ingest run in flight (waiting on the writer lock the test holds) when the
            # daemon, its code server and the run worker are SIGKILLed together
            tags = rig.ingest_run_tags(gql, location, repository, deadline)
            with warehouse.open_writer(wh):
                gql.launch(location, repository, "ingest_job", tags=tags)
                stuck = until(deadline, "an ingest run to start", lambda: gql.runs("ingest_job", ["STARTED"]), 0.5)[0]
                rig.kill_tree(daemon)
            assert gql.run(stuck)["status"] == "STARTED"  # nobody is left to finish it

            # 2. the stall shows: the health metrics, scraped by a real Prometheus, and the
            # chart's rule expression (its threshold lowered to 1 s) fires on them; at the
            # shipped threshold (45 min) it does not yet
            metrics = rig.start([str(BIN / "gpuledger"), "metrics", "serve", "--address", "127.0.0.1",
                                 "--port", str(metrics_port)], env, tmp_path / "metrics.log")
            with PrometheusRig(tmp_path / "prometheus", [f"http://127.0.0.1:{metrics_port}/metrics"]) as prom:
                until(deadline, "Prometheus to scrape one running run",
                      lambda: prom.scalar("gpuledger_pipeline_running_runs") == 1.0, 1.0)
                assert prom.scalar("gpuledger_pipeline_health_up") == 1.0
                assert prom.scalar("gpuledger_pipeline_oldest_running_run_age_seconds") > 0
                fired = until(deadline, "GpuledgerPipelineRunStuck to fire",
                              lambda: prom.query(rule_expr("GpuledgerPipelineRunStuck",
                                                           "metrics.prometheusRule.runStuckSeconds=1")), 1.0)
                assert float(fired[0]["value"][1]) > 1
                assert prom.query(rule_expr("GpuledgerPipelineRunStuck")) == []

            # 3. restart: the wrapper fails the dead run before the daemon starts, the retry
            # daemon relaunches it; the next writing run starts within a minute
            restarted = time.time()
            daemon = wrapper(env, log)
            failed = until(deadline, "the dead run to be failed",
                           lambda: (r := gql.run(stuck))["status"] in rig.FINISHED and r, 0.5)
            assert failed["status"] == "FAILURE"
            assert any("gpuledger: failed at daemon start" in m for m in gql.messages(stuck)), gql.messages(stuck)

            def next_writing_run():
                started = [gql.run(r) for r in gql.runs("ingest_job", ["STARTED", "SUCCESS", "FAILURE"]) if r != stuck]
                started = [r for r in started if r["startTime"] and r["startTime"] > restarted - 1]
                return min(started, key=lambda r: r["startTime"]) if started else None

            first = until(deadline, "the next ingest run to start", next_writing_run, 0.5)
            print(f"the next writing run started {first['startTime'] - restarted:.1f} s after the restart")
            assert first["startTime"] - restarted < 60, (first["startTime"] - restarted, log.read_text()[-3000:])
            assert "recovered run " + stuck in log.read_text()
            # and the dead run itself was retried (a re-execution of it, not only the next tick)
            retries = until(deadline, "the retry of the dead run", lambda: gql(
                rig.RUNS, filter={"tags": [{"key": "dagster/parent_run_id", "value": stuck}]})["runsOrError"]["results"],
                1.0)
            assert len(retries) == 1, retries
        finally:
            if metrics is not None:
                rig.stop(metrics)
            rig.stop(daemon)
            rig.stop(web)

