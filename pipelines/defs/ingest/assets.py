"""Ingest assets: the raw warehouse tables, fed from the sources named in the config's ``sources``.

Each asset calls the ingest package (the same code the ``gpuledger ingest`` / ``import`` commands
run), is idempotent (raw tables keep their natural keys, so the same input twice changes nothing)
and reports rows written and quarantined as metadata. A source the config leaves out is skipped:
the materialization succeeds and says so (``skipped`` in the metadata and the log).

The per-cluster sources (Kubernetes and Slurm job records, the TSDB's window aggregates, the
holdings pass) are partitioned by cluster (``cluster_partitions``); a run may hold every cluster
(the ingest schedule's), each done on its own: its figures under ``by_cluster``, a cluster whose
source failed named in the run's failure after the others were written.
"""

import dataclasses
import os
import time
from contextlib import nullcontext
from pathlib import Path

import dagster as dg
from gpuledger.pipelines.defs.partitions import cluster_partitions, daily_partitions, single_run, window
from gpuledger.pipelines.defs.resources import GpuledgerConfig, Warehouse

from gpuledger import warehouse as wh
from gpuledger.ingest import SCRAPE_SERVICE_ENV
from gpuledger.ingest.device_links import link_devices_for_jobs
from gpuledger.ingest.holdings.store import LinkResult, holdings_pass
from gpuledger.ingest.jobs.jobs_csv import CsvHeaderError, read_jobs_csv
from gpuledger.ingest.jobs.k8s_mapping import MappingOptions
from gpuledger.ingest.jobs.sacct_import import import_batches, open_export
from gpuledger.ingest.jobs.slurm import LIVE_ORIGIN, parse_sacct, run_sacct, with_controller_reasons
from gpuledger.ingest.metrics.prometheus.aggregate import aggregate_recent
from gpuledger.ingest.metrics.prometheus.auth import auth_headers
from gpuledger.ingest.metrics.prometheus.backfill import backfill
from gpuledger.ingest.metrics.scrape import scrape

GROUP = "ingest"

# Dynamic partitions of csv_jobs: one per file of the watched folder (its path relative to the
# folder), added by job_csv_sensor.
job_csv_partitions = dg.DynamicPartitionsDefinition(name="job_csv_files")


def skipped(context: dg.AssetExecutionContext, config: GpuledgerConfig, key: str) -> dg.MaterializeResult:
    message = (f"skipped: the config {config.describe()} has no `sources.{key}` "
               f"(README \"Pipelines\" shows how to add one)")
    context.log.info(message)
    return dg.MaterializeResult(metadata={"skipped": message, "rows_written": 0, "rows_quarantined": 0})


@dg.asset(group_name=GROUP, kinds={"duckdb"})
def reference_tables(context: dg.AssetExecutionContext, warehouse: Warehouse,
                     gpuledger_config: GpuledgerConfig) -> dg.MaterializeResult:
    """The org tree, budgets and rate card in force (org_nodes, budgets, rate_card): the config
    file, when one is given and its content changed, becomes a new config version through the
    ledger (gpuledger.ledger.config_versions.config_in_force: the path `config load` takes; audited,
    by "dagster"), and the metadata says so; with no file the stored version stays in force (the
    packaged example only starts an empty warehouse). Closed periods keep their issued statements."""
    with warehouse.writer() as con:
        chosen = gpuledger_config.in_force(con, load=True)
    cfg, loaded = chosen.config, chosen.loaded
    for change in loaded.changes if loaded else []:
        context.log.info(f"config change: {change}")
    file = gpuledger_config.config_file()
    if loaded is not None:
        said = f"{chosen.source} loaded as config version {chosen.version}"
    elif file is None:
        said = f"no config file given: the warehouse's stored config version {chosen.version} stays in force"
    else:
        said = f"{file} unchanged: config version {chosen.version} in force"
    return dg.MaterializeResult(metadata={
        "config": str(chosen.source), "config_version": chosen.version, "config_in_force": said,
        "new_version": loaded is not None and loaded.added, "org_nodes": len(cfg.node_names()),
        "budgets": len(cfg.budgets), "rates": len(cfg.rate_card), "rows_quarantined": 0,
    })


