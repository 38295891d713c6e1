"""Wait times from real job records, and why each wait happened. Pure polars: frames in, frames
out, time injected (``now``), no warehouse (the loader is queries.waits_report).

**A wait** is one waiting period of one job row (a requeued Slurm job's runs are rows of their own;
Slurm resets Submit at the requeue): submit → start, in seconds. A job not started by ``now``
counts with its wait so far and says so (``still_waiting``), so starving work is never hidden; a
job that ended without ever starting (cancelled in the queue) waited for nothing and is left out.
A Kueue Workload's wait ends when its quota was reserved (the ``admitted_at`` the loader gives it).
**Time to first GPU** is per scheduler job (all runs of a requeued job): its first submission →
its first start. Quantiles interpolate linearly between order statistics (numpy's default, as the
what-if's waits do), over the jobs of a group.

**The main cause** of each wait, the first that holds, in this order:

1. ``scheduler`` — the scheduler's own reason during the wait is one gpuledger does not model
   (Slurm: Dependency, QOS / association limits, held, BeginTime ...; Kueue: NoMatchingFlavor,
   ExceedsMaxQuota ...): nothing gpuledger weighs would have started it;
2. ``squatters`` — a squatting finding (every GPU of a job idle) was open on the job's pool (its
   cluster and GPU model) during the wait: GPUs it could have had were held idle;
3. ``budget`` — jobs submitted after it started on its pool before it did, and it was unfunded
   for want of budget (no budget, or exhausted): it ranked below them for that;
4. ``fair-share`` — jobs submitted after it started on its pool before it did: capacity went to
   work ranked above it;
5. ``pool-full`` — none of these: every GPU of the kind asked was busy with work that came first.
   Where the pool had room for the job at its submission, the wait is the scheduler's own
   (``scheduler``: its cycle, or a limit it did not name): the GPUs held at its submission plus
   those taken during its wait by work submitted no later than it left room for its own. The pool's capacity: its installed GPUs
   where the inventory knows them, else the most GPUs of that pool seen held at once (a lower bound).

A job that started the moment it was submitted (a wait of 0 s) has cause ``none``.

The scheduler's latest reason during the wait is kept beside (``scheduler_reason``) whatever the
cause, so a reader sees both words.
"""

from __future__ import annotations

from datetime import datetime

import polars as pl

from gpuledger.analytics.pool_pressure import pressure
from gpuledger.rules.job_class import wait_class_expr

CAUSES = ("scheduler", "squatters", "budget", "fair-share", "pool-full", "none")
# the scheduler reasons that say what gpuledger already models (the pool is full, others rank
# above): any other reason is the scheduler's own cause
MODELLED_REASONS = frozenset({"Resources", "Priority", "None", "WaitingForQuota", "Pending"})
ADMITTED = "QuotaReserved"  # a Kueue reason row that ends the wait (gpuledger.ingest.scheduler_reasons)
EVERY = {"day": "1d", "week": "1w"}  # buckets by submission time (a week starts on Monday, UTC)
KEYS = {"project": ["project"], "user": ["project", "user_name"], "class": ["job_class"],
        "project-class": ["project", "job_class"], "job": ["cluster", "job_id"]}
_S = pl.Float64
FOREVER = datetime(9999, 12, 31)  # a job still holding its GPUs: held until then (pool_pressure)

JOB_WAIT_SCHEMA = {
    "cluster": pl.String, "job_id": pl.String, "scheduler_job": pl.String, "project": pl.String,
    "user_name": pl.String, "job_class": pl.String, "gpu_model": pl.String, "gpus": _S,
    "submit_time": pl.Datetime("us"), "start_time": pl.Datetime("us"), "wait_s": _S, "still_waiting": pl.Boolean,
    "first_gpu_s": _S, "first_run": pl.Boolean,
}


