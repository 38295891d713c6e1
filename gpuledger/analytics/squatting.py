"""Idle squatting: jobs holding GPUs that do nothing.

Judged per device (a MIG instance on its own), sample by sample, over a recent ``lookback`` only.
Two steps:

1. :func:`gpuledger.analytics.load.load_device_activity` — DuckDB, an aggregate pass over the
   sustained window, then over the lookback for the devices that window does not settle,
   restricted to the devices of :func:`held_devices` — gives per held device its *evidence*
   (see :data:`ACTIVITY_COLUMNS`).
2. :func:`squatting_findings` — polars on those ~1 row per held device — judges devices and jobs.

Definitions (per (job, device) held at ``now``):

* ``judged_from`` = max(job start + grace, allocation start, now − max(lookback, sustained)).
* Activity = the best signal the device reports anywhere in [now − max(lookback, sustained), now):
  sm_active > gr_engine_active > gpu_util (gpu_util ignored on MIG). A NaN reading counts as no
  reading. Only samples in [judged_from, now) with a reading of that signal are judged.
* A sample is *active* when its activity ≥ the threshold, *idle* below it.
* ``idle_since`` = the first judged sample after the last active one (the first judged sample
  if none was active); NULL when the last judged sample is active.
* The device is idle when ``now − idle_since ≥ sustained``: every judged sample since then is idle.
* Stale-data guard: ``covered_minutes``, the time the judged rows at or after now − sustained
  cover, weighted as the rollups weight rows: sample_n × interval. A row stands for ``n`` raw
  samples (``gpu_samples.sample_n``, 1 for a raw sample) and covers n × u of the time from its ts
  to the next judged row (or now), u being the device's raw sample interval: the median over
  its rows of that time ÷ n, at most one minute (a lone reading vouches for no more, as the
  clock-minute count this replaces had it). So 10-s samples and their 5-minute aggregates
  (sample_n 30, u = 10 s) cover the same time, and a gap is uncovered in either form. Less than
  min_coverage_ratio × sustained minutes means no judgement for that device, and then none for
  its job (a held device without any sample is stale too).
"""

from __future__ import annotations

from datetime import datetime, timedelta

import polars as pl

from gpuledger.analytics.allocations import gpu_inventory
from gpuledger.analytics.money import half_up_cents, price_as_of, to_raw
from gpuledger.config import SquattingPolicy
from gpuledger.rules.severity import LOOKBACK, severity_expr

SQUATTING = "squatting"
PARTIAL = "partial-idle"
PER_DEVICE = ["cluster", "job_id", "gpu_id"]
#: The evidence per held device that load_device_activity returns and squatting_findings judges.
ACTIVITY_COLUMNS = {
    "cluster": pl.String, "job_id": pl.String, "gpu_id": pl.Int32,
    "activity_signal": pl.String,  # sm_active, gr_engine_active or gpu_util; NULL: no reading at all
    "last_active": pl.Datetime("us"),  # last judged sample ≥ threshold (NULL: none)
    "idle_since": pl.Datetime("us"),  # first judged sample after last_active (NULL: none)
    "covered_minutes": pl.Float64,  # time the judged rows in the sustained window cover (minutes)
    "fb_used_bytes": pl.Int64,  # last non-null fb_used_bytes of the judged samples
}


def with_exemptions(findings: pl.LazyFrame, policy: SquattingPolicy,
                    job_labels: pl.LazyFrame | None) -> pl.LazyFrame:
    """``findings`` (cluster, job_id, namespace, job_kind: the job's own, from held_devices) with
    ``exempt_reason`` (namespace first, then kind, then label) and ``exempt``: judged on the few
    findings, not on every job of the range."""
    reason = (
        pl.when(pl.col("namespace").is_in(list(policy.exempt_namespaces)))
        .then(pl.format("namespace {}", pl.col("namespace")))
        .when(pl.col("job_kind").is_in(list(policy.exempt_kinds)))
        .then(pl.format("kind {}", pl.col("job_kind")))
        .otherwise(None)
    )
    out = findings.with_columns(reason.alias("exempt_reason"))
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
    return out.with_columns(exempt=pl.col("exempt_reason").is_not_null())


