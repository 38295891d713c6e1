"""The delivery balance: owed-but-undelivered GPU-hours carried forward by settlement period.

Delivery is settled per period of the usage window W (analytics.fairshare.delivery). A team that
was owed 500 GPU-hours in a week and got 300 is 200 short; without a balance that shortfall is
forgotten the next week. Here it is carried: in period k the team is *due* what it is owed that
period plus what it was still owed at the end of the last one, and

    due_k       = owed_k + balance_(k-1)
    delivered_k = min(allocated_k, due_k)
    balance_k   = due_k - delivered_k = max(0, balance_(k-1) + owed_k - allocated_k)
    repaid_k    = delivered_k - min(allocated_k, owed_k)      (the carried balance paid back)
    above_due_k = allocated_k - delivered_k                   (burst: GPU time nobody owed it)

so allocation above what a period owes pays the carried balance back first, and burst beyond it
never makes a balance negative (Ai2's burst on idle GPUs is free). ``balance_k`` is Lindley's
recursion; with S_k = Σ_(i<=k) (owed_i - allocated_i) it is S_k - min(0, min_(j<=k) S_j), which is
how the frame version computes it (:func:`carry_forward`; :func:`next_balance` is the same rule one
period at a time, for the what-if; tests/analytics/test_delivery_balance.py checks they agree).

Periods are whole multiples of W from a fixed Monday (1970-01-05 00:00 UTC), so with W = 7 days
they are ISO weeks whatever day the question is asked. A node's balance is the sum of its
projects' balances.

Fed back into fair share (``policy.usage.delivery_balance.credit_fair_share``): a project's usage is
credited with what is still open of the balance carried into the running period,
credit = carried_in - repaid so far (:func:`open_credit`), usage' = max(0, usage - credit)
(:func:`credited_usage`), so a team the cluster still owes ranks as if it had used that much less
until it is paid back. The running period's own shortfall is not credited before it is settled:
fair share time-slices within a period, as delivery is settled.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import polars as pl

from gpuledger.analytics import fairshare
from gpuledger.analytics.allocations import DEFAULT_TIER
from gpuledger.analytics.demand import demand_hourly
from gpuledger.analytics.tree import rollup_to_nodes

ANCHOR = datetime(1970, 1, 5)  # a Monday: W = 7 days gives ISO weeks
BALANCE_COLUMNS = ["gpu_hours_owed", "gpu_hours_allocated", "gpu_hours_carried_in", "gpu_hours_due",
                   "gpu_hours_delivered", "gpu_hours_repaid", "gpu_hours_above_due", "gpu_hours_balance"]


def next_balance(balance: float, owed: float, allocated: float) -> float:
    """The balance at a period's end from the one at its start: max(0, balance + owed - allocated)."""
    return max(0.0, balance + owed - allocated)


def period_start(at: datetime, period: timedelta) -> datetime:
    """The start of the settlement period holding ``at`` (whole periods from ANCHOR)."""
    n = (at - ANCHOR) // period
    return ANCHOR + n * period


def carry_forward(per_period: pl.LazyFrame | pl.DataFrame) -> pl.LazyFrame:
    """``per_period``: project, period_start, gpu_hours_owed, gpu_hours_allocated (one row per
    project and period, no period missing between a project's first and last). Adds the columns
    of BALANCE_COLUMNS by the rule in the module docstring."""
    s = (pl.col("gpu_hours_owed") - pl.col("gpu_hours_allocated")).cum_sum().over("project", order_by="period_start")
    low = pl.min_horizontal(pl.lit(0.0), pl.col("_s").cum_min().over("project", order_by="period_start"))
    return (
        per_period.lazy().sort("project", "period_start")
        .with_columns(_s=s)
        .with_columns(gpu_hours_balance=(pl.col("_s") - low).clip(lower_bound=0.0))
        .with_columns(gpu_hours_carried_in=pl.col("gpu_hours_balance").shift(1, fill_value=0.0)
                      .over("project", order_by="period_start"))
        .with_columns(gpu_hours_due=pl.col("gpu_hours_owed") + pl.col("gpu_hours_carried_in"))
        .with_columns(gpu_hours_delivered=pl.min_horizontal("gpu_hours_allocated", "gpu_hours_due"))
        .with_columns(
            gpu_hours_repaid=pl.col("gpu_hours_delivered") - pl.min_horizontal("gpu_hours_allocated",
                                                                               "gpu_hours_owed"),
            gpu_hours_above_due=pl.col("gpu_hours_allocated") - pl.col("gpu_hours_delivered"),
        )
        .drop("_s")
    )


