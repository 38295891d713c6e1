"""Idle squatting: jobs holding GPUs that do nothing.

Judged per device (a MIG instance on its own) on ``bucket``-long buckets (default 1 min) over a
recent ``lookback`` only. A device is idle when its activity (best signal present in the
lookback: sm_active > gr_engine_active > gpu_util, gpu_util ignored on MIG) stays below the
threshold in every bucket with data since its last active bucket, counted from the end of the
start-up grace, for at least the sustained window. Too few buckets with data in the sustained
window (stale-data guard) means no judgement for that device, and then none for its job.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import polars as pl

from gpuledger.analytics.attribution import SIGNALS, gpu_inventory
from gpuledger.analytics.money import CENTS, price_as_of, to_raw
from gpuledger.config import SquattingPolicy

SQUATTING = "squatting"
PARTIAL = "partial-idle"


def _exemptions(jobs: pl.LazyFrame, policy: SquattingPolicy, job_labels: pl.LazyFrame | None) -> pl.LazyFrame:
    reason = (
        pl.when(pl.col("namespace").is_in(list(policy.exempt_namespaces)))
        .then(pl.format("namespace {}", pl.col("namespace")))
        .when(pl.col("kind").is_in(list(policy.exempt_kinds)))
        .then(pl.format("kind {}", pl.col("kind")))
        .otherwise(None)
    )
    out = jobs.select("cluster", "job_id", reason.alias("exempt_reason"))
    if job_labels is not None and policy.exempt_labels:
        wanted = pl.LazyFrame({"key": list(policy.exempt_labels), "value": list(policy.exempt_labels.values())})
        hits = (
            job_labels.join(wanted, on=["key", "value"], how="inner")
            .group_by("cluster", "job_id")
            .agg(pl.format("label {}={}", pl.col("key"), pl.col("value")).first().alias("_label"))
        )
        out = out.join(hits, on=["cluster", "job_id"], how="left").with_columns(
            pl.coalesce("exempt_reason", "_label").alias("exempt_reason")
        ).drop("_label")
    return out


def squatting_findings(
    jobs: pl.LazyFrame,
    job_allocations: pl.LazyFrame,
    gpus: pl.LazyFrame,
    gpu_samples: pl.LazyFrame,
    rate_card: pl.LazyFrame,
    *,
    now: datetime,
    policy: SquattingPolicy | None = None,
    job_labels: pl.LazyFrame | None = None,
    bucket: timedelta = timedelta(minutes=1),
    lookback: timedelta = timedelta(hours=6),
    include_exempt: bool = False,
) -> pl.LazyFrame:
    """Findings per running job at ``now``: all GPUs idle (``squatting``) or some (``partial-idle``).

    ``job_labels`` (optional): cluster, job_id, key, value — matched against
    ``policy.exempt_labels``. Columns: cluster, job_id, project, user_name, namespace, job_kind,
    finding, severity (squatting: warning ≥ warn_minutes, second-warning ≥ second_warn_minutes,
    preempt-eligible ≥ preempt_minutes, info below; partial-idle: always info),
    gpus_total, gpus_idle (devices), idle_since (UTC; for squatting the latest of the idle
    devices' starts), idle_minutes (now − idle_since), gpu_hours_idle (Σ over idle devices of
    their idle time × fractions), idle_cost (Decimal cents at the price in force now), currency,
    fb_used_bytes_idle (memory held on the idle devices, last sample), activity_signal (signals
    used, comma-joined), exempt, exempt_reason. Idle time is capped at ``lookback``.
    """
    p = policy or SquattingPolicy()
    thr = p.idle_threshold_ratio
    sustained = timedelta(minutes=p.sustained_minutes)
    grace = timedelta(minutes=p.grace_minutes)
    lb_start = now - max(lookback, sustained)
    every = f"{int(bucket / timedelta(microseconds=1))}us"

    running = jobs.filter(
        pl.col("start_time").is_not_null() & (pl.col("start_time") <= now)
        & (pl.col("end_time").is_null() | (pl.col("end_time") > now))
    ).select("cluster", "job_id", "project", "user_name", "namespace", pl.col("kind").alias("job_kind"),
             pl.col("start_time").alias("job_start"))
    held = (
        job_allocations.filter((pl.col("start_time") <= now) & (pl.col("end_time").is_null() | (pl.col("end_time") > now)))
        .select("cluster", "job_id", "gpu_id", pl.col("start_time").alias("alloc_start"),
                pl.col("gpu_fraction").fill_null(1.0).alias("alloc_fraction"))
        .join(running, on=["cluster", "job_id"], how="inner")
        .join(gpu_inventory(gpus).drop("cluster"), on="gpu_id", how="left")
        .with_columns(pl.col("device_fraction").fill_null(1.0), pl.col("is_mig").fill_null(False),
                      pl.col("tier").fill_null("reserved"))
    )
    mig = held.select("gpu_id", "is_mig").unique()
    buckets = (
        gpu_samples.filter((pl.col("ts") >= lb_start) & (pl.col("ts") < now))
        .join(mig, on="gpu_id", how="inner")
        .with_columns(
            pl.when(pl.col("is_mig")).then(None).otherwise(pl.col("gpu_util_ratio")).alias("gpu_util_ratio"),
            pl.col("ts").dt.truncate(every).alias("bucket"),
        )
        .group_by("gpu_id", "bucket")
        .agg(*(pl.col(c).mean().alias(n) for n, c in SIGNALS),
             pl.col("fb_used_bytes").sort_by("ts").drop_nulls().last().alias("fb_used_bytes"))
    )
    signal = pl.lit(None, pl.String)
    for name, _ in reversed(SIGNALS):
        signal = pl.when(pl.col(name).is_not_null().any().over("gpu_id")).then(pl.lit(name)).otherwise(signal)
    activity = pl.lit(None, pl.Float64)
    for name, _ in SIGNALS:
        activity = pl.when(pl.col("activity_signal") == name).then(pl.col(name)).otherwise(activity)
    buckets = (
        buckets.with_columns(activity_signal=signal)
        .with_columns(activity_ratio=activity)
        .filter(pl.col("activity_ratio").is_not_null())
    )
    per_gpu_key = ["cluster", "job_id", "gpu_id"]
    judged_from = pl.max_horizontal(pl.col("job_start") + pl.lit(grace), pl.col("alloc_start"), pl.lit(lb_start))
    per_device = (
        held.join(buckets, on="gpu_id", how="inner")
        .filter(pl.col("bucket") >= judged_from.dt.truncate(every))
        .with_columns(
            _last_active=pl.col("bucket").filter(pl.col("activity_ratio") >= thr).max().over(per_gpu_key)
        )
        .group_by(per_gpu_key)
        .agg(
            pl.col("bucket").filter(
                (pl.col("activity_ratio") < thr)
                & (pl.col("_last_active").is_null() | (pl.col("bucket") > pl.col("_last_active")))
            ).min().alias("_idle_from"),
            pl.col("bucket").filter(pl.col("bucket") >= pl.lit(now - sustained)).n_unique().alias("_covered"),
            pl.col("fb_used_bytes").sort_by("bucket").drop_nulls().last().alias("fb_used_bytes"),
            pl.col("activity_signal").first(),
        )
    )
    expected = max(1, round(sustained / bucket))
    devices = (
        held.join(per_device, on=per_gpu_key, how="left")
        .with_columns(
            stale=pl.col("_covered").fill_null(0) / expected < p.min_coverage_ratio,
            # idle from the later of the run's first bucket and the end of grace
            idle_since=pl.max_horizontal(pl.col("_idle_from"), judged_from),
        )
        .with_columns(
            idle=~pl.col("stale") & pl.col("_idle_from").is_not_null()
            & ((pl.lit(now) - pl.col("idle_since")) >= pl.lit(sustained))
        )
        .with_columns(
            gpu_hours_idle=pl.when(pl.col("idle")).then(
                (pl.lit(now) - pl.col("idle_since")).dt.total_microseconds() / 3.6e9
                * pl.col("device_fraction") * pl.col("alloc_fraction")
            ).otherwise(0.0),
            _at=pl.lit(now),
        )
    )
    devices = price_as_of(devices, rate_card, at="_at").drop("_at")
    idle = pl.col("idle")
    per_job = devices.group_by("cluster", "job_id").agg(
        pl.col("project", "user_name", "namespace", "job_kind").first(),
        pl.len().alias("gpus_total"),
        idle.sum().cast(pl.Int64).alias("gpus_idle"),
        pl.col("stale").any().alias("_stale"),
        pl.col("idle_since").filter(idle).max().alias("idle_since"),
        pl.col("gpu_hours_idle").sum(),
        (to_raw(pl.col("gpu_hours_idle")) * pl.col("price_per_gpu_hour")).filter(idle).sum().alias("_cost"),
        pl.col("currency").filter(idle).first(),
        pl.col("fb_used_bytes").filter(idle).sum().alias("fb_used_bytes_idle"),
        pl.col("activity_signal").filter(idle).drop_nulls().unique().sort().str.join(",").alias("activity_signal"),
    )
    minutes = (pl.lit(now) - pl.col("idle_since")).dt.total_microseconds() / 6e7
    findings = (
        per_job.filter(~pl.col("_stale") & (pl.col("gpus_idle") > 0))
        .with_columns(
            finding=pl.when(pl.col("gpus_idle") == pl.col("gpus_total")).then(pl.lit(SQUATTING))
            .otherwise(pl.lit(PARTIAL)),
            idle_minutes=minutes,
            idle_cost=pl.col("_cost").round(2).cast(CENTS),
        )
        .with_columns(
            severity=pl.when(pl.col("finding") == PARTIAL).then(pl.lit("info"))
            .when(pl.col("idle_minutes") >= p.preempt_minutes).then(pl.lit("preempt-eligible"))
            .when(pl.col("idle_minutes") >= p.second_warn_minutes).then(pl.lit("second-warning"))
            .when(pl.col("idle_minutes") >= p.warn_minutes).then(pl.lit("warning"))
            .otherwise(pl.lit("info"))
        )
        .join(_exemptions(jobs, p, job_labels), on=["cluster", "job_id"], how="left")
        .with_columns(exempt=pl.col("exempt_reason").is_not_null())
    )
    if not include_exempt:
        findings = findings.filter(~pl.col("exempt"))
    return findings.select(
        "cluster", "job_id", "project", "user_name", "namespace", "job_kind", "finding", "severity",
        "gpus_total", "gpus_idle", "idle_since", "idle_minutes", "gpu_hours_idle", "idle_cost", "currency",
        "fb_used_bytes_idle", "activity_signal", "exempt", "exempt_reason",
    ).sort("cluster", "job_id")
