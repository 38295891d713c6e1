"""The weekly summary per business unit: GPU-hours and spend of the ISO week (chargeback through
``ledger.periods.statement_lines``), budget burn as of the week's end (``queries.budget_report``), and
the top squatters of the week (the materialized ``squatting_findings`` episodes seen in it,
worst wasted GPU-hours first). Units: GPU-hours, budgets in normalised GPU-hours, money exact."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path

import duckdb
import polars as pl

from gpuledger.analytics.collect import ENGINE
from gpuledger.analytics.load import load_device_activity, load_tables
from gpuledger.analytics.queries import budget_report, chargeback_report, data_now, ordered, squatters_report
from gpuledger.analytics.squatting import LOOKBACK as SQUATTING_LOOKBACK
from gpuledger.analytics.squatting import squatting_findings
from gpuledger.analytics.squatting_lifecycle import EPISODE, advance_lifecycle
from gpuledger.config_store import policy_in_force
from gpuledger.errors import UsageError
from gpuledger.ledger.periods import month_bounds, next_month, statement_lines
from gpuledger.reports.statement.build import ORG_LINES, UNASSIGNED, business_units
from gpuledger.reports.table_files import html_rows, sha256_file, write_csv
from gpuledger.rules.billing import billed as is_billed
from gpuledger.rules.money import largest_remainder
from gpuledger.rules.periods import week_bounds
from gpuledger.rules.severity import SEVERITY_RANK
from gpuledger.sql import load_sql

WEEKLY_TEMPLATE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{{ title }}</title>
<style>body{font-family:"DejaVu Sans",sans-serif;margin:24px;max-width:1200px}
table{border-collapse:collapse;font-size:12px;width:100%}th,td{border:1px solid #ddd;padding:3px 6px;
vertical-align:top}th{background:#f2f2f2;text-align:left}td.num{text-align:right;
white-space:nowrap}p.small{color:#555;font-size:12px}@page{size:A4 landscape;margin:12mm}
@media print{body{margin:0;max-width:none}table{font-size:9px}}</style></head>
<body><h1>{{ title }}</h1><p>{{ start }} to {{ end }} (UTC, end exclusive){% if provisional %}
· provisional: the data ends {{ through }} UTC{% endif %}</p>
{% for n in notes %}<p>{{ n }}</p>{% endfor %}
{% for t in tables %}<h2>{{ t.title }}</h2><table><tr>{% for c in t.columns %}<th>{{ c }}</th>{% endfor %}</tr>
{% for row in t.rows %}<tr>{% for v in row %}<td{% if v.num %} class="num"{% endif %}>{{ v.text }}</td>{% endfor %}</tr>
{% endfor %}</table>
{% else %}<p>No GPU use this week.</p>{% endfor %}
<p class="small">Every column, with its machine name, is in the CSV files beside this page. Budgets are in
normalised GPU-hours (GPU-hours × the model's weight in the rate card); times are UTC.</p></body></html>
"""


@dataclass
class WeeklySummary:
    week: str
    start: datetime
    end: datetime
    provisional: bool
    billed_through: datetime
    units: pl.DataFrame  # business_unit, currency, gpu_hours, spend, budget figures
    squatters: pl.DataFrame  # business_unit, rank, cluster, job_id, project, user_name, severity, ...
    notes: list[str]


