"""Chargeback: who owes what for a period, in exact decimal money that adds up to the cluster's cost.

Charge = allocated GPU-hours × price(model, tier) in force at each hour (as-of join on the rate
card's effective_from). Installed capacity (physical GPUs × hours, see capacity.py) not
allocated is ``idle`` cost: its own line, or spread over the jobs that used the same
(cluster, model, tier) in proportion to their charges. Invariant, per currency and period:
Σ charge lines + idle = Σ capacity × price, rounded half-up to the cent — raw amounts keep 12
decimals and lines are rounded with the largest-remainder method. Project and org-node lines are
sums of the rounded job lines, so every level adds up to the same total. Job-level allocations
(jobs without devices) on a cluster with no inventory of their model are charged with no idle
line beside them (see chargeback_lines).
"""

from __future__ import annotations

import calendar
import re
from datetime import date, datetime, timedelta

import polars as pl

from gpuledger.analytics.allocations import DEFAULT_TIER
from gpuledger.analytics.attribution import allocated_pieces
from gpuledger.analytics.capacity import capacity_hourly
from gpuledger.analytics.money import CENTS, RAW, largest_remainder_cents, price_as_of, to_raw
from gpuledger.analytics.tree import closure

IDLE = "(idle)"


def period_bounds(period: str) -> tuple[datetime, datetime]:
    """[start, end) in UTC of ``YYYY-MM`` (month), ``YYYY-MM-DD`` (day), ``YYYY-Www`` (ISO week,
    Monday start) or ``START..END`` (custom, ISO dates or datetimes, end exclusive). ValueError
    naming the period and the accepted forms for anything else (2026-02-30, 2026-W60, x..y)."""
    try:
        return _period_bounds(period)
    except ValueError as exc:
        if str(exc).startswith("period "):
            raise
        raise ValueError(f"period {period!r}: {exc}; use YYYY-MM, YYYY-MM-DD, YYYY-Www or START..END "
                         "with dates that exist") from None


def _period_bounds(period: str) -> tuple[datetime, datetime]:
    text = period.strip()
    if ".." in text:
        lo, hi = (datetime.fromisoformat(p) for p in text.split("..", 1))
        if hi <= lo:
            raise ValueError(f"period {period!r}: the end must come after the start")
        return lo, hi
    if m := re.fullmatch(r"(\d{4})-(\d{2})", text):
        y, mo = int(m[1]), int(m[2])
        if not 1 <= mo <= 12:
            raise ValueError(f"period {period!r}: month must be 01..12")
        start = datetime(y, mo, 1)
        return start, start + timedelta(days=calendar.monthrange(y, mo)[1])
    if m := re.fullmatch(r"(\d{4})-W(\d{2})", text):
        start = datetime.combine(date.fromisocalendar(int(m[1]), int(m[2]), 1), datetime.min.time())
        return start, start + timedelta(days=7)
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
        start = datetime.fromisoformat(text)
        return start, start + timedelta(days=1)
    raise ValueError(
        f"period {period!r}: use YYYY-MM (month), YYYY-MM-DD (day), YYYY-Www (ISO week) or START..END"
    )


def _check_rates(priced: pl.LazyFrame) -> None:
    missing = priced.filter(pl.col("price_per_gpu_hour").is_null()).select("model", "tier").unique().collect()
    if missing.height:
        pairs = ", ".join(f"{m}/{t}" for m, t in missing.iter_rows())
        raise ValueError(
            f"rate card: no price in force for {pairs} during the period; add a rate_card entry "
            "with an effective_from on or before the period start"
        )