def job_waits(jobs: pl.DataFrame, *, now: datetime) -> pl.DataFrame:
    """One row per waiting period (see the module docstring) of ``jobs`` (the ``jobs`` table's
    columns; ``admitted_at`` optional: a Kueue Workload's admission). Seconds throughout."""
    if "admitted_at" not in jobs.columns:
        jobs = jobs.with_columns(admitted_at=pl.lit(None, dtype=pl.Datetime("us")))
    for col, dtype in (("time_limit_s", pl.Int64), ("scheduler_job", pl.String)):
        if col not in jobs.columns:
            jobs = jobs.with_columns(pl.lit(None, dtype=dtype).alias(col))
    now_lit = pl.lit(now, dtype=pl.Datetime("us"))
    start = pl.coalesce(pl.col("start_time"), pl.col("admitted_at"))
    started = start.is_not_null() & (start <= now_lit)
    seconds = lambda a, b: (a - b).dt.total_microseconds().cast(pl.Float64) / 1e6  # noqa: E731
    out = (
        jobs.filter(pl.col("submit_time").is_not_null() & (pl.col("submit_time") <= now_lit))
        # ended without ever starting: cancelled in the queue, not a wait
        .filter(~(start.is_null() & pl.col("end_time").is_not_null() & (pl.col("end_time") <= now_lit)))
        .with_columns(
            start_time=pl.when(started).then(start),
            still_waiting=~started,
            scheduler_job=pl.coalesce("scheduler_job", "job_id"),
            work_s=pl.when(started).then(seconds(pl.coalesce(pl.col("end_time"), now_lit).clip(upper_bound=now_lit),
                                                 start)),
        )
        .with_columns(wait_s=seconds(pl.coalesce("start_time", now_lit), pl.col("submit_time")).clip(lower_bound=0),
                      job_class=wait_class_expr())
    )
    # time to first GPU: per scheduler job, its first submission to its first start
    first = out.group_by("cluster", "scheduler_job").agg(
        pl.col("submit_time").min().alias("_first_submit"), pl.col("start_time").min().alias("_first_start"))
    out = (out.join(first, on=["cluster", "scheduler_job"], how="left")
           .with_columns(first_gpu_s=seconds(pl.coalesce("_first_start", now_lit), pl.col("_first_submit"))
                         .clip(lower_bound=0),
                         first_run=pl.col("submit_time") == pl.col("_first_submit")))
    return out.select(list(JOB_WAIT_SCHEMA)).cast(JOB_WAIT_SCHEMA).sort("submit_time", "cluster", "job_id")


def _same_pool(model_a: str, model_b: str) -> pl.Expr:
    """Two jobs share a pool: the same GPU model, or either names none (any GPU will do)."""
    return pl.col(model_a).is_null() | pl.col(model_b).is_null() | (pl.col(model_a) == pl.col(model_b))


def wait_causes(waits: pl.DataFrame, *, now: datetime, others: pl.DataFrame, squatting: pl.DataFrame,
                unfunded: pl.DataFrame, reasons: pl.DataFrame, capacity: pl.DataFrame | None = None) -> pl.DataFrame:
    """``waits`` (job_waits) with ``cause`` (CAUSES), ``cause_detail`` (the figures behind it, in
    words), ``scheduler_reason`` and ``scheduler_message`` (the scheduler's latest word in the
    wait).

    * ``others``: every job that started: cluster, job_id, gpu_model, gpus, submit_time, start_time,
      end_time;
    * ``squatting``: squatting episodes: cluster, job_id, gpu_model, gpus_idle, first_seen,
      resolved_at (NULL: still open);
    * ``unfunded``: cluster, job_id, unfunded_reason — why gpuledger left the job unfunded during
      its wait (only budget reasons count: "no budget", "budget exhausted at NODE");
    * ``reasons``: scheduler_reasons rows: cluster, job_id, observed_at, scheduler, reason, message;
    * ``capacity``: cluster, gpu_model, gpus installed (whole-GPU equivalents); a pool it lacks
      (or None) counts the most GPUs seen held at once (:func:`observed_capacity`).
    """
    now_lit = pl.lit(now, dtype=pl.Datetime("us"))
    w = waits.with_columns(_end=pl.coalesce("start_time", now_lit), _row=pl.int_range(pl.len()))
    keys = ["_row"]

    said = (w.select("_row", "cluster", "job_id", "submit_time", "_end")
            .join(reasons.filter(pl.col("reason") != ADMITTED), on=["cluster", "job_id"])
            .filter((pl.col("observed_at") >= pl.col("submit_time")) & (pl.col("observed_at") <= pl.col("_end")))
            .sort("observed_at").group_by(keys)
            .agg(pl.col("reason").last().alias("scheduler_reason"), pl.col("message").last().alias("scheduler_message"),
                 pl.col("scheduler").last().alias("_scheduler")))

    squat = (w.select("_row", "cluster", "job_id", "gpu_model", "submit_time", "_end")
             .join(squatting.rename({"job_id": "_squatter", "gpu_model": "_squat_model"}), on="cluster")
             .filter(_same_pool("gpu_model", "_squat_model") & (pl.col("_squatter") != pl.col("job_id")))
             .with_columns(_lo=pl.max_horizontal("submit_time", "first_seen"),
                           _hi=pl.min_horizontal("_end", pl.coalesce("resolved_at", now_lit)))
             .filter(pl.col("_hi") > pl.col("_lo"))
             .group_by(keys).agg(pl.len().alias("_squatters"), pl.col("gpus_idle").sum().alias("_squat_gpus"),
                                 ((pl.col("_hi") - pl.col("_lo")).dt.total_seconds().max() / 60).alias("_squat_min")))

    budget = (w.select("_row", "cluster", "job_id")
              .join(unfunded.filter(pl.col("unfunded_reason").str.contains("budget")), on=["cluster", "job_id"])
              .group_by(keys).agg(pl.col("unfunded_reason").first()))

    # what the pool's other started jobs did during each wait, a pool at a time, counted over
    # quadrants (analytics.pool_pressure): pairing every wait with every job ran out of memory at
    # fleet size
    mine = w.select("_row", "cluster", "job_id", "gpu_model", "submit_time", "_end")
    theirs = others.select(pl.col("cluster").alias("_other_cluster"), pl.col("job_id").alias("_other"),
                           pl.col("gpu_model").alias("_other_model"), pl.col("gpus").cast(_S).alias("_other_gpus"),
                           pl.col("submit_time").alias("_other_submit"), pl.col("start_time").alias("_other_start"),
                           pl.col("end_time").fill_null(FOREVER).alias("_other_end"))
    pressed = pool_pressure(mine, theirs)
    overtaken = pressed.filter(pl.col("_overtaken").is_not_null()).select(*keys, "_overtaken")

    # the pool's GPUs held by started work at the job's submission, where its capacity is known
    room = pl.DataFrame(schema={"_row": pl.Int64, "_free": _S, "_capacity": _S})
    seen = observed_capacity(others)
    if capacity is not None and capacity.height:
        seen = seen.join(capacity.select("cluster", "gpu_model"), on=["cluster", "gpu_model"], how="anti",
                         nulls_equal=True)
        capacity = pl.concat([capacity.select("cluster", "gpu_model", pl.col("gpus").cast(_S)), seen])
    else:
        capacity = seen
    if capacity.height:
        # held at its submission, or taken during its wait by work submitted no later than it
        held = pressed.select(*keys, "_held")
        installed = (w.select("_row", "cluster", "gpu_model")
                     .join(capacity.rename({"gpu_model": "_cap_model", "gpus": "_cap_gpus"}), on="cluster")
                     .filter(_same_pool("gpu_model", "_cap_model"))
                     .group_by(keys).agg(pl.col("_cap_gpus").sum().alias("_capacity")))
        room = (installed.join(held, on=keys, how="left")
                .select("_row", (pl.col("_capacity") - pl.col("_held").fill_null(0)).alias("_free"),
                        pl.col("_capacity").cast(_S)).cast({"_row": pl.Int64, "_free": _S}))
    out = (w.join(said, on=keys, how="left").join(squat, on=keys, how="left")
           .join(budget, on=keys, how="left").join(overtaken, on=keys, how="left")
           .join(room, on=keys, how="left"))
    had_room = pl.col("_free").is_not_null() & (pl.col("_free") >= pl.col("gpus") - 1e-9)
    own = pl.col("scheduler_reason").is_not_null() & ~pl.col("scheduler_reason").is_in(list(MODELLED_REASONS))
    who = pl.when(pl.col("_scheduler") == "kueue").then(pl.lit("Kueue")).otherwise(pl.lit("Slurm"))
    pool = pl.coalesce("gpu_model", pl.lit("GPU"))
    out = out.with_columns(
        cause=pl.when(pl.col("wait_s") <= 0).then(pl.lit("none"))
        .when(own).then(pl.lit("scheduler"))
        .when(pl.col("_squatters").is_not_null()).then(pl.lit("squatters"))
        .when(pl.col("unfunded_reason").is_not_null() & pl.col("_overtaken").is_not_null()).then(pl.lit("budget"))
        .when(pl.col("_overtaken").is_not_null()).then(pl.lit("fair-share"))
        .when(had_room).then(pl.lit("scheduler"))
        .otherwise(pl.lit("pool-full")),
        cause_detail=pl.when(pl.col("wait_s") <= 0).then(pl.lit("started when submitted"))
        .when(own).then(pl.format("{} says {}", who, pl.col("scheduler_reason")))
        .when(pl.col("_squatters").is_not_null())
        .then(pl.format("{} squatting job(s) held {} idle {} GPU(s) for up to {} min of the wait",
                        pl.col("_squatters"), pl.col("_squat_gpus").fill_null(0), pool, pl.col("_squat_min").round(1)))
        .when(pl.col("unfunded_reason").is_not_null() & pl.col("_overtaken").is_not_null())
        .then(pl.format("unfunded ({}): {} later job(s) started first on {}", pl.col("unfunded_reason"),
                        pl.col("_overtaken"), pool))
        .when(pl.col("_overtaken").is_not_null())
        .then(pl.format("{} later job(s) started first on {}: ranked above it", pl.col("_overtaken"), pool))
        .when(had_room).then(pl.format("{} of {} {} GPUs were free for it: the scheduler's own delay",
                                       pl.col("_free").round(2), pl.col("_capacity").round(2), pool))
        .otherwise(pl.format("every {} busy with work that came first", pool)),
    )
    return out.select(*waits.columns, "cause", "cause_detail", "scheduler_reason", "scheduler_message")


