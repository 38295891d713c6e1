"""Ingest automation: the live sources every minute (``$GPULEDGER_INGEST_CRON``, a cron string,
default ``* * * * *``), and yesterday's Prometheus backfill partition at 00:30 UTC (off by default:
turn it on where a Prometheus holds what the live scrape may have missed).

Each ingest tick first makes the cluster partitions the config's clusters (``sync_clusters``), then
asks for one run over all of them (and the unpartitioned sources): Kubernetes and Slurm job records,
the TSDB's window aggregates and the holdings pass of every cluster. One run a minute, not one per
cluster: each run costs seconds of start-up on the one-writer run queue (BENCHMARKS.md "Cadence")."""

import os
from datetime import timedelta

import dagster as dg
from gpuledger.ingest.metrics.prometheus.aggregate import labelled_clusters
from gpuledger.pipelines.defs.ingest.assets import CLUSTER_ASSETS, INGEST_ASSETS, prometheus_samples
from gpuledger.pipelines.defs.partitions import cluster_partitions, cluster_range_tags, sync_clusters
from gpuledger.pipelines.defs.resources import GpuledgerConfig
from gpuledger.pipelines.defs.run_policy import job_tags
from gpuledger.pipelines.defs.squatting.assets import squatting_findings

INGEST_CRON_ENV = "GPULEDGER_INGEST_CRON"
INGEST_CRON = os.environ.get(INGEST_CRON_ENV, "* * * * *")
_IN_FLIGHT = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
              dg.DagsterRunStatus.STARTED]

# Its steps run in the run's process, as every job's (pipelines/definitions.py). The
# squatting evaluation closes each run, at the data the run (or the scrape service) just landed: the
# squatters report holds a sample a minute or two after its scrape, not after the next five-minute
# tick and the runs queued at it (BENCHMARKS.md "Freshness from scrape to every report").
ingest_job = dg.define_asset_job(
    "ingest_job", tags=job_tags("ingest_job"), selection=[*INGEST_ASSETS, squatting_findings],
    description="Reference tables, one DCGM scrape round; per cluster: Kubernetes, Slurm, the TSDB's window "
                "aggregates, the holdings pass; then the squatting evaluation.")
prometheus_backfill_job = dg.define_asset_job(
    "prometheus_backfill_job", tags=job_tags("prometheus_backfill_job"), selection=[prometheus_samples])


def in_flight(context, job_name: str) -> int:
    """Runs of ``job_name`` not finished yet (a slow round is not stacked on by the next tick)."""
    return len(context.instance.get_run_records(
        dg.RunsFilter(job_name=job_name, statuses=_IN_FLIGHT), limit=1))


def ingest_request(instance: dg.DagsterInstance, config: GpuledgerConfig, run_key: str | None,
                   log=None) -> dg.RunRequest:
    """One ingest run over every cluster the config in force names, and those a TSDB told apart by
    ``cluster_label`` alone holds (the cluster partitions made equal to them first); with none, the
    unpartitioned sources alone."""
    loaded = config.load()
    names = loaded.pipeline_clusters()
    source = loaded.sources.prometheus
    if source is not None and source.aggregate_s is not None:
        try:
            names += [n for n in labelled_clusters(source) if n not in names]
        except (OSError, ValueError, RuntimeError) as exc:  # the TSDB cannot say now: keep the partitions it gave
            names += [n for n in instance.get_dynamic_partitions(cluster_partitions.name) if n not in names]
            if log is not None:
                log.warning(f"sources.prometheus.cluster_label: the TSDB's clusters not read ({exc}); "
                            "the cluster partitions stay as they were")
    clusters = sync_clusters(instance, names)
    if not clusters:
        selection = [a.key for a in [*INGEST_ASSETS, squatting_findings] if a not in CLUSTER_ASSETS]
        return dg.RunRequest(run_key=run_key, asset_selection=selection)
    return dg.RunRequest(run_key=run_key, tags=cluster_range_tags(clusters))


@dg.schedule(name="ingest_schedule", job=ingest_job, cron_schedule=INGEST_CRON, execution_timezone="UTC",
             default_status=dg.DefaultScheduleStatus.RUNNING)
def ingest_schedule(context: dg.ScheduleEvaluationContext, gpuledger_config: GpuledgerConfig):
    if in_flight(context, ingest_job.name):
        return dg.SkipReason("the previous ingest run is still going")
    return ingest_request(context.instance, gpuledger_config, f"ingest@{context.scheduled_execution_time.isoformat()}",
                          log=context.log)


@dg.schedule(name="prometheus_backfill_schedule", job=prometheus_backfill_job, cron_schedule="30 0 * * *",
             execution_timezone="UTC", default_status=dg.DefaultScheduleStatus.STOPPED)
def prometheus_backfill_schedule(context: dg.ScheduleEvaluationContext):
    day = (context.scheduled_execution_time - timedelta(days=1)).strftime("%Y-%m-%d")
    return dg.RunRequest(run_key=f"prometheus@{day}", partition_key=day)