def capacity_cost(gpus: pl.LazyFrame, rate_card: pl.LazyFrame, *, start: datetime, end: datetime) -> pl.LazyFrame:
    """Installed capacity priced per hour: cluster, model, tier, hour, gpu_hours_capacity,
    price_per_gpu_hour, currency, amount_raw (Decimal, 12 places)."""
    cap = capacity_hourly(gpus, start=start, end=end).with_columns(
        _at=pl.max_horizontal(pl.col("hour"), pl.lit(start))
    )
    return price_as_of(cap, rate_card, at="_at").drop("_at").with_columns(
        amount_raw=to_raw(pl.col("gpu_hours_capacity")) * pl.col("price_per_gpu_hour")
    )


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
) -> pl.LazyFrame:
    """Chargeback lines for [start, end); allocations still open are counted up to ``now``.

    ``level``: ``job`` (one line per job, model, tier), ``project``, or ``node`` (every org node:
    its subtree's lines). ``idle_cost``: ``line`` (an ``idle`` line per cluster, model and tier)
    or ``spread`` (idle cost added to the jobs of the same cluster, model and tier in proportion
    to their charge; capacity nobody used stays on an idle line).

    Columns: period_start, period_end, line_kind (charge / idle), the level's keys (job: cluster,
    job_id, project, user_name; project: project; node: node, depth), gpu_model, tier, currency,
    gpu_hours_allocated (idle lines: idle GPU-hours), amount (Decimal, cents),
    idle_amount_included (Decimal cents of spread idle inside ``amount``; 0 with ``line``).
    Idle lines (job level) have job_id/project NULL and their cluster set; at project level they
    are project "(idle)". Raises ValueError when a GPU's model/tier has no rate in force.

    Jobs without device allocations (allocations.py) are charged jobs.gpus × hours at
    jobs.gpu_model and ``default_tier``; one with no gpu_model cannot be priced and is left out.
    Their hours come out of the idle of the same (cluster, model, tier): idle may go negative
    when job records claim more GPUs than the inventory holds (the line shows the
    over-allocation; it is never spread). Where the cluster has no inventory of that model and
    tier there is no capacity and no idle line: those charges are on top of Σ capacity × price,
    so the invariant reads Σ charges + idle = Σ capacity × price + Σ charges without capacity.
    """
    if idle_cost not in ("line", "spread"):
        raise ValueError(f"idle_cost={idle_cost!r}: choose line or spread")
    if level not in ("job", "project", "node"):
        raise ValueError(f"level={level!r}: choose job, project or node")
    keys = ["cluster", "model", "tier", "currency"]
    cap = capacity_cost(gpus, rate_card, start=start, end=end)
    _check_rates(cap)
    cap_totals = cap.group_by(keys).agg(
        gpu_hours_capacity=pl.col("gpu_hours_capacity").sum(), capacity_raw=pl.col("amount_raw").sum()
    )
    # Allocations on devices missing from the inventory (model NULL) cannot be priced or fit the
    # capacity; they are left out of chargeback (attribution still shows them).
    pieces = price_as_of(
        allocated_pieces(job_allocations, gpus, now=now, start=start, end=end, jobs=jobs,
                         default_tier=default_tier).filter(pl.col("model").is_not_null()),
        rate_card,
    )
    _check_rates(pieces)
    charges = (
        pieces.with_columns(amount_raw=to_raw(pl.col("gpu_hours_allocated")) * pl.col("price_per_gpu_hour"))
        .group_by("job_id", *keys)
        .agg(pl.col("gpu_hours_allocated").sum(), pl.col("amount_raw").sum())
    )
    used = charges.group_by(keys).agg(
        _alloc=pl.col("gpu_hours_allocated").sum(), _charged=pl.col("amount_raw").sum()
    )
    idle = (
        cap_totals.join(used, on=keys, how="left")
        .with_columns(
            gpu_hours_allocated=pl.col("gpu_hours_capacity") - pl.col("_alloc").fill_null(0.0),
            amount_raw=pl.col("capacity_raw") - pl.col("_charged").fill_null(pl.lit(0).cast(RAW)),
        )
    )
    zero = pl.lit(0).cast(RAW)
    if idle_cost == "spread":
        spread = (
            charges.join(idle.select(*keys, pl.col("amount_raw").alias("_idle"),
                                     pl.col("_charged")), on=keys, how="left")
            .with_columns(_spreads=(pl.col("_charged") > zero) & (pl.col("_idle") >= zero))
            .with_columns(
                _share=pl.when(pl.col("_spreads"))
                .then(pl.col("_idle") * pl.col("amount_raw") / pl.col("_charged")).otherwise(zero)
            )
            # Decimal division rounds; the last few 1e-12 go to the group's largest charge so the
            # spread parts add up to the idle amount exactly.
            .with_columns(_rank=pl.col("amount_raw").rank("ordinal", descending=True).over(keys))
            .with_columns(
                _share=pl.col("_share") + pl.when((pl.col("_rank") == 1) & pl.col("_spreads"))
                .then(pl.col("_idle") - pl.col("_share").sum().over(keys)).otherwise(zero)
            )
        )
        charges = spread.with_columns(
            _idle_raw=pl.col("_share"), amount_raw=pl.col("amount_raw") + pl.col("_share")
        ).drop("_idle", "_charged", "_share", "_rank", "_spreads")
        # Negative idle (allocations beyond the inventory) is never spread: it stays on its line.
        idle = idle.filter(pl.col("_charged").is_null() | (pl.col("_charged") <= zero)
                           | (pl.col("amount_raw") < zero))
    else:
        charges = charges.with_columns(_idle_raw=zero)
    job_meta = jobs.select("cluster", "job_id", "project", "user_name")
    lines = pl.concat(
        [
            charges.join(job_meta, on=["cluster", "job_id"], how="left").with_columns(line_kind=pl.lit("charge")),
            idle.select(*keys, "gpu_hours_allocated", "amount_raw").with_columns(
                line_kind=pl.lit("idle"), job_id=pl.lit(None, pl.String), project=pl.lit(None, pl.String),
                user_name=pl.lit(None, pl.String), _idle_raw=pl.col("amount_raw"),
            ),
        ],
        how="diagonal_relaxed",
    )
    lines = largest_remainder_cents(lines, raw_col="amount_raw", group=["currency"],
                                    order=["line_kind", "cluster", "job_id", "model", "tier"])
    # Split each rounded amount into its idle part (rounded alone; the charge part is the rest).
    lines = lines.with_columns(
        idle_amount_included=pl.when(pl.col("line_kind") == "idle").then(pl.col("amount"))
        .otherwise(pl.col("_idle_raw").round(2).cast(CENTS))
    ).drop("_idle_raw", "amount_raw")
    lines = lines.rename({"model": "gpu_model"}).with_columns(
        period_start=pl.lit(start), period_end=pl.lit(end)
    )
    tail = ["gpu_model", "tier", "currency", "gpu_hours_allocated", "amount", "idle_amount_included"]
    if level == "job":
        return lines.select("period_start", "period_end", "line_kind", "cluster", "job_id", "project",
                            "user_name", *tail).sort("line_kind", "cluster", "job_id", "gpu_model", "tier",
                                                     nulls_last=True)
    sums = [pl.col("gpu_hours_allocated").sum(), pl.col("amount").sum().cast(CENTS),
            pl.col("idle_amount_included").sum().cast(CENTS)]
    group = ["period_start", "period_end", "line_kind", "gpu_model", "tier", "currency"]
    per_project = (
        lines.with_columns(project=pl.when(pl.col("line_kind") == "idle").then(pl.lit(IDLE))
                           .otherwise(pl.col("project").fill_null("(no job record)")))
        .group_by("project", *group).agg(sums)
    )
    if level == "project":
        return per_project.select("period_start", "period_end", "line_kind", "project", *tail).sort(
            "line_kind", "project", "gpu_model", "tier")
    if org_nodes is None:
        raise ValueError("level='node' needs org_nodes")
    clo = closure(org_nodes)
    extra = (
        per_project.select(pl.col("project").alias("node")).unique()
        .join(clo.select("node").unique(), on="node", how="anti")
        .with_columns(ancestor=pl.col("node"), levels_up=pl.lit(0, pl.Int32))
        .select("ancestor", "node", "levels_up")
    )
    clo = pl.concat([clo, extra])
    return (
        per_project.join(clo, left_on="project", right_on="node", how="inner")
        .group_by(pl.col("ancestor").alias("node"), *group).agg(sums)
        .select("period_start", "period_end", "line_kind", "node", *tail)
        .sort("line_kind", "node", "gpu_model", "tier")
    )


def chargeback_totals(gpus: pl.LazyFrame, rate_card: pl.LazyFrame, *, start: datetime, end: datetime) -> pl.LazyFrame:
    """Per currency: gpu_hours_capacity and capacity_amount (Σ capacity × price, cents half-up) —
    what the chargeback lines of the period add up to."""
    cap = capacity_cost(gpus, rate_card, start=start, end=end)
    return cap.group_by("currency").agg(
        pl.col("gpu_hours_capacity").sum(),
        ((pl.col("amount_raw").sum() * 100 + pl.lit(0.5).cast(RAW)).floor() / 100).cast(CENTS).alias("capacity_amount"),
    )