def build_weekly(con: duckdb.DuckDBPyConnection, week: str, *, policy=None, now: datetime | None = None,
                 top: int | None = None) -> WeeklySummary:
    """The summary of ISO week ``week`` (YYYY-Www)."""
    try:
        start, end = week_bounds(week)
    except UsageError as exc:
        raise UsageError(f"--week: {exc}") from None
    policy = policy_in_force(con, policy)
    top = top or policy.reports.top_squatters
    now = now or data_now(con)
    lines = statement_lines(con, week, level="project", policy=policy, now=now)
    org_nodes = load_tables(con, samples=False).org_nodes.collect()
    _, unit_of, units = business_units(org_nodes)
    unit_expr = (pl.when(pl.col("project").is_in(["(idle)", "(over-allocated)", "(capacity unknown)"]))
                 .then(pl.lit(ORG_LINES))
                 .otherwise(pl.col("project").replace_strict(unit_of, default=UNASSIGNED, return_dtype=pl.String)))
    billed = lines.filter(is_billed(lines) & pl.col("currency").is_not_null()) \
        .with_columns(business_unit=unit_expr)
    # GPU-hours: allocated on charge lines, idle on the idle line (the org's): every row states its hours
    hours = billed.group_by("business_unit", "currency").agg(pl.col("gpu_hours").sum().round(6))
    # spend: the month statements' cents shared out to their weeks (so weeks add up to the month)
    spent = month_shares(con, start, end, policy=policy, now=now, unit_expr=unit_expr)
    spend = hours.join(spent, on=["business_unit", "currency"], how="full", coalesce=True).with_columns(
        pl.col("gpu_hours").fill_null(0.0), pl.col("spend").fill_null(Decimal("0.00")))
    as_of = min(end, now)
    budget = budget_report(con, policy=policy, as_of=as_of).filter(pl.col("node").is_in(units)).select(
        pl.col("node").alias("business_unit"), "budget_gpu_hours", "consumed_gpu_hours", "remaining_gpu_hours",
        "burn_gpu_hours_per_day", "projected_exhaustion", "status")
    budget = budget.with_columns(pl.col(c).round(6) for c in ("budget_gpu_hours", "consumed_gpu_hours",
                                                             "remaining_gpu_hours", "burn_gpu_hours_per_day"))
    order = {u: i for i, u in enumerate([*units, ORG_LINES, UNASSIGNED])}
    table = (spend.join(budget, on="business_unit", how="full", coalesce=True)
             .with_columns(_o=pl.col("business_unit").replace_strict(order, default=99, return_dtype=pl.Int32))
             .sort("_o", "business_unit", "currency", nulls_last=True).drop("_o"))
    episodes = week_episodes(con, policy, start=start, end=min(end, now))
    squat = (episodes.with_columns(business_unit=pl.col("project").replace_strict(unit_of, default=UNASSIGNED,
                                                                                  return_dtype=pl.String))
             .sort("business_unit", "gpu_hours_idle", "cluster", "job_id", "first_seen",
                   descending=[False, True, False, False, False], nulls_last=True)
             .with_columns(rank=pl.int_range(1, pl.len() + 1).over("business_unit"))
             .filter(pl.col("rank") <= top))
    # the job by the name its owner gave it (the id beside), as people look for it
    keys = [f"{c}/{j}" for c, j in squat.select("cluster", "job_id").iter_rows()]
    named = con.execute("SELECT cluster, job_id, name FROM jobs WHERE list_contains($keys, cluster || '/' || job_id)",
                        {"keys": keys}).fetchall() if keys else []
    names = pl.DataFrame(named, schema={"cluster": pl.String, "job_id": pl.String, "name": pl.String}, orient="row")
    squat = (squat.join(names, on=["cluster", "job_id"], how="left")
             .with_columns(job_name=pl.coalesce("name", "job_id")).drop("name"))
    squat = squat.select("business_unit", "rank", "job_name",
                         *[c for c in squat.columns if c not in ("business_unit", "rank", "job_name")])
    through = lines["billed_through"].max() if lines.height else as_of
    wasted = episodes["gpu_hours_idle"].sum() if episodes.height else 0.0
    notes = [(f"squatting: {episodes.height} episodes in the week ({wasted or 0:,.3f} idle GPU-hours held), found "
              f"by evaluating the idle-GPU rules every {REPLAY_STEP.total_seconds() / 60:g} min through the week; "
              f"the top {top} per business unit are listed")]
    return WeeklySummary(week=week, start=start, end=end, provisional=bool(end > now), billed_through=through,
                         units=table, squatters=squat, notes=notes)


def _weeks_of_month(m_start: datetime, m_end: datetime) -> list[tuple[datetime, datetime]]:
    """The parts of a month cut at ISO week starts (Mondays 00:00 UTC)."""
    cuts, moment = [m_start], m_start - timedelta(days=m_start.weekday())
    while (moment := moment + timedelta(days=7)) < m_end:
        cuts.append(moment)
    return list(zip(cuts, [*cuts[1:], m_end], strict=True))


def month_shares(con, start: datetime, end: datetime, *, policy, now: datetime, unit_expr: pl.Expr) -> pl.DataFrame:
    """Spend of [start, end) (a week) per business unit and currency, as its share of each month's
    statement it overlaps: a month's cents (its issued lines and corrections when closed) are split
    among the month's week parts by largest remainder of their exact amounts, so the weeks of a
    month add up to its statement to the cent, and a week crossing months is the sum of two parts."""
    rows: dict[tuple[str, str], Decimal] = {}
    month = datetime(start.year, start.month, 1)
    while month < end:
        m_start, m_end = month_bounds(f"{month:%Y-%m}")
        lines = statement_lines(con, f"{month:%Y-%m}", level="project", policy=policy, now=now)
        owed = _per_unit(lines.filter(is_billed(lines)), unit_expr, "amount")
        parts = [(a, b) for a, b in _weeks_of_month(m_start, m_end) if a < min(m_end, now)]
        exact = [_per_unit(chargeback_report(con, f"{a.isoformat()}..{b.isoformat()}", level="project",
                                             policy=policy, now=now, exact=True).pipe(lambda f: f.filter(is_billed(f))),
                           unit_expr, "amount_exact") for a, b in parts]
        mine = [i for i, (a, b) in enumerate(parts) if a < end and b > start]
        for key, cents in owed.items():
            weights = [e.get(key, Decimal(0)) for e in exact]
            for i in mine:
                rows[key] = rows.get(key, Decimal("0.00")) + largest_remainder(cents, weights)[i]
        month = next_month(month)
    return pl.DataFrame([(u, c, a) for (u, c), a in sorted(rows.items())],
                        schema={"business_unit": pl.String, "currency": pl.String, "spend": pl.Decimal(38, 2)},
                        orient="row")


