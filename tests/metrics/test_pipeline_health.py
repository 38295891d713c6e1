"""Pipeline health from a real (temporary) Dagster instance: a job's newest success and failure
end times, the queue, the oldest running run; and the collector says so when the instance is
unreachable instead of failing the page."""

from __future__ import annotations

import dagster as dg
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from gpuledger.metrics.pipeline_health import PipelineHealthCollector, compute_health


@dg.op
def fine():
    return 1


@dg.op
def broken():
    raise RuntimeError("the backend refused")


@dg.job(name="ingest_job")
def ingest_job():
    fine()


@dg.job(name="enforcement_apply_job")
def enforcement_apply_job():
    broken()


def _by(figures):
    return {name: {tuple(sorted(labels.items())): value for labels, value in samples} for name, _, samples in figures}


@pytest.mark.slow
def test_last_success_and_failure_per_job_and_nothing_running():
    with dg.instance_for_test() as instance:
        first = ingest_job.execute_in_process(instance=instance)
        second = ingest_job.execute_in_process(instance=instance)
        failed = enforcement_apply_job.execute_in_process(instance=instance, raise_on_error=False)
        assert first.success and second.success and not failed.success
        ends = {r.dagster_run.run_id: r.end_time for r in instance.get_run_records()}
        now = max(ends.values()) + 10.0
        figures = _by(compute_health(instance, now, ["analytics_job", "enforcement_apply_job", "ingest_job"]))
    # the newest of ingest's two successes; the failure of the apply job; analytics never ran: absent
    assert figures["gpuledger_pipeline_last_success_timestamp_seconds"] == {(("job", "ingest_job"),): ends[second.run_id]}
    assert figures["gpuledger_pipeline_last_failure_timestamp_seconds"] == {
        (("job", "enforcement_apply_job"),): ends[failed.run_id]}
    assert figures["gpuledger_pipeline_queued_runs"] == {(): 0.0}
    assert figures["gpuledger_pipeline_running_runs"] == {(): 0.0}
    assert figures["gpuledger_pipeline_oldest_running_run_age_seconds"] == {(): 0.0}


def test_an_unreachable_instance_reads_as_health_down_not_as_an_error():
    def no_instance():
        raise ConnectionError("could not connect to server: Connection refused")

    registry = CollectorRegistry()
    registry.register(PipelineHealthCollector(no_instance, cache_s=0))
    page = generate_latest(registry).decode()
    assert "gpuledger_pipeline_health_up 0.0" in page
    assert "gpuledger_pipeline_running_runs" not in page  # unknown, not 0


@pytest.mark.parametrize("home", [None, "set"])
def test_registered_only_where_there_is_an_instance(monkeypatch, tmp_path, home):
    from gpuledger.metrics.pipeline_health import register_if_configured

    if home:
        monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    else:
        monkeypatch.delenv("DAGSTER_HOME", raising=False)
    assert register_if_configured(CollectorRegistry()) is bool(home)
