"""The code location loads and validates; sensors keep cursors; schedules ask for the right runs."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime

import dagster as dg
import pytest
from gpuledger.pipelines.definitions import defs as build_defs
from gpuledger.pipelines.defs.automation import analytics_schedule, squatting_schedule
from gpuledger.pipelines.defs.chargeback.schedules import statements_schedule
from gpuledger.pipelines.defs.ingest.schedules import ingest_schedule
from gpuledger.pipelines.defs.ingest.sensors import job_csv_sensor
from gpuledger.pipelines.defs.resources import GpuledgerConfig

from gpuledger.config import example_config_text

ASSETS = {"reference_tables", "dcgm_samples", "prometheus_samples", "kubernetes_jobs", "slurm_jobs", "csv_jobs",
          "prometheus_aggregates", "holdings_links",
          "job_usage_hourly", "project_usage_hourly", "utilization_hourly", "fairshare_snapshots",
          "budget_snapshots", "squatting_findings", "chargeback_statements",
          "enforcement_plan", "enforcement_actions", "finance_statement_files", "weekly_summary_files",
          "raw_sample_retention", "alert_deliveries"}


def test_definitions_load_and_validate():
    defs = build_defs()
    dg.Definitions.validate_loadable(defs)
    assert {spec.key.to_user_string() for spec in defs.resolve_all_asset_specs()} == ASSETS
    checks = {key.name for key in defs.resolve_asset_graph().asset_check_keys}
    assert {"dcgm_samples_fresh", "dcgm_samples_unique", "chargeback_reconciles", "budgets_consistent_down_tree",
            "usage_hourly_jobs_no_negative_idle", "kubernetes_jobs_fresh", "slurm_jobs_fresh",
            "prometheus_aggregates_fresh"} <= checks
    repo = defs.get_repository_def()
    assert {s.name for s in repo.schedule_defs} == {"ingest_schedule", "analytics_schedule", "squatting_schedule",
                                                     "statements_schedule", "prometheus_backfill_schedule",
                                                     "enforcement_plan_schedule", "enforcement_apply_schedule",
                                                     "finance_statement_schedule", "weekly_summary_schedule",
                                                     "retention_schedule"}
    assert {s.name for s in repo.sensor_defs} >= {"job_csv_sensor", "alerts_after_analytics_sensor"}
    for name in ("ingest_schedule", "analytics_schedule", "statements_schedule"):
        assert repo.get_schedule_def(name).default_status == dg.DefaultScheduleStatus.RUNNING
    # squatting is evaluated at the end of every ingest run, which the run queue starts first
    assert repo.get_schedule_def("squatting_schedule").default_status == dg.DefaultScheduleStatus.STOPPED
    ingest = defs.resolve_job_def("ingest_job")
    assert "squatting_findings" in {k.to_user_string() for k in ingest.asset_layer.selected_asset_keys}
    assert ingest.tags["dagster/priority"] == "10" and "dagster/priority" not in defs.resolve_job_def(
        "analytics_job").tags
    assert set(defs.resources) >= {"warehouse", "gpuledger_config"}
    # every job runs its steps in the run's process (pipelines/definitions.py): none sets its own executor
    executors = {job.name: job.executor_def.name for job in defs.resolve_all_job_defs()}
    assert set(executors.values()) == {"in_process"}, executors


def test_job_csv_sensor_cursor(tmp_path):
    folder = tmp_path / "incoming"
    folder.mkdir()
    config_file = tmp_path / "gpuledger.yaml"
    config_file.write_text(example_config_text() + f"\nsources:\n  jobs_csv: {{folder: '{folder}'}}\n")
    resources = {"gpuledger_config": GpuledgerConfig(path=str(config_file))}
    instance = dg.DagsterInstance.ephemeral()

    def tick(cursor):
        context = dg.build_sensor_context(cursor=cursor, instance=instance, resources=resources)
        result = job_csv_sensor(context)
        return result, context

    first, _ = tick(None)
    assert not first.run_requests  # an empty folder
    (folder / "a.csv").write_text("job_id\n")
    (folder / "b.csv").write_text("job_id\n")
    (folder / "notes.txt").write_text("not a csv")
    second, _ = tick(first.cursor)
    assert sorted(r.partition_key for r in second.run_requests) == ["a.csv", "b.csv"]
    assert second.dynamic_partitions_requests[0].partition_keys == ["a.csv", "b.csv"]
    third, _ = tick(second.cursor)
    assert third.run_requests == [] and third.cursor == second.cursor  # nothing new: nothing requested
    stat = (folder / "a.csv").stat()
    (folder / "a.csv").write_text("job_id,cluster\n")  # changed size
    os.utime(folder / "a.csv", ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    fourth, _ = tick(third.cursor)
    assert [r.partition_key for r in fourth.run_requests] == ["a.csv"]
    assert fourth.run_requests[0].run_key != second.run_requests[0].run_key


def test_job_csv_sensor_skips_without_a_folder():
    context = dg.build_sensor_context(resources={"gpuledger_config": GpuledgerConfig(path=None)})
    result = job_csv_sensor(context)
    assert isinstance(result, dg.SkipReason) and "sources.jobs_csv" in result.skip_message


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def test_schedules_request_the_right_partitions():
    with dg.instance_for_test() as instance:
        _schedules(instance)


def _schedules(instance):

    def run(schedule, at, **resources):
        # in `with`: the context's own instance (from the ref) is closed after, as the daemon does
        with dg.build_schedule_context(instance=instance, scheduled_execution_time=_at(at),
                                       resources=resources or None) as context:
            return schedule(context)

    # the packaged example names one cluster (clusters: sim): one run over its partition
    ingest = run(ingest_schedule, "2026-12-01T10:07:00", gpuledger_config=GpuledgerConfig(path=None))
    assert ingest.run_key == "ingest@2026-12-01T10:07:00+00:00"
    assert instance.get_dynamic_partitions("clusters") == ["sim"]
    assert ingest.tags == {"dagster/asset_partition_range_start": "sim", "dagster/asset_partition_range_end": "sim"}
    assert [r.partition_key for r in run(analytics_schedule, "2026-12-01T10:05:00")] == ["2026-12-01"]
    # just after midnight the day that ended is refreshed once more, then today
    assert [r.partition_key for r in run(analytics_schedule, "2026-12-02T00:05:00")] == ["2026-12-01", "2026-12-02"]
    assert run(squatting_schedule, "2026-12-01T10:05:00").run_key.startswith("squatting@")
    assert statements_schedule.cron_schedule == "0 1 1 * *"
    statement = run(statements_schedule, "2026-12-01T01:00:00")
    assert statement.partition_key == "2026-11-01"  # the month before


@pytest.mark.parametrize("cron", ["*/2 * * * *"])
def test_ingest_cadence_is_configurable(cron, tmp_path):
    import subprocess
    import sys

    started = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-c", ("from gpuledger.pipelines.defs.ingest.schedules import ingest_schedule as s; "
                                "print(s.cron_schedule)")], env={**os.environ, "GPULEDGER_INGEST_CRON": cron},
        capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == cron and time.monotonic() - started < 120


def test_the_repositorys_dagster_yaml_is_a_valid_instance(tmp_path, monkeypatch):
    """`make dev` runs with DAGSTER_HOME = the repository: its dagster.yaml must build an instance
    whose storage, artifact and compute-log settings all load."""
    import shutil
    from pathlib import Path

    shutil.copy(Path(__file__).resolve().parents[2] / "dagster.yaml", tmp_path / "dagster.yaml")
    monkeypatch.chdir(tmp_path)  # its storage paths are relative to the folder Dagster runs in
    instance = dg.DagsterInstance.from_config(str(tmp_path))
    try:
        assert type(instance.compute_log_manager).__name__ == "LocalComputeLogManager"
        assert instance.get_runs() == []
    finally:
        instance.dispose()


def test_the_ingest_tick_keeps_the_cluster_partitions_equal_to_the_config(tmp_path):
    from gpuledger.pipelines.defs.ingest.assets import CLUSTER_ASSETS, INGEST_ASSETS

    config = tmp_path / "gpuledger.yaml"
    base = example_config_text().split("\nclusters:")[0]  # the example names cluster sim: not here

    def tick(sources: str):
        config.write_text(base + "\nsources:\n" + sources)
        with_config = {"gpuledger_config": GpuledgerConfig(path=str(config))}
        with dg.build_schedule_context(instance=instance, resources=with_config,
                                       scheduled_execution_time=_at("2026-12-01T10:07:00")) as context:
            return ingest_schedule(context)

    with dg.instance_for_test() as instance:
        two = tick("  kubernetes:\n    - {cluster: east}\n    - {cluster: west}\n  slurm: {cluster: hpc}\n")
        assert instance.get_dynamic_partitions("clusters") == ["east", "west", "hpc"]
        assert (two.tags["dagster/asset_partition_range_start"], two.tags["dagster/asset_partition_range_end"]) == (
            "east", "hpc")
        one = tick("  kubernetes: {cluster: west}\n")  # east and hpc are gone from the config
        assert instance.get_dynamic_partitions("clusters") == ["west"]
        assert one.tags["dagster/asset_partition_range_end"] == "west"
        none = tick("  jobs_csv: {folder: incoming}\n")  # no cluster named: the unpartitioned sources only
        assert instance.get_dynamic_partitions("clusters") == []
        assert set(none.asset_selection) == {*(a.key for a in INGEST_ASSETS if a not in CLUSTER_ASSETS),
                                             dg.AssetKey("squatting_findings")}