def _per_unit(lines: pl.DataFrame, unit_expr: pl.Expr, col: str) -> dict[tuple[str, str], Decimal]:
    if lines.is_empty():
        return {}
    sums = lines.filter(pl.col("currency").is_not_null()).with_columns(business_unit=unit_expr) \
        .group_by("business_unit", "currency").agg(pl.col(col).sum())
    return {(u, c): Decimal(a) for u, c, a in sums.iter_rows()}


REPLAY_STEP = timedelta(minutes=30)  # half the default sustained-idle window: no episode slips between


def idle_candidate_moments(con: duckdb.DuckDBPyConnection, policy, *, start: datetime, end: datetime,
                           step: timedelta = REPLAY_STEP) -> set[datetime] | None:
    """The moments start + k·step in (start, end] at which some device held then could be found
    idle, from one pass over the window's samples (week_idle_candidates.sql); None when the
    windows do not fall on the buckets (sustained window not a whole number of steps) or the
    stale-data guard is off, and every moment must be evaluated.

    Exact, not a heuristic: a device is idle at M only when its judged samples of the signal it
    is judged by (one of sm_active, gr_engine_active, gpu_util) cover enough of [M − sustained, M)
    (min_coverage_ratio > 0: at least one sample there) and none of them is active (a later active
    sample makes idle_since later than M − sustained; analytics/squatting.py). So where, for every
    signal, a device's samples in the window are absent or include an active one, it is not idle at
    M, whichever signal it is judged by; and only a device allocated at M is held."""
    sustained = timedelta(minutes=policy.squatting.sustained_minutes)
    if policy.squatting.min_coverage_ratio <= 0 or sustained <= timedelta(0) or sustained % step:
        return None
    per = sustained // step  # buckets in a window
    buckets = con.sql(load_sql(__package__, "week_idle_candidates.sql"), params={
        "step_s": int(step.total_seconds()), "origin": start, "lo": start + step - sustained, "hi": end,
        "thr": policy.squatting.idle_threshold_ratio}).pl()
    if buckets.is_empty():
        return set()
    windows = (buckets.with_columns(moment=pl.concat_list([pl.col("bucket") + step * j for j in range(1, per + 1)]))
               .explode("moment").filter((pl.col("moment") > start) & (pl.col("moment") <= end))
               .group_by("gpu_id", "moment").agg(pl.col("^[na]_.*$").sum()))
    could = windows.filter(pl.any_horizontal([(pl.col(f"n_{s}") > 0) & (pl.col(f"a_{s}") == 0)
                                              for s in ("sm", "gr", "util")]))
    held = con.sql("SELECT gpu_id, start_time, end_time FROM job_allocations WHERE gpu_id IS NOT NULL "
                   "AND start_time <= $hi AND (end_time IS NULL OR end_time > $lo)",
                   params={"lo": start, "hi": end}).pl()
    hit = (could.join(held, on="gpu_id")
           .filter((pl.col("start_time") <= pl.col("moment"))
                   & (pl.col("end_time").is_null() | (pl.col("end_time") > pl.col("moment")))))
    return set(hit["moment"].unique().to_list())


