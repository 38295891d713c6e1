"""A run's figures. Every figure states its unit; GPU-hours are whole-GPU equivalents × hours.

* delivery per project — :func:`gpuledger.analytics.fairshare.delivery` (the live definition:
  owed = share of capacity capped hour by hour at the project's demand, delivered = min(allocated,
  owed) settled per usage window W, as fair share promises it) over the run's own jobs and
  allocations; ``worst_delivery_ratio`` is the lowest among projects that were owed anything
  (the hour-by-hour figure beside it: ``worst_delivery_ratio_hourly``; with each period's
  shortfall carried into the next as the delivery balance does, analytics.delivery_balance:
  ``delivery_ratio_carried`` = 1 − what is still owed at the end ÷ owed, and its worst team);
* occupancy — allocated ÷ installed GPU-hours;
* useful GPU-hours — active GPU-hours (allocated × activity ratio) of work that was kept: the
  active part of work thrown away by preemptions is left out;
* waits — first start − submission, hours, p50 / p90 per job class; a job never started counts
  with its wait so far (a lower bound), so starving work is not hidden; a session its user gave
  up on (not started in its patience, gpuledger.rules.job_class) with that patience, and counted
  in ``sessions_given_up``;
* preemptions, and the allocated GPU-hours of work they threw away;
* squatted GPU-hours — allocated GPU-hours of jobs whose GPUs were all idle (activity under the
  idle threshold) past the start-up grace;
* Ai2's measures (issue 34, :func:`outcome_figures`): teams at ≥ 0.95 of owed, burst (allocated
  GPU-hours above owed ÷ allocated), waits in seconds per job class by what the work is
  (:func:`wait_class`), GPU-hours reclaimed from squatters, and per settlement period capacity,
  owed, occupied and delivered GPU-hours with the ceiling of delivered ÷ owed they allow; and
  each team's own ceiling on the pools its jobs asked for (:mod:`gpuledger.whatif.team_ceiling`,
  ``ceiling_ratio_pools`` per project, the lowest as ``worst_team_ceiling``); and the debug jobs'
  wait p90 the rules force (``wait_p90_seconds_debug_forced``: at its submission every device of
  the job's pool is held by exempt work or funded work inside its minimum runtime; engine._forced_wait).
"""

from __future__ import annotations

from datetime import timedelta

import polars as pl

from gpuledger.analytics import fairshare
from gpuledger.analytics.allocations import DEFAULT_TIER
from gpuledger.analytics.delivery_balance import end_balances
from gpuledger.rules import job_class as job_class_rule
from gpuledger.rules.job_class import DEBUG_MAX_GPUS, DEBUG_MAX_S, KIND_CLASSES, WAIT_CLASSES  # noqa: F401
from gpuledger.warehouse.job_columns import job_schema
from gpuledger.whatif import team_ceiling
from gpuledger.whatif.model import JobOutcome, RunResult, SimJob

SMALL, MEDIUM, LARGE = "small", "medium", "large"
SMALL_MAX_GPUS = 1.0  # a debug job: one GPU or less ...
SMALL_MAX_HOURS = 2.0  # ... for at most two hours
LARGE_MIN_GPUS = 8.0


def job_class(job: SimJob) -> str:
    """small (≤ 1 GPU and ≤ 2 h: debug work), large (≥ 8 GPUs), else medium."""
    if job.gpus <= SMALL_MAX_GPUS + 1e-9 and job.work_s <= SMALL_MAX_HOURS * 3600:
        return SMALL
    if job.gpus >= LARGE_MIN_GPUS - 1e-9:
        return LARGE
    return MEDIUM


