"""Partitions shared by the domains: time (UTC) and clusters.

* ``cluster_partitions``: one per cluster the config names (``Config.pipeline_clusters``: the
  sources' clusters, then ``clusters:``), for the ingest of each cluster's job records, window
  aggregates and holdings pass. Dynamic: the ingest schedule keeps them equal to the config in force
  on every tick (``sync_clusters``) and runs every cluster in one run (``cluster_range_tags``: one
  run start a minute on the single writer instead of one per cluster).
* ``daily_partitions``: samples and the analytics that are time-bound (usage, utilization,
  fair-share and budget snapshots); ``end_offset=1`` keeps today as a partition, refreshed as the
  day goes on and final after midnight.
* ``monthly_partitions``: chargeback statements; only whole months (the statement for a month is
  issued on the 1st of the next).

The first partition is ``$GPULEDGER_PARTITIONS_START`` (a date, default 2026-01-01).
"""

import os
import warnings
from datetime import datetime

import dagster as dg
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

from gpuledger.rules.clock import naive_utc

PARTITIONS_START_ENV = "GPULEDGER_PARTITIONS_START"
PARTITIONS_START = os.environ.get(PARTITIONS_START_ENV, "2026-01-01")

cluster_partitions = dg.DynamicPartitionsDefinition(name="clusters")
daily_partitions = dg.DailyPartitionsDefinition(start_date=PARTITIONS_START, timezone="UTC", end_offset=1)
monthly_partitions = dg.MonthlyPartitionsDefinition(start_date=PARTITIONS_START[:8] + "01", timezone="UTC")


def window(context: dg.AssetExecutionContext) -> tuple[datetime, datetime]:
    """The partition's [start, end) as naive UTC."""
    span = context.partition_time_window
    return naive_utc(span.start), naive_utc(span.end)


def partition_windows(context: dg.AssetExecutionContext) -> list[tuple[str, datetime, datetime]]:
    """(key, start, end) of every partition the run materializes, naive UTC: one for a scheduled
    run, each day (month) of the range for a single-run backfill (`dg launch --partition-range`,
    or a backfill from the UI)."""
    definition = context.assets_def.partitions_def
    out = []
    for key in context.partition_keys:
        span = definition.time_window_for_partition_key(key)
        out.append((key, naive_utc(span.start), naive_utc(span.end)))
    return out


# Each run of a time-partitioned asset may cover a range of partitions (one run for a backfill);
# the bodies replace each partition on its own, so a range equals its partitions one by one.
single_run = dg.BackfillPolicy.single_run()
# `@dg.asset(backfill_policy=...)` is marked beta in Dagster 1.13 and warns once per asset at every
# code load (`make demo`, `pipelines run-once`, `dg dev`); the assets that pass it import this module
# first, so the one known warning is silenced here, by its text, and no other.
warnings.filterwarnings("ignore", message="Parameter `backfill_policy` of function `asset`",
                        category=dg.BetaWarning)


def sync_clusters(instance: dg.DagsterInstance, names: list[str]) -> list[str]:
    """Make the cluster partitions exactly ``names`` (adding the new, deleting those the config no
    longer names: their materializations stay in the event log); returns the keys in their order."""
    have = instance.get_dynamic_partitions(cluster_partitions.name)
    for gone in [k for k in have if k not in names]:
        instance.delete_dynamic_partition(cluster_partitions.name, gone)
    new = [n for n in names if n not in have]
    if new:
        instance.add_dynamic_partitions(cluster_partitions.name, new)
    return list(instance.get_dynamic_partitions(cluster_partitions.name))


def cluster_range_tags(keys: list[str]) -> dict[str, str]:
    """Run tags for one run over every cluster partition in ``keys`` (a range from the first to the
    last, as a single-run backfill of the UI launches it); {} for none."""
    return {ASSET_PARTITION_RANGE_START_TAG: keys[0], ASSET_PARTITION_RANGE_END_TAG: keys[-1]} if keys else {}