class _WeekTables:
    """The week's jobs, allocations, inventory and rates, read once; :meth:`findings` at a moment
    is queries.squatters_report's at that moment (the same tables cut as load_tables would cut
    them for [moment − lookback, moment + 1 s), the same evidence and rules), without reading the
    tables again for each of the week's 336 moments."""

    LOOKBACK = SQUATTING_LOOKBACK  # squatters_report's default lookback

    def __init__(self, con, policy, *, start: datetime, end: datetime, step: timedelta):
        self.con, self.policy = con, policy
        t = load_tables(con, start=start + step - self.LOOKBACK, end=end + timedelta(seconds=1), samples=False)
        self.jobs, self.allocations = t.jobs.collect(engine=ENGINE), t.job_allocations.collect(engine=ENGINE)
        self.gpus, self.rate_card = t.gpus.collect(engine=ENGINE), t.rate_card.collect(engine=ENGINE)

    def findings(self, moment: datetime) -> pl.DataFrame:
        lo, hi = moment - self.LOOKBACK, moment + timedelta(seconds=1)

        def overlaps(frame: pl.DataFrame, begin: pl.Expr) -> pl.Expr:
            return (begin < hi) & (pl.col("end_time").is_null() | (pl.col("end_time") > lo))

        jobs = self.jobs.filter(overlaps(self.jobs, pl.coalesce("submit_time", "start_time")))
        allocs = self.allocations.filter(
            overlaps(self.allocations, pl.col("start_time"))
            | pl.struct("cluster", "job_id").is_in(jobs.select(pl.struct("cluster", "job_id")).to_series().implode()))
        jobs, allocs, gpus = jobs.lazy(), allocs.lazy(), self.gpus.lazy()
        sq = self.policy.squatting
        activity = load_device_activity(self.con, jobs, allocs, gpus, now=moment, policy=sq, lookback=self.LOOKBACK)
        found = squatting_findings(jobs, allocs, gpus, activity, self.rate_card.lazy(), now=moment, policy=sq,
                                   include_exempt=False).collect(engine=ENGINE)
        return ordered(found, ["finding", "idle_minutes", "cluster", "job_id"], [True, True, False, False])


def week_episodes(con: duckdb.DuckDBPyConnection, policy, *, start: datetime, end: datetime,
                  step: timedelta = REPLAY_STEP, plain: bool = False) -> pl.DataFrame:
    """Every squatting episode of [start, end): the idle-GPU rules (queries.squatters_report)
    evaluated every ``step`` through the window and the episodes advanced as the pipeline does
    (analytics.squatting_lifecycle), so the week's summary does not depend on which moments the
    pipeline happened to evaluate. Each episode with its worst severity and its largest wasted
    GPU-hours (idle minutes × idle GPUs, as of its last evaluation).

    ``plain``: queries.squatters_report at every moment, reading the tables each time (the
    reference the fast path is measured and checked against: benchmarks/weekly_bench.py)."""
    if plain:
        def findings_at(moment: datetime) -> pl.DataFrame:
            return squatters_report(con, policy=policy, now=moment)
    else:
        findings_at = _WeekTables(con, policy, start=start, end=end, step=step).findings

    open_now = pl.DataFrame()
    done: list[pl.DataFrame] = []
    # With no episode open, only a moment at which some held device could be idle can find
    # anything (idle_candidate_moments, one pass over the week's samples); an open episode is
    # followed at every moment until it resolves.
    candidates = None if plain else idle_candidate_moments(con, policy, start=start, end=end, step=step)
    moment = start + step
    while moment <= end:
        if candidates is not None and moment.replace(tzinfo=None) not in candidates and not open_now.height:
            moment += step
            continue
        findings = findings_at(moment)
        if findings.height or open_now.height:
            prior = open_now if open_now.height else findings.clear().with_columns(
                first_seen=pl.lit(None, pl.Datetime("us")), last_seen=pl.lit(None, pl.Datetime("us")),
                resolved_at=pl.lit(None, pl.Datetime("us"))).select(EPISODE)
            episodes, _ = advance_lifecycle(prior, findings, now=moment)
            done.append(episodes.filter(pl.col("resolved_at").is_not_null()))
            open_now = episodes.filter(pl.col("resolved_at").is_null())
            if findings.height:  # the worst severity seen, the most idle GPU-hours
                done.append(findings.join(open_now.select("cluster", "job_id", "first_seen"),
                                          on=["cluster", "job_id"]).with_columns(
                    last_seen=pl.lit(moment).cast(pl.Datetime("us")),
                    resolved_at=pl.lit(None, pl.Datetime("us"))).select(EPISODE))
        moment += step
    cols = ["cluster", "job_id", "project", "user_name", "finding", "severity", "first_seen", "last_seen",
            "resolved_at", "gpus_idle", "gpus_total", "gpu_hours_idle", "idle_cost", "currency"]
    parts = [d for d in done if d.height] + ([open_now] if open_now.height else [])
    if not parts:
        return pl.DataFrame(schema={"cluster": pl.String, "job_id": pl.String, "project": pl.String,
                                    "user_name": pl.String, "finding": pl.String, "severity": pl.String,
                                    "first_seen": pl.Datetime("us"), "last_seen": pl.Datetime("us"),
                                    "resolved_at": pl.Datetime("us"), "gpus_idle": pl.Int64, "gpus_total": pl.Int64,
                                    "gpu_hours_idle": pl.Float64, "idle_cost": pl.Decimal(38, 2),
                                    "currency": pl.String})
    rows = pl.concat([p.select(cols) for p in parts], how="vertical_relaxed").with_columns(
        _rank=pl.col("severity").replace_strict(SEVERITY_RANK, default=0, return_dtype=pl.Int32))
    return (rows.group_by("cluster", "job_id", "first_seen")
            .agg(pl.col("project", "user_name", "finding", "currency").last(),
                 pl.col("severity").sort_by("_rank").last(), pl.col("last_seen").max(), pl.col("resolved_at").max(),
                 pl.col("gpus_idle").max(), pl.col("gpus_total").max(),
                 pl.col("gpu_hours_idle").max().round(6), pl.col("idle_cost").max())
            .select(cols).sort("cluster", "job_id", "first_seen"))