@dg.asset(group_name=GROUP, kinds={"duckdb"})
def dcgm_samples(context: dg.AssetExecutionContext, warehouse: Warehouse,
                 gpuledger_config: GpuledgerConfig) -> dg.MaterializeResult:
    """One scrape round of the dcgm-exporter targets in ``sources.scrape`` into gpu_samples (and
    the GPU inventory, device links, hourly rollup). A target that fails is quarantined and
    counted; the others are ingested. Skipped where $GPULEDGER_SCRAPE_SERVICE is set: there the
    `ingest scrape --every` service scrapes (one scraper per target)."""
    if os.environ.get(SCRAPE_SERVICE_ENV, "") not in ("", "0"):
        message = (f"skipped: ${SCRAPE_SERVICE_ENV} says the scrape service (`gpuledger ingest scrape "
                   "--every`) scrapes sources.scrape beside this Dagster: one scraper per target")
        context.log.info(message)
        return dg.MaterializeResult(metadata={"skipped": message, "rows_written": 0, "rows_quarantined": 0})
    source = gpuledger_config.load().sources.scrape
    if source is None:
        return skipped(context, gpuledger_config, "scrape")
    stats = scrape(source.targets, warehouse_path=warehouse.path, cluster=source.cluster, count=1,
                   timeout_s=source.timeout_s, retries=source.retries, backoff_s=0.2)
    for error in stats.errors:
        context.log.warning(error)
    return dg.MaterializeResult(metadata={
        "targets": len(source.targets), "failed_targets": stats.failed_targets, "pages": stats.pages,
        "samples_parsed": stats.samples_parsed, "rows_written": stats.samples_new,
        # refused lines, plus one row per target that could not be scraped (scrape.record_failure)
        "rows_quarantined": stats.quarantined + stats.failed_targets,
    })


@dg.asset(group_name=GROUP, kinds={"duckdb", "prometheus"}, partitions_def=daily_partitions,
          backfill_policy=single_run)
def prometheus_samples(context: dg.AssetExecutionContext, warehouse: Warehouse,
                       gpuledger_config: GpuledgerConfig) -> dg.MaterializeResult:
    """One UTC day of DCGM samples backfilled from the Prometheus in ``sources.prometheus`` into
    gpu_samples. Resumable (per-chunk checkpoints); rerunning a finished day changes nothing."""
    source = gpuledger_config.load().sources.prometheus
    if source is None:
        return skipped(context, gpuledger_config, "prometheus")
    if source.aggregate_s is not None:  # one TSDB, one form: raw rows beside its windows would count twice
        message = (f"skipped: sources.prometheus.aggregate_s is set ({source.aggregate_s} s): prometheus_aggregates "
                   "ingests this TSDB as window aggregates")
        context.log.info(message)
        return dg.MaterializeResult(metadata={"skipped": message, "rows_written": 0, "rows_quarantined": 0})
    start, end = window(context)
    # tenant / bearer token: $GPULEDGER_PROMETHEUS_TENANT / _BEARER_TOKEN(_FILE) (the manifests set
    # them from the gpuledger-prometheus Secret), else the config's tenant / bearer_token_file / _env
    stats = backfill(source.url, start, end, step_s=source.step_s, warehouse_path=warehouse.path,
                     cluster=source.cluster, workers=1, processes=False, deadline=source.call_deadline(),
                     headers=auth_headers(source))
    return dg.MaterializeResult(metadata={
        "url": source.url, "chunks_done": stats.chunks_done, "chunks_skipped": stats.chunks_skipped,
        "points": stats.points, "rows_written": stats.samples_new, "rows_quarantined": stats.quarantined,
    })


def _per_cluster(context: dg.AssetExecutionContext, sources: dict, key: str, config: GpuledgerConfig, do,
                 totals: tuple[str, ...]) -> dg.MaterializeResult:
    """Run ``do(cluster, source) -> dict of figures`` for each cluster partition of the run that
    ``sources`` (cluster -> source) names; the others are skipped, and said so. Figures are summed
    over the clusters (``totals``) and kept per cluster (``by_cluster``). A cluster that fails does
    not stop the others; the run then fails naming it."""
    if not sources:
        return skipped(context, config, key)
    by_cluster, failed = {}, {}
    for cluster in context.partition_keys:
        source = sources.get(cluster)
        if source is None:
            by_cluster[cluster] = {"skipped": f"no sources.{key} for cluster {cluster}"}
            continue
        try:
            by_cluster[cluster] = do(cluster, source)
        except Exception as exc:  # noqa: BLE001 - the other clusters still run; the run fails below
            failed[cluster] = f"{type(exc).__name__}: {exc}"
            by_cluster[cluster] = {"failed": failed[cluster]}
            context.log.error(f"cluster {cluster}: {failed[cluster]}")
    metadata = {name: sum(f.get(name, 0) for f in by_cluster.values()) for name in totals}
    metadata["by_cluster"] = by_cluster
    if failed:
        raise dg.Failure(description=f"sources.{key}: " + "; ".join(f"cluster {c}: {e}" for c, e in failed.items()),
                         metadata=metadata)
    return dg.MaterializeResult(metadata=metadata)


@dg.asset(group_name=GROUP, kinds={"duckdb", "kubernetes"}, partitions_def=cluster_partitions,
          backfill_policy=single_run)
