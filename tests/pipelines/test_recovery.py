"""Crash recovery at daemon start (pipelines/recovery.py) on a real temporary Dagster instance:
a STARTED run whose worker is gone is failed and tagged for one retry; a run whose worker still
runs (a daemon killed alone leaves it) is left alone; a PID reused by a later process is no worker.
The whole daemon, killed and restarted on PostgreSQL: tests/deploy/test_daemon_recovery.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.events import EngineEventData
from dagster._core.test_utils import create_run_for_test
from gpuledger.pipelines import recovery

from tests.helpers.postgres_rig import PostgresRig, have_postgres

REPO = Path(__file__).resolve().parents[2]


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(timeout=60)
    return child.pid


def test_a_pid_is_the_runs_worker_only_while_that_process_lives():
    assert recovery.worker_alive(os.getpid(), time.time())  # this process began before "now"
    assert not recovery.worker_alive(_dead_pid(), time.time())
    later = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        # a process that began after the run started is not its worker, whatever its PID
        assert not recovery.worker_alive(later.pid, time.time() - 100)
        assert recovery.worker_alive(later.pid, time.time())
    finally:
        later.stdin.close()
        later.wait(timeout=60)


@pytest.mark.slow
def test_dead_workers_runs_are_failed_and_marked_for_one_retry_live_ones_kept():
    lines = []
    with dg.instance_for_test() as instance:
        dead = create_run_for_test(instance, job_name="ingest_job", status=dg.DagsterRunStatus.STARTED,
                                   tags={"gpuledger/warehouse": "write", "dagster/max_retries": "1"})
        instance.report_engine_event("Started process for run (pid: x).", dead,
                                     EngineEventData.in_process(_dead_pid()))
        retried_once = create_run_for_test(instance, job_name="analytics_job", status=dg.DagsterRunStatus.STARTED,
                                           tags={"dagster/retry_number": "1"})  # no worker event at all
        alive = create_run_for_test(instance, job_name="squatting_job", status=dg.DagsterRunStatus.STARTED)
        instance.report_engine_event("Started process for run (pid: x).", alive, EngineEventData.in_process(os.getpid()))
        done = create_run_for_test(instance, job_name="ingest_job", status=dg.DagsterRunStatus.SUCCESS)

        recovered = recovery.recover_dead_runs(instance, alive=lambda pid, started: pid == os.getpid(),
                                               log=lines.append)
        now = {name: instance.get_run_by_id(r.run_id) for name, r in
               (("dead", dead), ("retried_once", retried_once), ("alive", alive), ("done", done))}

    assert {r.run_id for r in recovered} == {dead.run_id, retried_once.run_id}
    assert now["dead"].status == dg.DagsterRunStatus.FAILURE
    assert now["dead"].tags["dagster/max_retries"] == "1"  # one retry: its retry number (0) + 1
    assert now["retried_once"].status == dg.DagsterRunStatus.FAILURE
    assert now["retried_once"].tags["dagster/max_retries"] == "2"  # already a retry: one more
    assert now["alive"].status == dg.DagsterRunStatus.STARTED
    assert now["done"].status == dg.DagsterRunStatus.SUCCESS
    assert len(lines) == 2 and all("failed and queued for one retry" in line for line in lines)
    assert any("its worker never started" in line for line in lines)


@pytest.mark.slow
def test_a_second_daemon_is_refused_while_one_holds_the_warehouse(tmp_path):
    """The lease: a second `gpuledger pipelines daemon` on the same warehouse exits 1 with one line
    naming the holder; the ordinal guard: replica 1 of the StatefulSet exits 1 before anything."""
    from gpuledger.warehouse import writer_guard

    wh = tmp_path / "gpuledger.duckdb"
    held = writer_guard.take_lease(wh, role="dagster-daemon")  # this process: the first writer
    try:
        env = {**os.environ, "DAGSTER_HOME": str(tmp_path), "GPULEDGER_WAREHOUSE": str(wh)}
        env.pop("GPULEDGER_STATEFULSET", None)
        second = subprocess.run([str(Path(sys.executable).parent / "gpuledger"), "pipelines", "daemon"], env=env, capture_output=True,
                                text=True, timeout=120)
        assert second.returncode == 1
        lines = (second.stdout + second.stderr).strip().splitlines()
        assert len(lines) == 1 and "another gpuledger writer holds" in lines[0] and f"PID {os.getpid()}" in lines[0], lines
    finally:
        os.close(held)
    replica = subprocess.run([str(Path(sys.executable).parent / "gpuledger"), "pipelines", "daemon"], capture_output=True, text=True,
                             timeout=120, env={**env, "GPULEDGER_STATEFULSET": "gpuledger", "HOSTNAME": "gpuledger-1"})
    assert replica.returncode == 1
    assert "ordinal 1 of the StatefulSet gpuledger" in replica.stdout + replica.stderr


@pytest.mark.skipif(not have_postgres(), reason="needs PostgreSQL (scripts/install-test-deps.sh)")
def test_a_daemon_whose_database_cannot_be_opened_says_what_to_do_in_one_line(tmp_path):
    """Dagster's schema half made by another process (as when a daemon and a webserver create it
    at once on an empty database: a row type `asset_keys` exists, its table not): exit 1, one line
    naming the error and the fix, not an internal error and not dagster-postgres's retry chatter.
    (A database nobody listens on gives the same line with "OperationalError: ... Connection
    refused", after dagster-postgres's 14 s of retries: not run here.)"""
    home = tmp_path / "dagster"
    home.mkdir()
    shutil.copy(REPO / "deploy/kubernetes/base/dagster.yaml", home / "dagster.yaml")
    with PostgresRig() as pg:
        pg.sql("create type asset_keys as (x integer)")  # what the other creator left
        env = {**os.environ, **pg.env, "DAGSTER_HOME": str(home), "GPULEDGER_WAREHOUSE": str(tmp_path / "w.duckdb")}
        env.pop("GPULEDGER_STATEFULSET", None)
        done = subprocess.run([str(Path(sys.executable).parent / "gpuledger"), "pipelines", "daemon"], env=env,
                              capture_output=True, text=True, timeout=120)
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert done.returncode == 1, lines
    assert len(lines) == 1 and lines[0].startswith("gpuledger pipelines daemon: the Dagster instance"), lines
    assert '"asset_keys" already exists' in lines[0] and "`dagster instance migrate`" in lines[0], lines