# The HTML's columns: human headers with units (the CSVs keep every column by its machine name).
UNIT_HEADERS = {"business_unit": "Business unit", "currency": "Currency", "gpu_hours": "GPU-hours",
                "spend": "Spend ({cur})", "budget_gpu_hours": "Budget (norm. GPU-h)",
                "consumed_gpu_hours": "Consumed (norm. GPU-h)", "remaining_gpu_hours": "Remaining (norm. GPU-h)",
                "burn_gpu_hours_per_day": "Burn (norm. GPU-h / day)",
                "projected_exhaustion": "Projected exhaustion (UTC)", "status": "Status"}
SQUATTER_HEADERS = {"business_unit": "Business unit", "rank": "Rank", "job_name": "Job", "job_id": "Job id",
                    "project": "Project",
                    "user_name": "Owner", "severity": "Worst severity", "first_seen": "First seen (UTC)",
                    "last_seen": "Last seen (UTC)", "resolved_at": "Resolved (UTC)", "gpus_idle": "Idle GPUs",
                    "gpus_total": "GPUs held", "gpu_hours_idle": "Idle GPU-hours", "idle_cost": "Idle cost ({cur})"}


def _human(title: str, frame: pl.DataFrame, headers: dict[str, str], currency: str) -> dict:
    cols = [c for c in headers if c in frame.columns]
    if "resolved_at" in cols:  # an episode not over by the week's end says so, not a blank
        frame = frame.with_columns(pl.col("resolved_at").dt.strftime("%Y-%m-%d %H:%M").fill_null("still open"))
    return {"title": title, "columns": [headers[c].format(cur=currency or "?") for c in cols],
            "rows": html_rows(frame.select(cols))}


def write_weekly(ws: WeeklySummary, out: Path) -> dict:
    """weekly-<week>.csv (per business unit), weekly-<week>-squatters.csv, weekly-<week>.html and
    manifest.json in ``out``; deterministic like the statements."""
    from jinja2 import Environment, select_autoescape  # lazy: optional extra gpuledger[reports]


    out.mkdir(parents=True, exist_ok=True)
    files = [write_csv(ws.units, out / f"weekly-{ws.week}.csv"),
             write_csv(ws.squatters, out / f"weekly-{ws.week}-squatters.csv")]
    env = Environment(autoescape=select_autoescape(default=True, default_for_string=True))
    cur = ", ".join(sorted({c for c in ws.units["currency"].drop_nulls().to_list()})) if ws.units.height else ""
    tables = [_human("GPU-hours, spend and budget burn by business unit", ws.units, UNIT_HEADERS, cur)] \
        if ws.units.height else []
    if ws.squatters.height:
        tables.append(_human("Top squatters (idle GPUs held)", ws.squatters, SQUATTER_HEADERS, cur))
    html = env.from_string(WEEKLY_TEMPLATE).render(
        title=f"GPU weekly summary {ws.week}", start=f"{ws.start:%Y-%m-%d}", end=f"{ws.end:%Y-%m-%d}",
        provisional=ws.provisional, through=f"{ws.billed_through:%Y-%m-%d %H:%M}", tables=tables, notes=ws.notes)
    (out / f"weekly-{ws.week}.html").write_text(html)
    files.append(out / f"weekly-{ws.week}.html")
    manifest = {"week": ws.week, "start": f"{ws.start:%Y-%m-%dT%H:%M:%S}Z", "end": f"{ws.end:%Y-%m-%dT%H:%M:%S}Z",
                "provisional": ws.provisional,
                "files": [{"path": p.name, "sha256": sha256_file(p), "bytes": p.stat().st_size}
                          for p in sorted(files)]}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest
