"""Usage attribution: per job, per GPU, per hour — allocated, active, idle, unknown GPU-hours, energy.

Units: GPU-hours (one whole GPU for one hour; a MIG slice counts by ``gpus.gpu_fraction``, a shared
GPU by ``job_allocations.gpu_fraction``, both multiply), energy in kWh, ratios 0..1.

Samples are aggregated once per (GPU, hour); whole-hour pieces of allocations use those
aggregates and partial hours (where allocations start or end) go back to the raw samples of just
those GPU-hours, so a job that starts at 10:30 on a GPU busy for someone else until then is not
blamed or credited for the first half hour.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import polars as pl

from gpuledger.analytics.allocations import DEFAULT_TIER, allocation_intervals
from gpuledger.analytics.collect import ENGINE
from gpuledger.analytics.energy import counter_increment
from gpuledger.analytics.intervals import HOUR, split_by_hour
from gpuledger.analytics.tree import rollup_to_nodes
from gpuledger.rules.activity import SIGNALS, best_of_sums

J_PER_KWH = 3_600_000.0
USAGE_COLS = ["gpu_hours_allocated", "gpu_hours_active", "gpu_hours_idle", "gpu_hours_unknown", "energy_kwh"]


def allocated_pieces(
    job_allocations: pl.LazyFrame,
    gpus: pl.LazyFrame,
    *,
    now: datetime,
    start: datetime | None = None,
    end: datetime | None = None,
    jobs: pl.LazyFrame | None = None,
    default_tier: str = DEFAULT_TIER,
    every: timedelta = HOUR,
) -> pl.LazyFrame:
    """Allocations cut into hourly pieces, clipped to [start, end) and to ``now`` (open ends).

    One row per (cluster, job_id, gpu_id, allocation start_time, hour) with ``piece_start``,
    ``piece_end``, ``piece_s`` (seconds), the device's ``model``/``tier``/``device_fraction``,
    ``allocation_level`` and ``gpu_hours_allocated`` = piece_s / 3600 × device_fraction ×
    alloc_fraction. With ``jobs``, jobs that have no device allocation count too (gpu_id NULL,
    see allocations.py). ``every``: another piece length (usage cuts by day: it joins no hourly
    samples), the column is still named ``hour`` (the piece's bucket start).
    """
    span = (start, now if end is None else min(end, now))  # what split_by_hour keeps: only these are joined
    return (
        split_by_hour(allocation_intervals(job_allocations, gpus, jobs, default_tier=default_tier, span=span),
                      now=now, start=start, end=end, every=every)
        .with_columns(gpu_hours_allocated=allocated_hours())
    )


def allocated_hours() -> pl.Expr:
    """A piece's allocated GPU-hours: piece_s / 3600 × device_fraction × alloc_fraction."""
    return pl.col("piece_s") / 3600.0 * pl.col("device_fraction") * pl.col("alloc_fraction")


def _reset_aware_increment(e: pl.Expr) -> pl.Expr:
    """Σ of counter increments along ``e`` (already in time order): a drop is a reset, so the
    increment is the new value itself."""
    return counter_increment(e, e.shift(1)).slice(1).sum()


def sample_weight(gpu_samples: pl.LazyFrame) -> pl.Expr:
    """``_w``: how many raw samples each row stands for — ``sample_n`` of an aggregated row
    (``ingest prometheus --aggregate``), 1 for a raw sample (NULL, or a frame without the column)."""
    if "sample_n" in gpu_samples.collect_schema().names():
        return pl.col("sample_n").fill_null(1).cast(pl.Int64).alias("_w")
    return pl.lit(1, pl.Int64).alias("_w")


def hourly_rollup(gpu_samples: pl.LazyFrame) -> pl.LazyFrame:
    """Per (gpu_id, hour): the sums the analytics need, shaped like the warehouse's ``gpu_hourly``.

    Columns: gpu_id, hour, s_n (samples), s_<signal> (Σ of the signal clipped to 0..1),
    s_n_<signal> (samples with the signal) — each row counted as the raw samples it stands for
    (:func:`sample_weight`: an aggregated row's ``sample_n``), e_first / e_last (first and last energy counter
    value in the hour, J), e_inside (Σ of the counter's increments between the hour's samples,
    a drop counted as a reset: the new value; 0 with one energy sample, NULL with none). Only an
    hour whose minimum is below its first value is walked for resets; a dip that stays above the
    first value is jitter, and the increase is last − first.
    ``warehouse.refresh_gpu_hourly`` computes the same in SQL.
    """
    e_sorted = pl.col("energy_total_j").sort_by("ts").drop_nulls()
    sig = [col for _, col in SIGNALS]
    w = pl.col("_w")
    return (
        gpu_samples.select("gpu_id", "ts", *sig, "energy_total_j", sample_weight(gpu_samples))
        .group_by("gpu_id", pl.col("ts").dt.truncate("1h").alias("hour"))
        .agg(
            w.sum().cast(pl.Int64).alias("s_n"),
            *((pl.col(col).clip(0.0, 1.0) * w).sum().alias(f"s_{name}") for name, col in SIGNALS),
            *(w.filter(pl.col(col).is_not_null()).sum().cast(pl.Int64).alias(f"s_n_{name}")
              for name, col in SIGNALS),
            e_sorted.first().alias("e_first"),
            e_sorted.last().alias("e_last"),
            pl.col("energy_total_j").min().alias("_e_min"),
            _reset_aware_increment(e_sorted).alias("_e_walked"),
        )
        # As the SQL: only an hour whose minimum is below its first value can hold a reset; any
        # other dip is jitter and the hour's increase is last − first.
        .with_columns(
            e_inside=pl.when(pl.col("e_first").is_null()).then(None)
            .when(pl.col("_e_min") < pl.col("e_first")).then(pl.col("_e_walked"))
            .otherwise(pl.col("e_last") - pl.col("e_first"))
        )
        .drop("_e_min", "_e_walked")
    )


def device_hour(gpu_id: str = "gpu_id", hour: str = "hour") -> pl.Expr:
    """One Int64 per (gpu_id, hour), in their order: gpu_id × 2^32 + hours since 1970 (exact for
    any INTEGER gpu_id and hour after 1970). Joins and sorts on one integer cost about half what
    they cost on the two columns."""
    return pl.col(gpu_id).cast(pl.Int64) * 2**32 + pl.col(hour).dt.epoch("s") // 3600


def hourly_energy(rollup: pl.LazyFrame) -> pl.LazyFrame:
    """Rollup rows (:func:`hourly_rollup` / ``gpu_hourly``) → with ``prev_last`` and ``s_energy_j``.

    ``s_energy_j`` is the counter increase of the hour's samples, each counted from the sample
    before it (in an earlier hour for the first one); a drop means the counter reset (driver
    reload) and the increment is the new value. ``prev_last`` is the last counter value of an
    earlier hour of the same GPU present in ``rollup`` (so read one hour before the range).
    Sorted by ``_gh`` (:func:`device_hour`), which it adds.
    """
    return (
        # Sorted by one integer key in (gpu_id, hour) order (about half the cost of two columns),
        # which attribution also joins on (``_gh``).
        rollup.with_columns(_gh=device_hour()).sort("_gh")
        .with_columns(prev_last=pl.col("e_last").forward_fill().shift(1).over("gpu_id"))
        .with_columns(
            s_energy_j=pl.col("e_inside").fill_null(0.0)
            + pl.when(pl.col("prev_last").is_null() | pl.col("e_first").is_null()).then(0.0)
            .otherwise(counter_increment(pl.col("e_first"), pl.col("prev_last"))),
            energy_seen=pl.col("e_last").is_not_null(),
        )
        .drop("e_first", "e_inside", "e_last")
    )


def mig_hourly_energy(energy: pl.LazyFrame, gpus: pl.LazyFrame) -> pl.LazyFrame:
    """Joules per (MIG instance gpu_id, hour), whatever convention the source used for the energy
    counter, which on MIG belongs to the physical GPU:

    * on the whole GPU's own row (mig_instance_id -1; NVML) or on one instance only (a scrape keeps
      it on the lowest GPU_I_ID) or repeated, equal, on every instance (raw dcgm-exporter): the
      device's energy, split by compute fraction (a 3g instance 3/7 of it);
    * different on each instance (a source with per-instance counters): the instance's own.

    ``energy`` is :func:`hourly_energy` output. ``mig_energy_j`` is NULL where the physical GPU had no
    energy reading that hour: unknown, never 0. Columns: gpu_id, hour, _gh (device_hour), mig_energy_j.
    """
    names = gpus.collect_schema().names()
    inv = gpus.select(
        pl.col("gpu_id").cast(pl.Int32), "cluster", "gpu_uuid",
        (pl.col("mig_instance_id") if "mig_instance_id" in names else pl.lit(-1)).fill_null(-1).alias("_mig"),
        pl.col("gpu_fraction").fill_null(1.0).alias("_fraction"),
    ).filter(  # only devices with MIG instances have an answer here: skip the other GPUs' hours
        pl.col("_mig").max().over("cluster", "gpu_uuid") >= 0
    )
    e = energy.select(pl.col("gpu_id").cast(pl.Int32), "hour", "s_energy_j", "energy_seen").join(inv, on="gpu_id")
    seen = e.filter(pl.col("energy_seen"))
    inst = pl.col("s_energy_j").filter(pl.col("_mig") >= 0)
    per_device = seen.group_by("cluster", "gpu_uuid", "hour").agg(
        _whole=pl.col("s_energy_j").filter(pl.col("_mig") < 0).first(),
        _n=inst.len(), _hi=inst.max(), _lo=inst.min(),
    ).with_columns(
        # Equal readings on every instance are one device counter repeated (1 mJ of float slack).
        _repeated=(pl.col("_hi") - pl.col("_lo")) <= 1e-3 + 1e-9 * pl.col("_hi").abs(),
    ).with_columns(
        _own=pl.col("_whole").is_null() & (pl.col("_n") > 1) & ~pl.col("_repeated"),
        _device_j=pl.coalesce("_whole", "_hi"),
    )
    return (
        e.filter(pl.col("_mig") >= 0)
        .join(per_device, on=["cluster", "gpu_uuid", "hour"], how="left")
        .select("gpu_id", "hour", device_hour().alias("_gh"), mig_energy_j=pl.when(pl.col("_own"))
                .then(pl.when(pl.col("energy_seen")).then(pl.col("s_energy_j")))
                .otherwise(pl.col("_device_j") * pl.col("_fraction")))
    )


_SUM_COLS = ["n", *(name for name, _ in SIGNALS), *(f"n_{name}" for name, _ in SIGNALS), "energy_j"]


def _window_sums(pieces: pl.LazyFrame, gpu_samples: pl.LazyFrame, hourly: pl.LazyFrame) -> pl.LazyFrame:
    """Add w_<sum> columns: sums over the samples with piece_start <= ts < piece_end.

    Whole-hour pieces (most of them) take the hourly aggregate; the few partial hours at the
    edges of allocations go back to the raw samples of just those (gpu, hour) pairs, so a job that
    starts at 10:30 is judged on 10:30-11:00 only. ``hourly`` is :func:`hourly_energy` output.
    """
    no_device = pieces.filter(pl.col("gpu_id").is_null())
    pieces = pieces.filter(pl.col("gpu_id").is_not_null())
    full_hour = (pl.col("piece_start") == pl.col("hour")) & (pl.col("piece_s") == 3600.0)
    partial = pieces.filter(~full_hour)
    cast = [pl.col(f"w_{c}").cast(pl.Float64).fill_null(0.0) for c in _SUM_COLS]
    return pl.concat([
        full_hour_sums(pieces.filter(full_hour), hourly).with_columns(cast),
        partial_hour_sums(partial, partial_hour_samples(partial, gpu_samples, hourly)).with_columns(cast),
        no_device.with_columns(*(pl.lit(0.0).alias(f"w_{c}") for c in _SUM_COLS), pl.lit(False).alias("w_energy_seen")),
    ], how="diagonal_relaxed")


def full_hour_sums(full: pl.LazyFrame, hourly: pl.LazyFrame) -> pl.LazyFrame:
    """Whole-hour device pieces with their hour's sums from ``hourly`` (:func:`hourly_energy`
    output) as w_<sum> (0 for an hour without samples) and w_energy_seen."""
    return (
        full.with_columns(_gh=device_hour())
        .join(hourly.drop("gpu_id", "hour"), on="_gh", how="left")
        .with_columns(pl.col(f"s_{c}").fill_null(0).alias(f"w_{c}") for c in _SUM_COLS)
        .with_columns(w_energy_seen=pl.col("energy_seen").fill_null(False))
        .drop(*(f"s_{c}" for c in _SUM_COLS), "prev_last", "energy_seen", "_gh")
    )


def partial_hour_samples(partial: pl.LazyFrame, gpu_samples: pl.LazyFrame, hourly: pl.LazyFrame) -> pl.LazyFrame:
    """The raw samples of the (gpu_id, hour) pairs of ``partial`` pieces, each with its weight
    ``_w`` and ``_inc``: the energy counter's increase since the sample before (the previous hour's
    last value, from ``hourly``, for the hour's first; a drop is a reset: the new value; 0 without
    a reading or a predecessor)."""
    # The partial hours with their predecessor's last counter value: one small table, so the raw
    # samples meet a few thousand keys once instead of the whole rollup.
    # Joined, sorted and windowed on the one integer device-hour key (_gh, device_hour).
    keys = partial.select(_gh=device_hour()).unique().join(hourly.select("_gh", "prev_last"), on="_gh", how="left")
    sig = [col for _, col in SIGNALS]
    return (
        gpu_samples.select("gpu_id", "ts", *sig, "energy_total_j", sample_weight(gpu_samples))
        .with_columns(hour=pl.col("ts").dt.truncate("1h"))
        .with_columns(_gh=device_hour())
        .join(keys, on="_gh", how="inner")
        .sort("ts")  # time order within each (gpu_id, hour), all the window below needs (a sort by
        # (_gh, ts) costs 2.6x this one; a window ordered by ts left the rows, so the sums' order, unset)
        .with_columns(
            _prev=pl.col("energy_total_j").forward_fill().shift(1).over("_gh")
            .fill_null(pl.col("prev_last"))
        )
        .with_columns(
            _inc=pl.when(pl.col("energy_total_j").is_null() | pl.col("_prev").is_null()).then(0.0)
            .when(pl.col("energy_total_j") >= pl.col("_prev")).then(pl.col("energy_total_j") - pl.col("_prev"))
            .otherwise(pl.col("energy_total_j"))
        )
    )


def partial_hour_sums(partial: pl.LazyFrame, raw: pl.LazyFrame) -> pl.LazyFrame:
    """Partial-hour pieces with the sums (w_<sum>, w_energy_seen) of the ``raw`` samples
    (:func:`partial_hour_samples`) in [piece_start, piece_end); NULL sums where none lies there."""
    in_piece = (
        partial.select("_pid", "piece_start", "piece_end", _gh=device_hour())
        .join(raw.with_columns(_gh=device_hour()), on="_gh", how="inner")
        .filter((pl.col("ts") >= pl.col("piece_start")) & (pl.col("ts") < pl.col("piece_end")))
        .group_by("_pid")
        .agg(
            pl.col("_w").sum().alias("w_n"),
            *((pl.col(col).clip(0.0, 1.0) * pl.col("_w")).sum().alias(f"w_{name}") for name, col in SIGNALS),
            *(pl.col("_w").filter(pl.col(col).is_not_null()).sum().alias(f"w_n_{name}") for name, col in SIGNALS),
            pl.col("_inc").sum().alias("w_energy_j"),
            (pl.col("energy_total_j").count() > 0).alias("w_energy_seen"),
        )
    )
    return partial.join(in_piece, on="_pid", how="left").with_columns(pl.col("w_energy_seen").fill_null(False))


def partial_hour_keys(pieces: pl.LazyFrame) -> pl.LazyFrame:
    """The (gpu_id, hour) pairs of :func:`allocated_pieces` output that cover less than the whole
    hour on a device: the only GPU-hours whose raw samples attribution still needs when it reads
    the hourly rollup."""
    return (
        pieces.filter(pl.col("gpu_id").is_not_null()
                      & ((pl.col("piece_start") != pl.col("hour")) | (pl.col("piece_s") != 3600.0)))
        .select("gpu_id", "hour").unique()
    )


_PIECE_KEY = ["cluster", "job_id", "gpu_id", "start_time", "hour"]  # one allocated piece (allocated_pieces)


def shared_pieces(pieces: pl.LazyFrame) -> pl.LazyFrame:
    """The keys (cluster, job_id, gpu_id, start_time, hour) of every device piece that overlaps in
    time a piece of another job on the same device: a time-sliced GPU held by several pods at once.
    NVML reports one value for the whole device, so whose activity it is cannot be told; such
    pieces are allocated by their fractions with activity unknown, never the device's activity
    copied to each holder (issue 20). A piece (at most an hour) that overlaps another holder's for
    part of its time is unknown as a whole. With ``_pid`` (:func:`indexed_pieces`) each key keeps it."""
    pid = ["_pid"] if "_pid" in pieces.collect_schema().names() else []  # indexed_pieces: kept, flag_shared's key
    # Only a (gpu_id, hour) with more than one piece can have two holders: those pieces, found on
    # one integer key, are paired with each other on it (a few per key), never every piece.
    several = (pieces.filter(pl.col("gpu_id").is_not_null())
               .select(*_PIECE_KEY, *pid, "piece_start", "piece_end", _gh=device_hour())
               .filter(pl.col("_gh").is_duplicated()))
    other = several.select("_gh", *(pl.col(c).alias(f"{c}_o") for c in ("cluster", "job_id", "piece_start", "piece_end")))
    return (
        several.join(other, on="_gh")
        .filter(((pl.col("job_id") != pl.col("job_id_o")) | (pl.col("cluster") != pl.col("cluster_o")))
                & (pl.col("piece_start") < pl.col("piece_end_o")) & (pl.col("piece_start_o") < pl.col("piece_end")))
        .select(*_PIECE_KEY, *pid).unique(pid or None).with_columns(pl.lit(True).alias("_shared"))
    )


POD_SIGNAL = "gpu_util_per_pod"  # a pod's own utilization on a shared GPU (dcgm-exporter's virtual-GPU mode)


def _activity_from_window() -> list[pl.Expr]:
    signal, ratio = best_of_sums("w_", "w_n_", pl.col("is_mig"))
    # a time-sliced device's activity is nobody's in particular, unless the pod's own was measured
    # (with_pod_activity)
    measured = pl.col("_pod_ratio").is_not_null()
    signal = pl.when(~pl.col("_shared")).then(signal).when(measured).then(pl.lit(POD_SIGNAL))
    ratio = pl.when(~pl.col("_shared")).then(ratio).when(measured).then(pl.col("_pod_ratio"))
    return [signal.alias("activity_signal"), ratio.alias("activity_ratio")]


def with_pod_activity(window: pl.LazyFrame, pod_samples: pl.LazyFrame | None,
                      jobs: pl.LazyFrame | None) -> pl.LazyFrame:
    """Adds ``_pod_ratio`` to the shared pieces whose pod measured its own utilization
    (``pod_samples``: gpu_id, ts, scheduler_job = namespace/pod, gpu_util_ratio — the share of the
    whole device's time the pod's kernels ran), NULL elsewhere.

    The pod's ratio of its own allocation: mean utilization over the piece's samples ÷ the share of
    the device it holds, at most 1 — so active GPU-hours = the device time it really used, never
    more than it was allocated (a pod that runs past its share on a time-sliced GPU is active for
    all of it, not more), and idle = the rest of its share."""
    if pod_samples is None or jobs is None:
        return window.with_columns(_pod_ratio=pl.lit(None, pl.Float64))
    names = jobs.collect_schema().names()
    if "scheduler_job" not in names:
        return window.with_columns(_pod_ratio=pl.lit(None, pl.Float64))
    held = pl.col("device_fraction") * pl.col("alloc_fraction")
    measured = (
        window.filter(pl.col("_shared")).select("_pid", "cluster", "job_id", "gpu_id", "piece_start", "piece_end",
                                                held.alias("_held"))
        .join(jobs.select("cluster", "job_id", "scheduler_job").unique(["cluster", "job_id"]),
              on=["cluster", "job_id"], how="inner")
        .join(pod_samples.select(pl.col("gpu_id").cast(pl.Int32), "ts", "scheduler_job", "gpu_util_ratio"),
              on=["gpu_id", "scheduler_job"], how="inner")
        .filter((pl.col("ts") >= pl.col("piece_start")) & (pl.col("ts") < pl.col("piece_end"))
                & pl.col("gpu_util_ratio").is_not_null())
        .group_by("_pid").agg(pl.col("gpu_util_ratio").mean().alias("_util"), pl.col("_held").first())
        .select("_pid", _pod_ratio=pl.when(pl.col("_held") > 0)
                .then((pl.col("_util") / pl.col("_held")).clip(0.0, 1.0)))
    )
    return window.join(measured, on="_pid", how="left")


def indexed_pieces(pieces: pl.LazyFrame | pl.DataFrame) -> pl.LazyFrame:
    """:func:`allocated_pieces` output with ``_pid`` (row index), materialized: several branches
    read it, and :func:`flag_shared` finds pieces by it."""
    return pieces.lazy().with_row_index("_pid").collect(engine=ENGINE).lazy()


def window_with_mig_energy(pieces: pl.LazyFrame, gpu_samples: pl.LazyFrame, energy: pl.LazyFrame,
                           gpus: pl.LazyFrame) -> pl.LazyFrame:
    """Each piece with its sample sums (``w_*``, :func:`_window_sums`) and ``mig_energy_j``
    (:func:`mig_hourly_energy`: a MIG instance's joules in the piece's hour; NULL on a whole GPU)."""
    return (_window_sums(pieces, gpu_samples, energy)
            .with_columns(_gh=device_hour())
            .join(mig_hourly_energy(energy, gpus).drop("gpu_id", "hour"), on="_gh", how="left")
            .drop("_gh"))


def flag_shared(window: pl.LazyFrame, pieces: pl.LazyFrame) -> pl.LazyFrame:
    """Adds ``_shared``: the piece overlaps another job's on the same device (:func:`shared_pieces`).
    ``pieces`` is :func:`indexed_pieces` output, which ``window`` carries the ``_pid`` of: the shared
    pieces come with their _pid, so none is looked up again by its five-column key (a semi join of
    every piece on it was a sixth of attribution's CPU at 4,096 GPUs)."""
    shared = shared_pieces(pieces).select("_pid").collect(engine=ENGINE)["_pid"].implode()
    return window.with_columns(_shared=pl.col("_pid").is_in(shared))


def _piece_energy_kwh() -> pl.Expr:
    """MIG: the instance's share of its GPU's energy in the hour (mig_hourly_energy), for the
    piece's part of the hour. A whole GPU: its counter over the piece. NULL when unknown."""
    return (pl.when(pl.col("is_mig"))
            .then(pl.col("mig_energy_j") * pl.col("piece_s") / 3600.0 * pl.col("alloc_fraction") / J_PER_KWH)
            .when(pl.col("w_energy_seen"))
            .then(pl.col("w_energy_j") * pl.col("device_fraction") * pl.col("alloc_fraction") / J_PER_KWH)
            .otherwise(None))


def piece_usage(window: pl.LazyFrame) -> pl.LazyFrame:
    """Per piece (:func:`flag_shared` output): activity_signal, activity_ratio (NULL: unknown, no
    reading or a time-sliced device), gpu_hours_active = allocated × ratio, gpu_hours_idle = the
    rest, gpu_hours_unknown = allocated when the ratio is unknown (then active and idle are 0),
    energy_kwh."""
    alloc = pl.col("gpu_hours_allocated")
    known = pl.col("activity_ratio").is_not_null()
    if "_pod_ratio" not in window.collect_schema().names():  # no per-pod measurement offered
        window = window.with_columns(_pod_ratio=pl.lit(None, pl.Float64))
    return (
        window.with_columns(_activity_from_window())
        .with_columns(
            gpu_hours_active=pl.when(known).then(alloc * pl.col("activity_ratio")).otherwise(0.0),
            gpu_hours_unknown=pl.when(~known).then(alloc).otherwise(0.0),
            energy_kwh=_piece_energy_kwh(),
        )
        .with_columns(gpu_hours_idle=pl.when(known).then(alloc - pl.col("gpu_hours_active")).otherwise(0.0),
                      # time-sliced hours whose holder's activity is unknown (not measured per pod)
                      _sliced=pl.col("_shared") & ~known)
    )


def attribute_usage(
    job_allocations: pl.LazyFrame,
    gpus: pl.LazyFrame,
    gpu_samples: pl.LazyFrame,
    *,
    now: datetime,
    start: datetime | None = None,
    end: datetime | None = None,
    jobs: pl.LazyFrame | None = None,
    default_tier: str = DEFAULT_TIER,
    hourly: pl.LazyFrame | None = None,
    pieces: pl.LazyFrame | pl.DataFrame | None = None,
    pod_samples: pl.LazyFrame | None = None,
) -> pl.LazyFrame:
    """Per (cluster, job_id, gpu_id, hour): allocated / active / idle / unknown GPU-hours and energy.

    Columns: cluster, job_id, gpu_id, hour, model, tier, is_mig, allocation_level (device / job),
    gpu_hours_allocated,
    gpu_hours_active, gpu_hours_idle, gpu_hours_unknown, energy_kwh, activity_ratio (mean of the
    signal used, 0..1), activity_signal (sm_active / gr_engine_active / gpu_util, NULL when no
    signal), sample_count, gpu_hours_time_sliced (the part of gpu_hours_unknown on a time-sliced
    device, :func:`shared_pieces`). A piece with no samples is allocated with unknown activity: its
    active and idle hours are 0 and its hours go to ``gpu_hours_unknown``; so is a piece that
    overlaps another job's on the same device (a time-sliced GPU, :func:`shared_pieces`). Energy is the device's
    counter increase over the piece × the device fraction × the allocation fraction (shared GPUs
    split it by allocation fraction); NULL when no energy samples.

    ``jobs`` (optional, recommended): jobs without device allocations then count too, with
    gpu_id NULL, model jobs.gpu_model, tier ``default_tier`` and unknown activity (allocations.py).
    ``hourly`` (optional): the warehouse's ``gpu_hourly`` rollup (:func:`hourly_rollup` shape,
    starting an hour before the range so the first hour's energy has its predecessor); whole
    hours then read it and ``gpu_samples`` need only hold the samples of the partial hours
    (:func:`partial_hour_keys`), which is what keeps a week of 1,000 GPUs fast.
    ``pieces`` (optional): :func:`allocated_pieces` of these same arguments, when the caller
    already cut them (to find the partial hours): not cut a second time.
    ``pod_samples`` (optional): each pod's own utilization on shared devices (``pod_gpu_samples``:
    gpu_id, ts, scheduler_job, gpu_util_ratio); a time-sliced piece whose pod measured it takes it
    (:func:`with_pod_activity`, signal ``gpu_util_per_pod``) instead of unknown.

    Stages: allocated_pieces → indexed_pieces → window_with_mig_energy → flag_shared →
    with_pod_activity → piece_usage → per hour.
    """
    if pieces is None:
        pieces = allocated_pieces(job_allocations, gpus, now=now, start=start, end=end, jobs=jobs,
                                  default_tier=default_tier)
    # Both read by several branches below: computed once here (a lazy plan recomputed the
    # energy of every rollup row for each of them).
    pieces = indexed_pieces(pieces)
    energy = hourly_energy(hourly if hourly is not None else hourly_rollup(gpu_samples)).collect(engine=ENGINE).lazy()
    window = flag_shared(window_with_mig_energy(pieces, gpu_samples, energy, gpus), pieces)
    return _per_hour(piece_usage(with_pod_activity(window, pod_samples, jobs)))


#: attribute_usage sums only the (job, GPU, hour) keys that hold several pieces and takes the
#: others (nearly all) as they are; False: every key through the group-by, the reference the tests
#: compare it with.
SINGLE_PIECES_AS_THEY_ARE = True
_OUT_KEY = ["cluster", "job_id", "gpu_id", "hour"]


def _per_hour(per_piece: pl.LazyFrame) -> pl.LazyFrame:
    """Pieces → one row per (cluster, job_id, gpu_id, hour): sums, the allocation-weighted
    activity ratio. A key with one piece (an allocation row's hour; several only where one job
    holds a device through two allocation rows in the same hour) gets what the group-by gives a
    group of one, computed row by row: the same expressions, without hashing ~1.5 M string keys."""
    alloc = pl.col("gpu_hours_allocated")
    if not SINGLE_PIECES_AS_THEY_ARE:
        return _grouped(per_piece)
    # A hash of the key: a collision only sends a single piece through the group-by (same result).
    dup = pl.struct(*_OUT_KEY).hash().is_duplicated()
    per_piece = per_piece.with_columns(_dup=dup)
    known = pl.col("activity_ratio").is_not_null()
    singles = per_piece.filter(~pl.col("_dup")).select(
        *_OUT_KEY, "model", "tier", "is_mig", "allocation_level",
        *(pl.col(c).fill_null(0.0) if c != "energy_kwh" else pl.col(c) for c in USAGE_COLS),
        # the group-by's Σ(ratio × alloc) / Σ alloc over a group of one, as it computes it
        pl.when(known & (alloc > 0)).then((pl.col("activity_ratio") * alloc) / alloc)
        .otherwise(None).alias("activity_ratio"),
        "activity_signal",
        pl.col("w_n").fill_null(0.0).cast(pl.Int64).alias("sample_count"),
        pl.when(pl.col("_sliced")).then(alloc.fill_null(0.0)).otherwise(0.0).alias("gpu_hours_time_sliced"),
    )
    several = _grouped(per_piece.filter(pl.col("_dup")).drop("_dup"))
    return pl.concat([singles, several], how="vertical_relaxed")


def _grouped(per_piece: pl.LazyFrame) -> pl.LazyFrame:
    """Pieces summed per (cluster, job_id, gpu_id, hour) by a group-by (any number per key)."""
    alloc = pl.col("gpu_hours_allocated")
    return (
        per_piece.group_by(*_OUT_KEY)
        .agg(
            pl.col("model", "tier", "is_mig", "allocation_level").first(),
            pl.col(USAGE_COLS).sum(),
            # allocation-weighted mean over the hour's pieces (usually one)
            pl.when(alloc.filter(pl.col("activity_ratio").is_not_null()).sum() > 0)
            .then((pl.col("activity_ratio") * alloc).sum()
                  / alloc.filter(pl.col("activity_ratio").is_not_null()).sum())
            .otherwise(None)
            .alias("activity_ratio"),
            pl.col("activity_signal").drop_nulls().first(),
            pl.col("w_n").sum().cast(pl.Int64).alias("sample_count"),
            # the part of gpu_hours_unknown on a time-sliced device (showback marks it apart from
            # hours without any signal)
            alloc.filter(pl.col("_sliced")).sum().alias("gpu_hours_time_sliced"),
            pl.col("energy_kwh").is_not_null().any().alias("_has_energy"),
        )
        .with_columns(pl.when(pl.col("_has_energy")).then(pl.col("energy_kwh")).otherwise(None).alias("energy_kwh"))
        .drop("_has_energy")
    )


_NANO = 1e9  # rollup_usage sums in integer nano-units


def _null_aware_sums() -> list[pl.Expr]:
    # energy: NULL when every summed row is NULL; the hour figures are never NULL.
    return [pl.when(pl.col(c).is_not_null().any()).then(pl.col(c).sum()).otherwise(None).alias(c)
            if c == "energy_kwh" else pl.col(c).sum() for c in USAGE_COLS]


def sum_usage(rows: pl.LazyFrame, keys: list[str]) -> pl.LazyFrame:
    """Usage rows (USAGE_COLS, any grain finer than ``keys``) summed by ``keys`` with the same exact
    rule as :func:`rollup_usage` (whole nano-units, energy NULL when none is known) plus
    ``efficiency_ratio``: summing materialized hours gives the digits the range computation gives."""
    out = (rows.with_columns((pl.col(c) * _NANO).round(0).cast(pl.Int64).alias(c) for c in USAGE_COLS)
           .group_by(keys).agg(_null_aware_sums())
           .with_columns((pl.col(c).cast(pl.Decimal(38, 9)) / 1_000_000_000).cast(pl.Float64).alias(c)
                         for c in USAGE_COLS))
    known = pl.col("gpu_hours_allocated") - pl.col("gpu_hours_unknown")
    return out.with_columns(
        efficiency_ratio=pl.when(known > 0).then(pl.col("gpu_hours_active") / known).otherwise(None))


def rollup_usage(
    attribution: pl.LazyFrame,
    jobs: pl.LazyFrame,
    *,
    by: str = "project",
    org_nodes: pl.LazyFrame | None = None,
    per_hour: bool = False,
) -> pl.LazyFrame:
    """Sum attributed usage by ``job``, ``user``, ``project`` or ``node`` (every org tree node).

    Units as in :func:`attribute_usage`; adds ``efficiency_ratio`` = active / (allocated − unknown).
    With ``per_hour`` the ``hour`` column is kept as a key.

    Sums are exact and order-free: each figure is counted in whole nano-units (1e-9 GPU-hour /
    kWh) and summed as integers, so a parallel group-by gives the same digits on every run and a
    node equals the sum of its projects to the last digit. Energy stays NULL where none of the
    summed rows has any (unknown, not zero).
    """
    job_keys = jobs.select("cluster", "job_id", "project", "user_name")
    enriched = attribution.join(job_keys, on=["cluster", "job_id"], how="left").with_columns(
        pl.col("project").fill_null("(no job record)"),
        *((pl.col(c) * _NANO).round(0).cast(pl.Int64).alias(c) for c in USAGE_COLS),
    )
    hour = ["hour"] if per_hour else []
    keys = {"job": ["cluster", "job_id", "project", "user_name"], "user": ["user_name"],
            "project": ["project"], "node": ["project"]}.get(by)
    if keys is None:
        raise ValueError(f"by={by!r}: choose job, user, project or node")
    out = enriched.group_by([*keys, *hour]).agg(_null_aware_sums())
    if by == "node":
        if org_nodes is None:
            raise ValueError("by='node' needs org_nodes")
        out = rollup_to_nodes(out, org_nodes, sum_cols=USAGE_COLS, keys=hour, sum_exprs=_null_aware_sums())
    # Back to float through Decimal: a float division by 1e9 is not correctly rounded in polars.
    out = out.with_columns((pl.col(c).cast(pl.Decimal(38, 9)) / 1_000_000_000).cast(pl.Float64).alias(c)
                           for c in USAGE_COLS)
    known = pl.col("gpu_hours_allocated") - pl.col("gpu_hours_unknown")
    return out.with_columns(
        efficiency_ratio=pl.when(known > 0).then(pl.col("gpu_hours_active") / known).otherwise(None)
    )
