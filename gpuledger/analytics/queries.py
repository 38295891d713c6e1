"""Ready-to-show analytics over a warehouse connection: the one place the CLI, dashboards,
pipelines and benchmarks get their tables from. Each function reads what it needs (DuckDB filters
by time), runs the pure polars functions, and collects once."""

from __future__ import annotations

from datetime import datetime, timedelta

import duckdb
import polars as pl

from gpuledger.analytics.allocations import allocation_intervals
from gpuledger.analytics.attribution import (
    USAGE_COLS,
    allocated_pieces,
    attribute_usage,
    partial_hour_keys,
    rollup_usage,
    sum_usage,
)
from gpuledger.analytics.budget import budget_burn, funding_from_remaining, job_funding, own_budgets
from gpuledger.analytics.carbon import carbon_sums, with_carbon
from gpuledger.analytics.carbon_inputs import site_inputs
from gpuledger.analytics.chargeback import chargeback_lines_at, period_bounds
from gpuledger.analytics.collect import ENGINE
from gpuledger.analytics.delivery_balance import behind_owed, credited_usage, credits, delivery_balance
from gpuledger.analytics.fairshare import delivery, fair_share
from gpuledger.analytics.load import (
    Tables,
    load_device_activity,
    load_hourly,
    load_open_jobs,
    load_samples_for_hours,
    load_tables,
)
from gpuledger.analytics.squatting import LOOKBACK, squatting_findings
from gpuledger.analytics.tree import Tree
from gpuledger.analytics.usage import node_usage
from gpuledger.analytics.utilization import (
    USED_SUMS,
    utilization_by_kind,
    utilization_hourly,
    utilization_over_models,
)
from gpuledger.analytics.waits import job_waits, wait_causes, wait_summary
from gpuledger.config import Policy
from gpuledger.sql import load_sql

# "now" for the data and for waits: the warehouse's rules, here for the query layer's callers
from gpuledger.warehouse.clock import data_now, waits_now  # noqa: F401

DAY = timedelta(days=1)


def ordered(frame: pl.DataFrame, by: list[str], descending: list[bool] | None = None) -> pl.DataFrame:
    """``frame`` sorted by ``by``, then by every other column: a full key, so the same data comes
    out in the same row order on every run (csv output byte for byte)."""
    rest = [c for c in frame.columns if c not in by]
    desc = [*(descending or [False] * len(by)), *([False] * len(rest))]
    return frame.sort([*by, *rest], descending=desc, nulls_last=True)


def tree_position(org_nodes: pl.LazyFrame | pl.DataFrame) -> pl.DataFrame:
    """node -> its position in the org tree walked depth-first, children by name (the order
    `gpuledger report budget` lists nodes in: each parent above its children)."""
    nodes = [node for node, _ in Tree.from_frame(org_nodes).walk()]
    return pl.DataFrame({"node": nodes, "_tree_pos": list(range(len(nodes)))},
                        schema={"node": pl.String, "_tree_pos": pl.Int64})


def warehouse_summary(con: duckdb.DuckDBPyConnection) -> dict[str, object]:
    """What the warehouse holds: devices, jobs, allocated GPU-hours up to the data's "now"
    (device-level and job-level allocations, as the analytics count them), samples, quarantine."""
    counts = con.execute(load_sql(__package__, "warehouse_counts.sql")).fetchall()[0]
    now = data_now(con)
    t = load_tables(con, end=now, samples=False)
    held = allocation_intervals(t.job_allocations, t.gpus, t.jobs).select(
        ((pl.min_horizontal(pl.col("end_time").fill_null(now), pl.lit(now)) - pl.col("start_time"))
         .dt.total_seconds().clip(lower_bound=0) / 3600.0
         * pl.col("alloc_fraction") * pl.col("device_fraction")).sum()
    ).collect(engine=ENGINE).item()
    names = ("physical_gpus", "mig_instances", "jobs", "samples", "first_sample_utc", "last_sample_utc",
             "quarantined_lines")
    figures = dict(zip(names, counts, strict=True))
    figures["gpu_hours_allocated"] = float(held or 0.0)
    figures["as_of_utc"] = now
    # a simulated warehouse names its seeds and demand regime (simulator.to_warehouse.provenance)
    simulated = con.execute("SELECT position FROM ingest_checkpoints WHERE source = 'simulator' "
                            "GROUP BY position ORDER BY min(scope)").fetchall()
    if simulated:
        figures["simulated"] = "; ".join(r[0] for r in simulated)
    return figures


