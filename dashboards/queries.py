"""The dashboards' reads: plain functions over the warehouse file (no Streamlit), each reading
through ``gpuledger.warehouse.kept_reader`` (a read-only connection kept between calls and given up
within 50 ms when the pipeline's writer wants the file) and binding every input as a parameter. SQL lives in ``sql/*.sql`` beside
this module. Pages read the tables the Dagster pipelines materialize; only the chargeback statement
is built on demand, by the same function the finance statement files come from.

Units: GPU-hours (one whole GPU for one hour), budget GPU-hours normalised by the rate card's model
weights, ratios 0..1 unless a name ends in ``_pct`` (0..100), money as exact decimals."""

from __future__ import annotations

import importlib
import json
import os
import re
import tempfile
import warnings
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cache, cached_property
from pathlib import Path

import polars as pl
from gpuledger.enforce import scheduler_view as view
from gpuledger.enforce import team_store

from gpuledger import facts, warehouse
from gpuledger.config import load_config
from gpuledger.config_store import policy_in_force
from gpuledger.facts import data_now, with_outlook
from gpuledger.ledger.config_versions import config_in_force as in_force
from gpuledger.rules import activity
from gpuledger.rules.billing import billed
from gpuledger.rules.periods import months_between  # noqa: F401  (the pages ask queries for it)
from gpuledger.rules.severity import SEVERITY_RANK
from gpuledger.sql import load_sql
from gpuledger.whatif.compare import FORMAT, frames_from_json
from gpuledger.whatif.outcome import TARGET_NOTE, frame_from_document

HOUR = timedelta(hours=1)


# the rules a query's SQL takes from gpuledger.rules (the same text the analytics run)
_FRAGMENTS = {
    "gpu_hours": lambda: {"activity_ratio": activity.ratio_of_sums_sql("h", activity.is_mig_sql("d"))},
}


@cache
def sql(name: str) -> str:
    fragments = _FRAGMENTS[name]() if name in _FRAGMENTS else {}
    return load_sql("gpuledger.dashboards", f"sql/{name}.sql", **fragments)


def _frame(con, name: str, **params) -> pl.DataFrame:
    # execute, not con.sql(...).pl(): a relation with bound parameters costs ~0.5 ms more to build
    return result_frame(con.execute(sql(name), params))


SMALL_ROWS = 256  # below this many rows, Python tuples into a typed frame beat Arrow's fixed cost
_POLARS_TYPES = {
    "VARCHAR": pl.String, "BOOLEAN": pl.Boolean, "DOUBLE": pl.Float64, "FLOAT": pl.Float32,
    "BIGINT": pl.Int64, "INTEGER": pl.Int32, "SMALLINT": pl.Int16, "TINYINT": pl.Int8,
    "UBIGINT": pl.UInt64, "UINTEGER": pl.UInt32, "DATE": pl.Date, "TIMESTAMP": pl.Datetime("us"),
    "TIMESTAMP WITH TIME ZONE": pl.Datetime("us", "UTC"),  # the kept reader's session is UTC
}
_DECIMAL = re.compile(r"DECIMAL\((\d+),(\d+)\)")


def _polars_type(duckdb_type: str) -> pl.DataType | None:
    """The polars type Arrow gives a DuckDB column of this type; None where not listed here."""
    if duckdb_type in _POLARS_TYPES:
        return _POLARS_TYPES[duckdb_type]
    decimal = _DECIMAL.fullmatch(duckdb_type)
    return pl.Decimal(int(decimal[1]), int(decimal[2])) if decimal else None


@cache
def _result_schema(columns: tuple[tuple[str, str], ...]) -> tuple[dict | None, pl.DataFrame | None]:
    """(polars schema, the empty frame) of a result's (name, DuckDB type) columns; (None, None) when
    a type is not listed or a name repeats. Cached: a page asks the same few shapes again and again
    (polars frames are immutable, so one empty frame serves every empty answer)."""
    schema = {name: _polars_type(kind) for name, kind in columns}
    if len(schema) < len(columns) or any(t is None for t in schema.values()):
        return None, None
    return schema, pl.DataFrame(schema=schema)


def result_frame(cursor) -> pl.DataFrame:
    """An executed query's result as a polars frame, the same as ``pl.from_arrow(...to_arrow_table())``.
    Converting through Arrow costs ~0.3 ms however few the rows (0.6 ms of a 0.9 ms question from a
    small materialized table); a short result of plain types is built from its tuples instead."""
    schema, empty = _result_schema(tuple((d[0], str(d[1])) for d in cursor.description))
    if schema is None:
        return _rest_by_arrow(cursor)
    rows = cursor.fetchmany(SMALL_ROWS)
    if not rows:
        return empty
    head = pl.DataFrame(rows, schema=schema, orient="row")
    if len(rows) < SMALL_ROWS:
        return head
    return pl.concat([head, _rest_by_arrow(cursor).cast(schema)])