def held_devices(
    jobs: pl.LazyFrame,
    job_allocations: pl.LazyFrame,
    gpus: pl.LazyFrame,
    *,
    now: datetime,
    policy: SquattingPolicy | None = None,
    lookback: timedelta = LOOKBACK,
) -> pl.LazyFrame:
    """Devices held at ``now`` by jobs running at ``now``: one row per (cluster, job_id, gpu_id)
    (the earliest open allocation row when there are several). A device-less allocation
    (gpu_id NULL) stays: it has no samples, so its job is never judged (stale-data guard).

    Columns: cluster, job_id, gpu_id, project, user_name, namespace, job_kind, job_start,
    alloc_start, alloc_fraction, model, device_fraction, is_mig, tier, judged_from (see the module
    docstring).
    """
    p = policy or SquattingPolicy()
    lb_start = now - max(lookback, timedelta(minutes=p.sustained_minutes))
    grace = timedelta(minutes=p.grace_minutes)
    running = jobs.filter(
        pl.col("start_time").is_not_null() & (pl.col("start_time") <= now)
        & (pl.col("end_time").is_null() | (pl.col("end_time") > now))
    ).select("cluster", "job_id", "project", "user_name", "namespace", pl.col("kind").alias("job_kind"),
             pl.col("start_time").alias("job_start"))
    return (
        job_allocations.filter((pl.col("start_time") <= now)
                               & (pl.col("end_time").is_null() | (pl.col("end_time") > now)))
        .select("cluster", "job_id", "gpu_id", pl.col("start_time").alias("alloc_start"),
                pl.col("gpu_fraction").fill_null(1.0).alias("alloc_fraction"))
        .sort("alloc_start")
        .unique(subset=PER_DEVICE, keep="first", maintain_order=True)
        .join(running, on=["cluster", "job_id"], how="inner")
        .join(gpu_inventory(gpus).select("gpu_id", "model", "device_fraction", "is_mig", "tier"), on="gpu_id",
              how="left")
        .with_columns(pl.col("device_fraction").fill_null(1.0), pl.col("is_mig").fill_null(False),
                      pl.col("tier").fill_null("reserved"),
                      judged_from=pl.max_horizontal(pl.col("job_start") + pl.lit(grace),
                                                    pl.col("alloc_start"), pl.lit(lb_start)))
    )


FINDING_COLUMNS = [
    "cluster", "job_id", "project", "user_name", "namespace", "job_kind", "finding", "severity",
    "gpus_total", "gpus_idle", "idle_since", "idle_minutes", "gpu_hours_idle", "idle_cost", "currency",
    "fb_used_bytes_idle", "activity_signal", "exempt", "exempt_reason",
]


def with_evidence(held: pl.LazyFrame, device_activity: pl.LazyFrame) -> pl.LazyFrame:
    """:func:`held_devices` rows with their evidence (:data:`ACTIVITY_COLUMNS`) joined on; a held
    device without evidence keeps NULLs (stale). The keys are cast to ``held``'s types."""
    keys = held.collect_schema()
    evidence = device_activity.select(
        *(pl.col(k).cast(keys[k]) for k in PER_DEVICE), "activity_signal", "idle_since", "covered_minutes",
        "fb_used_bytes",
    )
    return held.join(evidence, on=PER_DEVICE, how="left")


def judge_devices(devices: pl.LazyFrame, *, now: datetime, policy: SquattingPolicy) -> pl.LazyFrame:
    """Adds ``stale`` (evidence covers < min_coverage_ratio of the sustained window), ``idle``
    (not stale and idle since at least ``sustained`` before ``now``) and ``gpu_hours_idle``
    (now − idle_since × device and allocation fractions on an idle device, else 0)."""
    sustained = timedelta(minutes=policy.sustained_minutes)
    expected = max(1, round(policy.sustained_minutes))  # clock minutes in the sustained window
    return (
        devices.with_columns(stale=pl.col("covered_minutes").fill_null(0) / expected < policy.min_coverage_ratio)
        .with_columns(
            idle=~pl.col("stale") & pl.col("idle_since").is_not_null()
            & ((pl.lit(now) - pl.col("idle_since")) >= pl.lit(sustained))
        )
        .with_columns(
            gpu_hours_idle=pl.when(pl.col("idle")).then(
                (pl.lit(now) - pl.col("idle_since")).dt.total_microseconds() / 3.6e9
                * pl.col("device_fraction") * pl.col("alloc_fraction")
            ).otherwise(0.0),
        )
    )