def periods_hourly(hourly: pl.LazyFrame, *, period: timedelta, anchor: datetime = ANCHOR) -> pl.LazyFrame:
    """fairshare.owed_hourly's rows summed per project and settlement period (whole periods from
    ``anchor``; every period of the range present for every project, zero where nothing was owed
    or allocated)."""
    period_us = int(period.total_seconds() * 1_000_000)
    anchor = pl.lit(anchor).cast(pl.Datetime("us"))
    per = (
        hourly.with_columns(pl.col("hour").cast(pl.Datetime("us")))
        .with_columns(period_start=anchor + pl.duration(microseconds=((pl.col("hour") - anchor).dt.total_microseconds()
                                                                       // period_us) * period_us))
        .group_by("project", "period_start")
        .agg(pl.col("gpu_hours_owed", "gpu_hours_allocated").sum())
    )
    grid = per.select("project").unique().join(per.select("period_start").unique(), how="cross")
    return (grid.join(per, on=["project", "period_start"], how="left")
            .with_columns(pl.col("gpu_hours_owed", "gpu_hours_allocated").fill_null(0.0)))


def delivery_balance(
    jobs: pl.LazyFrame,
    job_allocations: pl.LazyFrame,
    gpus: pl.LazyFrame,
    org_nodes,
    *,
    as_of: datetime,
    period: timedelta,
    history_periods: int,
    default_tier: str = DEFAULT_TIER,
) -> pl.LazyFrame:
    """Per org node and settlement period, the last ``history_periods`` periods up to the one
    holding the last instant before ``as_of`` (that one running to ``as_of``): BALANCE_COLUMNS in GPU-hours, the balance
    starting at 0 at the first period shown. Columns: node, period_start, period_end, BALANCE_COLUMNS."""
    # the running period holds the last instant before as_of: at a period's very start that is the
    # period just ended (a period of no hours yet would leave nothing to show, or no history at all)
    start = period_start(as_of - timedelta(microseconds=1), period) - (history_periods - 1) * period
    hourly = fairshare.owed_hourly(
        fairshare.entitled_hourly(org_nodes, gpus, start=start, end=as_of),
        demand_hourly(jobs, start=start, end=as_of, now=as_of),
        fairshare.allocated_hourly(jobs, job_allocations, gpus, start=start, end=as_of, now=as_of,
                                   default_tier=default_tier),
    )
    projects = carry_forward(periods_hourly(hourly, period=period))
    period_us = int(period.total_seconds() * 1_000_000)
    return (
        rollup_to_nodes(projects, org_nodes, sum_cols=BALANCE_COLUMNS, keys=["period_start"])
        .with_columns(period_end=pl.min_horizontal(pl.col("period_start") + pl.duration(microseconds=period_us),
                                                   pl.lit(as_of).cast(pl.Datetime("us"))))
        .select("node", "period_start", "period_end", *BALANCE_COLUMNS)
    )


def end_balances(hourly: pl.LazyFrame, *, period: timedelta, anchor: datetime = ANCHOR) -> pl.LazyFrame:
    """Per project: gpu_hours_balance_end, what is still owed after the last period of ``hourly``
    (fairshare.owed_hourly's rows) with every shortfall carried."""
    carried = carry_forward(periods_hourly(hourly, period=period, anchor=anchor))
    return (carried.sort("project", "period_start").group_by("project")
            .agg(gpu_hours_balance_end=pl.col("gpu_hours_balance").last()))


def open_credit(carried_in: float, owed: float, allocated: float) -> float:
    """What is still owed of the balance carried into the running period, after the period so far
    (its ``owed`` and ``allocated`` GPU-hours) paid part of it back: carried_in - repaid."""
    return carried_in - (min(allocated, owed + carried_in) - min(allocated, owed))


def credits(balance: pl.DataFrame, projects) -> dict[str, float]:
    """Project -> open credit in the newest period of :func:`delivery_balance`'s frame."""
    newest = balance.filter(pl.col("period_start") == pl.col("period_start").max())
    wanted = set(projects)
    return {r["node"]: open_credit(r["gpu_hours_carried_in"], r["gpu_hours_owed"], r["gpu_hours_allocated"])
            for r in newest.iter_rows(named=True) if r["node"] in wanted}


def behind_owed(balance: pl.DataFrame, projects) -> frozenset[str]:
    """The projects of ``projects`` delivered less than they are owed so far in the newest period of
    :func:`delivery_balance`'s frame (the running settlement period): allocated < owed, i.e.
    delivered = min(allocated, owed) < owed (policy.enforcement.spare_behind_owed)."""
    newest = balance.filter(pl.col("period_start") == pl.col("period_start").max())
    wanted = set(projects)
    return frozenset(r["node"] for r in newest.iter_rows(named=True)
                     if r["node"] in wanted and r["gpu_hours_allocated"] < r["gpu_hours_owed"] - 1e-9)


def credited_usage(usage: dict[str, float], credit: dict[str, float]) -> dict[str, float]:
    """Per project: usage - credit, at least 0 (GPU-hours, the usage's own mode)."""
    return {p: max(0.0, u - credit.get(p, 0.0)) for p, u in usage.items()}
