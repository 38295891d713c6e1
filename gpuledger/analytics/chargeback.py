"""Chargeback: who owes what for a period, in exact decimal money that adds up to the cluster's cost.

Charge = allocated GPU-hours × price(model, tier) in force at each clock hour (as-of join on the
rate card's effective_from, at the hour's start). Capacity is what existed (capacity.py: a device
from first seen until retired). Per (cluster, model, tier) and hour, capacity not allocated is
``idle`` cost (its own line, or spread over the jobs of that cluster, model and tier in
proportion to their charges); allocation beyond capacity is ``over-allocated`` (a memo line
naming the jobs, never negative idle). So, exactly in the raw amounts (12 decimals), per
(cluster, model, tier): Σ charges + idle = Σ capacity × price + over-allocated.

Rounding is top-down, one tree per currency, pool first: each GPU pool (model × tier) is its exact
total rounded half-up (so a pool's charges + idle are its capacity × price to the cent), and the
currency total is the sum of its pools; each pool is split among its org tree nodes (roots, ...,
projects: project × model × tier lines and the idle model × tier line), then job lines (idle:
cluster lines), by largest remainder of their exact amounts. Every job, project and pool line is
within a cent of exact; a node's line sums its parts in every pool (within a cent per pool);
children add up to their parent at every level; job, project and node levels read the same tree.

Nothing is dropped: allocations that cannot be priced (device not in the inventory, job without
a GPU model, model/tier without a rate) and capacity without a rate are ``unpriced`` lines with
their GPU-hours and the reason. A cluster with no device inventory at all has unknown capacity:
its charges stand, no idle or over-allocation is computed, and a ``capacity-unknown`` memo line
says so. A period not over at ``now`` is provisional: capacity (so idle) is billed only up to now.

The lines of :func:`chargeback_lines`, their columns: period_start, period_end, billed_through
(min(end, now): capacity is billed up to it), provisional (the period is not over at ``now``), line_kind (charge / idle /
over-allocated / capacity-unknown / unpriced), billed (charge and idle lines: they make the
total; the others are memo lines), the level's keys (job: cluster, job_id, project,
user_name; project: project; node: node), gpu_model, tier, currency, gpu_hours_allocated
(idle lines: idle GPU-hours; over-allocated: GPU-hours beyond capacity; unpriced: GPU-hours
that could not be priced; capacity-unknown: the charged GPU-hours), amount (Decimal cents;
NULL on unpriced lines and on over-allocation in hours without a rate; on a
capacity-unknown line the charges it explains, again outside the total),
idle_amount_included (cents of spread idle inside ``amount``, rounded top-down the same
way), note (the reason of an unpriced line, the jobs of an over-allocated one, ...). Lines
not of a project at project / node level are named "(idle)", "(over-allocated)",
"(capacity unknown)"; unpriced idle capacity is under "(idle)".

Per currency: Σ billed = Σ capacity × price + Σ over-allocated + Σ capacity-unknown, to the
cent of the exact amounts (each line within a cent of exact).
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from decimal import Decimal
from typing import NamedTuple

import polars as pl

from gpuledger.analytics.allocations import DEFAULT_TIER, DEVICE
from gpuledger.analytics.attribution import allocated_pieces
from gpuledger.analytics.capacity import DEFAULT_RETIRE_GRACE, capacity_hourly
from gpuledger.analytics.collect import ENGINE
from gpuledger.analytics.money import CENTS, RAW, half_up_cents, price_as_of, round_tree, to_raw
from gpuledger.analytics.tree import Tree, closure
from gpuledger.rules.billing import BILLED_KINDS, LINE_KINDS
from gpuledger.rules.periods import period_bounds  # noqa: F401  (callers name it with the lines it bounds)

IDLE = "(idle)"
OVER = "(over-allocated)"
CAPACITY_UNKNOWN = "(capacity unknown)"
NO_JOB_RECORD = "(no job record)"
PAD = "\x00"  # a level a branch of the rounding tree does not have (a pass-through node)
_OVER_TOLERANCE = Decimal("0.000000001")  # GPU-hours: float noise of MIG fractions is not over


def capacity_cost(gpus: pl.LazyFrame, rate_card: pl.LazyFrame, *, start: datetime, end: datetime,
                  retire_grace: timedelta = DEFAULT_RETIRE_GRACE) -> pl.LazyFrame:
    """Capacity priced per hour: cluster, model, tier, hour, gpu_hours_capacity,
    price_per_gpu_hour, currency (NULL where no rate is in force), amount_raw (Decimal, 12
    places). Each hour at the rate in force at its start (or at ``start``)."""
    cap = capacity_hourly(gpus, start=start, end=end, retire_grace=retire_grace).with_columns(
        _at=pl.max_horizontal(pl.col("hour"), pl.lit(start))
    )
    return price_as_of(cap, rate_card, at="_at").drop("_at").with_columns(
        amount_raw=to_raw(pl.col("gpu_hours_capacity")) * pl.col("price_per_gpu_hour")
    )


def with_org_paths(lines: pl.LazyFrame, org_nodes) -> tuple[pl.LazyFrame, int]:
    """``lines`` with p1..pD: the org path of its ``project``, root first, padded; a project not
    in the tree (and the idle / no-job-record lines) is its own root. Returns (frame, D)."""
    tree = Tree.from_frame(org_nodes) if org_nodes is not None else None
    paths = {n: list(reversed(tree.ancestors(n))) for n in tree.parent} if tree else {}
    depth = max((len(v) for v in paths.values()), default=1)
    cols = [f"p{i}" for i in range(1, depth + 1)]
    rows = [[name, *(path + [PAD] * (depth - len(path)))] for name, path in paths.items()]
    frame = pl.LazyFrame(rows, schema={"project": pl.String, **{c: pl.String for c in cols}}, orient="row")
    joined = lines.join(frame, on="project", how="left").with_columns(
        pl.col("p1").fill_null(pl.col("project")), *(pl.col(c).fill_null(PAD) for c in cols[1:]))
    return joined, depth


def chargeback_lines(
    job_allocations: pl.LazyFrame,
    gpus: pl.LazyFrame,
    jobs: pl.LazyFrame,
    rate_card: pl.LazyFrame,
    *,
    start: datetime,
    end: datetime,
    now: datetime,
    level: str = "job",
    org_nodes: pl.LazyFrame | pl.DataFrame | None = None,
    idle_cost: str = "line",
    default_tier: str = DEFAULT_TIER,
    retire_grace: timedelta = DEFAULT_RETIRE_GRACE,
    exact: bool = False,
) -> pl.LazyFrame:
    """Chargeback lines for [start, end); allocations still open are counted up to ``now``.

    With ``exact`` the lines also carry ``amount_exact`` and ``idle_amount_exact`` (Decimal, 12
    places: the unrounded amounts the cents were rounded from), which a closed period stores so
    that a correction can round only its delta (ledger.periods).

    ``level``: ``job`` (one line per cluster, job, model, tier), ``project`` (project × model ×
    tier) or ``node`` (one line per org node: its subtree). ``idle_cost``: ``line`` (an idle line
    per cluster, model and tier) or ``spread`` (idle added to the jobs of the same cluster, model
    and tier in proportion to their charges; capacity nobody used stays on an idle line).
    ``org_nodes`` gives the rounding tree (without it every project is a root); ``node`` needs it.

    Columns and the invariant: the module notes.
    """
    return chargeback_lines_at(job_allocations, gpus, jobs, rate_card, levels=(level,), start=start, end=end, now=now,
                               org_nodes=org_nodes, idle_cost=idle_cost, default_tier=default_tier,
                               retire_grace=retire_grace, exact=exact)[level]


def chargeback_lines_at(
    job_allocations: pl.LazyFrame,
    gpus: pl.LazyFrame,
    jobs: pl.LazyFrame,
    rate_card: pl.LazyFrame,
    *,
    levels: tuple[str, ...],
    start: datetime,
    end: datetime,
    now: datetime,
    org_nodes: pl.LazyFrame | pl.DataFrame | None = None,
    idle_cost: str = "line",
    default_tier: str = DEFAULT_TIER,
    retire_grace: timedelta = DEFAULT_RETIRE_GRACE,
    exact: bool = False,
) -> dict[str, pl.LazyFrame]:
    """:func:`chargeback_lines` at each of ``levels`` from one pricing and one rounding: the lines
    of every level are cut from the same trees (a period's close stores all three; issue 41)."""
    for level in levels:
        _check_options(level=level, idle_cost=idle_cost, org_nodes=org_nodes)
    billed_end = min(end, max(now, start))
    cap, pieces, prices = priced_pieces(job_allocations, gpus, jobs, rate_card, start=start, end=end, now=now,
                                        billed_end=billed_end, default_tier=default_tier, retire_grace=retire_grace)
    per_hour = hourly_balance(cap, pieces, prices)
    charges, idle = charge_lines(pieces), idle_lines(per_hour)
    over, cap_unknown, unpriced = over_lines(per_hour, pieces), capacity_unknown_lines(charges), \
        unpriced_lines(pieces, per_hour)
    charges = charges.drop("_known").with_columns(_idle_raw=_ZERO)
    if idle_cost == "spread":
        charges, idle = spread_idle(charges, idle)
    billed = rounded_billed(charges, idle, jobs, org_nodes)
    memo = rounded_memo(over, cap_unknown)
    unpriced = unpriced_by_project(unpriced, billed.job_meta)
    over_unpriced = over.filter(pl.col("currency").is_null())  # over-allocated in hours without a rate
    out = {}
    for level in levels:
        if level == "node":
            frames = node_level_lines(billed, memo, over_unpriced, unpriced, org_nodes)
        else:
            frames = (job_level_lines if level == "job" else project_level_lines)(billed, memo, over_unpriced,
                                                                                  unpriced)
        out[level] = shaped_lines(frames, LEVEL_KEYS[level], start=start, end=end, now=now, billed_end=billed_end,
                                  exact=exact)
    return out


LEVEL_KEYS = {"job": ["cluster", "job_id", "project", "user_name"], "project": ["project"], "node": ["node"]}


def _check_options(*, level: str, idle_cost: str, org_nodes) -> None:
    if idle_cost not in ("line", "spread"):
        raise ValueError(f"idle_cost={idle_cost!r}: choose line or spread")
    if level not in LEVEL_KEYS:
        raise ValueError(f"level={level!r}: choose job, project or node")
    if level == "node" and org_nodes is None:
        raise ValueError("level='node' needs org_nodes")


# --- the stages of chargeback_lines, each a function of frames (tests/analytics/test_chargeback_stages.py) ---

KEYS = ["cluster", "model", "tier"]
_ZERO = pl.lit(0).cast(RAW)


def priced_pieces(job_allocations, gpus, jobs, rate_card, *, start: datetime, end: datetime, now: datetime,
                  billed_end: datetime, default_tier: str, retire_grace: timedelta):
    """(cap, pieces, prices): capacity per (cluster, model, tier, hour) up to ``billed_end`` as
    ``cap_raw``; each allocation's hourly piece (``a_raw`` GPU-hours, ``_known``: its cluster has
    an inventory) with the price in force at its hour; the one price per (model, tier, hour) that
    charges, capacity and over-allocation all use."""
    keys = KEYS
    # Capacity per (cluster, model, tier, hour); clusters with any inventory have known capacity.
    # cap, the pieces and prices are each read by several stages: materialized once here (lazy,
    # each reader cut the allocations into hours again and recomputed the capacity).
    cap = capacity_hourly(gpus, start=start, end=billed_end, retire_grace=retire_grace).select(
        *keys, "hour", cap_raw=to_raw(pl.col("gpu_hours_capacity"))).collect(engine=ENGINE).lazy()
    known = gpus.select(pl.col("cluster").cast(pl.String)).unique().with_columns(_known=pl.lit(True))
    pieces = (
        allocated_pieces(job_allocations, gpus, now=now, start=start, end=end, jobs=jobs,
                         default_tier=default_tier)
        .join(known, on="cluster", how="left")
        .select("job_id", "gpu_id", "allocation_level", *keys, "hour", "gpu_hours_allocated",
                a_raw=to_raw(pl.col("gpu_hours_allocated")), _known=pl.col("_known").fill_null(False))
        .collect(engine=ENGINE).lazy()
    )
    # One price per (model, tier, hour): charges, capacity and over-allocation use the same one.
    hours = pl.concat([pieces.select("model", "tier", "hour"), cap.select("model", "tier", "hour")]) \
        .filter(pl.col("model").is_not_null()).unique()
    prices = price_as_of(hours.with_columns(_at=pl.max_horizontal(pl.col("hour"), pl.lit(start))),
                         rate_card, at="_at").drop("_at").collect(engine=ENGINE).lazy()
    # Materialised once here: every line kind below reads these two frames (a lazy plan would
    # recompute the hourly cut for each of them).
    pieces = pieces.join(prices, on=["model", "tier", "hour"], how="left", nulls_equal=False).collect(engine=ENGINE).lazy()
    return cap, pieces, prices


def hourly_balance(cap: pl.LazyFrame, pieces: pl.LazyFrame, prices: pl.LazyFrame) -> pl.LazyFrame:
    """Per (cluster, model, tier, hour) of a known cluster: ``idle_h`` (capacity not allocated)
    and ``over_h`` (allocated beyond capacity, above float noise), priced."""
    keys, zero = KEYS, _ZERO
    # Per hour of a known cluster: idle = capacity not allocated, over = allocated beyond it.
    per_hour = (
        cap.join(pieces.filter(pl.col("_known") & pl.col("model").is_not_null())
                 .group_by(*keys, "hour").agg(alloc_raw=pl.col("a_raw").sum()),
                 on=[*keys, "hour"], how="full", coalesce=True)
        .with_columns(pl.col("cap_raw").fill_null(zero), pl.col("alloc_raw").fill_null(zero))
        .with_columns(_diff=pl.col("alloc_raw") - pl.col("cap_raw"))
        .with_columns(
            over_h=pl.when(pl.col("_diff") > pl.lit(_OVER_TOLERANCE).cast(RAW)).then(pl.col("_diff")).otherwise(zero),
            idle_h=pl.when(pl.col("_diff") < zero).then(-pl.col("_diff")).otherwise(zero),
        )
        .join(prices, on=["model", "tier", "hour"], how="left")
    ).collect(engine=ENGINE).lazy()
    return per_hour


_PRICED_HOUR = pl.col("price_per_gpu_hour").is_not_null()


def charge_lines(pieces: pl.LazyFrame) -> pl.LazyFrame:
    """Per job, cluster, model, tier, currency: allocated GPU-hours and the exact charge."""
    keys, priced_hour = KEYS, _PRICED_HOUR
    return (
        pieces.filter(priced_hour)
        .with_columns(amount_raw=pl.col("a_raw") * pl.col("price_per_gpu_hour"))
        .group_by("job_id", *keys, "currency")
        .agg(pl.col("gpu_hours_allocated").sum(), pl.col("amount_raw").sum(), pl.col("_known").first())
    )


def idle_lines(per_hour: pl.LazyFrame) -> pl.LazyFrame:
    """Per cluster, model, tier, currency: idle GPU-hours and their exact cost."""
    keys, zero, priced_hour = KEYS, _ZERO, _PRICED_HOUR
    return (
        per_hour.filter(priced_hour & (pl.col("idle_h") > zero))
        .group_by(*keys, "currency")
        .agg(gpu_hours_allocated=pl.col("idle_h").sum().cast(pl.Float64),
             amount_raw=(pl.col("idle_h") * pl.col("price_per_gpu_hour")).sum())
    )


def over_lines(per_hour: pl.LazyFrame, pieces: pl.LazyFrame) -> pl.LazyFrame:
    """Per cluster, model, tier, currency: GPU-hours allocated beyond capacity, their cost (NULL
    currency: hours without a rate) and a note naming the jobs."""
    keys, zero = KEYS, _ZERO
    over_hours = per_hour.filter(pl.col("over_h") > zero)
    over_jobs = (
        pieces.join(over_hours.select(*keys, "hour"), on=[*keys, "hour"], how="semi")
        .group_by(*keys).agg(note=pl.lit("jobs: ") + pl.col("job_id").unique().sort().str.join(", "))
    )
    return (
        over_hours.group_by(*keys, "currency")
        .agg(gpu_hours_allocated=pl.col("over_h").sum().cast(pl.Float64),
             amount_raw=(pl.col("over_h") * pl.col("price_per_gpu_hour")).sum())
        .join(over_jobs, on=keys, how="left")
    )


def capacity_unknown_lines(charges: pl.LazyFrame) -> pl.LazyFrame:
    """The charges of clusters without a device inventory, per cluster, model, tier, currency."""
    keys = KEYS
    return (
        charges.filter(~pl.col("_known")).group_by(*keys, "currency")
        .agg(pl.col("gpu_hours_allocated").sum(), pl.col("amount_raw").sum())
        .with_columns(note=pl.lit("cluster ") + pl.col("cluster")
                      + pl.lit(" has no device inventory: capacity unknown, its charges stand, "
                               "no idle or over-allocation computed"))
    )


def unpriced_lines(pieces: pl.LazyFrame, per_hour: pl.LazyFrame) -> pl.LazyFrame:
    """Allocations (per job and reason) and idle capacity that no rate prices, with the reason."""
    keys, priced_hour = KEYS, _PRICED_HOUR
    no_rate = pl.lit("no price for ") + pl.col("model") + pl.lit("/") + pl.col("tier") + pl.lit(" in the rate card")
    reason = (
        pl.when(pl.col("model").is_null() & (pl.col("allocation_level") == DEVICE))
        .then(pl.lit("device ") + pl.col("gpu_id").cast(pl.String) + pl.lit(" not in the inventory"))
        .when(pl.col("model").is_null()).then(pl.lit("job record names no GPU model"))
        .otherwise(no_rate)
    )
    return pl.concat([
        pieces.filter(~priced_hour).with_columns(note=reason)
        .group_by("job_id", *keys, "note").agg(pl.col("gpu_hours_allocated").sum()),
        # above float noise, as over-allocation: two half allocations of a 1-minute piece leave
        # 1e-12 h "idle" (hypothesis found it; tests/analytics/test_chargeback_oracle.py)
        per_hour.filter(~priced_hour & (pl.col("idle_h") > pl.lit(_OVER_TOLERANCE).cast(RAW)))
        .with_columns(note=no_rate + pl.lit(" (idle capacity)"), job_id=pl.lit(None, pl.String))
        .group_by("job_id", *keys, "note")
        .agg(gpu_hours_allocated=pl.col("idle_h").sum().cast(pl.Float64)),
    ], how="diagonal_relaxed")


def spread_idle(charges: pl.LazyFrame, idle: pl.LazyFrame) -> tuple[pl.LazyFrame, pl.LazyFrame]:
    """Idle cost added to the charges of the same cluster, model, tier and currency in proportion
    to them (``_idle_raw``: the part of ``amount_raw`` that is idle); idle nobody charged stays."""
    keys, zero = KEYS, _ZERO
    group = [*keys, "currency"]
    spread = (
        charges.join(idle.select(*group, pl.col("amount_raw").alias("_idle")), on=group, how="left")
        .with_columns(_charged=pl.col("amount_raw").sum().over(group))
        .with_columns(_spreads=pl.col("_idle").is_not_null() & (pl.col("_charged") > zero))
        .with_columns(_share=pl.when(pl.col("_spreads"))
                      .then(pl.col("_idle") * pl.col("amount_raw") / pl.col("_charged")).otherwise(zero))
        # Decimal division rounds at 1e-12; the group's largest charge takes the last few so
        # the spread parts add up to the idle amount exactly.
        .with_columns(_rank=pl.col("amount_raw").rank("ordinal", descending=True).over(group))
        .with_columns(_share=pl.col("_share") + pl.when((pl.col("_rank") == 1) & pl.col("_spreads"))
                      .then(pl.col("_idle") - pl.col("_share").sum().over(group)).otherwise(zero))
    )
    spread_groups = spread.filter(pl.col("_spreads")).select(group).unique()
    charges = spread.with_columns(_idle_raw=pl.col("_share"),
                                  amount_raw=pl.col("amount_raw") + pl.col("_share")) \
        .drop("_idle", "_charged", "_share", "_rank", "_spreads")
    idle = idle.join(spread_groups, on=group, how="anti")

    return charges, idle


def node_level(levels: list[pl.LazyFrame], k: int, sums: tuple[str, ...] = (
        "gpu_hours_allocated", "amount", "idle_amount_included", "amount_raw", "_idle_raw")) -> pl.LazyFrame:
    """The org nodes at depth ``k`` (1 = the roots) of a pool-first rounded tree (path pool →
    p1..pD → leaf, :func:`rounded_billed`): per (currency, node ``p<k>``) the sum of its parts in
    every pool, as column ``node``."""
    lv = levels[k].filter(pl.col(f"p{k}") != PAD)
    names = lv.collect_schema().names()
    return lv.group_by("currency", pl.col(f"p{k}").alias("node")).agg(pl.col(c).sum() for c in sums if c in names)


def rounded_billed(charges: pl.LazyFrame, idle: pl.LazyFrame, jobs: pl.LazyFrame, org_nodes) -> BilledTree:
    """(levels, meta, path, depth, job_meta): charge and idle lines rounded top-down, one tree per
    GPU pool (currency | model × tier → org path → leaf), money.round_tree's levels, each with the
    pool's currency and ``_mt`` beside it. Pool first: each GPU pool's lines add up to its own exact total rounded half-up, which
    is its capacity × price (rounded half-up) where nothing is over-allocated, so every pool
    reconciles to the cent and the currency total is the sum of its pools. A node's line (every
    pool's part of it summed) is within a cent per pool of its exact amount."""
    # The rounding trees: pool (currency, model × tier) → org path → project → job line.
    job_meta = jobs.select("cluster", "job_id", "project", "user_name").unique(["cluster", "job_id"])
    charges = charges.join(job_meta, on=["cluster", "job_id"], how="left").with_columns(
        pl.col("project").fill_null(NO_JOB_RECORD), line_kind=pl.lit("charge"))
    idle = idle.with_columns(line_kind=pl.lit("idle"), job_id=pl.lit(None, pl.String),
                             project=pl.lit(IDLE), user_name=pl.lit(None, pl.String), _idle_raw=pl.col("amount_raw"))
    billed = pl.concat([charges, idle], how="diagonal_relaxed")
    billed, depth = with_org_paths(billed, org_nodes)
    model_tier = pl.col("model") + pl.lit("|") + pl.col("tier")
    # the pool (currency | model | tier) is the tree's root: each rounded half-up on its own
    path = ["_pool", *(f"p{i}" for i in range(1, depth + 1)), "_leaf"]
    leaves = billed.with_columns(
        _mt=model_tier, _pool=pl.concat_str([pl.col("currency"), model_tier], separator="|"),
        _leaf=pl.concat_str([pl.col("cluster"), pl.col("job_id").fill_null(""), model_tier], separator="|"),
    ).collect(engine=ENGINE).lazy()
    levels = round_tree(leaves, path=path, amounts={"amount_raw": "amount", "_idle_raw": "idle_amount_included"},
                        sums=["gpu_hours_allocated"])
    pools = leaves.select("_pool", "currency", "_mt").unique("_pool")
    levels = [lv.join(pools, on="_pool", how="left") for lv in levels]
    meta = leaves.select(*path, "line_kind", "cluster", "job_id", "project", "user_name", "model", "tier")
    return BilledTree(levels, meta, path, depth, job_meta)


def rounded_memo(over: pl.LazyFrame, cap_unknown: pl.LazyFrame) -> MemoTree:
    """(levels, meta, path): the memo lines with money rounded top-down per kind and currency."""
    keys = KEYS
    model_tier = pl.col("model") + pl.lit("|") + pl.col("tier")
    # Memo lines with money, outside the total: over-allocation, and the charges of clusters of
    # unknown capacity (what the total holds beyond capacity × price). Rounded top-down per kind.
    memo = pl.concat([
        over.filter(pl.col("currency").is_not_null()).with_columns(line_kind=pl.lit("over-allocated")),
        cap_unknown.with_columns(line_kind=pl.lit("capacity-unknown")),
    ], how="diagonal_relaxed").with_columns(_mt=model_tier, _leaf=pl.col("cluster") + pl.lit("|") + model_tier)
    memo_path = ["line_kind", "currency", "_mt", "_leaf"]
    memo_levels = round_tree(memo, path=memo_path, amounts={"amount_raw": "amount"}, sums=["gpu_hours_allocated"])
    memo_meta = memo.select(*memo_path, *keys, "note")
    return MemoTree(memo_levels, memo_meta, memo_path)


class BilledTree(NamedTuple):
    """The billed lines' rounding trees (:func:`rounded_billed`)."""
    levels: list[pl.LazyFrame]  # money.round_tree's levels: pool, p1..pD, leaf
    meta: pl.LazyFrame  # per leaf: its path, line_kind and the job's keys
    path: list[str]
    depth: int  # D, the org tree's depth
    job_meta: pl.LazyFrame  # cluster, job_id -> project, user_name


class MemoTree(NamedTuple):
    """The memo lines' rounding trees (:func:`rounded_memo`): line_kind → currency → pool → leaf."""
    levels: list[pl.LazyFrame]
    meta: pl.LazyFrame
    path: list[str]


# --- one line set per level, from the rounded trees (tests/analytics/test_chargeback_levels.py) ---

_NO_NOTE = {"note": pl.lit(None, pl.String)}
_NO_IDLE = {"idle_amount_included": pl.lit(0).cast(CENTS)}
_NO_MONEY = {"amount": pl.lit(None, CENTS), "idle_amount_included": pl.lit(None, CENTS)}
_UNPRICED = {"line_kind": pl.lit("unpriced"), "currency": pl.lit(None, pl.String), **_NO_MONEY}
_OVER_UNPRICED = {"line_kind": pl.lit("over-allocated"), **_NO_MONEY}
_MEMO_NAME = pl.when(pl.col("line_kind") == "over-allocated").then(pl.lit(OVER)).otherwise(pl.lit(CAPACITY_UNKNOWN))


def unpriced_by_project(unpriced: pl.LazyFrame, job_meta: pl.LazyFrame) -> pl.LazyFrame:
    """The unpriced lines with their job's project and user: unpriced idle capacity (no job) is
    "(idle)", a job without a record "(no job record)"."""
    return unpriced.join(job_meta, on=["cluster", "job_id"], how="left").with_columns(
        project=pl.when(pl.col("job_id").is_null()).then(pl.lit(IDLE))
        .otherwise(pl.col("project").fill_null(NO_JOB_RECORD)))


def _memo_at(memo: MemoTree, k: int) -> pl.LazyFrame:
    """The memo lines rolled up to level ``k`` of their tree, each with its pool's model, tier and notes."""
    on = memo.path[: k + 1]
    extra = memo.meta.group_by(on).agg(pl.col("model", "tier").first(), pl.col("note").unique().sort().str.join("; "))
    return memo.levels[k].join(extra, on=on, how="left").with_columns(**_NO_IDLE)


def _hours_and_notes(lf: pl.LazyFrame, *by: str) -> pl.LazyFrame:
    """GPU-hours summed per ``by``, their distinct notes joined."""
    return lf.group_by(*by).agg(pl.col("gpu_hours_allocated").sum(), pl.col("note").unique().sort().str.join("; "))


def job_level_lines(billed: BilledTree, memo: MemoTree, over_unpriced: pl.LazyFrame,
                    unpriced: pl.LazyFrame) -> list[pl.LazyFrame]:
    """One line per cluster, job, model and tier: the leaves of the trees, and the lines without money."""
    return [
        billed.levels[-1].join(billed.meta, on=billed.path, how="left", nulls_equal=True).with_columns(**_NO_NOTE),
        memo.levels[-1].join(memo.meta, on=memo.path, how="left").with_columns(**_NO_IDLE),
        over_unpriced.with_columns(**_OVER_UNPRICED),
        unpriced.with_columns(**_UNPRICED),
    ]


def project_level_lines(billed: BilledTree, memo: MemoTree, over_unpriced: pl.LazyFrame,
                        unpriced: pl.LazyFrame) -> list[pl.LazyFrame]:
    """One line per project × model × tier (the level above the leaves; memo lines per pool)."""
    above_leaf = billed.path[:-1]
    proj = billed.levels[-2].join(billed.meta.unique(above_leaf).drop("_leaf"), on=above_leaf, how="left")
    return [
        proj.with_columns(**_NO_NOTE),
        _memo_at(memo, 2).with_columns(project=_MEMO_NAME),
        _hours_and_notes(over_unpriced, "currency", "model", "tier").with_columns(project=pl.lit(OVER),
                                                                                  **_OVER_UNPRICED),
        unpriced.group_by("project", "model", "tier", "note").agg(pl.col("gpu_hours_allocated").sum())
        .with_columns(**_UNPRICED),
    ]


def node_level_lines(billed: BilledTree, memo: MemoTree, over_unpriced: pl.LazyFrame,
                     unpriced: pl.LazyFrame, org_nodes) -> list[pl.LazyFrame]:
    """One line per org node (its subtree, every pool summed: the tree is rounded pool first);
    memo lines per kind and currency, unpriced hours per node and reason."""
    kind = pl.when(pl.col("node") == IDLE).then(pl.lit("idle")).otherwise(pl.lit("charge"))
    nodes = [node_level(billed.levels, k).select("currency", "node", "gpu_hours_allocated", "amount",
                                                 "idle_amount_included", "amount_raw", "_idle_raw", line_kind=kind)
             for k in range(1, billed.depth + 1)]
    unpriced_nodes = (
        unpriced.join(closure(org_nodes), left_on="project", right_on="node", how="left")
        .with_columns(node=pl.coalesce("ancestor", "project"))
        .group_by("node", "note").agg(pl.col("gpu_hours_allocated").sum())
    )
    return [
        *(f.with_columns(**_NO_NOTE) for f in nodes),
        _memo_at(memo, 1).drop("model", "tier").with_columns(node=_MEMO_NAME),
        _hours_and_notes(over_unpriced, "currency").with_columns(node=pl.lit(OVER), **_OVER_UNPRICED),
        unpriced_nodes.with_columns(**_UNPRICED),
    ]


_TAIL = ["gpu_model", "tier", "currency", "gpu_hours_allocated", "amount", "idle_amount_included", "note"]
_KIND_RANK = {k: i for i, k in enumerate(LINE_KINDS)}


def shaped_lines(frames: list[pl.LazyFrame], key_cols: list[str], *, start: datetime, end: datetime,
                 now: datetime, billed_end: datetime, exact: bool) -> pl.LazyFrame:
    """A level's line frames as chargeback_lines returns them: the period's columns, ``billed``,
    the columns in their order, sorted by line kind then the level's keys."""
    out = pl.concat(frames, how="diagonal_relaxed")
    names = out.collect_schema().names()
    out = out.with_columns(*(pl.lit(None, pl.String).alias(c) for c in ("model", "tier") if c not in names))
    exact_cols = []
    if exact:  # the raw amounts of the rounding trees, beside their cents
        exact_cols = ["amount_exact", "idle_amount_exact"]
        out = out.with_columns(amount_exact=pl.col("amount_raw").cast(RAW), idle_amount_exact=pl.col("_idle_raw")
                               .cast(RAW) if "_idle_raw" in names else pl.lit(None, RAW))
    return (
        out.rename({"model": "gpu_model"})
        .with_columns(
            pl.col("amount").cast(CENTS), pl.col("idle_amount_included").cast(CENTS),
            pl.col("gpu_hours_allocated").cast(pl.Float64),
            period_start=pl.lit(start), period_end=pl.lit(end), billed_through=pl.lit(billed_end),
            provisional=pl.lit(end > now), billed=pl.col("line_kind").is_in(BILLED_KINDS),
            _rank=pl.col("line_kind").replace_strict(_KIND_RANK, return_dtype=pl.Int32),
        )
        .sort("_rank", *key_cols, "gpu_model", "tier", "currency", "note", nulls_last=True)
        .select("period_start", "period_end", "billed_through", "provisional", "line_kind", "billed",
                *key_cols, *_TAIL, *exact_cols)
    )


def statement_notes(lines: pl.DataFrame) -> tuple[list[str], list[str]]:
    """What a reader of these chargeback lines must be told: (notes, warnings), one line each.

    Notes: the period is provisional; clusters of unknown capacity; over-allocation beyond
    capacity (outside the total). Warnings: GPU-hours that could not be priced, naming the
    models and devices (the unpriced lines have the detail)."""
    notes: list[str] = []
    warnings: list[str] = []
    if lines.is_empty():
        return notes, warnings
    hours = "gpu_hours" if "gpu_hours" in lines.columns else "gpu_hours_allocated"
    if "provisional" in lines.columns and lines["provisional"].any():
        row = lines.row(0, named=True)
        notes.append(
            f"provisional: the period runs to {row['period_end']:%Y-%m-%d %H:%M} UTC and the data to "
            f"{row['billed_through']:%Y-%m-%d %H:%M}; capacity (idle) is billed only up to then, and "
            "the lines change as data arrives")
    kind = lines["line_kind"]
    unknown = lines.filter(kind == "capacity-unknown")
    if unknown.height:
        clusters = sorted({c for note in unknown["note"].drop_nulls() for c in re.findall(r"cluster (\S+) has", note)})
        notes.append(f"capacity unknown for cluster {', '.join(clusters)} (no device inventory): its charges "
                     "stand; no idle or over-allocation is computed for it")
    over = lines.filter(kind == "over-allocated")
    if over.height:
        money = ", ".join(f"{amount:,.2f} {cur}" for cur, amount in
                          over.filter(pl.col("currency").is_not_null()).group_by("currency")
                          .agg(pl.col("amount").sum()).sort("currency").iter_rows())
        notes.append(f"over-allocated: {over[hours].sum():,.3f} GPU-hours allocated beyond capacity"
                     + (f" ({money}, a memo outside the total)" if money else "")
                     + "; the over-allocated lines name the jobs")
    unpriced = lines.filter(kind == "unpriced")
    if unpriced.height:
        reasons = unpriced.group_by("note").agg(pl.col(hours).sum()).sort("note")
        devices = sorted({int(d) for n in reasons["note"] for d in re.findall(r"^device (\d+) not in", n)})
        other = [f"{n} ({h:,.3f} h)" for n, h in reasons.iter_rows() if not re.match(r"^device \d+ not in", n)]
        if devices:
            dev_hours = reasons.filter(pl.col("note").str.contains(r"^device \d+ not in"))[hours].sum()
            named = ", ".join(map(str, devices[:12])) + (f" and {len(devices) - 12} more" if len(devices) > 12 else "")
            other.append(f"device{'s' if len(devices) > 1 else ''} {named} not in the inventory ({dev_hours:,.3f} h)")
        warnings.append(f"{unpriced[hours].sum():,.3f} GPU-hours unpriced, not billed: " + "; ".join(other))
    return notes, warnings


def chargeback_totals(gpus: pl.LazyFrame, rate_card: pl.LazyFrame, *, start: datetime, end: datetime,
                      retire_grace: timedelta = DEFAULT_RETIRE_GRACE, by: tuple[str, ...] = ()) -> pl.LazyFrame:
    """Per currency: gpu_hours_capacity and capacity_amount (Σ capacity × price in cents) — what
    the billed chargeback lines of the period add up to when nothing is over-allocated and every
    cluster has an inventory. Rounded as the lines are, pool first: each GPU pool's (currency,
    model, tier) exact cost half-up, then summed — not the currency's exact total rounded once,
    which can differ by a cent per two pools. Capacity without a rate is left out (chargeback lists
    it as unpriced). ``by``: also per these columns (``("model", "tier")``: per GPU pool)."""
    cap = capacity_cost(gpus, rate_card, start=start, end=end, retire_grace=retire_grace)
    pool = ["currency", "model", "tier"]
    pools = cap.filter(pl.col("currency").is_not_null()).group_by(*pool, *(b for b in by if b not in pool)).agg(
        pl.col("gpu_hours_capacity").sum(), half_up_cents(pl.col("amount_raw").sum()).alias("capacity_amount"))
    return pools.group_by("currency", *by).agg(pl.col("gpu_hours_capacity").sum(), pl.col("capacity_amount").sum())
