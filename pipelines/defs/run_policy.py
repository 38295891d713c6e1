"""How long each job may run, whether it is retried, and whether it writes the warehouse: the run
tags every job and sensor request carries, read by the instance's run monitoring, run retries and
run queue (dagster.yaml, deploy/kubernetes/base/dagster.yaml).

* ``dagster/max_runtime`` (seconds): run monitoring fails a run still going after this long. A run
  whose worker died with its pod or its ``dagster dev`` (the default run launcher cannot ask a dead
  worker how it is) is caught by this limit, so each limit is the longest real run with room to
  spare, not a guess of hours: a stuck ingest run holds up every later ingest tick only this long.
* ``dagster/max_retries``: the run-retry daemon relaunches a failed run this many times (ingest:
  a source that was down for a minute; the analytics and statements are rerun by their schedules
  and re-runs are idempotent anyway).
* ``gpuledger/warehouse: write``: the instance's run queue starts one such run at a time (DuckDB
  takes one writing process; the writer lock would serialize them anyway, but a queued run costs
  nothing while one waiting on the lock holds a process and times out after ~31 s).
"""

import os

MAX_RUNTIME_TAG = "dagster/max_runtime"
MAX_RETRIES_TAG = "dagster/max_retries"
WAREHOUSE_TAG = "gpuledger/warehouse"
WRITES = "write"

# Seconds. Longest runs seen (BENCHMARKS.md, 1,024 GPUs on 2 cores): an ingest round ~10 s plus
# up to ~31 s queued on the writer lock; a day of analytics ~2 min; a month's statement and its
# files a few minutes; a day of Prometheus backfill ~20 min.
# The ingest limit bounds how long a dead ingest run holds up the next ticks; a site whose rounds
# run longer (or a test that waits for one to be failed) sets $GPULEDGER_INGEST_MAX_RUNTIME_S.
INGEST_MAX_RUNTIME_ENV = "GPULEDGER_INGEST_MAX_RUNTIME_S"
MAX_RUNTIME_S = {
    "ingest_job": int(os.environ.get(INGEST_MAX_RUNTIME_ENV) or 5 * 60),
    "csv_jobs_job": 15 * 60,
    "squatting_job": 10 * 60,
    "alerts_job": 5 * 60,
    "analytics_job": 30 * 60,
    "enforcement_plan_job": 10 * 60,
    "enforcement_apply_job": 10 * 60,
    "statements_job": 60 * 60,
    "finance_statement_job": 60 * 60,
    "weekly_summary_job": 60 * 60,
    "retention_job": 60 * 60,
    "prometheus_backfill_job": 6 * 60 * 60,
}
RETRIES = {"ingest_job": 1, "csv_jobs_job": 2, "prometheus_backfill_job": 2}


def job_tags(job_name: str, *, writes_warehouse: bool = True) -> dict[str, str]:
    """The run tags of ``job_name`` (a key of ``MAX_RUNTIME_S``)."""
    tags = {MAX_RUNTIME_TAG: str(MAX_RUNTIME_S[job_name])}
    if job_name in RETRIES:
        tags[MAX_RETRIES_TAG] = str(RETRIES[job_name])
    if writes_warehouse:
        tags[WAREHOUSE_TAG] = WRITES
    return tags