def kubernetes_jobs(context: dg.AssetExecutionContext, warehouse: Warehouse,
                    gpuledger_config: GpuledgerConfig) -> dg.MaterializeResult:
    """GPU pods and Kueue Workloads of each cluster of ``sources.kubernetes`` as job rows (one list
    pass per cluster; pods gone since the last pass are closed), as `gpuledger ingest kubernetes
    --once` does."""
    # lazy: optional extra gpuledger[kubernetes]
    from gpuledger.ingest.jobs.kubernetes import KubernetesIngest, api_client

    def one(cluster: str, source) -> dict:
        options = MappingOptions(project_label=source.project_label, user_label=source.user_label,
                                 namespace_projects=dict(source.namespace_projects))
        ingest = KubernetesIngest(api_client(source.kubeconfig, source.context), cluster=cluster,
                                  warehouse_path=warehouse.path, options=options)
        stats = ingest.sync()
        return {"pods_listed": stats.pods_listed, "workloads_listed": stats.workloads_listed,
                "ignored_without_gpus": stats.ignored, "vanished_closed": stats.vanished_closed,
                "rows_written": stats.jobs_written, "rows_quarantined": stats.quarantined}

    return _per_cluster(context, gpuledger_config.load().sources.kubernetes_by_cluster(), "kubernetes",
                        gpuledger_config, one, ("pods_listed", "workloads_listed", "ignored_without_gpus",
                                                "vanished_closed", "rows_written", "rows_quarantined"))


@dg.asset(group_name=GROUP, kinds={"duckdb", "slurm"}, partitions_def=cluster_partitions, backfill_policy=single_run)
def slurm_jobs(context: dg.AssetExecutionContext, warehouse: Warehouse,
               gpuledger_config: GpuledgerConfig) -> dg.MaterializeResult:
    """Slurm accounting records holding or asking for GPUs, per cluster of ``sources.slurm``: a live
    ``sacct`` over the last ``lookback_hours``, or a saved export file (`gpuledger ingest slurm`)."""
    def one(cluster: str, source) -> dict:
        if source.file:  # read a batch of jobs at a time (memory follows the batch, not the export)
            origin, opened = source.file, open_export(Path(source.file), cluster=source.cluster, tz=source.tz)
        else:  # the lookback's window read whole, as `ingest slurm --live`: the controller's reasons joined on
            start, origin = f"now-{max(1, round(source.lookback_hours * 60))}minutes", LIVE_ORIGIN  # sacct's form
            text = run_sacct("parsable", start, "now", tz=source.tz, sacct=source.sacct)
            batch = parse_sacct(text, fmt="parsable", origin=origin, cluster=source.cluster, tz=source.tz)
            with_controller_reasons(batch, "parsable", start=start, end="now", tz=source.tz, sacct=source.sacct,
                                    cluster=source.cluster)
            opened = nullcontext(iter([batch]))
        with opened as batches, warehouse.writer() as con:
            result = import_batches(con, batches, origin)
        for warning in result.warnings:
            context.log.warning(f"cluster {cluster}: {warning}")
        context.log.info(f"cluster {cluster}: {result.summary(origin)}")
        return {"records_read": result.records_read, "jobs_new": result.jobs_new,
                "rows_written": result.jobs_offered, "rows_quarantined": result.quarantined}

    return _per_cluster(context, gpuledger_config.load().sources.slurm_by_cluster(), "slurm", gpuledger_config,
                        one, ("records_read", "jobs_new", "rows_written", "rows_quarantined"))


class AggregateConfig(dg.Config):
    """How far back and how long one run of ``prometheus_aggregates`` goes."""

    days: int = 2  # UTC days, today's included: yesterday's last windows end at midnight
    budget_s: float = 45.0  # no chunk is started after this many seconds: a backlog goes on next run


@dg.asset(group_name=GROUP, kinds={"duckdb", "prometheus"}, partitions_def=cluster_partitions,
          backfill_policy=single_run)
