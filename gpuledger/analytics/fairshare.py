"""Hierarchical fair share (Slurm's Fair Tree), Ai2's occupancy ratio and the delivery ratio.

At every level siblings compare their share s with their usage u, both normalised among the
siblings: level fair share LF = s / u (∞ with no usage). Walking the tree depth-first with
children in descending LF orders the projects; rank 1 is served first and the fair-share factor
is (N − rank + 1) / N for N projects (1.0 best). Ties follow SchedMD's Fair Tree
(slurm.schedmd.com/fair_tree.html, "Ties"): sibling projects with equal LF share a rank; sibling
inner nodes with equal LF have their children merged and ranked together (each child keeps the
LF computed under its own parent); a project tied with a sibling inner node sorts first and
shares its rank with that node's best project. Names only fix the print order of exact ties.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

import polars as pl

from gpuledger.analytics.allocations import DEFAULT_TIER
from gpuledger.analytics.attribution import allocated_pieces
from gpuledger.analytics.capacity import capacity_hourly
from gpuledger.analytics.demand import demand_hourly
from gpuledger.analytics.tree import Tree, rollup_to_nodes


def fair_share(
    org_nodes: pl.LazyFrame | pl.DataFrame,
    node_usage: pl.LazyFrame,
    *,
    usage_col: str = "gpu_hours_decayed",
    tree: Tree | None = None,
) -> pl.LazyFrame:
    """The tree shaped like ``sshare -l``, one row per org node in fair-tree (queue) order.

    ``node_usage`` has ``node`` and ``usage_col`` (GPU-hours; e.g. from usage.node_usage — decayed
    or window). Columns: node, parent, depth, kind, shares_raw, shares_norm (among siblings),
    share_global (product of shares_norm to the root), usage_raw_gpu_hours, usage_norm
    (÷ all usage), usage_effective (÷ siblings' usage), level_fs (s/u, inf with no usage),
    fs_rank and fairshare_factor (projects only), order (row position). ``tree``: the
    ``Tree.from_frame(org_nodes)`` already built, for a caller ranking many times (the what-if
    simulator, once per cycle).
    """
    tree = tree or Tree.from_frame(org_nodes)
    used = dict(node_usage.select("node", usage_col).collect().iter_rows())
    usage = subtree_usage(tree, used)
    shares_norm, usage_eff, level_fs = level_fair_share(tree, usage)
    order, fs_rank = _fair_tree_order(tree, level_fs)
    total = sum(usage[r] for r in tree.roots)
    n_leaves = len(fs_rank)
    depth_of = dict(tree.walk())
    rows = []
    for position, node in enumerate(order):
        glob = math.prod(shares_norm[a] for a in tree.ancestors(node))
        r = fs_rank.get(node)
        rows.append((
            node, tree.parent[node], depth_of[node], tree.kind[node], float(tree.shares[node]), shares_norm[node], glob,
            usage[node], usage[node] / total if total > 0 else 0.0, usage_eff[node], level_fs[node],
            r, None if r is None else (n_leaves - r + 1) / n_leaves, position,
        ))
    return pl.LazyFrame(rows, schema=_SSHARE_SCHEMA, orient="row")


_SSHARE_SCHEMA = {
    "node": pl.String, "parent": pl.String, "depth": pl.Int32, "kind": pl.String,
    "shares_raw": pl.Float64, "shares_norm": pl.Float64, "share_global": pl.Float64,
    "usage_raw_gpu_hours": pl.Float64, "usage_norm": pl.Float64, "usage_effective": pl.Float64,
    "level_fs": pl.Float64, "fs_rank": pl.Int32, "fairshare_factor": pl.Float64, "order": pl.Int32,
}


def subtree_usage(tree: Tree, used: dict[str, float | None]) -> dict[str, float]:
    """Each node's usage is its subtree's. A rolled-up ``used`` already says so; a per-project
    one leaves inner nodes at 0, so they take the sum of their children (the larger wins)."""
    usage = {n: float(used.get(n) or 0.0) for n in tree.parent}
    for node, _ in sorted(tree.walk(), key=lambda x: -x[1]):
        if tree.children[node]:
            usage[node] = max(usage[node], sum(usage[c] for c in tree.children[node]))
    return usage


def level_fair_share(tree: Tree, usage: dict[str, float]) -> tuple[dict, dict, dict]:
    """(shares_norm, usage_effective, level_fs) per node: share and usage normalised among its
    siblings, and LF = s / u (inf with no usage and a share; 0 with neither)."""
    shares_norm, usage_eff, level_fs = {}, {}, {}
    for up in [None, *tree.parent]:
        siblings = tree.roots if up is None else tree.children[up]
        s_sum = sum(tree.shares[c] for c in siblings)
        u_sum = sum(usage[c] for c in siblings)
        for c in siblings:
            shares_norm[c] = tree.shares[c] / s_sum if s_sum > 0 else 0.0
            usage_eff[c] = usage[c] / u_sum if u_sum > 0 else 0.0
            if usage_eff[c] > 0:
                level_fs[c] = shares_norm[c] / usage_eff[c]
            else:
                level_fs[c] = math.inf if shares_norm[c] > 0 else 0.0
    return shares_norm, usage_eff, level_fs


def _fair_tree_order(tree: Tree, level_fs: dict[str, float]) -> tuple[list[str], dict[str, int]]:
    """Every node in queue order and each project's rank (1 = best), by Fair Tree's rules."""
    order: list[str] = []
    fs_rank: dict[str, int] = {}
    next_rank = 1  # what the rank would be with no ties (Slurm's ``rnt``, counted up here)
    rank = 0

    def visit(siblings: list[str], starts_tied: bool) -> None:
        nonlocal next_rank, rank
        # Descending LF; on equal LF projects before inner nodes (rule 3), then by name.
        ranked = sorted(siblings, key=lambda n: (-level_fs[n], bool(tree.children[n]), n))
        prev = None
        i = 0
        while i < len(ranked):
            node = ranked[i]
            tied = starts_tied if i == 0 else prev == level_fs[node]
            if not tree.children[node]:
                if not tied:
                    rank = next_rank
                fs_rank[node] = rank
                next_rank += 1
                order.append(node)
            else:
                last = i
                while (last + 1 < len(ranked) and tree.children[ranked[last + 1]]
                       and level_fs[ranked[last + 1]] == level_fs[node]):
                    last += 1
                merged = ranked[i:last + 1]
                order.extend(merged)
                visit([c for m in merged for c in tree.children[m]], tied)
                i = last
            prev = level_fs[node]
            i += 1

    visit(list(tree.roots), False)
    return order, fs_rank


def delivery(
    jobs: pl.LazyFrame,
    job_allocations: pl.LazyFrame,
    gpus: pl.LazyFrame,
    org_nodes: pl.LazyFrame | pl.DataFrame,
    *,
    start: datetime,
    end: datetime,
    now: datetime,
    default_tier: str = DEFAULT_TIER,
    settle: timedelta | None = None,
) -> pl.LazyFrame:
    """Per org node over [start, end): what its share promised and what it got, in GPU-hours.

    Per project and hour: entitled = share_global × installed capacity; demand = GPUs its jobs
    requested from submit to end (queued time included); owed = min(entitled, demand), so an hour
    the project did not want is not owed. Allocated includes jobs without device allocations
    (allocations.py). Delivered is settled per period of ``settle`` from ``start`` (None: the whole
    range is one period): min(allocated, owed) over the period. Fair share promises a share of
    usage over its window (Ai2's W, Slurm's half-life), not of every hour: rank-ordered service
    time-slices a backlogged cluster, and an hourly cap would count a project served 2 GPUs then
    0 against 1 owed each hour as half delivered. The stricter hour-by-hour figure is kept
    beside it (gpu_hours_delivered_hourly, delivery_ratio_hourly). Summed up the tree. Columns:
    node, gpu_hours_entitled, gpu_hours_demand, gpu_hours_owed, gpu_hours_allocated,
    gpu_hours_delivered, gpu_hours_delivered_hourly, delivery_ratio (delivered ÷ owed; NULL when
    nothing was owed), delivery_ratio_hourly, occupancy_ratio (Ai2's sort key: allocated ÷
    entitled; lower = more deserving).
    """
    entitled = entitled_hourly(org_nodes, gpus, start=start, end=end)
    demand = demand_hourly(jobs, start=start, end=end, now=now)  # no per-hour pieces of queued jobs
    allocated = allocated_hourly(jobs, job_allocations, gpus, start=start, end=end, now=now,
                                 default_tier=default_tier)
    hourly = owed_hourly(entitled, demand, allocated)
    per_project = settled_per_project(hourly, start=start, end=end, settle=settle)
    return delivery_ratios(per_project, org_nodes)


# --- the stages of delivery, each on its own (tests/analytics/test_fairshare_stages.py) ---

_HOUR_COLS = ["gpu_hours_entitled", "gpu_hours_demand", "gpu_hours_owed", "gpu_hours_allocated",
              "gpu_hours_delivered_hourly"]
_SETTLED_COLS = [*_HOUR_COLS, "gpu_hours_delivered"]


def entitled_hourly(org_nodes, gpus: pl.LazyFrame, *, start: datetime, end: datetime) -> pl.LazyFrame:
    """Per project and hour: gpu_hours_entitled = its global share × the installed capacity."""
    shares = fair_share(org_nodes, pl.LazyFrame({"node": [], "u": []}, schema={"node": pl.String, "u": pl.Float64}),
                        usage_col="u").select("node", "share_global")
    tree = Tree.from_frame(org_nodes)
    leaves = pl.LazyFrame({"project": tree.leaves()}, schema={"project": pl.String})
    cap = capacity_hourly(gpus, start=start, end=end, by=()).select("hour", "gpu_hours_capacity")
    return (
        leaves.join(shares.rename({"node": "project"}), on="project")
        .join(cap, how="cross")
        .with_columns(gpu_hours_entitled=pl.col("share_global") * pl.col("gpu_hours_capacity"))
        .select("project", "hour", "gpu_hours_entitled")
    )


def allocated_hourly(jobs: pl.LazyFrame, job_allocations: pl.LazyFrame, gpus: pl.LazyFrame, *,
                     start: datetime, end: datetime, now: datetime, default_tier: str) -> pl.LazyFrame:
    """Per project and hour: gpu_hours_allocated (jobs without device allocations by jobs.gpus)."""
    return (
        allocated_pieces(job_allocations, gpus, now=now, start=start, end=end, jobs=jobs,
                         default_tier=default_tier)
        .join(jobs.select("cluster", "job_id", "project"), on=["cluster", "job_id"], how="left")
        .group_by("project", "hour")
        .agg(pl.col("gpu_hours_allocated").sum())
    )


def owed_hourly(entitled: pl.LazyFrame, demand: pl.LazyFrame, allocated: pl.LazyFrame) -> pl.LazyFrame:
    """Per project and hour: owed = min(entitled, demand); delivered (hourly) = min(allocated, owed)."""
    return (
        entitled.join(demand, on=["project", "hour"], how="full", coalesce=True)
        .join(allocated, on=["project", "hour"], how="full", coalesce=True)
        .with_columns(pl.col("gpu_hours_entitled", "gpu_hours_demand", "gpu_hours_allocated").fill_null(0.0))
        .with_columns(gpu_hours_owed=pl.min_horizontal("gpu_hours_entitled", "gpu_hours_demand"))
        .with_columns(gpu_hours_delivered_hourly=pl.min_horizontal("gpu_hours_allocated", "gpu_hours_owed"))
    )


def settled_per_project(hourly: pl.LazyFrame, *, start: datetime, end: datetime,
                        settle: timedelta | None) -> pl.LazyFrame:
    """Per project: the hourly columns summed, and gpu_hours_delivered = Σ over settlement periods
    (``settle`` from ``start``; None: one period) of min(allocated, owed) in the period."""
    period_s = (end - start).total_seconds() if settle is None else settle.total_seconds()
    if period_s <= 0:
        raise ValueError(f"delivery: settle must be a positive period, got {settle}")
    settled = (
        hourly.with_columns(period=((pl.col("hour") - pl.lit(start)).dt.total_seconds() // period_s))
        .group_by("project", "period")
        .agg(pl.col(_HOUR_COLS).sum())
        .with_columns(gpu_hours_delivered=pl.min_horizontal("gpu_hours_allocated", "gpu_hours_owed"))
    )
    return settled.group_by("project").agg(pl.col(_SETTLED_COLS).sum())


def delivery_ratios(per_project: pl.LazyFrame, org_nodes) -> pl.LazyFrame:
    """Summed up the tree, with delivery_ratio(_hourly) = delivered ÷ owed and occupancy_ratio =
    allocated ÷ entitled (NULL where the divisor is 0)."""
    def ratio(col: str) -> pl.Expr:
        return pl.when(pl.col("gpu_hours_owed") > 0).then(pl.col(col) / pl.col("gpu_hours_owed")).otherwise(None)

    return rollup_to_nodes(per_project, org_nodes, sum_cols=_SETTLED_COLS).with_columns(
        delivery_ratio=ratio("gpu_hours_delivered"),
        delivery_ratio_hourly=ratio("gpu_hours_delivered_hourly"),
        occupancy_ratio=pl.when(pl.col("gpu_hours_entitled") > 0)
        .then(pl.col("gpu_hours_allocated") / pl.col("gpu_hours_entitled")).otherwise(None),
    )


def over_share_projects(tree_rows) -> frozenset[str]:
    """The ranked projects of fair_share's rows whose share of all usage exceeds their global
    share (sshare's EffectvUsage above NormShares at the root): enforce queues their exempt jobs by
    fair share instead of on top (policy.enforcement.exempt_queue)."""
    return frozenset(r["node"] for r in tree_rows
                     if r["fs_rank"] is not None and (r["usage_norm"] or 0.0) > (r["share_global"] or 0.0) + 1e-9)