def pool_pressure(mine: pl.DataFrame, theirs: pl.DataFrame) -> pl.DataFrame:
    """pool_pressure.pressure a pool at a time: a wait's pool is its cluster's jobs of its GPU
    model or of none named (all of its cluster when it names none)."""
    parts = [pl.DataFrame(schema={"_row": pl.Int64, "_overtaken": pl.UInt32, "_held": _S})]
    for (cluster,), in_cluster in mine.partition_by("cluster", as_dict=True).items():
        of_cluster = theirs.filter(pl.col("_other_cluster") == cluster)
        for (model,), waiting in in_cluster.partition_by("gpu_model", as_dict=True).items():
            pool = of_cluster if model is None else of_cluster.filter(
                pl.col("_other_model").is_null() | (pl.col("_other_model") == model))
            parts.append(pressure(waiting, pool).cast({"_row": pl.Int64}))
    return pl.concat(parts)


def observed_capacity(others: pl.DataFrame) -> pl.DataFrame:
    """Per cluster and GPU model: the most GPUs held at once by ``others`` (started jobs: gpus,
    start_time, end_time NULL = still held) — a lower bound of the pool's capacity."""
    if not others.height:
        return pl.DataFrame(schema={"cluster": pl.String, "gpu_model": pl.String, "gpus": _S})
    starts = others.select("cluster", "gpu_model", pl.col("start_time").alias("t"), pl.col("gpus").cast(_S).alias("d"))
    ends = others.filter(pl.col("end_time").is_not_null()).select(
        "cluster", "gpu_model", pl.col("end_time").alias("t"), (-pl.col("gpus").cast(_S)).alias("d"))
    # at one instant an end frees GPUs before a start takes them (d ascending: negatives first)
    events = pl.concat([starts, ends]).sort("cluster", "gpu_model", "t", "d", nulls_last=True)
    return (events.with_columns(held=pl.col("d").cum_sum().over(["cluster", "gpu_model"], order_by=["t", "d"]))
            .group_by("cluster", "gpu_model").agg(pl.col("held").max().alias("gpus"))
            .sort("cluster", "gpu_model", nulls_last=True))


def wait_summary(waits: pl.DataFrame, *, by: str = "project", every: str | None = None) -> pl.DataFrame:
    """Per group (``by``: project, user, class or job) and, with ``every`` (day / week), per
    bucket of submission time: jobs, still waiting, p50 / p90 / max wait and p50 / p90 time to first
    GPU (seconds), and the causes counted (``causes``: needs wait_causes' column) with the commonest
    among the jobs that waited (``main_cause``; "none" when none did)."""
    keys = list(KEYS[by])
    frame = waits
    if every is not None:
        frame = frame.with_columns(bucket=pl.col("submit_time").dt.truncate(EVERY[every]))
        keys = ["bucket", *keys]
    first = pl.col("first_gpu_s").filter(pl.col("first_run"))
    aggs = [pl.len().alias("jobs"), pl.col("still_waiting").sum().cast(pl.Int64).alias("still_waiting"),
            pl.col("wait_s").quantile(0.5, interpolation="linear").alias("wait_p50_s"),
            pl.col("wait_s").quantile(0.9, interpolation="linear").alias("wait_p90_s"),
            pl.col("wait_s").max().alias("wait_max_s"),
            first.quantile(0.5, interpolation="linear").alias("first_gpu_p50_s"),
            first.quantile(0.9, interpolation="linear").alias("first_gpu_p90_s")]
    out = frame.group_by(keys).agg(aggs)
    if "cause" in frame.columns:  # "pool-full 3, fair-share 1": most first, then by name
        counted = (frame.group_by([*keys, "cause"]).len()
                   .sort([*keys, "len", "cause"], descending=[*([False] * len(keys)), True, False], nulls_last=True)
                   .group_by(keys, maintain_order=True)
                   .agg((pl.col("cause") + pl.lit(" ") + pl.col("len").cast(pl.String)).str.join(", ").alias("causes"),
                        # the commonest cause of the jobs that waited ("none" only when none did)
                        pl.col("cause").filter(pl.col("cause") != "none").first().fill_null("none")
                        .alias("main_cause")))
        out = out.join(counted, on=keys, how="left", nulls_equal=True)
    return out.sort(keys, nulls_last=True)