def _quantile(values: list[float], q: float) -> float | None:
    """Linear interpolation between order statistics (numpy's default)."""
    if not values:
        return None
    v = sorted(values)
    pos = (len(v) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def waited_s(o: JobOutcome, horizon: int) -> int:
    """Seconds from submission to first start; a job never started to when its user gave up (a
    session: its patience), else to the run's end (a lower bound)."""
    end = o.first_start_s if o.first_start_s is not None else o.given_up_s if o.given_up_s is not None else horizon
    return max(0, end - o.job.submit_s)


def idle_seconds(job: SimJob, p0: float, p1: float, threshold: float) -> float:
    """Seconds of progress [p0, p1) with activity under ``threshold``."""
    total, t = 0.0, p0
    while t < p1:
        i = int(t // 3600)
        edge = min(p1, (i + 1) * 3600) if i < len(job.activity) else p1
        if job.activity_at(t) < threshold:
            total += edge - t
        t = edge
    return total


def squatted_gpu_hours(outcomes: list[JobOutcome], *, threshold: float, grace_s: float) -> float:
    total = 0.0
    for o in outcomes:
        for s in o.segments:
            p_from = s.progress_start_s + grace_s
            if p_from < s.progress_end_s:
                total += o.job.gpus * idle_seconds(o.job, p_from, s.progress_end_s, threshold) / 3600
    return total


def frames(result: RunResult):
    """(jobs, job_allocations, gpus) in the warehouse's shapes, for the analytics."""
    origin = result.trace.origin
    at = lambda s: None if s is None else origin + timedelta(seconds=s)
    jobs, allocs = [], []
    for o in result.outcomes:
        j = o.job
        jobs.append(
            (
                j.cluster,
                j.job_id,
                j.project,
                j.kind,
                j.pool[1],
                float(j.gpus),
                j.min_runtime_s,
                at(j.submit_s),
                at(o.first_start_s),
                at(o.stopped_s),
                "whatif",
            )
        )
        for s in o.segments:
            for d in s.devices:
                allocs.append((j.cluster, j.job_id, d, at(s.start_s), at(s.end_s), float(j.unit_size)))
    jobs_f = pl.DataFrame(
        jobs,
        orient="row",
        schema=job_schema("cluster", "job_id", "project", "kind", "gpu_model", "gpus", "min_runtime_s",
                          "submit_time", "start_time", "end_time", "source"),
    )
    alloc_f = pl.DataFrame(
        allocs,
        orient="row",
        schema={
            "cluster": pl.String,
            "job_id": pl.String,
            "gpu_id": pl.Int32,
            "start_time": pl.Datetime("us"),
            "end_time": pl.Datetime("us"),
            "gpu_fraction": pl.Float64,
        },
    )
    devs = result.trace.inventory.devices
    gpus_f = pl.DataFrame(
        {
            "gpu_id": [d.device_id for d in devs],
            "cluster": [d.pool[0] for d in devs],
            "gpu_uuid": [d.gpu_uuid for d in devs],
            "mig_instance_id": [(-1 if d.pool[2] is None else i) for i, d in enumerate(devs)],
            "host": ["whatif"] * len(devs),
            "model": [d.pool[1] for d in devs],
            "mig_profile": [d.pool[2] for d in devs],
            "gpu_fraction": [float(d.fraction) for d in devs],
            "pricing_tier": [d.tier for d in devs],
            "first_seen": [None] * len(devs),
            "last_seen": [None] * len(devs),
            "retired_at": [None] * len(devs),
        },
        schema_overrides={
            "gpu_id": pl.Int32,
            "first_seen": pl.Datetime("us"),
            "last_seen": pl.Datetime("us"),
            "retired_at": pl.Datetime("us"),
            "mig_profile": pl.String,
        },
    )
    return jobs_f, alloc_f, gpus_f


def project_delivery(result: RunResult, org_nodes, settle: timedelta | None = None, *, periods: bool = False,
                     exempt=None):
    """Per project (leaves): owed, allocated, delivered GPU-hours and delivery_ratio, delivered
    settled per ``settle`` (the usage window; None: the whole run is one period) — the stages of
    analytics.fairshare.delivery. ``periods``: also the settlement periods' totals (see
    :func:`settlement_periods`; ``exempt``, a predicate on jobs: with exempt work's share), as
    (frame, periods)."""
    jobs_f, alloc_f, gpus_f = frames(result)
    start = result.trace.origin
    end = start + timedelta(seconds=result.trace.horizon_s)
    hourly = fairshare.owed_hourly(
        fairshare.entitled_hourly(org_nodes, gpus_f.lazy(), start=start, end=end),
        fairshare.demand_hourly(jobs_f.lazy(), start=start, end=end, now=end),
        fairshare.allocated_hourly(jobs_f.lazy(), alloc_f.lazy(), gpus_f.lazy(), start=start, end=end, now=end,
                                   default_tier=DEFAULT_TIER),
    ).collect()
    per_project = fairshare.settled_per_project(hourly.lazy(), start=start, end=end, settle=settle)
    out = fairshare.delivery_ratios(per_project, org_nodes).collect()
    # the same hours with each period's shortfall carried into the next (analytics.delivery_balance):
    # what is still owed at the end of the run
    balance = end_balances(hourly.lazy(), period=settle or (end - start), anchor=start).collect()
    out = out.join(balance.rename({"project": "node"}), on="node", how="left").with_columns(
        pl.col("gpu_hours_balance_end").fill_null(0.0))
    leaves = set(org_nodes.filter(~pl.col("node").is_in(org_nodes["parent"].drop_nulls().implode()))["node"])
    deliv = (
        out.filter(pl.col("node").is_in(sorted(leaves)))
        .select(
            pl.col("node").alias("project"),
            "gpu_hours_entitled",
            "gpu_hours_demand",
            "gpu_hours_owed",
            "gpu_hours_allocated",
            "gpu_hours_delivered",
            "delivery_ratio",
            "gpu_hours_delivered_hourly",
            "delivery_ratio_hourly",
            "gpu_hours_balance_end",
            # clipped: a project never served owes its whole owed, to the last float digit or one past it
            delivery_ratio_carried=pl.when(pl.col("gpu_hours_owed") > 0)
            .then((pl.col("gpu_hours_owed") - pl.col("gpu_hours_balance_end")).clip(lower_bound=0.0)
                  / pl.col("gpu_hours_owed")).otherwise(None),
        )
        .sort("project")
    )
    if not periods:
        return deliv
    held = exempt_gpu_hours(result.outcomes, exempt, settle=settle, horizon_s=result.trace.horizon_s)
    period_s = int((settle or (end - start)).total_seconds())
    owed = hourly.group_by("project", _period(start, period_s)).agg(pl.col("gpu_hours_owed").sum())
    ceilings = team_ceiling.team_ceilings(owed, team_ceiling.reachable_gpu_hours(result, exempt, period_s=period_s))
    deliv = deliv.join(ceilings, on="project", how="left")
    return deliv, settlement_periods(hourly, start=start, end=end, settle=settle, exempt=held)


def _period(start, period_s: float) -> pl.Expr:
    """``period``: the settlement period an hourly row falls in (whole periods of ``period_s`` from ``start``)."""
    return ((pl.col("hour") - pl.lit(start)).dt.total_seconds() // period_s).cast(pl.Int64).alias("period")


def settlement_periods(hourly, *, start, end, settle: timedelta | None, exempt=None) -> list[dict]:
    """Per settlement period (a usage window W from ``start``): installed capacity, Σ owed, Σ
    allocated (the occupied capacity) and Σ delivered GPU-hours. Delivered can never pass
    min(owed, allocated) in a period — the arithmetic ceiling of delivered ÷ owed that month.

    ``exempt`` (project, period, gpu_hours_exempt: :func:`exempt_gpu_hours`) adds what exempt work
    (on top, never preempted: the site's rule, not the policy's choice) held: ``exempt_gpu_hours``,
    ``exempt_above_owed_gpu_hours`` (Σ max(0, exempt − owed) per team) and
    ``deliverable_gpu_hours``, the most any order of the rest of the occupied GPU-hours could
    deliver with exempt work where it ran: Σ min(owed, exempt) + min(Σ max(0, owed − exempt),
    occupied − Σ exempt) — see :func:`ceiling_ratio`."""
    period_s = (end - start).total_seconds() if settle is None else settle.total_seconds()
    per_team = (
        hourly.group_by("project", _period(start, period_s))
        .agg(pl.col("gpu_hours_entitled", "gpu_hours_owed", "gpu_hours_allocated").sum())
        .with_columns(delivered=pl.min_horizontal("gpu_hours_allocated", "gpu_hours_owed"))
    )
    extra = []
    if exempt is not None:
        # exempt GPU-hours are part of the team's allocation: clipped to it (the two sum hours alike)
        per_team = per_team.join(exempt, on=["project", "period"], how="left").with_columns(
            ex=pl.min_horizontal(pl.col("gpu_hours_exempt").fill_null(0.0), "gpu_hours_allocated"))
        extra = [
            pl.col("ex").sum().alias("exempt_gpu_hours"),
            (pl.col("ex") - pl.col("gpu_hours_owed")).clip(lower_bound=0.0).sum().alias("exempt_above_owed_gpu_hours"),
            pl.min_horizontal("ex", "gpu_hours_owed").sum().alias("_owed_met_by_exempt"),
            (pl.col("gpu_hours_owed") - pl.col("ex")).clip(lower_bound=0.0).sum().alias("_owed_left"),
        ]
    per = (
        per_team.group_by("period")
        .agg(
            capacity_gpu_hours=pl.col("gpu_hours_entitled").sum(),
            owed_gpu_hours=pl.col("gpu_hours_owed").sum(),
            allocated_gpu_hours=pl.col("gpu_hours_allocated").sum(),
            delivered_gpu_hours=pl.col("delivered").sum(),
            *extra,
        )
        .sort("period")
    )
    if exempt is not None:
        per = per.with_columns(deliverable_gpu_hours=pl.col("_owed_met_by_exempt") + pl.min_horizontal(
            "_owed_left", (pl.col("allocated_gpu_hours") - pl.col("exempt_gpu_hours")).clip(lower_bound=0.0)),
        ).drop("_owed_met_by_exempt", "_owed_left")
    return [
        {"period_start": f"{start + timedelta(seconds=r['period'] * period_s):%Y-%m-%d}", **{
            k: float(v or 0.0) for k, v in r.items() if k != "period"}}
        for r in per.iter_rows(named=True)
    ]


def ceiling_ratio(periods: list[dict], *, exempt_where_it_ran: bool = False) -> float | None:
    """Σ min(owed, occupied) ÷ Σ owed over the settlement periods: the best delivered ÷ owed any
    order of the same occupied GPU-hours could give. ``exempt_where_it_ran``: the best any order of
    the occupied GPU-hours other than exempt work's could give (Σ deliverable ÷ Σ owed): exempt
    work above its team's owed is hours no other team can be given (None without the exempt split)."""
    owed = sum(p["owed_gpu_hours"] for p in periods)
    if owed <= 1e-9:
        return None
    if exempt_where_it_ran:
        deliverable = period_sum(periods, "deliverable_gpu_hours")
        return None if deliverable is None else deliverable / owed
    return sum(min(p["owed_gpu_hours"], p["allocated_gpu_hours"]) for p in periods) / owed


def period_sum(periods: list[dict], key: str) -> float | None:
    """Σ ``key`` over the settlement periods, or None when a period lacks it (no exempt split)."""
    if not periods or any(key not in p for p in periods):
        return None
    return sum(p[key] for p in periods)


def exempt_gpu_hours(outcomes: list[JobOutcome], exempt, *, settle: timedelta | None, horizon_s: int):
    """(project, period, gpu_hours_exempt): GPU-hours the jobs ``exempt(job)`` holds true for held in
    each settlement period (segments split at the periods' edges), or None without a predicate."""
    if exempt is None:
        return None
    period_s = horizon_s if settle is None else int(settle.total_seconds())
    held: dict[tuple[str, int], float] = {}
    for o in outcomes:
        if not exempt(o.job):
            continue
        for s in o.segments:
            t = s.start_s
            while t < s.end_s:
                k = t // period_s
                edge = min(s.end_s, (k + 1) * period_s)
                held[(o.job.project, k)] = held.get((o.job.project, k), 0.0) + o.job.gpus * (edge - t) / 3600
                t = edge
    return pl.DataFrame(
        {"project": [p for p, _ in held], "period": [k for _, k in held], "gpu_hours_exempt": list(held.values())},
        schema={"project": pl.String, "period": pl.Int64, "gpu_hours_exempt": pl.Float64},
    )


# Job classes for waits by what the work is: one rule with the real-history waits
# (gpuledger.rules.job_class); the names stay importable from here for the what-if's callers.
TEAM_TARGET_RATIO = 0.95  # Ai2: 13 of 15 teams at >= 95 % of what they were owed


def wait_class(job: SimJob) -> str:
    """The job's class for waits (gpuledger.rules.job_class.wait_class: debug, interactive, batch,
    training, inference, other)."""
    return job_class_rule.wait_class(job.kind, job.gpus, job.time_limit_s, job.work_s)


def reclaimed_gpu_hours(outcomes: list[JobOutcome], horizon_s: int) -> float:
    """GPU-hours reclaimed squatters would still have held: the rest of their recorded runtime
    from the reclaim, up to the run's end."""
    total = 0.0
    for o in outcomes:
        for s in o.segments:
            if s.ended_by == "squatter-reclaimed":
                rest = min(o.job.work_s - s.progress_end_s, horizon_s - s.end_s)
                total += o.job.gpus * max(0.0, rest) / 3600
    return total


def outcome_figures(result: RunResult, deliv, periods: list[dict]) -> dict:
    """Ai2's measures of one run: teams at >= 95 % of owed, burst (share of allocated GPU-hours
    above owed, settled per period), waits per job class in seconds, squatted GPU-hours
    reclaimed, and the ceilings of delivered ÷ owed (with exempt work where it ran, when the
    periods carry its split)."""
    owed = deliv.filter(deliv["gpu_hours_owed"] > 1e-9)
    allocated = float(deliv["gpu_hours_allocated"].sum()) if deliv.height else 0.0
    delivered = float(deliv["gpu_hours_delivered"].sum()) if deliv.height else 0.0
    out = {
        "teams_owed": owed.height,
        "teams_at_95": int((owed["delivery_ratio"] >= TEAM_TARGET_RATIO - 1e-9).sum()) if owed.height else 0,
        "burst_ratio": (allocated - delivered) / allocated if allocated > 1e-9 else None,
        "reclaimed_gpu_hours": reclaimed_gpu_hours(result.outcomes, result.trace.horizon_s),
        "ceiling_delivery_ratio": ceiling_ratio(periods),
        "ceiling_exempt_delivery_ratio": ceiling_ratio(periods, exempt_where_it_ran=True),
        "exempt_above_owed_gpu_hours": period_sum(periods, "exempt_above_owed_gpu_hours"),
        "settlement": periods,
    }
    if "ceiling_ratio_pools" in owed.columns and owed.height:
        # each team's own bound on its pools (team_ceiling): which teams no order could bring to 0.95
        reach = owed["ceiling_ratio_pools"].drop_nulls()
        out["worst_team_ceiling"] = float(reach.min()) if reach.len() else None
        out["teams_reachable_95"] = int((reach >= TEAM_TARGET_RATIO - 1e-9).sum())
    waits: dict[str, list[float]] = {c: [] for c in WAIT_CLASSES}
    horizon = result.trace.horizon_s
    for o in result.outcomes:
        if o.job.submit_s < horizon:
            waits[wait_class(o.job)].append(float(waited_s(o, horizon)))
    out["sessions_given_up"] = sum(1 for o in result.outcomes if o.given_up_s is not None)
    for c in WAIT_CLASSES:
        out[f"wait_p50_seconds_{c}"] = _quantile(waits[c], 0.5)
        out[f"wait_p90_seconds_{c}"] = _quantile(waits[c], 0.9)
        out[f"jobs_{c}"] = len(waits[c])
    # the part of debug jobs' waits the rules force (engine._forced_wait): the p90 no order of the
    # queue can go below without holding devices idle for them
    forced = [float(o.forced_wait_s) for o in result.outcomes
              if o.forced_wait_s is not None and o.job.submit_s < horizon]
    out["wait_p90_seconds_debug_forced"] = _quantile(forced, 0.9)
    out["jobs_debug_forced"] = sum(1 for f in forced if f > 0)
    return out


def summarize(result: RunResult, org_nodes, squatting, settle: timedelta | None = None, exempt=None) -> dict:
    """The figures of one run (see the module docstring), keyed with their units. ``settle``:
    the period delivery is settled over (engine.effective_policy's usage window); ``exempt``: the
    predicate of exempt jobs (engine.exempt_rule), for the ceiling with exempt work where it ran."""
    trace = result.trace
    hours = trace.horizon_s / 3600
    capacity = trace.inventory.physical_gpus() * hours
    allocated = active = lost = lost_active = 0.0
    waits: dict[str, list[float]] = {SMALL: [], MEDIUM: [], LARGE: []}
    started = {SMALL: 0, MEDIUM: 0, LARGE: 0}
    preemptions = done = reclaimed = abandoned = 0
    for o in result.outcomes:
        j = o.job
        for s in o.segments:
            allocated += j.gpus * (s.end_s - s.start_s) / 3600
            active += j.gpus * j.active_seconds(s.progress_start_s, s.progress_end_s) / 3600
        lost += o.lost_gpu_hours
        lost_active += o.lost_active_gpu_hours
        preemptions += o.preemptions
        done += o.done_s is not None
        reclaimed += o.reclaimed
        abandoned += o.abandoned
        c = job_class(j)
        if j.submit_s < trace.horizon_s:
            started[c] += o.first_start_s is not None
            waits[c].append(waited_s(o, trace.horizon_s) / 3600)
    deliv, periods = project_delivery(result, org_nodes, settle, periods=True, exempt=exempt)
    owed = deliv.filter(deliv["gpu_hours_owed"] > 1e-9)
    worst = owed.sort("delivery_ratio", "project").row(0, named=True) if owed.height else None
    worst_h = owed.sort("delivery_ratio_hourly", "project").row(0, named=True) if owed.height else None
    # to 9 places before ranking: the carried sums' last float digit differs run to run, and a tie
    # must go to the same project every time (by name)
    worst_c = (owed.sort(pl.col("delivery_ratio_carried").round(9), "project").row(0, named=True)
               if owed.height else None)
    total_owed = float(owed["gpu_hours_owed"].sum()) if owed.height else 0.0
    out = {
        "policy": result.policy,
        "capacity_gpu_hours": capacity,
        "allocated_gpu_hours": allocated,
        "occupancy_ratio": allocated / capacity if capacity else None,
        "active_gpu_hours": active,
        "useful_gpu_hours": active - lost_active,
        "owed_gpu_hours": total_owed,
        "delivered_gpu_hours": float(owed["gpu_hours_delivered"].sum()) if owed.height else 0.0,
        "delivery_ratio": (float(owed["gpu_hours_delivered"].sum()) / total_owed) if total_owed else None,
        "worst_delivery_ratio": None if worst is None else worst["delivery_ratio"],
        "worst_project": None if worst is None else worst["project"],
        "delivery_ratio_hourly": (float(owed["gpu_hours_delivered_hourly"].sum()) / total_owed) if total_owed else None,
        "worst_delivery_ratio_hourly": None if worst_h is None else worst_h["delivery_ratio_hourly"],
        "worst_project_hourly": None if worst_h is None else worst_h["project"],
        # shortfalls carried period to period (the delivery balance): Σ owed − what is still owed at the end
        "delivery_ratio_carried": (max(0.0, total_owed - float(owed["gpu_hours_balance_end"].sum())) / total_owed
                                   if total_owed else None),
        "worst_delivery_ratio_carried": None if worst_c is None else worst_c["delivery_ratio_carried"],
        "worst_project_carried": None if worst_c is None else worst_c["project"],
        "preemptions": preemptions,
        "lost_gpu_hours": lost,
        "squatted_gpu_hours": squatted_gpu_hours(
            result.outcomes, threshold=squatting.idle_threshold_ratio, grace_s=squatting.grace_minutes * 60
        ),
        "squatters_reclaimed": reclaimed,
        # preempted for waiting work while idle through their last grace: their owners had left them (engine._left_idle)
        "idle_jobs_not_resubmitted": abandoned,
        "jobs_done": done,
        "jobs": len(result.outcomes),
    }
    for c in (SMALL, MEDIUM, LARGE):
        out[f"wait_p50_hours_{c}"] = _quantile(waits[c], 0.5)
        out[f"wait_p90_hours_{c}"] = _quantile(waits[c], 0.9)
        out[f"jobs_{c}"] = len(waits[c])
        out[f"jobs_started_{c}"] = started[c]
    out.update(outcome_figures(result, deliv, periods))
    return out, deliv