def _rest_by_arrow(cursor) -> pl.DataFrame:
    """The rows the cursor has not handed out yet, through Arrow. DuckDB warns that this copies them
    once more than ``con.sql(...).pl()`` would (~25 % on a large result); asking twice costs more."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Arrow output on a DB-API result", UserWarning)
        return pl.from_arrow(cursor.to_arrow_table())


def read(path: str, name: str, **params) -> pl.DataFrame:
    """Run ``sql/<name>.sql`` with ``params`` on the kept reader of ``path``."""
    with warehouse.kept_reader(path) as con:
        return _frame(con, name, **params)


def _has_table(con, table: str) -> bool:
    return bool(con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = ?",
                            [table]).fetchall()[0][0])


# --- what is there ----------------------------------------------------------------------------

@dataclass(frozen=True)
class WarehouseState:
    """Enough to draw the sidebar and to tell an empty warehouse from a ready one."""

    path: str
    problem: str | None  # why nothing can be shown (missing file, no analytics yet): what to run
    data_now: datetime | None
    first_hour: datetime | None
    last_hour: datetime | None
    clusters: tuple[str, ...]
    parent_of: dict  # org node -> parent (None for the root)
    kind_of: dict  # org node -> org / program / project
    periods: tuple[str, ...]  # months with a materialized statement, newest first
    counts: dict

    @property
    def ready(self) -> bool:
        return self.problem is None

    @property
    def root(self) -> str | None:
        return next((n for n, p in self.parent_of.items() if p is None), None)

    def projects(self) -> list[str]:
        parents = {p for p in self.parent_of.values() if p is not None}
        return sorted(n for n in self.parent_of if n not in parents)


NEXT_STEPS = ("`make demo` (a simulated week), or `gpuledger simulate warehouse` then "
              "`gpuledger pipelines run-once`; for real data the ingest commands and the Dagster "
              "pipelines (`make dev`)")


def config_in_force(path: str):
    """The config in force for every page — roles, policy and chargeback alike: the warehouse's
    stored version (gpuledger.ledger.config_versions.config_in_force, the CLI's and the pipelines'
    answer); a warehouse not there yet, or never given a config, the file's
    ($GPULEDGER_CONFIG, ./gpuledger.yaml, the packaged example)."""
    if Path(path).exists():
        try:
            with warehouse.kept_reader(path) as con:
                return in_force(con, None, write=False).config
        except warehouse.WarehouseError:
            pass  # unreadable or not migrated: warehouse_state says so on the page
    return load_config(None)


def warehouse_state(path: str) -> WarehouseState:
    """The warehouse's state for the dashboards. A missing, unreadable or not yet analysed
    warehouse comes back with ``problem`` set to one sentence saying what to run."""
    empty = {"data_now": None, "first_hour": None, "last_hour": None, "clusters": (), "parent_of": {},
             "kind_of": {}, "periods": (), "counts": {}}
    if not Path(path).exists():
        return WarehouseState(path, f"There is no warehouse at `{path}` yet. Run {NEXT_STEPS}. Under `make dev` "
                                    "the first ingest run creates it within a minute: reload then.", **empty)
    try:
        with warehouse.kept_reader(path) as con:
            row = con.execute(sql("state")).fetchall()[0]
            names = [d[0] for d in con.description]
            counts = dict(zip(names, row, strict=True))
            tree = con.execute("SELECT node, parent, kind FROM org_nodes ORDER BY node").fetchall()
            clusters = tuple(r[0] for r in con.execute(
                "SELECT DISTINCT cluster FROM gpus UNION SELECT DISTINCT cluster FROM jobs ORDER BY 1").fetchall())
            periods = tuple(r[0] for r in con.execute(
                "SELECT DISTINCT period FROM chargeback_statements ORDER BY period DESC").fetchall())
            now = data_now(con)
    except warehouse.WarehouseError as exc:
        return WarehouseState(path, f"{exc}", **empty)
    state = WarehouseState(
        path=path, problem=None, data_now=now, first_hour=counts["first_hour"], last_hour=counts["last_hour"],
        clusters=clusters, parent_of={n: p for n, p, _ in tree}, kind_of={n: k for n, _, k in tree},
        periods=periods, counts=counts)
    if not counts["samples"] and not counts["jobs"]:
        problem = f"The warehouse `{path}` holds no GPU samples or jobs yet. Run {NEXT_STEPS}."
    elif not counts["utilization_rows"] or not counts["fairshare_rows"]:
        problem = (f"The warehouse `{path}` holds data but no analytics yet: run `gpuledger pipelines run-once` "
                   "(or let the Dagster schedules of `make dev` materialize them).")
    else:
        return state
    return WarehouseState(**{**state.__dict__, "problem": problem})


# --- utilization -------------------------------------------------------------------------------

def utilization(path: str, start: datetime, end: datetime, clusters: tuple[str, ...]) -> pl.DataFrame:
    """Capacity, allocated and active GPU-hours per hour, cluster and model."""
    return read(path, "utilization", start=start, end=end, clusters=list(clusters))


def utilization_totals(hourly: pl.DataFrame) -> dict[str, float | None]:
    """Over the frame: capacity / allocated / active / idle GPU-hours, allocated % and active % of
    capacity, active % of allocated (unknown-activity hours count in neither active nor idle)."""
    cap = float(hourly["gpu_hours_capacity"].sum()) if hourly.height else 0.0
    alloc = float(hourly["gpu_hours_allocated"].sum()) if hourly.height else 0.0
    active = float(hourly["gpu_hours_active"].fill_null(0).sum()) if hourly.height else 0.0
    return {
        "gpu_hours_capacity": cap, "gpu_hours_allocated": alloc, "gpu_hours_active": active,
        "gpu_hours_unallocated": max(cap - alloc, 0.0),
        "allocation_pct": 100 * alloc / cap if cap else None,
        "active_pct": 100 * active / cap if cap else None,
        "active_of_allocated_pct": 100 * active / alloc if alloc else None,
    }


def utilization_by(hourly: pl.DataFrame, key: str | None) -> pl.DataFrame:
    """Allocated % and active % of capacity per hour, summed over everything but ``key``
    (``cluster``, ``model`` or None for the fleet); long form: hour, key, measure, pct."""
    keys = ["hour", *([key] if key else [])]
    grouped = hourly.group_by(keys).agg(pl.col("gpu_hours_capacity").sum(), pl.col("gpu_hours_allocated").sum(),
                                        pl.col("gpu_hours_active").fill_null(0).sum())
    out = grouped.with_columns(
        allocated=pl.when(pl.col("gpu_hours_capacity") > 0)
        .then(100 * pl.col("gpu_hours_allocated") / pl.col("gpu_hours_capacity")),
        active=pl.when(pl.col("gpu_hours_capacity") > 0)
        .then(100 * pl.col("gpu_hours_active") / pl.col("gpu_hours_capacity")),
    ).unpivot(index=keys, on=["allocated", "active"], variable_name="measure", value_name="pct")
    return out.sort([*keys, "measure"])


def usage_by_kind(path: str, start: datetime, end: datetime, clusters: tuple[str, ...]) -> pl.DataFrame:
    """Allocated / active GPU-hours per hour and workload kind."""
    return read(path, "usage_by_kind", start=start, end=end, clusters=list(clusters))


def kind_pct(kinds: pl.DataFrame, hourly: pl.DataFrame) -> pl.DataFrame:
    """Per hour and workload kind: allocated and active GPU-hours as % of that hour's installed
    capacity (the clusters of ``hourly``)."""
    capacity = hourly.group_by("hour").agg(pl.col("gpu_hours_capacity").sum())
    return (kinds.join(capacity, on="hour", how="left")
            .with_columns(allocated_pct=pl.when(pl.col("gpu_hours_capacity") > 0)
                          .then(100 * pl.col("gpu_hours_allocated") / pl.col("gpu_hours_capacity")),
                          active_pct=pl.when(pl.col("gpu_hours_capacity") > 0)
                          .then(100 * pl.col("gpu_hours_active") / pl.col("gpu_hours_capacity")))
            .sort("hour", "kind"))


def device_hours(path: str, start: datetime, end: datetime, clusters: tuple[str, ...], now: datetime,
                 idle_below: float, mig_only: bool = False) -> pl.DataFrame:
    """Per device and hour: activity ratio, held fraction, and a state for the heatmap: ``held,
    idle`` (held half the hour or more, activity under ``idle_below``), ``held, busy``, ``held,
    no data``, ``free``. ``mig_only``: MIG instances only (the MIG table's evidence)."""
    frame = read(path, "gpu_hours", start=start, end=end, clusters=list(clusters), now=now, mig_only=mig_only)
    return frame.with_columns(
        device=pl.concat_str([pl.col("cluster"), pl.col("host"), pl.col("gpu_index").cast(pl.String)], separator="/")
        + pl.when(pl.col("mig_profile").is_not_null()).then(pl.lit(" ") + pl.col("mig_profile")).otherwise(pl.lit("")),
        state=pl.when(pl.col("held_fraction") < 0.5).then(pl.lit("free"))
        .when(pl.col("activity_ratio").is_null()).then(pl.lit("held, no data"))
        .when(pl.col("activity_ratio") < idle_below).then(pl.lit("held, idle"))
        .otherwise(pl.lit("held, busy")),
    )


HEAT_MAX_BINS = 56  # heatmap columns: a week in 3-hour bins, two days in hours (fewer marks for the browser)


def heat_bin_hours(start: datetime, end: datetime, max_bins: int = HEAT_MAX_BINS) -> int:
    """Hours per heatmap column so that the period fits in at most ``max_bins`` columns."""
    hours = max(int((end - start).total_seconds() // 3600), 1)
    return -(-hours // max_bins)


def idle_jobs(path: str, start: datetime, end: datetime, projects: tuple[str, ...], clusters: tuple[str, ...],
              default_tier: str, limit: int) -> pl.DataFrame:
    """The ``limit`` jobs of ``projects`` with the most idle GPU-hours in [start, end), most first:
    allocated and idle GPU-hours, the idle time's cost (Decimal, the rate in force each hour),
    a ``label`` "job name (project, user)", and ``jobs_idle`` / ``gpu_hours_idle_all`` over every job."""
    frame = read(path, "idle_jobs", start=start, end=end, projects=list(projects), clusters=list(clusters),
                 default_tier=default_tier, limit=limit)
    # the name its owner gave it (the id when it has none), as people look for it; a name shared by
    # two rows (every `wrap` of an array) gets the id beside, so each job keeps its own heatmap row
    named = frame.with_columns(job_key=pl.col("cluster") + "/" + pl.col("job_id"),
                               _name=pl.coalesce(pl.col("name"), pl.col("job_id")))
    named = named.with_columns(_name=pl.when(pl.len().over("_name") > 1)
                               .then(pl.col("_name") + " · " + pl.col("job_id")).otherwise(pl.col("_name")))
    return named.with_columns(
        label=pl.col("_name") + " (" + pl.col("project").fill_null("?") + ", " + pl.col("user_name").fill_null("?")
        + ")").drop("_name")


def idle_heat(path: str, start: datetime, end: datetime, projects: tuple[str, ...], clusters: tuple[str, ...],
              default_tier: str, limit: int) -> dict:
    """What "Who holds idle GPUs" draws: ``jobs`` (idle_jobs), ``cells`` (idle_job_cells) and
    ``bin_hours``; one call, so the page caches it per filter set."""
    bin_hours = heat_bin_hours(start, end)
    jobs = idle_jobs(path, start, end, projects, clusters, default_tier, limit)
    return {"jobs": jobs, "cells": idle_job_cells(path, start, end, jobs, bin_hours), "bin_hours": bin_hours}


def idle_job_cells(path: str, start: datetime, end: datetime, jobs: pl.DataFrame, bin_hours: int) -> pl.DataFrame:
    """The heatmap's cells for ``jobs`` (idle_jobs' rows): per job and bin of ``bin_hours`` hours,
    held and idle GPU-hours and the idle share of held (binned in SQL: rows × bins numbers)."""
    cells = read(path, "idle_job_bins", start=start, end=end, job_keys=jobs["job_key"].to_list() if jobs.height else [],
                 bin_hours=bin_hours)
    return (cells.join(jobs.select("job_key", "label"), on="job_key")
            .with_columns(bin_end=pl.col("bin") + pl.duration(hours=bin_hours),
                          idle_share=pl.when(pl.col("gpu_hours_held") > 0)
                          .then(pl.col("gpu_hours_idle") / pl.col("gpu_hours_held"))))


def mig_summary(devices: pl.DataFrame) -> pl.DataFrame:
    """MIG instances per model and profile: count, GPU equivalents (compute slices), held
    GPU-hours (held fraction × slice share) and held % of their capacity over the period."""
    mig = devices.filter(pl.col("mig_profile").is_not_null())
    if not mig.height:
        return pl.DataFrame(schema={"model": pl.String, "mig_profile": pl.String, "instances": pl.UInt32,
                                    "gpu_equivalents": pl.Float64, "gpu_hours_held": pl.Float64, "held_pct": pl.Float64})
    per = mig.group_by("model", "mig_profile").agg(
        pl.col("device").n_unique().alias("instances"),
        (pl.col("held_fraction") * pl.col("gpu_fraction")).sum().alias("gpu_hours_held"),
        pl.col("gpu_fraction").sum().alias("_cap_hours"),
    )
    eq = mig.unique("device").group_by("model", "mig_profile").agg(pl.col("gpu_fraction").sum().alias("gpu_equivalents"))
    return (per.join(eq, on=["model", "mig_profile"])
            .with_columns(held_pct=100 * pl.col("gpu_hours_held") / pl.col("_cap_hours"))
            .select("model", "mig_profile", "instances", "gpu_equivalents", "gpu_hours_held", "held_pct")
            .sort("model", "mig_profile"))


# --- fair share -------------------------------------------------------------------------------

def fairshare_latest(path: str, end: datetime) -> pl.DataFrame:
    """The fair-share tree as of the period's end (_facts_at_the_end: `gpuledger report
    fairshare`'s answer, so the page and the CLI agree right after `config load`). The report's
    columns plus ``as_of`` and ``day``; empty without data."""
    tree = _facts_at_the_end(path, end, "fairshare", "fairshare_latest")
    return tree.rename({"order": "queue_order"}) if "order" in tree.columns else tree


def _facts_at_the_end(path: str, end: datetime, figure: str, empty_sql: str) -> pl.DataFrame:
    """``figure`` (facts.fairshare / budget) as of the period's end, at most the data's
    now: the materialized snapshot when it holds for that moment and was made after the config in
    force was loaded, else computed under that config — never a snapshot older than the data or
    the config. With the snapshot table's ``as_of`` and ``day`` beside (the pages' names)."""
    with warehouse.kept_reader(path) as con:
        now = facts.data_now(con)
        if now is None:
            return _frame(con, empty_sql, end=end)  # no data: the (empty) snapshot read
        at = min(end, now)
        answer = getattr(facts, figure)(con, policy=lambda: in_force(con, None, write=False).config.policy,
                                        as_of=at).frame
    return answer.with_columns(pl.lit(at, dtype=pl.Datetime("us")).alias("as_of"), pl.lit(at.date()).alias("day"))


def delivery_balance(path: str, end: datetime) -> tuple[pl.DataFrame, bool, float]:
    """The delivery balance per org node and settlement period up to the period's end, at most the
    data's now (`gpuledger report balance --history`'s answer under the config in force; empty
    without data), whether fair share is credited with it, and the period's length in days."""
    with warehouse.kept_reader(path) as con:
        policy = in_force(con, None, write=False).config.policy
        credited, days = policy.usage.delivery_balance.credit_fair_share, policy.usage.window_days
        now = facts.data_now(con)
        if now is None:
            return pl.DataFrame(), credited, days
        return facts.delivery_balance(con, policy=policy, as_of=min(end, now)).frame, credited, days


def fairshare_history(path: str, start: datetime, end: datetime) -> pl.DataFrame:
    return read(path, "fairshare_history", start=start, end=end)


def _fmt_lf(value: float | None) -> str:
    if value is None:
        return "n/a"
    return "∞ (no usage)" if value == float("inf") else f"{value:.2f}"


def queue_reasons(tree: pl.DataFrame) -> pl.DataFrame:
    """Per project in queue order, why it is there: at every level from the root down, its
    ancestor's share s and usage u among siblings (normalised), LF = s / u and its place among the
    siblings (descending LF, as the depth-first walk takes them)."""
    rows = {r["node"]: r for r in tree.iter_rows(named=True)}
    siblings: dict[str | None, list[dict]] = {}
    for r in rows.values():
        siblings.setdefault(r["parent"], []).append(r)
    for group in siblings.values():
        group.sort(key=lambda r: r["queue_order"])
    out = []
    for r in sorted(rows.values(), key=lambda r: r["queue_order"]):
        if r["kind"] != "project" and any(c["parent"] == r["node"] for c in rows.values()):
            continue
        chain, node = [], r
        while node is not None and node["parent"] is not None:
            chain.append(node)
            node = rows.get(node["parent"])
        steps = []
        for level in reversed(chain):
            group = siblings[level["parent"]]
            place = [g["node"] for g in group].index(level["node"]) + 1
            # share and usage of the same parent, as LF divides them (usage_norm is of the whole org)
            steps.append(
                f"{level['node']}: share {level['shares_norm']:.0%} vs usage {level['usage_effective'] or 0:.0%} "
                f"of {level['parent']} → LF {_fmt_lf(level['level_fs'])}, {place} of {len(group)}")
        out.append({"queue_position": len(out) + 1, "project": r["node"], "fs_rank": r["fs_rank"],
                    "fairshare_factor": r["fairshare_factor"], "why": "; ".join(steps)})
    return pl.DataFrame(out, schema={"queue_position": pl.Int64, "project": pl.String, "fs_rank": pl.Int64,
                                     "fairshare_factor": pl.Float64, "why": pl.String})


# --- budgets ----------------------------------------------------------------------------------

def budgets_latest(path: str, end: datetime) -> pl.DataFrame:
    """Budget burn per node and budget period as of the period's end (`gpuledger report budget`'s
    answer, through the read model: _facts_at_the_end, with its runs_out and left_at_period_end),
    by node and period start."""
    burn = _facts_at_the_end(path, end, "budget", "budgets_latest")
    if not burn.height:
        return burn
    # runs_out / left_at_period_end: as `gpuledger report budget` shows them (facts.budget_outlook)
    return with_outlook(burn, as_of=burn["as_of"][0]).sort("node", "period_start")


def budget_history(path: str, node: str, period_start, end: datetime) -> pl.DataFrame:
    return read(path, "budget_history", node=node, period_start=period_start, end=end)


# --- squatters --------------------------------------------------------------------------------

def squatting_open(path: str, clusters: tuple[str, ...]) -> pl.DataFrame:
    """Open findings of ``clusters`` (all when empty), worst first: the highest severity, then the
    longest idle."""
    found = read(path, "squatting_open")
    if clusters:
        found = found.filter(pl.col("cluster").is_in(list(clusters)))
    if found.height < 2:
        return found  # nothing to order (a polars sort costs as much as the read)
    rank = pl.col("severity").replace_strict(SEVERITY_RANK, default=-1, return_dtype=pl.Int8)
    return found.sort(rank, "idle_minutes", "cluster", "job_id", descending=[True, True, False, False],
                      nulls_last=True)


def finding_history(path: str, job_keys: tuple[str, ...]) -> dict[str, pl.DataFrame]:
    """For the jobs ``cluster/job_id``: lifecycle events, alerts (the outbox, when the alerts
    migration is there) and enforcement rows."""
    keys = list(job_keys)
    with warehouse.kept_reader(path) as con:
        events = _frame(con, "finding_events", job_keys=keys)
        actions = _frame(con, "enforcement_for_jobs", job_keys=keys)
        if _has_table(con, "alert_outbox"):
            alerts = con.sql(sql("finding_alerts"), params={"job_keys": keys}).pl()
        else:
            alerts = pl.DataFrame()
    return {"events": events, "alerts": alerts, "enforcement": actions}


# --- enforcement, my team ---------------------------------------------------------------------

def enforcement(path: str, start: datetime, end: datetime | None, clusters: tuple[str, ...]) -> pl.DataFrame:
    """Audit rows planned in [start, end); ``end`` None: up to the wall clock (a plan made today
    over a replayed week is stamped with today)."""
    return read(path, "enforcement_audit", start=start, end=end, clusters=list(clusters))


ENFORCEMENT_PAGE_ROWS = 200  # audit rows the enforcement page sends at a time


@dataclass(frozen=True)
class AuditFilter:
    """What the enforcement page asks for: the sidebar's period, clusters and visible projects, the
    page's pickers (empty = all) and a text the job id or the reason contains."""

    start: datetime
    end: datetime | None
    clusters: tuple[str, ...]
    projects: tuple[str, ...]
    actions: tuple[str, ...] = ()
    phases: tuple[str, ...] = ()
    outcomes: tuple[str, ...] = ()
    text: str = ""

    def params(self) -> dict:
        return {"start": self.start, "end": self.end, "clusters": list(self.clusters), "projects": list(self.projects),
                "actions": list(self.actions), "phases": list(self.phases), "outcomes": list(self.outcomes),
                "text": self.text}


def enforcement_page(path: str, audit: AuditFilter, page: int, rows: int = ENFORCEMENT_PAGE_ROWS) -> pl.DataFrame:
    """Page ``page`` (0-based) of the audit rows ``audit`` keeps, newest first: paged in SQL so the
    browser gets the rows shown, not the whole trail."""
    return read(path, "enforcement_page", **audit.params(), limit=rows, offset=page * rows)


def enforcement_counts(path: str, audit: AuditFilter) -> dict:
    """Rows kept (planned, applied) over all pages, rows in the period, and the pickers' values."""
    with warehouse.kept_reader(path) as con:
        cur = con.execute(sql("enforcement_counts"), audit.params())
        row = cur.fetchall()[0]
        names = [d[0] for d in cur.description]
    out = dict(zip(names, row, strict=True))
    for key in ("actions", "phases", "outcomes"):
        out[key] = [v for v in (out[key] or []) if v is not None]
    return out


def open_jobs(path: str, projects: tuple[str, ...], clusters: tuple[str, ...], now: datetime) -> pl.DataFrame:
    return read(path, "open_jobs", projects=list(projects), clusters=list(clusters), now=now)


def project_usage(path: str, start: datetime, end: datetime, projects: tuple[str, ...]) -> pl.DataFrame:
    return read(path, "project_usage", start=start, end=end, projects=list(projects))


def user_waste(path: str, start: datetime, end: datetime, projects: tuple[str, ...],
               clusters: tuple[str, ...]) -> pl.DataFrame:
    return read(path, "user_waste", start=start, end=end, projects=list(projects), clusters=list(clusters))


def priority_why(jobs: pl.DataFrame, budgets: pl.DataFrame, tree: pl.DataFrame) -> pl.DataFrame:
    """``jobs`` with a ``why`` column: the enforcement plan's own reason when one was planned,
    else the project's budget status and fair-share rank (what that plan would weigh)."""
    ranks = {r["node"]: r["fs_rank"] for r in tree.iter_rows(named=True) if r["fs_rank"] is not None}
    of = len(ranks)
    status = {r["node"]: r["status"] for r in budgets.iter_rows(named=True)}
    why = []
    for r in jobs.iter_rows(named=True):
        if r["priority_reason"]:
            why.append(r["priority_reason"])
            continue
        budget = status.get(r["project"])
        rank = ranks.get(r["project"])
        parts = [f"budget {budget}" if budget else "no budget of its own",
                 f"fair-share rank {rank} of {of}" if rank else "not ranked by fair share"]
        if not r["min_runtime_s"]:
            parts.append("no minimum runtime declared (preemptible)")
        why.append("; ".join(parts) + " (no enforcement plan yet)")
    return jobs.with_columns(why=pl.Series(why, dtype=pl.String))


# --- wait times, the scheduler's word (issue 38) ------------------------------------------------

def waits(path: str, start: datetime, end: datetime, projects: tuple[str, ...], by: str = "project") -> pl.DataFrame:
    """`gpuledger report waits`'s answer (facts.waits) for the jobs of ``projects`` (all
    when empty) submitted in [start, end): seconds, as of the data's now."""
    with warehouse.kept_reader(path) as con:
        return facts.waits(con, start=start, end=end, by=by, projects=projects).frame


def scheduler_view(path: str, jobs: tuple[tuple[str, str], ...]) -> pl.DataFrame:
    """Per (cluster, job_id): the scheduler's latest word (``scheduler_says``) and gpuledger's rank
    beside it, saying whether they agree (``versus``: enforce.scheduler_view.compare's sentence);
    empty cells where neither has spoken."""
    rows = []
    with warehouse.kept_reader(path) as con:
        for cluster, job_id in jobs:
            said = view.scheduler_words(con, cluster, job_id)
            latest = said[-1][1] if said else None
            place = view.queue_place(con, cluster, job_id)
            agree, sentence = view.compare(place, latest)
            says = None if latest is None else (f"{view.SCHEDULER_NAMES.get(latest.scheduler, latest.scheduler)}: "
                                                f"{latest.reason}")
            rows.append((cluster, job_id, says, agree, sentence if (latest or place) else None))
    return pl.DataFrame(rows, schema={"cluster": pl.String, "job_id": pl.String, "scheduler_says": pl.String,
                                      "agrees": pl.Boolean, "versus": pl.String}, orient="row")


# --- chargeback -------------------------------------------------------------------------------

@dataclass(frozen=True)
class StatementView:
    period: str
    scope: str
    status: str  # closed (revision n) / provisional / open
    closed: bool
    provisional: bool
    billed_through: datetime
    lines: pl.DataFrame
    totals: dict  # currency -> Decimal (billed lines)
    reconciliation: tuple[str, ...]  # one sentence per currency (org scope)
    reconciles: bool | None  # None: not checked for a subtree
    notes: tuple[str, ...]
    file_names: tuple[str, ...]  # the statement's files, as `gpuledger report statement` names them
    source: str  # "materialized" (the pipeline's statement_views) or "computed" (built for this view)
    path: str = field(repr=False, compare=False, default="")
    node: str | None = field(repr=False, compare=False, default=None)
    statement: object = field(repr=False, compare=False, default=None)  # reports.statement.build.Statement, if built

    @classmethod
    def of(cls, summary, source: str, *, path: str, node: str | None, statement=None) -> StatementView:
        stem = f"statement-{summary.period}-{file_slug(summary.scope)}"
        return cls(period=summary.period, scope=summary.scope, status=summary.state.text, closed=summary.state.closed,
                   provisional=summary.state.provisional, billed_through=summary.billed_through, lines=summary.lines,
                   totals=summary.totals, reconciliation=tuple(s for s, _ in summary.reconciliation),
                   reconciles=summary.reconciles, notes=summary.notes, file_names=tuple(summary.file_names(stem)),
                   source=source, path=path, node=node, statement=statement)

    @cached_property
    def files(self) -> dict:
        """File name -> bytes, exactly what `gpuledger report statement` writes (the same writer,
        from a statement built now when the view was read from the pipeline's), made on first
        use: a download, not every page load (~0.3 CPU-s at 1,024 GPUs)."""
        # lazy: warmed in the background (warm_imports): the first page does not wait on it
        from gpuledger.reports.statement.build import build_statement

        # lazy: warmed in the background (warm_imports): the first page does not wait on it
        from gpuledger.reports.statement.files import write_statement_files

        st = self.statement
        if st is None:
            with warehouse.kept_reader(self.path) as con:
                st = build_statement(con, self.period, node=self.node)
        stem = f"statement-{self.period}-{file_slug(self.scope)}"
        with tempfile.TemporaryDirectory() as tmp:
            return {p.name: p.read_bytes() for p in write_statement_files(st, Path(tmp), stem)}


# What building a statement imports (each module loads its own lazily, so the CLI starts fast):
# the server imports them once, in the background, before the chargeback page asks (ui.warm_server).
STATEMENT_MODULES = ("gpuledger.reports.statement.build", "gpuledger.reports.statement.summary",
                     "gpuledger.facts.statement_views", "gpuledger.reports.statement.files", "gpuledger.analytics.queries",
                     "gpuledger.analytics.chargeback", "gpuledger.analytics.load", "gpuledger.analytics.attribution",
                     "gpuledger.analytics.tree", "gpuledger.ledger.periods", "gpuledger.ledger.config_versions",
                     "gpuledger.config_store", "gpuledger.warehouse.clock", "gpuledger.analytics.carbon",
                     "gpuledger.ledger.grid_intensity", "gpuledger.reports.statement.focus")


def warm_imports() -> None:
    for name in STATEMENT_MODULES:
        importlib.import_module(name)


def statement(path: str, period: str, node: str | None) -> StatementView:
    """The finance statement of ``period`` (YYYY-MM) for the org or ``node``'s subtree: the
    chargeback pipeline's stored view while it is as new as the data (one row read), else built
    now; its files' bytes (``files``) are written when first asked for."""
    # lazy: warmed in the background (warm_imports): the first page does not wait on it
    from gpuledger.facts import statement_views

    # lazy: warmed in the background (warm_imports): the first page does not wait on it
    from gpuledger.reports.statement.build import build_statement, subtree

    # lazy: warmed in the background (warm_imports): the first page does not wait on it
    from gpuledger.reports.statement.summary import StatementSummary

    with warehouse.kept_reader(path) as con:
        stored = statement_views.fresh(con, period)
        if stored is not None:
            org_nodes = pl.DataFrame(con.execute("SELECT node, parent, kind, shares FROM org_nodes").fetchall(),
                                     schema=["node", "parent", "kind", "shares"], orient="row")
            if node is None or node in set(org_nodes["node"].to_list()):
                summary = stored if node is None else stored.for_node(node, subtree(org_nodes, node))
                return StatementView.of(summary, "materialized", path=path, node=node)
        st = build_statement(con, period, node=node)  # a node not in the tree: its UsageError
    return StatementView.of(StatementSummary.of(st), "computed", path=path, node=node, statement=st)


def chargeback_period(path: str, start: datetime, end: datetime, projects: tuple[str, ...] | None) -> pl.DataFrame:
    """Chargeback lines (project × model × tier, idle and memo lines) for any [start, end), by
    the ledger's chargeback with the warehouse's stored policy; ``projects``: only their lines
    (None: all, idle included). Not a statement: no files, nothing frozen."""
    with warehouse.kept_reader(path) as con:
        lines = facts.chargeback(con, f"{start.isoformat()}..{end.isoformat()}", level="project",
                                 policy=policy_in_force(con)).frame
    if projects is not None:
        lines = lines.filter(pl.col("project").is_in(list(projects)))
    return lines


def file_slug(name: str) -> str:
    """A scope or unit as the statement's file names spell it (reports.statement.files.slug; loaded on use)."""
    # lazy: warmed in the background (warm_imports): the first page does not wait on it
    from gpuledger.reports.statement.files import slug

    return slug(name)


def billed_lines(lines: pl.DataFrame) -> pl.DataFrame:
    """The lines that make what a statement bills (gpuledger.rules.billing: charge and idle, and
    the corrections of those; a correction of a memo line bills nothing), priced."""
    return lines.filter(billed(lines) & pl.col("currency").is_not_null())


def energy_by_project(lines: pl.DataFrame) -> pl.DataFrame:
    """Facility kWh and kgCO2e per business unit and project from a statement's charge lines, as
    text: "unknown" where no figure is known (never 0), three decimals otherwise."""
    charges = lines.filter((pl.col("line_kind") == "charge") & pl.col("correction_of").is_null())

    def shown(col: str) -> pl.Expr:
        known = pl.when(pl.col(col).is_not_null().any()).then(pl.col(col).sum())
        return pl.when(known.is_null()).then(pl.lit("unknown")).otherwise(
            known.round(3).map_elements(lambda v: f"{v:,.3f}", return_dtype=pl.String))

    return (charges.group_by("business_unit", "project")
            .agg(pl.col("gpu_hours").sum(), shown("energy_kwh_facility").alias("facility_kwh"),
                 shown("kg_co2e").alias("kg_co2e"), pl.col("gpu_hours_co2_unknown").fill_null(0.0).sum())
            .sort("business_unit", "project"))


# --- what-if result files (the /what-if page; `gpuledger whatif schedule --format json --out FILE`) -------------
WHATIF_COMMAND = "gpuledger whatif schedule --format json --out reports/whatif/schedule.json"


def whatif_dir() -> Path:
    """Where the page looks for result files: ``$GPULEDGER_WHATIF_DIR``, default reports/whatif/."""
    return Path(os.environ.get("GPULEDGER_WHATIF_DIR") or "reports/whatif")


def newest_whatif(folder: Path) -> Path | None:
    """The newest ``*.json`` in ``folder`` of format ``gpuledger.whatif.schedule/1``, or None."""
    try:
        files = sorted(folder.glob("*.json"), key=lambda p: (p.stat().st_mtime, p.name), reverse=True)
    except OSError:
        return None
    for file in files:
        try:
            if json.loads(file.read_text()).get("format") == FORMAT:
                return file
        except (OSError, ValueError, AttributeError):
            continue
    return None


def whatif_result(text: str) -> dict:
    """The frames of ``gpuledger.whatif.compare.frames_from_json`` plus ``titles`` (policy → title)
    and ``sweep_parameter`` / ``sweep_policy``; ValueError when the text is not such a file."""
    out = frames_from_json(text)
    doc = json.loads(text)
    out["titles"] = {p["policy"]: p.get("title") or p["policy"] for p in doc["policies"]}
    sweep = doc.get("sweep") or {}
    out["sweep_parameter"], out["sweep_policy"] = sweep.get("parameter"), sweep.get("policy")
    out["outcome"] = whatif_outcome(doc.get("outcome"), out["titles"])
    return out


def whatif_outcome(block: dict | None, titles: dict[str, str]) -> dict | None:
    """The outcome table of a result file (issue 34; files before it have none: None): ``table``
    (figure, target, one column per policy title, cells the median over seeds), ``ranges`` (the same,
    cells ``median [min–max]``), ``seeds``, ``regime``."""
    if not block:
        return None

    table, policies, _ = frame_from_document(block, ranges=False)
    ranges, _, _ = frame_from_document(block)
    names = {p: titles.get(p, p) for p in policies}
    return {"table": table.rename(names), "ranges": ranges.rename(names), "seeds": block.get("seeds", []),
            "regime": block.get("regime", ""), "target_note": TARGET_NOTE}


def whatif_long(frames: dict) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(project, policy, owed, delivered, ratio) and (policy, job_class, p50, p90) in long form,
    policies by their titles, for the charts."""
    titles = frames["titles"]
    projects = frames["projects"]
    rows = []
    for policy, title in titles.items():
        if projects is None or f"{policy}_delivery_ratio" not in projects.columns:
            continue
        rows.append(projects.select(
            "project", pl.lit(title).alias("policy"),
            pl.col(f"{policy}_owed_gpu_hours").cast(pl.Float64).alias("owed_gpu_hours"),
            pl.col(f"{policy}_delivered_gpu_hours").cast(pl.Float64).alias("delivered_gpu_hours"),
            pl.col(f"{policy}_delivery_ratio").cast(pl.Float64).alias("delivery_ratio")))
    delivery = pl.concat(rows) if rows else pl.DataFrame(
        schema={"project": pl.Utf8, "policy": pl.Utf8, "owed_gpu_hours": pl.Float64,
                "delivered_gpu_hours": pl.Float64, "delivery_ratio": pl.Float64})
    waits = frames["waits"].with_columns(pl.col("policy").replace_strict(titles, default=pl.col("policy")),
                                         pl.col("wait_p50_hours").cast(pl.Float64),
                                         pl.col("wait_p90_hours").cast(pl.Float64))
    return delivery, waits


# --- a lead's own queue (issue 38) -----------------------------------------------------------------

def team_queue(path: str, projects: tuple[str, ...], now: datetime) -> pl.DataFrame:
    """The team's jobs open at ``now`` with the lead's choices (enforce.team_store.queue): never
    cached, so a change shows on the rerun that made it."""
    with warehouse.kept_reader(path) as con:
        if not _has_table(con, "team_choices"):
            return pl.DataFrame()
        rows = team_store.queue(con, projects, now)
    return pl.DataFrame(rows, infer_schema_length=None) if rows else pl.DataFrame()


def team_audit(path: str, node: str, limit: int = 20) -> pl.DataFrame:
    """The newest changes to a team's queue: who (and how identified), when, before -> after."""
    with warehouse.kept_reader(path) as con:
        if not _has_table(con, "team_audit"):
            return pl.DataFrame()
        return result_frame(con.execute(
            "SELECT changed_at, changed_by, identity, change, cluster, job_id, before, after FROM team_audit "
            "WHERE node = ? ORDER BY changed_at DESC LIMIT ?", [node, limit]))
