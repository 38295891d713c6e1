"""The Dagster jobs gpuledger's code location defines, by name, and how long a run of each may
take (``dagster/max_runtime``, seconds). One list for the pipelines (pipelines/defs/run_policy.py
tags every run with it) and the exporter's pipeline-health figures (metrics/pipeline_health.py,
which names every job even before its first run). No Dagster import: the exporter's layer sits
below the pipelines'."""

import os

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
