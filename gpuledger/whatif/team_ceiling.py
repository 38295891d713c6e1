"""Each team's own ceiling of delivered ÷ owed: what it could have been given on the pools its jobs
asked for.

A job runs only in its pool (a model, a MIG profile), and exempt work runs on top there, never
preempted. So in each pool, at each instant, a team can hold at most the smaller of its demand
there (GPUs of its jobs submitted and not finished: waiting or running) and the pool's capacity
less the other teams' exempt work running there. Summed over its pools and a settlement period,
that is the most GPU-hours any scheduler that cannot move a job to another pool could allocate the
team; delivered in the period can pass neither it nor what the team is owed. A team's ceiling is
Σ min(owed, reachable) ÷ Σ owed over the periods. Each team's is its own bound (every other team
could not be given the same GPUs at once), so it says which teams no policy could bring to a
target, not what all could reach together. Pure: a run's outcomes in, GPU-hours out.
"""

from __future__ import annotations

from collections import defaultdict

import polars as pl

from gpuledger.whatif.model import RunResult

EPS = 1e-9


def reachable_gpu_hours(result: RunResult, exempt, *, period_s: int) -> dict[tuple[str, int], float]:
    """(project, period) -> GPU-hours the team could have held on its pools in that settlement
    period (periods of ``period_s`` from the run's origin): ∫ Σ_pools min(its demand in the pool,
    the pool's capacity − other teams' exempt work running there) dt. ``exempt``: the predicate of
    exempt jobs (engine.exempt_rule), or None (no exempt work)."""
    horizon = result.trace.horizon_s
    capacity = {pool: sum(d.fraction for d in devices) for pool, devices in result.trace.inventory.pools().items()}
    events: dict[tuple, list[tuple[int, str, float, float]]] = defaultdict(list)  # pool -> (t, project, demand Δ, exempt Δ)
    for o in result.outcomes:
        j = o.job
        if j.submit_s >= horizon:
            continue
        end = horizon if o.stopped_s is None else min(o.stopped_s, horizon)
        if end > j.submit_s:
            events[j.pool] += [(j.submit_s, j.project, j.gpus, 0.0), (end, j.project, -j.gpus, 0.0)]
        if exempt is not None and exempt(j):
            for s in o.segments:
                if s.end_s > s.start_s:
                    events[j.pool] += [(s.start_s, j.project, 0.0, j.gpus), (min(s.end_s, horizon), j.project, 0.0, -j.gpus)]
    out: dict[tuple[str, int], float] = defaultdict(float)
    for pool, evs in events.items():
        evs.sort(key=lambda e: e[0])
        cap = capacity.get(pool, 0.0)
        demand: dict[str, float] = defaultdict(float)
        held_exempt: dict[str, float] = defaultdict(float)
        exempt_total, t_prev, i = 0.0, 0, 0
        while i < len(evs):
            t = evs[i][0]
            if t > t_prev:
                _accrue(out, demand, held_exempt, exempt_total, cap, t_prev, t, period_s)
            while i < len(evs) and evs[i][0] == t:
                _, project, d, e = evs[i]
                demand[project] += d
                held_exempt[project] += e
                exempt_total += e
                i += 1
            t_prev = t
    return dict(out)


def _accrue(out, demand, held_exempt, exempt_total: float, cap: float, t0: int, t1: int, period_s: int) -> None:
    """Add [t0, t1) of each team's reachable GPUs in one pool, split at the settlement periods' edges."""
    rates = {}
    for project, d in demand.items():
        if d > EPS:
            room = cap - (exempt_total - held_exempt[project])  # its own exempt work is part of its demand
            rates[project] = min(d, max(0.0, room))
    if not rates:
        return
    t = t0
    while t < t1:
        k = t // period_s
        edge = min(t1, (k + 1) * period_s)
        for project, rate in rates.items():
            out[(project, k)] += rate * (edge - t) / 3600
        t = edge


def team_ceilings(owed: pl.DataFrame, reachable: dict[tuple[str, int], float]) -> pl.DataFrame:
    """(project, ceiling_ratio_pools): Σ min(owed, reachable) ÷ Σ owed per team over the settlement
    periods, from the owed GPU-hours per (project, period); None for a team owed nothing."""
    reach = pl.DataFrame(
        {"project": [p for p, _ in reachable], "period": [k for _, k in reachable],
         "gpu_hours_reachable": list(reachable.values())},
        schema={"project": pl.String, "period": pl.Int64, "gpu_hours_reachable": pl.Float64},
    )
    return (
        owed.join(reach, on=["project", "period"], how="left")
        .with_columns(met=pl.min_horizontal("gpu_hours_owed", pl.col("gpu_hours_reachable").fill_null(0.0)))
        .group_by("project")
        .agg(pl.col("met").sum(), pl.col("gpu_hours_owed").sum())
        .select("project", ceiling_ratio_pools=pl.when(pl.col("gpu_hours_owed") > EPS)
                .then(pl.col("met") / pl.col("gpu_hours_owed")).otherwise(None))
    )