def prometheus_aggregates(context: dg.AssetExecutionContext, config: AggregateConfig, warehouse: Warehouse,
                          gpuledger_config: GpuledgerConfig) -> dg.MaterializeResult:
    """Window aggregates of each cluster's DCGM series in the TSDB of ``sources.prometheus`` (the
    fleet path: one row per GPU and ``aggregate_s`` window, the window still filling as far as it has come), as `gpuledger
    ingest prometheus --aggregate` stores them: each cluster by its selector and tenant
    (``clusters``, or ``cluster_label``), each UTC day from its own checkpoint. Skipped unless
    ``aggregate_s`` is set."""
    source = gpuledger_config.load().sources.prometheus
    if source is None or source.aggregate_s is None:
        message = (f"skipped: the config {gpuledger_config.describe()} has no `sources.prometheus.aggregate_s` "
                   "(README \"Pipelines\": the fleet path pulls window aggregates from the TSDB)")
        context.log.info(message)
        return dg.MaterializeResult(metadata={"skipped": message, "rows_written": 0, "rows_quarantined": 0})
    until = time.monotonic() + config.budget_s
    if source.clusters:
        sources = {name: source for name in source.clusters}
    elif source.cluster_label:  # one label, every cluster partition: the series that carry its name
        sources = {name: source for name in context.partition_keys}
    else:
        sources = {source.cluster: source}

    def one(cluster: str, source) -> dict:
        stats = aggregate_recent(source, cluster, warehouse_path=warehouse.path, days=config.days, until=until)
        return {"rows_written": stats.rows_new, "rows_quarantined": stats.quarantined, "chunks": stats.chunks_done,
                "left_for_next_run": int(stats.left_for_later), "series": stats.series}

    return _per_cluster(context, sources, "prometheus", gpuledger_config, one,
                        ("rows_written", "rows_quarantined", "chunks", "left_for_next_run"))


@dg.asset(group_name=GROUP, kinds={"duckdb"}, partitions_def=cluster_partitions, backfill_policy=single_run,
          deps=[dg.AssetDep("dcgm_samples"), dg.AssetDep("kubernetes_jobs"), dg.AssetDep("slurm_jobs"),
                dg.AssetDep("prometheus_aggregates")])
def holdings_links(context: dg.AssetExecutionContext, warehouse: Warehouse) -> dg.MaterializeResult:
    """The holdings pass of each cluster (`gpuledger ingest link-devices`): the device holdings the
    Slurm prolog / scontrol and the pod-resources agents reported, placed on their devices and jobs
    as job allocations, and the samples whose labels disagree counted — only the holdings seen since
    the cluster's checkpoint (ingest.holdings.store.holdings_pass), so a pass costs what changed
    lately, however long the history."""
    by_cluster = {}
    for cluster in context.partition_keys:
        with warehouse.writer() as con:
            r = holdings_pass(con, cluster=cluster)
        by_cluster[cluster] = {
            "holdings": r.holdings, **dataclasses.asdict(r.links),  # linked, no_device, ... (store.LinkResult)
            "since_utc": r.since.isoformat() if r.since else "no holdings",
            "checkpoint_utc": r.position.isoformat() if r.position else "none"}
    counted = ["holdings", *(f.name for f in dataclasses.fields(LinkResult))]
    totals = {k: sum(f[k] for f in by_cluster.values()) for k in counted}
    return dg.MaterializeResult(metadata={**totals, "rows_quarantined": 0, "by_cluster": by_cluster})


@dg.asset(group_name=GROUP, kinds={"duckdb", "csv"}, partitions_def=job_csv_partitions)
def csv_jobs(context: dg.AssetExecutionContext, warehouse: Warehouse,
             gpuledger_config: GpuledgerConfig) -> dg.MaterializeResult:
    """One job CSV file of the watched folder (``sources.jobs_csv``; the partition key is the
    file's path under the folder) imported into jobs; bad rows quarantined with their line numbers. Re-importing
    a file changes nothing; a changed file updates its jobs."""
    cfg = gpuledger_config.load()
    if cfg.sources.jobs_csv is None:
        return skipped(context, gpuledger_config, "jobs_csv")
    path = Path(cfg.sources.jobs_csv.folder) / context.partition_key
    try:
        parsed = read_jobs_csv(path, set(cfg.projects()))
    except CsvHeaderError as exc:
        # the whole file is unreadable: one quarantine row naming it, and the run says why
        with warehouse.writer() as con:
            stored = wh.quarantine(con, [wh.QuarantineRow("jobs-csv", str(path), "", str(exc))])
        context.log.error(str(exc))
        return dg.MaterializeResult(metadata={"file": str(path), "error": str(exc), "rows_read": 0,
                                              "rows_written": 0, "rows_quarantined": stored})
    with warehouse.writer() as con:
        wh.upsert(con, "jobs", parsed.jobs)
        link_devices_for_jobs(con, parsed.jobs)
        stored = wh.quarantine(con, parsed.rejected)
    for bad in parsed.rejected[:20]:
        context.log.warning(f"{bad.location}: {bad.reason}")
    return dg.MaterializeResult(metadata={
        "file": str(path), "rows_read": parsed.rows_read, "rows_written": parsed.jobs.height,
        "rows_quarantined": stored,
    })


# the every-minute job: one run, every cluster partition of the last four
INGEST_ASSETS = [reference_tables, dcgm_samples, kubernetes_jobs, slurm_jobs, prometheus_aggregates, holdings_links]
CLUSTER_ASSETS = [kubernetes_jobs, slurm_jobs, prometheus_aggregates, holdings_links]
