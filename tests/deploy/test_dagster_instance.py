"""The instance configs: the production one (PostgreSQL) and `make dev`'s (SQLite) load as Dagster
instances with run monitoring, run retries and a one-writer run queue, the same in both; every
job carries the run tags those settings act on."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import yaml
from gpuledger.pipelines.definitions import defs as build_defs
from gpuledger.pipelines.defs import run_policy

REPO = Path(__file__).resolve().parents[2]
PRODUCTION = REPO / "deploy/kubernetes/base/dagster.yaml"
DEV = REPO / "dagster.yaml"
SHARED = ("run_monitoring", "run_retries", "concurrency", "telemetry")


def test_production_and_dev_share_monitoring_retries_and_the_queue():
    production, dev = (yaml.safe_load(p.read_text()) for p in (PRODUCTION, DEV))
    assert {k: production[k] for k in SHARED} == {k: dev[k] for k in SHARED}
    assert "postgres" in production["storage"] and "sqlite" in dev["storage"]
    monitoring = production["run_monitoring"]
    assert monitoring["enabled"] and monitoring["start_timeout_seconds"] > 0 and monitoring["cancel_timeout_seconds"] > 0
    limits = production["concurrency"]["runs"]["tag_concurrency_limits"]
    assert {"key": run_policy.WAREHOUSE_TAG, "value": run_policy.WRITES, "limit": 1} in limits


def test_dev_instance_loads_with_those_settings(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text(DEV.read_text().replace(".dagster/", f"{tmp_path}/.dagster/"))
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    with dg.DagsterInstance.get() as instance:
        assert instance.run_monitoring_enabled and instance.run_retries_enabled
        assert instance.run_monitoring_start_timeout_seconds == 180
        queue = instance.get_concurrency_config().run_queue_config
        assert queue.tag_concurrency_limits == [{"key": "gpuledger/warehouse", "value": "write", "limit": 1}]


def test_every_job_has_a_max_runtime_and_writers_are_tagged():
    repo = build_defs().get_repository_def()
    jobs = {j.name: j for j in repo.get_all_jobs() if not j.name.startswith("__")}
    assert set(jobs) == set(run_policy.MAX_RUNTIME_S)
    for name, job in jobs.items():
        assert int(job.tags[run_policy.MAX_RUNTIME_TAG]) == run_policy.MAX_RUNTIME_S[name]
    assert jobs["ingest_job"].tags[run_policy.MAX_RETRIES_TAG] == "1"
    # the finance files read the warehouse only; every other job writes it and queues for the slot
    readers = {n for n, j in jobs.items() if run_policy.WAREHOUSE_TAG not in j.tags}
    assert readers == {"finance_statement_job", "weekly_summary_job"}
    # an ingest round (~10 s, up to ~31 s on the writer lock) fits well inside its limit, and a dead
    # one holds the next ticks up at most 5 minutes
    assert 60 <= run_policy.MAX_RUNTIME_S["ingest_job"] <= 300
