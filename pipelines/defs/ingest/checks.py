"""Ingest checks: each source is fresh (its newest row is recent enough), and samples are never
stored twice for one (device, time).

A source the config leaves out passes with ``skipped`` in the metadata: nothing is expected of it.
Freshness limits are ages of the newest row, wall clock, UTC.
"""

from datetime import timedelta

import dagster as dg
from gpuledger.pipelines.defs.ingest.assets import (
    csv_jobs,
    dcgm_samples,
    kubernetes_jobs,
    prometheus_aggregates,
    prometheus_samples,
    slurm_jobs,
)
from gpuledger.pipelines.defs.resources import GpuledgerConfig, Warehouse

from gpuledger.facts.materialize import sql, utc_now

PACKAGE = "gpuledger.pipelines.defs.ingest"
DUPLICATE_WINDOW_HOURS = 24


def _freshness(asset, *, source_key: str, max_age: timedelta, samples: str | None = None,
               job_sources: tuple[str, ...] = (), applies=lambda source: source is not None):
    name = f"{asset.key.path[-1]}_fresh"

    @dg.asset_check(asset=asset, name=name, blocking=False,
                    description=f"the newest row from sources.{source_key} is at most {max_age} old")
    def _check(warehouse: Warehouse, gpuledger_config: GpuledgerConfig) -> dg.AssetCheckResult:
        if not applies(getattr(gpuledger_config.load().sources, source_key)):
            return dg.AssetCheckResult(passed=True, metadata={"skipped": f"no sources.{source_key} in the config"})
        with warehouse.reader() as con:
            if samples:
                newest = con.execute(sql(PACKAGE, "newest_sample"), {"source": samples}).fetchall()[0][0]
            else:
                newest = con.execute(sql(PACKAGE, "newest_job_update"), {"sources": list(job_sources)}).fetchall()[0][0]
        if newest is None:
            return dg.AssetCheckResult(passed=False, severity=dg.AssetCheckSeverity.WARN,
                                       metadata={"newest_utc": "none", "max_age_s": max_age.total_seconds()})
        age = utc_now() - newest
        return dg.AssetCheckResult(
            passed=age <= max_age, severity=dg.AssetCheckSeverity.WARN,
            metadata={"newest_utc": newest.isoformat(), "age_s": round(age.total_seconds(), 1),
                      "max_age_s": max_age.total_seconds()})

    return _check


dcgm_samples_fresh = _freshness(dcgm_samples, source_key="scrape", max_age=timedelta(minutes=5), samples="scrape")
prometheus_samples_fresh = _freshness(prometheus_samples, source_key="prometheus", max_age=timedelta(days=2),
                                      samples="prometheus", applies=lambda s: s is not None and s.aggregate_s is None)
# a window reaches its newest sample (ts + covered_ms), the window still filling included: its newest
# sample is settle_s plus the minute between ingest runs old; 15 minutes leave room for a TSDB that
# answers late
prometheus_aggregates_fresh = _freshness(prometheus_aggregates, source_key="prometheus", max_age=timedelta(minutes=15),
                                         samples="prometheus",
                                         applies=lambda s: s is not None and s.aggregate_s is not None)
kubernetes_jobs_fresh = _freshness(kubernetes_jobs, source_key="kubernetes", max_age=timedelta(minutes=5),
                                   job_sources=("kubernetes", "kueue"))
slurm_jobs_fresh = _freshness(slurm_jobs, source_key="slurm", max_age=timedelta(minutes=15),
                              job_sources=("slurm-sacct",))
csv_jobs_fresh = _freshness(csv_jobs, source_key="jobs_csv", max_age=timedelta(days=7), job_sources=("jobs-csv",))


def _no_duplicates(asset):
    @dg.asset_check(asset=asset, name=f"{asset.key.path[-1]}_unique", blocking=True,
                    description=f"no (gpu_id, ts) stored twice in the last {DUPLICATE_WINDOW_HOURS} h of samples")
    def _check(warehouse: Warehouse) -> dg.AssetCheckResult:
        with warehouse.reader() as con:
            keys, extra = con.execute(sql(PACKAGE, "duplicate_samples"),
                                      {"hours": DUPLICATE_WINDOW_HOURS}).fetchall()[0]
        return dg.AssetCheckResult(passed=keys == 0, metadata={"duplicate_keys": int(keys), "extra_rows": int(extra)})

    return _check


dcgm_samples_unique = _no_duplicates(dcgm_samples)
prometheus_samples_unique = _no_duplicates(prometheus_samples)
