"""Pipeline health from the Dagster instance, for `gpuledger metrics serve` (issue 35).

The warehouse's own figures (exporter.py) keep moving while Dagster is stuck, because the scrape
service runs outside Dagster; these come from the instance's run storage ($DAGSTER_HOME: the
PostgreSQL the daemon uses), so a dead daemon or a run holding the writer slot shows:

  gpuledger_pipeline_last_success_timestamp_seconds{job}  end of the job's newest successful run
                                             (Unix s; absent for a job that never succeeded)
  gpuledger_pipeline_last_failure_timestamp_seconds{job}  end of its newest failed run
  gpuledger_pipeline_queued_runs             runs waiting in the run queue
  gpuledger_pipeline_running_runs            runs STARTED now
  gpuledger_pipeline_oldest_running_run_age_seconds  how long the oldest STARTED run has run (0: none)
  gpuledger_pipeline_health_up               1 when the instance answered, 0 when not (the
                                             other series are then left out)

Jobs are the code location's (gpuledger/pipeline_jobs.py), so a job is reported even before
its first run. Read at most once per ``cache_s`` (a dozen small queries).
"""

from __future__ import annotations

import importlib.util
import math
import os
import threading
import time
from collections.abc import Callable

from gpuledger.pipeline_jobs import MAX_RUNTIME_S


def job_names() -> list[str]:
    return sorted(MAX_RUNTIME_S)


def compute_health(instance, now: float, jobs: list[str]) -> list[tuple[str, str, list[tuple[dict, float]]]]:
    """(name, help, [(labels, value)]) for each pipeline-health metric, from ``instance`` at ``now`` (Unix s)."""
    import dagster as dg  # lazy: optional extra gpuledger[pipelines]

    def newest_end(job: str, status) -> float | None:
        records = instance.get_run_records(filters=dg.RunsFilter(job_name=job, statuses=[status]), limit=1)
        return records[0].end_time if records and records[0].end_time else None

    success, failure = [], []
    for job in jobs:
        if (end := newest_end(job, dg.DagsterRunStatus.SUCCESS)) is not None:
            success.append(({"job": job}, float(end)))
        if (end := newest_end(job, dg.DagsterRunStatus.FAILURE)) is not None:
            failure.append(({"job": job}, float(end)))
    queued = instance.get_runs_count(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.QUEUED]))
    running = instance.get_run_records(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED]))
    starts = [r.start_time or r.create_timestamp.timestamp() for r in running]
    oldest_age = max(0.0, now - min(starts)) if starts else 0.0
    return [
        ("gpuledger_pipeline_last_success_timestamp_seconds",
         "When the job's newest successful run ended (Unix seconds)", success),
        ("gpuledger_pipeline_last_failure_timestamp_seconds",
         "When the job's newest failed run ended (Unix seconds)", failure),
        ("gpuledger_pipeline_queued_runs", "Runs waiting in the Dagster run queue", [({}, float(queued))]),
        ("gpuledger_pipeline_running_runs", "Dagster runs started and not finished", [({}, float(len(running)))]),
        ("gpuledger_pipeline_oldest_running_run_age_seconds",
         "Seconds the oldest started run has been running (0 when none runs)", [({}, oldest_age)]),
    ]


class PipelineHealthCollector:
    """prometheus_client custom collector over the Dagster instance; figures cached ``cache_s`` s."""

    def __init__(self, instance_factory: Callable[[], object] | None = None, *, cache_s: float = 15.0,
                 clock: Callable[[], float] = time.time):
        self._factory = instance_factory or _instance_from_env
        self.cache_s, self._clock = cache_s, clock
        self._lock = threading.Lock()
        self._at, self._figures, self._instance = -math.inf, [], None

    def figures(self):
        with self._lock:
            if time.monotonic() - self._at > self.cache_s:
                try:
                    if self._instance is None:
                        self._instance = self._factory()
                    figures = compute_health(self._instance, self._clock(), job_names())
                    up = 1.0
                except Exception:  # noqa: BLE001 - the instance's database down: say so, keep serving
                    self._instance, figures, up = None, [], 0.0
                self._figures = [*figures, ("gpuledger_pipeline_health_up",
                                            "1 when the Dagster instance answered the health queries", [({}, up)])]
                self._at = time.monotonic()
            return self._figures

    def collect(self):
        from prometheus_client.core import GaugeMetricFamily  # lazy: optional extra gpuledger[alerts]

        for name, doc, samples in self.figures():
            labels = sorted({k for lab, _ in samples for k in lab})
            family = GaugeMetricFamily(name, doc, labels=labels)
            for lab, value in samples:
                family.add_metric([lab[k] for k in labels], value)
            yield family


def _instance_from_env():
    import dagster as dg  # lazy: optional extra gpuledger[pipelines]

    # libpq's connect timeout: an unreachable PostgreSQL reads as health_up 0 within seconds, instead
    # of holding the whole /metrics page until the kernel gives up on the connection
    os.environ.setdefault("PGCONNECT_TIMEOUT", "5")
    return dg.DagsterInstance.get()


def register_if_configured(registry) -> bool:
    """Add the collector when this process can see a Dagster instance ($DAGSTER_HOME and the
    pipelines extra); returns whether it did."""
    if not os.environ.get("DAGSTER_HOME") or importlib.util.find_spec("dagster") is None:
        return False
    registry.register(PipelineHealthCollector())
    return True