def attribution(
    con: duckdb.DuckDBPyConnection, t: Tables, *, start: datetime, end: datetime, now: datetime,
    policy: Policy,
) -> pl.LazyFrame:
    """attribute_usage over [start, end) the fast way: whole GPU-hours from the ``gpu_hourly``
    rollup, raw samples only for the hours an allocation covers in part."""
    tier = policy.chargeback.default_tier
    # Cut once: the partial hours' lookup and the attribution both read the pieces.
    pieces = allocated_pieces(t.job_allocations, t.gpus, now=now, start=start, end=end, jobs=t.jobs,
                              default_tier=tier).collect(engine=ENGINE)
    partial = load_samples_for_hours(con, partial_hour_keys(pieces.lazy()))
    return attribute_usage(t.job_allocations, t.gpus, partial, now=now, start=start, end=end, jobs=t.jobs,
                           default_tier=tier, hourly=load_hourly(con, start=start, end=end), pieces=pieces,
                           pod_samples=load_pod_samples(con, start=start, end=end))


def utc_days(start: datetime, end: datetime) -> list[tuple[datetime, datetime]]:
    """[start, end) cut at UTC midnights: the pipelines' partitions (one UTC day each)."""
    cuts, lo = [], start
    while lo < end:
        hi = min(end, lo.replace(hour=0, minute=0, second=0, microsecond=0) + DAY)
        cuts.append((lo, hi))
        lo = hi
    return cuts


def attribution_by_day(
    con: duckdb.DuckDBPyConnection, t: Tables, *, start: datetime, end: datetime, now: datetime,
    policy: Policy, reduce, spans: list[tuple[datetime, datetime]] | None = None,
) -> list:
    """``reduce(day_attribution, day_start, day_end)`` for each UTC day of [start, end), collected
    day by day, as the pipelines materialize usage: attribution's job x GPU x hour pieces and the
    partial hours' samples cost ~50 KiB per GPU-day, so a month at once outgrows the machine
    (issue 41) while one day's stay flat. A piece never spans an hour, nor a day, so each day's
    pieces are the range's pieces of that day (tests/analytics/test_by_day.py). ``spans``: another
    cut of [start, end) (the tests compare cuts). An empty range is one (empty) span, so there is
    always at least one answer, with its schema."""
    cuts = (utc_days(start, end) if spans is None else spans) or [(start, end)]
    return [reduce(attribution(con, t, start=lo, end=hi, now=now, policy=policy), lo, hi) for lo, hi in cuts]


def load_pod_samples(con: duckdb.DuckDBPyConnection, *, start: datetime, end: datetime) -> pl.LazyFrame | None:
    """Pods' own utilization on shared GPUs in [start, end) (``pod_gpu_samples``, migration 025);
    None when there is none (or the table is not there yet)."""
    try:
        frame = con.sql("SELECT gpu_id, ts, namespace || '/' || pod AS scheduler_job, gpu_util_ratio "
                        "FROM pod_gpu_samples WHERE ts >= $start AND ts < $end AND gpu_util_ratio IS NOT NULL",
                        params={"start": start, "end": end}).pl()
    except duckdb.CatalogException:
        return None
    return frame.lazy() if frame.height else None


def carbon_report(
    con: duckdb.DuckDBPyConnection, *, start: datetime, end: datetime, now: datetime | None = None,
    policy: Policy | None = None,
) -> pl.DataFrame:
    """Per project over [start, end): GPU-hours, GPU kWh, facility kWh, kgCO2e (NULL: unknown)
    and the GPU-hours whose kgCO2e is unknown (no reading, PUE or intensity) (analytics/carbon.py)."""
    policy = policy or Policy()
    now = now or data_now(con)
    end = min(end, now)
    if end <= start:
        return pl.DataFrame(schema={"project": pl.String, "gpu_hours": pl.Float64, "energy_kwh": pl.Float64,
                                    "energy_kwh_facility": pl.Float64, "kg_co2e": pl.Float64,
                                    "gpu_hours_co2_unknown": pl.Float64})
    t = load_tables(con, start=start, end=end, samples=False)
    jobs = t.jobs.select("cluster", "job_id", "project").unique(["cluster", "job_id"])

    def per_project(used: pl.LazyFrame, lo: datetime, hi: datetime) -> pl.DataFrame:
        return (with_carbon(used, *site_inputs(con, lo, hi)).join(jobs, on=["cluster", "job_id"], how="left")
                .with_columns(pl.col("project").fill_null("(no job record)"))
                .group_by("project").agg(pl.col("gpu_hours_allocated").sum().alias("gpu_hours"), *carbon_sums())
                .collect(engine="in-memory"))

    # a day at a time (attribution_by_day), the days' sums added by the same rule (NULL: no day knew it)
    days = attribution_by_day(con, t, start=start, end=end, now=now, policy=policy, reduce=per_project)
    return (pl.concat(days).group_by("project").agg(pl.col("gpu_hours").sum(), *carbon_sums())
            .sort("project"))


def chargeback_report(
    con: duckdb.DuckDBPyConnection, period: str, *, level: str = "project", policy: Policy | None = None,
    now: datetime | None = None, exact: bool = False,
) -> pl.DataFrame:
    """Chargeback lines for a period (``2026-10``, ``2026-10-05``, ``2026-W41``, ``A..B``).

    Columns: period, then chargeback_lines' (period_start, period_end, billed_through,
    provisional, line_kind, billed, the level's keys, gpu_model, tier, currency, note) with
    gpu_hours (allocated GPU-hours; idle GPU-hours on idle lines) and amount (exact decimal). A
    period not over at ``now`` (default: the newest data) is provisional and bills capacity only
    up to ``now``. See chargeback.statement_notes for what to tell the reader. ``exact``: also
    the unrounded amounts (chargeback_lines).
    """
    return chargeback_reports(con, period, levels=(level,), policy=policy, now=now, exact=exact)[level]


def chargeback_reports(
    con: duckdb.DuckDBPyConnection, period: str, *, levels: tuple[str, ...], policy: Policy | None = None,
    now: datetime | None = None, exact: bool = False,
) -> dict[str, pl.DataFrame]:
    """:func:`chargeback_report` at each of ``levels``, priced and rounded once and collected together
    (polars shares the plans' common part): a period's close asks all three (issue 41: it priced
    the month three times)."""
    policy = policy or Policy()
    start, end = period_bounds(period)
    now = now or data_now(con)
    t = load_tables(con, start=start, end=end, samples=False)
    lines = chargeback_lines_at(
        t.job_allocations, t.gpus, t.jobs, t.rate_card, levels=levels, start=start, end=end, now=now,
        org_nodes=t.org_nodes, idle_cost=policy.chargeback.idle_cost,
        default_tier=policy.chargeback.default_tier,
        retire_grace=timedelta(hours=policy.chargeback.retire_after_hours), exact=exact,
    )
    frames = pl.collect_all([lines[level] for level in levels], engine=ENGINE)
    out = {}
    for level, frame in zip(levels, frames, strict=True):
        named = frame.rename({"gpu_hours_allocated": "gpu_hours"})
        out[level] = named.select(pl.lit(period).alias("period"), *named.columns)
    return out


def usage_report(
    con: duckdb.DuckDBPyConnection, *, start: datetime, end: datetime, by: str = "project",
    policy: Policy | None = None, now: datetime | None = None, per_hour: bool = False,
) -> pl.DataFrame:
    """Allocated / active / idle / unknown GPU-hours and energy (kWh) per job, user, project or
    org node over [start, end); with ``per_hour`` one row per key and UTC ``hour``."""
    policy = policy or Policy()
    now = now or data_now(con)
    t = load_tables(con, start=start, end=end, samples=False)

    def rollup(used: pl.LazyFrame, *_) -> pl.DataFrame:
        # in-memory engine: polars 2.1's streaming engine (the default) sums this plan, which reads
        # the lazy attribution in two branches, differently on every run (../shared/notes/tables.md)
        return rollup_usage(used, t.jobs, by=by, org_nodes=t.org_nodes, per_hour=per_hour).collect(engine="in-memory")

    # a day at a time (a month at once holds ~50 KiB per GPU-day); the days' sums added by
    # rollup_usage's own exact rule (whole nano-units), so the digits are the range's
    days = attribution_by_day(con, t, start=start, end=end, now=now, policy=policy, reduce=rollup)
    out = pl.concat(days)
    if not per_hour and len(days) > 1:
        keys = [c for c in out.columns if c not in USAGE_COLS and c != "efficiency_ratio"]
        out = sum_usage(out.lazy(), keys).select(out.columns).collect(engine="in-memory")
    # Ties broken by the row's keys, so the same data always prints in the same order.
    keys = [c for c in out.columns if c not in USAGE_COLS and c not in ("efficiency_ratio", "hour")]
    if per_hour:
        return out.sort(["hour", "gpu_hours_allocated", *keys],
                        descending=[False, True, *([False] * len(keys))], nulls_last=True)
    return out.sort(["gpu_hours_allocated", *keys], descending=[True, *([False] * len(keys))], nulls_last=True)


def fairshare_report(
    con: duckdb.DuckDBPyConnection, *, policy: Policy | None = None, as_of: datetime | None = None,
) -> pl.DataFrame:
    """The org tree in queue order, shaped like ``sshare -l``, with window and decayed usage, the
    delivery ratio and Ai2's occupancy ratio over the usage window."""
    policy = policy or Policy()
    as_of = as_of or data_now(con)
    window = timedelta(days=policy.usage.window_days)
    balance_policy = policy.usage.delivery_balance
    history = (balance_policy.history_periods + 1) * window if balance_policy.credit_fair_share else window
    t = load_tables(con, start=as_of - max(history, 10 * timedelta(days=policy.usage.half_life_days)),
                    end=as_of, samples=False)
    tier = policy.chargeback.default_tier
    usage = node_usage(t.job_allocations, t.gpus, t.jobs, t.org_nodes, as_of=as_of, window=window,
                       half_life=timedelta(days=policy.usage.half_life_days), default_tier=tier)
    usage_col = "gpu_hours_decayed" if policy.usage.mode == "decay" else "gpu_hours_window"
    ranked_on = usage
    if balance_policy.credit_fair_share:  # rank on usage less what the cluster still owes the project
        ranked_on = credited_node_usage(t, usage, usage_col, as_of=as_of, window=window, policy=policy)
    tree = fair_share(t.org_nodes, ranked_on, usage_col=usage_col)
    delivered = delivery(t.jobs, t.job_allocations, t.gpus, t.org_nodes, start=as_of - window,
                         end=as_of, now=as_of, default_tier=tier).select("node", "delivery_ratio",
                                                                          "occupancy_ratio")
    usage_cols = usage.select("node", "gpu_hours_window", "gpu_hours_decayed")
    return (tree.join(usage_cols, on="node", how="left").join(delivered, on="node", how="left")
            .sort("order").collect(engine=ENGINE))


def balance_report(
    con: duckdb.DuckDBPyConnection, *, policy: Policy | None = None, as_of: datetime | None = None,
) -> pl.DataFrame:
    """The delivery balance per org node and settlement period (GPU-hours; analytics.delivery_balance),
    in tree order, oldest period first."""
    policy = policy or Policy()
    as_of = as_of or data_now(con)
    window = timedelta(days=policy.usage.window_days)
    periods = policy.usage.delivery_balance.history_periods
    t = load_tables(con, start=as_of - (periods + 1) * window, end=as_of, samples=False)
    frame = delivery_balance(t.jobs, t.job_allocations, t.gpus, t.org_nodes, as_of=as_of, period=window,
                             history_periods=periods,
                             default_tier=policy.chargeback.default_tier).collect(engine=ENGINE)
    placed = frame.join(tree_position(t.org_nodes), on="node", how="left")
    return ordered(placed, ["_tree_pos", "period_start"]).drop("_tree_pos")


def behind_owed_projects(con: duckdb.DuckDBPyConnection, *, policy: Policy, as_of: datetime) -> frozenset[str]:
    """The projects delivered less than they are owed so far in the settlement period running at
    ``as_of`` (analytics.delivery_balance.behind_owed; policy.enforcement.spare_behind_owed)."""
    window = timedelta(days=policy.usage.window_days)
    t = load_tables(con, start=as_of - 2 * window, end=as_of, samples=False)
    frame = delivery_balance(t.jobs, t.job_allocations, t.gpus, t.org_nodes, as_of=as_of, period=window,
                             history_periods=1, default_tier=policy.chargeback.default_tier).collect(engine=ENGINE)
    return behind_owed(frame, Tree.from_frame(t.org_nodes).leaves())


def credited_node_usage(t, usage: pl.LazyFrame, usage_col: str, *, as_of: datetime, window: timedelta,
                        policy: Policy) -> pl.LazyFrame:
    """The projects' ``usage_col`` of node_usage's frame less their open delivery credit."""
    balance = delivery_balance(t.jobs, t.job_allocations, t.gpus, t.org_nodes, as_of=as_of, period=window,
                               history_periods=policy.usage.delivery_balance.history_periods,
                               default_tier=policy.chargeback.default_tier).collect(engine=ENGINE)
    leaves = set(Tree.from_frame(t.org_nodes).leaves())
    used = {n: v or 0.0 for n, v in usage.select("node", usage_col).collect().iter_rows() if n in leaves}
    # the projects only: fair_share sums them up the tree itself
    after = credited_usage(used, credits(balance, leaves))
    return pl.LazyFrame({"node": list(after), usage_col: list(after.values())},
                        schema={"node": pl.String, usage_col: pl.Float64})


def budget_tables(con: duckdb.DuckDBPyConnection, *, as_of: datetime) -> Tables:
    """The tables budget_burn reads at ``as_of``: jobs and allocations from the start of the earliest
    budget period containing it (nothing before counts), so the burn reads the same rows however
    long the history kept (from ``as_of`` when no period contains it: the jobs running then, for
    funding)."""
    budgets = con.sql("SELECT * FROM budgets").pl().lazy()
    starts = [datetime.combine(b["period_start"], datetime.min.time())
              for b in own_budgets(budgets, as_of=as_of).values()]
    start = min([*starts, as_of])
    return load_tables(con, start=start, end=as_of + DAY, samples=False)


def budget_report(
    con: duckdb.DuckDBPyConnection, *, policy: Policy | None = None, as_of: datetime | None = None,
) -> pl.DataFrame:
    """Budget burn per org node for the periods containing ``as_of`` (normalised GPU-hours)."""
    policy = policy or Policy()
    as_of = as_of or data_now(con)
    t = budget_tables(con, as_of=as_of)
    burn = budget_burn(t.job_allocations, t.gpus, t.jobs, t.org_nodes, t.budgets, t.rate_card,
                       as_of=as_of, default_tier=policy.chargeback.default_tier).collect(engine=ENGINE)
    placed = burn.join(tree_position(t.org_nodes), on="node", how="left")
    return ordered(placed, ["_tree_pos", "period_start"]).drop("_tree_pos")


def funding_report(
    con: duckdb.DuckDBPyConnection, *, policy: Policy | None = None, now: datetime | None = None,
    remaining: dict[str, float] | None = None,
) -> pl.DataFrame:
    """Per running job: funded or not (and why), protected until when. ``remaining``: each node's
    own budget left at ``now`` (budget_burn's remaining_gpu_hours where budget_own) when the caller
    has it (facts.funding, from the budget snapshot): then only the jobs not ended are read, not
    every allocation of the budget periods."""
    policy = policy or Policy()
    now = now or data_now(con)
    rules = [(r.qos, r.partition, int(r.hours * 3600)) for r in policy.funding.slurm_min_runtime]
    cap = timedelta(hours=policy.funding.min_runtime_cap_hours)
    if remaining is None:
        t = budget_tables(con, as_of=now)
        burn = budget_burn(t.job_allocations, t.gpus, t.jobs, t.org_nodes, t.budgets, t.rate_card, as_of=now,
                           default_tier=policy.chargeback.default_tier)
        funding = job_funding(t.jobs, burn, t.org_nodes, now=now, min_runtime_cap=cap, min_runtime_rules=rules)
    else:
        jobs, org_nodes = load_open_jobs(con, now=now, end=now + DAY)
        funding = funding_from_remaining(jobs, remaining, org_nodes, now=now, min_runtime_cap=cap,
                                         min_runtime_rules=rules)
    return ordered(funding.collect(engine=ENGINE), ["cluster", "job_id"])


def squatters_report(
    con: duckdb.DuckDBPyConnection, *, policy: Policy | None = None, now: datetime | None = None,
    lookback: timedelta = LOOKBACK, include_exempt: bool = False,
) -> pl.DataFrame:
    """Idle-GPU findings for jobs running at ``now``, worst first."""
    policy = policy or Policy()
    now = now or data_now(con)
    t = load_tables(con, start=now - lookback, end=now + timedelta(seconds=1), samples=False)
    # DuckDB reduces the lookback of the held devices to one evidence row each; polars judges.
    activity = load_device_activity(con, t.jobs, t.job_allocations, t.gpus, now=now, policy=policy.squatting,
                                    lookback=lookback)
    findings = squatting_findings(t.jobs, t.job_allocations, t.gpus, activity, t.rate_card, now=now,
                                  policy=policy.squatting, include_exempt=include_exempt).collect(engine=ENGINE)
    return ordered(findings, ["finding", "idle_minutes", "cluster", "job_id"], [True, True, False, False])


def utilization_report(
    con: duckdb.DuckDBPyConnection, *, start: datetime, end: datetime, by: str = "model",
    policy: Policy | None = None, now: datetime | None = None,
) -> pl.DataFrame:
    """Allocation % and active % of capacity per hour, by GPU model (``by="model"``), for the whole
    fleet (``"cluster"``), or allocated/active GPU-hours per workload kind (``"kind"``)."""
    policy = policy or Policy()
    now = now or data_now(con)
    t = load_tables(con, start=start, end=end, samples=False)
    if by == "kind":  # each day's job sums (attribution_by_day), summed per kind over the days
        def per_job(used: pl.LazyFrame, *_) -> pl.DataFrame:
            return used.group_by("cluster", "job_id").agg(pl.col(USED_SUMS).sum()).collect(engine=ENGINE)

        jobs_days = attribution_by_day(con, t, start=start, end=end, now=now, policy=policy, reduce=per_job)
        return ordered(utilization_by_kind(pl.concat(jobs_days).lazy(), t.jobs).collect(engine=ENGINE), ["kind"])
    keys = {"model": ("cluster", "model"), "cluster": ("cluster",), "fleet": ()}.get(by)
    if keys is None:
        raise ValueError(f"by={by!r}: choose model, cluster, fleet or kind")

    def per_hour(used: pl.LazyFrame, lo: datetime, hi: datetime) -> pl.DataFrame:
        # capacity up to the data's now: an hour not yet come (or its part) is not idle capacity
        # (a range asked into the future showed it at 0 % allocated, the running hour too low)
        until = max(lo, min(hi, now))
        return utilization_hourly(used, t.gpus, start=lo, end=until, by=("cluster", "model")).collect(engine=ENGINE)

    # hour rows, a day at a time as the pipeline stores them (attribution_by_day)
    days = attribution_by_day(con, t, start=start, end=end, now=now, policy=policy, reduce=per_hour)
    hourly = pl.concat(days).lazy()
    if by != "model":  # summed over models as the stored days are (the same digits either way)
        hourly = utilization_over_models(hourly, keys)
    return ordered(hourly.collect(engine=ENGINE), ["hour", *keys])


def _table_exists(con: duckdb.DuckDBPyConnection, table: str) -> bool:
    return bool(con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = ?",
                            [table]).fetchall()[0][0])


def job_waits_report(con: duckdb.DuckDBPyConnection, *, start: datetime, end: datetime,
                     now: datetime | None = None, projects: tuple[str, ...] = ()) -> pl.DataFrame:
    """Every waiting period of the jobs submitted in [start, end) (``projects``: only theirs),
    with its wait and time to first GPU (seconds, as of ``now``: jobs still waiting count with
    their wait so far) and its main cause (gpuledger.analytics.waits)."""
    now = now or waits_now(con)
    reasons_table = "scheduler_reasons" if _table_exists(con, "scheduler_reasons") else \
        "(SELECT NULL::VARCHAR AS cluster, NULL::VARCHAR AS job_id, NULL::TIMESTAMP AS observed_at, " \
        "NULL::VARCHAR AS reason WHERE false)"
    jobs = con.sql(load_sql(__package__, "waits_jobs.sql", reasons=reasons_table),
                   params={"start": start, "end": end, "now": now, "projects": list(projects)}).pl()
    waits = job_waits(jobs, now=now)
    since = waits["submit_time"].min() if waits.height else start
    window = {"since": since, "now": now}

    def read(name: str, schema: dict, needs: str) -> pl.DataFrame:
        if not _table_exists(con, needs):
            return pl.DataFrame(schema=schema)
        frame = con.sql(load_sql(__package__, f"{name}.sql"), params=window).pl()
        return frame.cast(schema) if frame.height else pl.DataFrame(schema=schema)

    ts, s, f = pl.Datetime("us"), pl.String, pl.Float64
    others = read("waits_started", {"cluster": s, "job_id": s, "gpu_model": s, "gpus": f, "submit_time": ts,
                                    "start_time": ts, "end_time": ts}, "jobs")
    squatting = read("waits_squatting", {"cluster": s, "job_id": s, "gpu_model": s, "gpus_idle": pl.Int64,
                                         "first_seen": ts, "resolved_at": ts}, "squatting_findings")
    unfunded = read("waits_unfunded", {"cluster": s, "job_id": s, "unfunded_reason": s}, "enforcement_audit")
    reasons = read("waits_reasons", {"cluster": s, "job_id": s, "observed_at": ts, "scheduler": s, "reason": s,
                                     "message": s}, "scheduler_reasons")
    capacity = con.sql(load_sql(__package__, "waits_capacity.sql"), params={"now": now}).pl()
    capacity = capacity.cast({"cluster": s, "gpu_model": s, "gpus": f}) if capacity.height else None
    return wait_causes(waits, now=now, others=others, squatting=squatting, unfunded=unfunded, reasons=reasons,
                       capacity=capacity)


def waits_report(con: duckdb.DuckDBPyConnection, *, start: datetime, end: datetime, now: datetime | None = None,
                 by: str = "project", every: str | None = None, projects: tuple[str, ...] = ()) -> pl.DataFrame:
    """p50 / p90 / max wait and p50 / p90 time to first GPU (seconds) per ``by`` (project, user,
    class) and, with ``every`` (day / week), per bucket of submission time, with the causes
    counted; ``by="job"``: every waiting period (job_waits_report)."""
    waits = job_waits_report(con, start=start, end=end, now=now, projects=projects)
    if by == "job":
        return waits
    return wait_summary(waits, by=by, every=every)