def priced_now(devices: pl.LazyFrame, rate_card: pl.LazyFrame, *, now: datetime) -> pl.LazyFrame:
    """Adds ``price_per_gpu_hour`` and ``currency``: the rate card's price in force at ``now``
    for each device's model and tier (:func:`price_as_of`)."""
    return price_as_of(devices.with_columns(_at=pl.lit(now)), rate_card, at="_at").drop("_at")


def job_idleness(devices: pl.LazyFrame) -> pl.LazyFrame:
    """Judged, priced devices → one row per (cluster, job_id): gpus_total, gpus_idle, ``_stale``
    (any device stale), idle_since (latest of the idle devices'), gpu_hours_idle, ``_cost`` (raw
    Σ idle hours × price, unrounded), currency, fb_used_bytes_idle, activity_signal (of the idle
    devices, sorted, comma-joined)."""
    idle = pl.col("idle")
    return devices.group_by("cluster", "job_id").agg(
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


def classify_jobs(per_job: pl.LazyFrame, *, now: datetime, policy: SquattingPolicy) -> pl.LazyFrame:
    """:func:`job_idleness` rows → findings: jobs not stale with an idle GPU, with ``finding``
    (squatting when every GPU is idle, else partial-idle), ``idle_minutes``, ``idle_cost`` (cents,
    half-up) and ``severity`` (the lifecycle stage reached; partial-idle is always info)."""
    minutes = (pl.lit(now) - pl.col("idle_since")).dt.total_microseconds() / 6e7
    return (
        per_job.filter(~pl.col("_stale") & (pl.col("gpus_idle") > 0))
        .with_columns(
            finding=pl.when(pl.col("gpus_idle") == pl.col("gpus_total")).then(pl.lit(SQUATTING))
            .otherwise(pl.lit(PARTIAL)),
            idle_minutes=minutes,
            idle_cost=half_up_cents(pl.col("_cost")),  # half-up: polars rounds half to even
        )
        .with_columns(
            severity=pl.when(pl.col("finding") == PARTIAL).then(pl.lit("info"))
            .otherwise(severity_expr(pl.col("idle_minutes"), policy))
        )
    )


def squatting_findings(
    jobs: pl.LazyFrame,
    job_allocations: pl.LazyFrame,
    gpus: pl.LazyFrame,
    device_activity: pl.LazyFrame,
    rate_card: pl.LazyFrame,
    *,
    now: datetime,
    policy: SquattingPolicy | None = None,
    job_labels: pl.LazyFrame | None = None,
    include_exempt: bool = False,
) -> pl.LazyFrame:
    """Findings per running job at ``now``: all GPUs idle (``squatting``) or some (``partial-idle``).

    ``device_activity``: the evidence per held device (:data:`ACTIVITY_COLUMNS`), from
    :func:`gpuledger.analytics.load.load_device_activity` with the same ``now`` and ``policy``.
    ``job_labels`` (optional): cluster, job_id, key, value — matched against
    ``policy.exempt_labels``. Columns (:data:`FINDING_COLUMNS`): cluster, job_id, project, user_name,
    namespace, job_kind, finding, severity (squatting: warning ≥ warn_minutes, second-warning ≥
    second_warn_minutes, preempt-eligible ≥ preempt_minutes, info below; partial-idle: always info),
    gpus_total, gpus_idle (devices), idle_since (UTC; for squatting the latest of the idle
    devices' starts), idle_minutes (now − idle_since), gpu_hours_idle (Σ over idle devices of
    their idle time × fractions), idle_cost (Decimal cents at the price in force now), currency,
    fb_used_bytes_idle (memory held on the idle devices, last sample), activity_signal (signals
    used, comma-joined), exempt, exempt_reason. Idle time is capped at the evidence's lookback.

    Stages: held_devices → with_evidence → judge_devices → priced_now → job_idleness →
    classify_jobs → with_exemptions.
    """
    p = policy or SquattingPolicy()
    held = held_devices(jobs, job_allocations, gpus, now=now, policy=p)
    devices = priced_now(judge_devices(with_evidence(held, device_activity), now=now, policy=p), rate_card, now=now)
    findings = with_exemptions(classify_jobs(job_idleness(devices), now=now, policy=p), p, job_labels)
    if not include_exempt:
        findings = findings.filter(~pl.col("exempt"))
    return findings.select(FINDING_COLUMNS).sort("cluster", "job_id")
