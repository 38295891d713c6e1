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
* ``dagster/priority``: the run queue starts a queued run of higher priority first. The ingest run
  (new data, the holdings pass and the squatting evaluation of every minute) goes before the
  five-minute batch's analytics, enforcement and alerts runs, which would otherwise hold it up to
  two minutes behind them (BENCHMARKS.md "Freshness from scrape to every report").
"""

# each job's dagster/max_runtime (s): one list with the exporter's pipeline-health figures
from gpuledger.pipeline_jobs import MAX_RUNTIME_S

MAX_RUNTIME_TAG = "dagster/max_runtime"
MAX_RETRIES_TAG = "dagster/max_retries"
WAREHOUSE_TAG = "gpuledger/warehouse"
WRITES = "write"

PRIORITY_TAG = "dagster/priority"

RETRIES = {"ingest_job": 1, "csv_jobs_job": 2, "prometheus_backfill_job": 2}
PRIORITY = {"ingest_job": 10}  # the others: 0


def job_tags(job_name: str, *, writes_warehouse: bool = True) -> dict[str, str]:
    """The run tags of ``job_name`` (a key of ``MAX_RUNTIME_S``)."""
    tags = {MAX_RUNTIME_TAG: str(MAX_RUNTIME_S[job_name])}
    if job_name in RETRIES:
        tags[MAX_RETRIES_TAG] = str(RETRIES[job_name])
    if job_name in PRIORITY:
        tags[PRIORITY_TAG] = str(PRIORITY[job_name])
    if writes_warehouse:
        tags[WAREHOUSE_TAG] = WRITES
    return tags
