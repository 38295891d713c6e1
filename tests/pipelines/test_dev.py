"""A real `dagster dev` (webserver + daemon) on a free port with a temporary DAGSTER_HOME: a run
launched through its GraphQL API and a scheduled tick both end in success; every process the test
started is stopped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest
import requests

from gpuledger import warehouse
from gpuledger.config import read_config_file
from gpuledger.simulator import build_cluster
from gpuledger.simulator.to_warehouse import write_simulation
from tests.helpers.dagster_rig import FINISHED, free_port, until

LOCATION_MODULE = "gpuledger.pipelines.definitions"
REPO = Path(__file__).resolve().parents[2]

LAUNCH = """
mutation Launch($params: ExecutionParams!) {
  launchRun(executionParams: $params) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on PythonError { message }
    ... on InvalidSubsetError { message }
    ... on RunConfigValidationInvalid { errors { message } }
  }
}"""
RUN = """query Run($id: ID!) { runOrError(runId: $id) { __typename ... on Run { status } } }"""
LOCATIONS = """{ repositoriesOrError { __typename ... on RepositoryConnection { nodes { name location { name } } } } }"""
TICKS = """
query Ticks($selector: ScheduleSelector!) {
  scheduleOrError(scheduleSelector: $selector) {
    __typename
    ... on Schedule { scheduleState { status ticks(limit: 10) { status runIds timestamp } } }
  }
}"""


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

    port = free_port()
    env = {**os.environ, "DAGSTER_HOME": str(home), "GPULEDGER_WAREHOUSE": str(wh),
           "GPULEDGER_INGEST_CRON": "* * * * *", "DAGSTER_DISABLE_TELEMETRY": "1"}
    env.pop("GPULEDGER_CONFIG", None)
    log = open(tmp_path / "dagster-dev.log", "w")  # noqa: SIM115 - open for the server's whole life
    dagster = Path(sys.executable).with_name("dagster")
    proc = subprocess.Popen([str(dagster), "dev", "-m", LOCATION_MODULE, "--host", "127.0.0.1", "--port", str(port)],
                            cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}/graphql"

    def gql(query: str, **variables):
        response = requests.post(url, json={"query": query, "variables": variables}, timeout=30)
        response.raise_for_status()
        body = response.json()
        assert "errors" not in body, body
        return body["data"]

    try:
        deadline = time.monotonic() + 420
        nodes = until(deadline, "the code location to load", lambda: gql(LOCATIONS)["repositoriesOrError"].get("nodes"))
        location = nodes[0]["location"]["name"]
        repository = nodes[0]["name"]

        # A launched run: November's statement, its asset and two checks in separate processes.
        launched = gql(LAUNCH, params={
            "selector": {"repositoryLocationName": location, "repositoryName": repository, "jobName": "statements_job"},
            "executionMetadata": {"tags": [{"key": "dagster/partition", "value": "2026-11-01"}]},
        })["launchRun"]
        assert launched["__typename"] == "LaunchRunSuccess", launched
        run_id = launched["run"]["runId"]
        status = until(deadline, f"run {run_id} to finish",
                       lambda: (s := gql(RUN, id=run_id)["runOrError"]["status"]) in FINISHED and s)
        assert status == "SUCCESS", (tmp_path / "dagster-dev.log").read_text()[-4000:]

        # A scheduled tick: ingest_schedule every minute, on by default; its run succeeds.
        selector = {"repositoryLocationName": location, "repositoryName": repository, "scheduleName": "ingest_schedule"}

        def ticked_run():
            state = gql(TICKS, selector=selector)["scheduleOrError"]["scheduleState"]
            assert state["status"] == "RUNNING"
            done = [t for t in state["ticks"] if t["status"] == "SUCCESS" and t["runIds"]]
            return done[0]["runIds"][0] if done else None

        tick_run = until(deadline, "a successful ingest_schedule tick", ticked_run, interval=2.0)
        status = until(deadline, f"tick run {tick_run} to finish",
                       lambda: (s := gql(RUN, id=tick_run)["runOrError"]["status"]) in FINISHED and s)
        assert status == "SUCCESS", (tmp_path / "dagster-dev.log").read_text()[-4000:]
    finally:
        stop_group(proc)
        log.close()
    with warehouse.open_reader(wh) as con:
        assert con.execute("SELECT count(*) FROM chargeback_statements WHERE period = '2026-11'").fetchone()[0] > 0


def stop_group(proc: subprocess.Popen) -> None:
    """SIGINT the whole process group (what Ctrl-C does), then SIGKILL what is left; assert that
    nothing of it survives."""
    pgid = os.getpgid(proc.pid)
    os.killpg(pgid, signal.SIGINT)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        pass
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.5)
    os.killpg(pgid, signal.SIGKILL)
    proc.wait(timeout=10)
    time.sleep(1)
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)
