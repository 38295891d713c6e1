"""The weekly summary per business unit: GPU-hours and spend of the ISO week (chargeback through
``ledger.periods.statement_lines``), budget burn as of the week's end (``reports.budget_report``), and
the top squatters of the week (the materialized ``squatting_findings`` episodes seen in it,
worst wasted GPU-hours first). Units: GPU-hours, budgets in normalised GPU-hours, money exact."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import duckdb
import polars as pl

from gpuledger.rules.billing import billed as is_billed

from gpuledger.reports.statement import ORG_LINES, UNASSIGNED, business_units

WEEKLY_TEMPLATE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{{ title }}</title>
<style>body{font-family:"DejaVu Sans",sans-serif;margin:24px}table{border-collapse:collapse;font-size:13px}
th,td{border:1px solid #ddd;padding:3px 8px}th{background:#f2f2f2}td.num{text-align:right}</style></head>
<body><h1>{{ title }}</h1><p>{{ start }} to {{ end }} (UTC, end exclusive){% if provisional %}
· provisional: the data ends {{ through }} UTC{% endif %}</p>
{% for n in notes %}<p>{{ n }}</p>{% endfor %}
{% for t in tables %}<h2>{{ t.title }}</h2><table><tr>{% for c in t.columns %}<th>{{ c }}</th>{% endfor %}</tr>
{% for row in t.rows %}<tr>{% for v in row %}<td{% if v.num %} class="num"{% endif %}>{{ v.text }}</td>{% endfor %}</tr>
{% endfor %}</table>
{% else %}<p>No GPU use this week.</p>{% endfor %}</body></html>
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
    from gpuledger.analytics.load import load_tables
    from gpuledger.analytics.reports import budget_report, data_now
    from gpuledger.ledger.periods import statement_lines
    from gpuledger.config_store import policy_in_force
    from gpuledger.errors import UsageError
    from gpuledger.rules.periods import week_bounds

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
    spend = billed.group_by("business_unit", "currency").agg(
        pl.col("gpu_hours").filter(pl.col("line_kind") == "charge").sum().round(6),
        pl.col("amount").sum().alias("spend"))
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
    episodes = con.sql(
        "SELECT cluster, job_id, project, user_name, finding, severity, first_seen, last_seen, resolved_at, "
        "gpus_idle, gpus_total, round(gpu_hours_idle, 6) AS gpu_hours_idle, idle_cost, currency "
        "FROM squatting_findings WHERE first_seen < $end AND coalesce(resolved_at, last_seen) >= $start",
        params={"start": start, "end": end}).pl()
    squat = (episodes.with_columns(business_unit=pl.col("project").replace_strict(unit_of, default=UNASSIGNED,
                                                                                  return_dtype=pl.String))
             .sort("business_unit", "gpu_hours_idle", "cluster", "job_id", "first_seen",
                   descending=[False, True, False, False, False], nulls_last=True)
             .with_columns(rank=pl.int_range(1, pl.len() + 1).over("business_unit"))
             .filter(pl.col("rank") <= top))
    squat = squat.select("business_unit", "rank", *[c for c in squat.columns if c not in ("business_unit", "rank")])
    through = lines["billed_through"].max() if lines.height else as_of
    evaluations = con.execute("SELECT count(*) FROM squatting_evaluations WHERE evaluated_at >= ? AND evaluated_at < ?",
                              [start, end]).fetchall()[0][0]
    notes = [] if evaluations or squat.height else [
        ("no squatting evaluation was recorded in this week, so no squatters are listed: the pipelines' "
         "squatting_findings asset records them (`gpuledger report squatters` shows the current ones)")]
    return WeeklySummary(week=week, start=start, end=end, provisional=bool(end > now), billed_through=through,
                         units=table, squatters=squat, notes=notes)


def write_weekly(ws: WeeklySummary, out: Path) -> dict:
    """weekly-<week>.csv (per business unit), weekly-<week>-squatters.csv, weekly-<week>.html and
    manifest.json in ``out``; deterministic like the statements."""
    from jinja2 import Environment, select_autoescape

    from gpuledger.reports.files import _rows, sha256_file, write_csv

    out.mkdir(parents=True, exist_ok=True)
    files = [write_csv(ws.units, out / f"weekly-{ws.week}.csv"),
             write_csv(ws.squatters, out / f"weekly-{ws.week}-squatters.csv")]
    env = Environment(autoescape=select_autoescape(default=True, default_for_string=True))
    tables = [{"title": "GPU-hours, spend and budget burn by business unit", "columns": ws.units.columns,
               "rows": _rows(ws.units)}] if ws.units.height else []
    if ws.squatters.height:
        tables.append({"title": "Top squatters (idle GPUs held)", "columns": ws.squatters.columns,
                       "rows": _rows(ws.squatters)})
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
