"""Budget burn per org node and funding per job.

Budgets are in normalised GPU-hours: allocated GPU-hours × the rate card's ``budget_weight`` for
the device's model and tier as of each hour. Hours the rate card cannot weigh (a model or tier it
has no row for, or no model at all) count at weight 1.0 and are listed per node
(``unweighted_gpu_hours``, ``unweighted_models``), never folded in silently.

Roll-up, once: a node with its own budget for a period shows that budget (it caps everything
below); a node without one shows the sum of its children's budgets for that period, where each
child contributes its own budget if it has one, else its own children's sum — so no budget is
added twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, time, timedelta

import polars as pl

from gpuledger.analytics.allocations import DEFAULT_TIER
from gpuledger.analytics.attribution import allocated_pieces
from gpuledger.analytics.collect import ENGINE
from gpuledger.analytics.intervals import HOUR
from gpuledger.analytics.tree import Tree, closure

BURN_WINDOW = timedelta(days=7)
DAY = timedelta(days=1)
MIN_RUNTIME_CAP = timedelta(hours=8)


def weighted_pieces(pieces: pl.LazyFrame, rate_card: pl.LazyFrame) -> pl.LazyFrame:
    """Add ``budget_weight`` (as of the piece start, by model and tier), ``weighed`` (False where the
    rate card has no weight for the piece: it counts at 1.0) and ``gpu_hours_normalized``."""
    rates = rate_card.select(
        pl.col("gpu_model").alias("model"), "tier",
        pl.col("effective_from").cast(pl.Datetime("us")).alias("_eff"), "budget_weight",
    ).sort("_eff")
    return (
        pieces.with_columns(pl.col("piece_start").cast(pl.Datetime("us")).alias("_eff"))
        .sort("_eff")
        .join_asof(rates, on="_eff", by=["model", "tier"], strategy="backward", check_sortedness=False)
        .drop("_eff")
        .with_columns(weighed=pl.col("budget_weight").is_not_null())
        .with_columns(pl.col("budget_weight").fill_null(1.0))
        .with_columns(gpu_hours_normalized=pl.col("gpu_hours_allocated") * pl.col("budget_weight"))
    )


def budget_burn(
    job_allocations: pl.LazyFrame,
    gpus: pl.LazyFrame,
    jobs: pl.LazyFrame,
    org_nodes: pl.LazyFrame | pl.DataFrame,
    budgets: pl.LazyFrame,
    rate_card: pl.LazyFrame,
    *,
    as_of: datetime,
    burn_window: timedelta = BURN_WINDOW,
    default_tier: str = DEFAULT_TIER,
) -> pl.LazyFrame:
    """Per org node with a budget period containing ``as_of`` (directly or through descendants).

    Columns (all GPU quantities in normalised GPU-hours): node, period_start, period_end (dates,
    end exclusive), budget_gpu_hours (the node's own budget, else the sum of its descendants'
    for the same period), budget_own (True: budget_gpu_hours is the node's own budget; False: it
    is the sum of its descendants' budgets), consumed_gpu_hours (subtree, since period start up to as_of),
    remaining_gpu_hours, burn_gpu_hours_per_day (consumed in the last ``burn_window`` inside the
    period ÷ its days), projected_exhaustion (UTC datetime; NULL when not burning or exhausted),
    status: exhausted (remaining ≤ 0) / at-risk (projected before period end) / funded,
    unweighted_gpu_hours (allocated GPU-hours of consumed the rate card could not weigh, counted
    at 1.0) and unweighted_models (their models, comma-separated; NULL when none).
    budget_gpu_hours rolls up once (module notes); two own budgets of a node containing
    ``as_of`` raise ValueError naming both.
    Jobs without device allocations count by jobs.gpus at ``default_tier`` (allocations.py).
    """
    tree = Tree.from_frame(org_nodes)
    clo = closure(org_nodes)
    nodes = rolled_budgets(tree, own_budgets(budgets, as_of=as_of))
    if nodes.is_empty():
        return _without_consumption(nodes.lazy())
    start = datetime.combine(nodes["period_start"].min(), datetime.min.time())
    use = project_hourly_use(job_allocations, gpus, jobs, rate_card, start=start, as_of=as_of,
                             default_tier=default_tier, every=piece_length(rate_card, start=start, as_of=as_of))
    consumed = consumed_per_node(nodes.lazy(), clo, use, burn_start=as_of - burn_window)
    return burn_status(nodes.lazy(), consumed, as_of=as_of, burn_window=burn_window)


# --- the stages of budget_burn, each on its own (tests/analytics/test_budget_stages.py) ---

_DAY_START = pl.col("period_start").cast(pl.Datetime("us"))


def own_budgets(budgets: pl.LazyFrame, *, as_of: datetime) -> dict[str, dict]:
    """Per node, its own budget row (period_start, period_end, budget_gpu_hours as float) whose
    period contains ``as_of``; two for one node raise ValueError naming both."""
    active = (
        budgets.select("node", "period_start", "period_end",
                       pl.col("budget_gpu_hours").cast(pl.Float64))
        .filter((_DAY_START <= as_of) & (pl.col("period_end").cast(pl.Datetime("us")) > as_of))
        .collect(engine=ENGINE)
    )
    own: dict[str, dict] = {}
    for r in active.iter_rows(named=True):
        if r["node"] in own:  # the config refuses this; a hand-filled warehouse may not
            other = own[r["node"]]
            raise ValueError(
                f"budgets: node {r['node']!r} has two budgets covering {as_of:%Y-%m-%d %H:%M}: "
                f"{other['period_start']}..{other['period_end']} and {r['period_start']}..{r['period_end']}; "
                "keep one budget per node and time")
        own[r["node"]] = r
    return own


def rolled_budgets(tree: Tree, own: dict[str, dict]) -> pl.DataFrame:
    """Per node and period (tree order): budget_gpu_hours, its own budget, else the sum of its
    children's own-or-rolled budgets for that period (so none is added twice), and budget_own."""
    rolled: dict[str, dict[tuple, float]] = {}
    for node, _ in sorted(tree.walk(), key=lambda x: -x[1]):  # bottom-up, once
        if node in own:
            r = own[node]
            rolled[node] = {(r["period_start"], r["period_end"]): r["budget_gpu_hours"]}
            continue
        sums: dict[tuple, float] = {}
        for child in tree.children[node]:
            for period, amount in rolled.get(child, {}).items():
                sums[period] = sums.get(period, 0.0) + amount
        rolled[node] = sums
    rows = [(node, ps, pe, total, node in own)
            for node, _ in tree.walk() for (ps, pe), total in sorted(rolled[node].items())]
    return pl.DataFrame(rows, schema={"node": pl.String, "period_start": pl.Date, "period_end": pl.Date,
                                      "budget_gpu_hours": pl.Float64, "budget_own": pl.Boolean}, orient="row")


def _without_consumption(nodes: pl.LazyFrame) -> pl.LazyFrame:
    """budget_burn's columns where no budget is in force (``nodes`` is empty)."""
    return nodes.with_columns(
        *(pl.lit(None, pl.Float64).alias(c) for c in
          ("consumed_gpu_hours", "remaining_gpu_hours", "burn_gpu_hours_per_day")),
        pl.lit(None, pl.Datetime("us")).alias("projected_exhaustion"), pl.lit(None, pl.String).alias("status"),
        pl.lit(None, pl.Float64).alias("unweighted_gpu_hours"), pl.lit(None, pl.String).alias("unweighted_models"),
    )


def piece_length(rate_card: pl.LazyFrame, *, start: datetime, as_of: datetime) -> timedelta:
    """How long budget burn's pieces may be and stay exact: a UTC day when every rate-card weight
    that takes effect inside (start, as_of) does so at midnight (a piece is weighed as of its start,
    and no weight changes inside a day), else an hour (weights as of each hour, as always). Budget
    periods start and end at midnight, and the burn window's start is weighed by each piece's
    overlap, which is exact for any length: a piece is one allocation held the same all along. Day
    pieces read a month at 4,096 GPUs in a third of the time (BENCHMARKS.md, issue 41)."""
    changes = (rate_card.select(pl.col("effective_from").cast(pl.Datetime("us")))
               .filter((pl.col("effective_from") > start) & (pl.col("effective_from") < as_of))
               .collect(engine=ENGINE)["effective_from"].to_list())
    return DAY if all(t.time() == time(0) for t in changes) else HOUR


def project_hourly_use(job_allocations: pl.LazyFrame, gpus: pl.LazyFrame, jobs: pl.LazyFrame,
                       rate_card: pl.LazyFrame, *, start: datetime, as_of: datetime,
                       default_tier: str, every: timedelta = HOUR) -> pl.LazyFrame:
    """Per project and piece (an hour, or ``every``: :func:`piece_length`) in [start, as_of):
    gpu_hours_normalized, and the allocated GPU-hours the rate card could not weigh
    (``_unweighted``) with their models (``_models``)."""
    pieces = weighted_pieces(
        allocated_pieces(job_allocations, gpus, now=as_of, start=start, end=as_of, jobs=jobs,
                         default_tier=default_tier, every=every), rate_card
    ).join(jobs.select("cluster", "job_id", "project"), on=["cluster", "job_id"], how="left")
    return pieces.group_by("project", "piece_start", "piece_end").agg(
        pl.col("gpu_hours_normalized").sum(),
        _unweighted=pl.col("gpu_hours_allocated").filter(~pl.col("weighed")).sum(),
        _models=pl.col("model").fill_null("(no model)").filter(~pl.col("weighed")).unique(),
    )


def consumed_per_node(nodes: pl.LazyFrame, clo: pl.LazyFrame, use: pl.LazyFrame, *,
                      burn_start: datetime) -> pl.LazyFrame:
    """Per node and budget period: its subtree's use inside the period (consumed_gpu_hours), the
    part since ``burn_start`` (``_burn``), and the unweighted GPU-hours and models."""
    joined = (
        nodes.join(clo, left_on="node", right_on="ancestor", how="left", suffix="_leaf")
        .join(use, left_on="node_leaf", right_on="project", how="inner")
        .filter(pl.col("piece_start") >= _DAY_START)
        .filter(pl.col("piece_start") < pl.col("period_end").cast(pl.Datetime("us")))
    )
    # A piece (an hour or a day) is one allocation held the same all along: the burn window's start
    # may cut one, and weighting it by the overlap is exact.
    overlap = (
        (pl.col("piece_end") - pl.max_horizontal(pl.col("piece_start"), pl.lit(burn_start), _DAY_START))
        .dt.total_microseconds().clip(lower_bound=0)
        / (pl.col("piece_end") - pl.col("piece_start")).dt.total_microseconds()
    )
    return joined.group_by("node", "period_start").agg(
        consumed_gpu_hours=pl.col("gpu_hours_normalized").sum(),
        _burn=(pl.col("gpu_hours_normalized") * overlap).sum(),
        unweighted_gpu_hours=pl.col("_unweighted").sum(),
        unweighted_models=pl.col("_models").list.explode(keep_nulls=False, empty_as_null=False).unique().sort()
        .str.join(", "),
    )


def burn_status(nodes: pl.LazyFrame, consumed: pl.LazyFrame, *, as_of: datetime,
                burn_window: timedelta) -> pl.LazyFrame:
    """Each node's budget beside its consumption: remaining, burn per day over the burn window
    (or the period so far, if shorter), projected exhaustion at that rate, and the status."""
    burn_days = pl.min_horizontal(
        pl.lit(burn_window.total_seconds()),
        (pl.lit(as_of) - _DAY_START).dt.total_microseconds() / 1e6,
    ) / 86400.0
    # to the second: a projection at a burn rate is no finer than that, and float sums of the same
    # GPU-hours added in another order (the pipeline's snapshot, a recompute) must project the same time
    exhaustion = pl.lit(as_of) + pl.duration(
        seconds=(pl.col("remaining_gpu_hours") / pl.col("burn_gpu_hours_per_day") * 86400.0).round(0).cast(pl.Int64)
    )
    return (
        nodes.join(consumed, on=["node", "period_start"], how="left")
        .with_columns(pl.col("consumed_gpu_hours", "_burn", "unweighted_gpu_hours").fill_null(0.0),
                      pl.col("unweighted_models").replace("", None))
        .with_columns(
            remaining_gpu_hours=pl.col("budget_gpu_hours") - pl.col("consumed_gpu_hours"),
            burn_gpu_hours_per_day=pl.when(burn_days > 0).then(pl.col("_burn") / burn_days).otherwise(0.0),
        )
        .with_columns(
            projected_exhaustion=pl.when((pl.col("remaining_gpu_hours") > 0) & (pl.col("burn_gpu_hours_per_day") > 0))
            .then(exhaustion).otherwise(None)
        )
        .with_columns(
            status=pl.when(pl.col("remaining_gpu_hours") <= 0).then(pl.lit("exhausted"))
            .when(pl.col("projected_exhaustion") < pl.col("period_end").cast(pl.Datetime("us")))
            .then(pl.lit("at-risk"))
            .otherwise(pl.lit("funded"))
        )
        .drop("_burn")
    )


def _with_rule_minimum(jobs: pl.LazyFrame, rules: Sequence[tuple[str | None, str | None, int]]) -> pl.LazyFrame:
    """Fill min_runtime_s of Slurm jobs that have none from the most specific matching rule."""
    names = jobs.collect_schema().names()
    if not rules or "source" not in names:
        return jobs
    qos = pl.col("qos") if "qos" in names else pl.lit(None, pl.String)
    partition = pl.col("partition") if "partition" in names else pl.lit(None, pl.String)
    # Both named first, then QOS only, then partition only: the first match in that order wins.
    ranked = sorted(rules, key=lambda r: 0 if r[0] and r[1] else 1 if r[0] else 2)
    from_rule = pl.lit(None, pl.Int64)
    for rule_qos, rule_partition, seconds in reversed(ranked):
        match = pl.lit(True)
        if rule_qos:
            match = match & (qos == rule_qos)
        if rule_partition:
            match = match & (partition == rule_partition)
        from_rule = pl.when(match.fill_null(False)).then(pl.lit(seconds, pl.Int64)).otherwise(from_rule)
    slurm = pl.col("source") == "slurm-sacct"
    return jobs.with_columns(
        min_runtime_s=pl.when(pl.col("min_runtime_s").is_null() & slurm).then(from_rule)
        .otherwise(pl.col("min_runtime_s"))
    )


def job_funding(
    jobs: pl.LazyFrame,
    burn: pl.LazyFrame,
    org_nodes: pl.LazyFrame | pl.DataFrame,
    *,
    now: datetime,
    min_runtime_cap: timedelta = MIN_RUNTIME_CAP,
    min_runtime_rules: Sequence[tuple[str | None, str | None, int]] = (),
) -> pl.LazyFrame:
    """Per job not yet ended (end_time NULL or after ``now``): is it funded, and protected until when?

    Funded = every node on the project's path that has a budget (own, from ``budget_burn``) has
    remaining > 0, at least one has, and the job declares min_runtime_s > 0. Columns: cluster,
    job_id, project, funded, unfunded_reason, min_runtime_s_effective (capped at
    ``min_runtime_cap``), protected_until (start + effective min runtime; NULL when not
    running or not funded), protected (funded and now < protected_until).

    ``min_runtime_rules`` — (qos, partition, seconds), None matching any — give Slurm jobs that
    declare no minimum runtime one: the most specific matching rule (both named, then QOS, then
    partition). A job's own min_runtime_s (TimeMin, an annotation) always wins.
    """
    b = burn.filter(pl.col("budget_own")).select("node", "remaining_gpu_hours").collect(engine=ENGINE)
    return funding_from_remaining(jobs, dict(b.iter_rows()), org_nodes, now=now, min_runtime_cap=min_runtime_cap,
                                  min_runtime_rules=min_runtime_rules)


def funding_from_remaining(
    jobs: pl.LazyFrame,
    remaining: dict[str, float],
    org_nodes: pl.LazyFrame | pl.DataFrame,
    *,
    now: datetime,
    min_runtime_cap: timedelta = MIN_RUNTIME_CAP,
    min_runtime_rules: Sequence[tuple[str | None, str | None, int]] = (),
) -> pl.LazyFrame:
    """job_funding from each node's own budget left (``remaining``: budget_burn's
    remaining_gpu_hours of its ``budget_own`` rows), wherever that came from: the burn computed
    here, or the budget snapshot the pipelines keep (facts.funding)."""
    jobs = _with_rule_minimum(jobs, min_runtime_rules)
    return funding_status(jobs, budget_verdicts(Tree.from_frame(org_nodes), remaining), now=now,
                          min_runtime_cap=min_runtime_cap)


def budget_verdicts(tree: Tree, remaining: dict[str, float]) -> pl.LazyFrame:
    """Per project of ``tree``: budget_ok (every node on its path with an own budget has some
    left, and there is at least one) and unfunded_reason (no budget / exhausted at the node)."""
    verdict = []
    for project in tree.parent:
        chain = [n for n in tree.ancestors(project) if n in remaining]
        if not chain:
            verdict.append((project, False, "no budget"))
        elif any(remaining[n] <= 0 for n in chain):
            dry = next(n for n in chain if remaining[n] <= 0)
            verdict.append((project, False, f"budget exhausted at {dry}"))
        else:
            verdict.append((project, True, None))
    return pl.LazyFrame(verdict, schema={"project": pl.String, "budget_ok": pl.Boolean,
                                         "unfunded_reason": pl.String}, orient="row")


def funding_status(jobs: pl.LazyFrame, budget_ok: pl.LazyFrame, *, now: datetime,
                   min_runtime_cap: timedelta) -> pl.LazyFrame:
    """job_funding's columns for the jobs not ended at ``now``, from their project's verdict and
    their minimum runtime (capped): funded, the reason if not, protected until when."""
    cap_s = int(min_runtime_cap.total_seconds())
    eff = pl.min_horizontal(pl.col("min_runtime_s").fill_null(0), pl.lit(cap_s))
    return (
        jobs.filter(pl.col("end_time").is_null() | (pl.col("end_time") > now))
        .select("cluster", "job_id", "project", "start_time", "min_runtime_s")
        .join(budget_ok, on="project", how="left")
        .with_columns(
            pl.when(pl.col("budget_ok").is_null()).then(pl.lit("project not in org tree"))
            .otherwise(pl.col("unfunded_reason")).alias("unfunded_reason"),
            pl.col("budget_ok").fill_null(False),
            min_runtime_s_effective=eff.cast(pl.Int64),
        )
        .with_columns(
            funded=pl.col("budget_ok") & (pl.col("min_runtime_s_effective") > 0),
            unfunded_reason=pl.when(~pl.col("budget_ok")).then(pl.col("unfunded_reason"))
            .when(pl.col("min_runtime_s_effective") <= 0).then(pl.lit("no minimum runtime declared"))
            .otherwise(None),
        )
        .with_columns(
            protected_until=pl.when(pl.col("funded") & pl.col("start_time").is_not_null())
            .then(pl.col("start_time") + pl.duration(seconds=pl.col("min_runtime_s_effective")))
            .otherwise(None)
        )
        .with_columns(protected=pl.col("protected_until").fill_null(pl.lit(now)) > pl.lit(now))
        .drop("budget_ok", "start_time", "min_runtime_s")
    )
