"""The facts as of T (gpuledger.facts): fair share, budget burn, delivery balance, usage, funding,
squatting findings and wait times, read from the materialized tables (the read model, migration 009)
when they are fresh for T and computed by the analytics query layer otherwise. Every surface (the
CLI, dashboards, alerts, enforcement, the metrics exporter, the pipelines' consumers) asks here, so
a question has one answer whichever way it was reached; ``Facts.source`` says which way it was.

This area sits above analytics, the ledger and the finance reports and below every surface
(tests/rules/test_layering.py). Beside this module:

- ``materialize``: writing the read model (replace a partition exactly, stamp rows), for the Dagster
  assets.
- ``statement_views``: a month's statement as the chargeback pipeline stored it.
- ``rows``: a materialized answer as query rows a terminal table prints without polars.

Fresh means, for a snapshot table (fair share, budgets): rows whose ``as_of`` is exactly T,
materialized after the config in force was loaded. For hourly usage and utilization: [start, end)
on whole hours, every UTC day of it materialized after the config in force was loaded and computed
at a data's now past the asked part of the day, or at the data's now itself (the running day,
which the pipelines refresh: its hour in progress included). Late data that does not move the
data's "now" is seen at the next materialization, as on the dashboards.

The fast path imports DuckDB only (no polars, no analytics): a materialized answer for a week of
1,024 GPUs costs one indexed query, and comes as rows a terminal table prints directly
(``Facts.table``; ``Facts.frame`` is polars; BENCHMARKS.md "Read model and CLI latency")."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cached_property

from gpuledger.config_store import stored_config, stored_config_in_force
from gpuledger.facts.budget_outlook import with_outlook  # noqa: F401 - the readers' budget columns, for the CLI
from gpuledger.facts.rows import Rows, as_polars
from gpuledger.sql import load_sql

# "now" for the data and for waits: facts.data_now / facts.waits_now for every surface
from gpuledger.rules.clock import utc_now
from gpuledger.warehouse.clock import data_now, data_now_within, waits_now

MATERIALIZED = "materialized"
COMPUTED = "computed"
SNAPSHOT_TABLES = ("fairshare_snapshots", "budget_snapshots")
# by -> (the hourly table that answers it, its keys: the report's key columns, in order)
USAGE_TABLES = {"project": ("usage_hourly_projects", ("project",)),
                "job": ("usage_hourly_jobs", ("cluster", "job_id", "project", "user_name")),
                "user": ("usage_hourly_jobs", ("user_name",))}
DAY = timedelta(days=1)

# the columns of queries.fairshare_report / budget_report, in their order, with their polars types
# (the tables add day, as_of and materialized_at; fair share stores `order` as queue_order)
_F = "Float64"
FAIRSHARE_COLUMNS = {"node": "String", "parent": "String", "depth": "Int32", "kind": "String", "shares_raw": _F,
                     "shares_norm": _F, "share_global": _F, "usage_raw_gpu_hours": _F, "usage_norm": _F,
                     "usage_effective": _F, "level_fs": _F, "fs_rank": "Int32", "fairshare_factor": _F,
                     "queue_order": "Int32", "gpu_hours_window": _F, "gpu_hours_decayed": _F,
                     "delivery_ratio": _F, "occupancy_ratio": _F}
BUDGET_COLUMNS = {"node": "String", "period_start": "Date", "period_end": "Date", "budget_gpu_hours": _F,
                  "budget_own": "Boolean", "consumed_gpu_hours": _F, "unweighted_gpu_hours": _F,
                  "unweighted_models": "String", "remaining_gpu_hours": _F, "burn_gpu_hours_per_day": _F,
                  "projected_exhaustion": "Datetime", "status": "String"}
# queries.usage_report's figures after its key columns: the materialized sums (usage_sums.sql)
USAGE_FIGURES = {"gpu_hours_allocated": _F, "gpu_hours_active": _F, "gpu_hours_idle": _F,
                 "gpu_hours_unknown": _F, "energy_kwh": _F, "efficiency_ratio": _F}
# queries.utilization_report(by="model")'s columns: the rows of utilization_hourly
UTILIZATION_COLUMNS = {"cluster": "String", "model": "String", "hour": "Datetime", "gpu_hours_capacity": _F,
                       "gpu_hours_allocated": _F, "gpu_hours_active": _F, "gpu_hours_unknown": _F,
                       "allocation_pct": _F, "active_pct": _F, "active_of_allocated_pct": _F}

# queries.squatters_report's columns, in order: the stored findings also carry their episode's
# lifecycle (first_seen, last_seen, resolved_at), and the exempt flags only with include_exempt
SQUATTERS_COLUMNS = {"cluster": "String", "job_id": "String", "project": "String", "user_name": "String",
                     "namespace": "String", "job_kind": "String", "finding": "String", "severity": "String",
                     "gpus_total": "UInt32", "gpus_idle": "Int64", "idle_since": "Datetime", "idle_minutes": _F,
                     "gpu_hours_idle": _F, "idle_cost": "Decimal(38,2)", "currency": "String",
                     "fb_used_bytes_idle": "Int64", "activity_signal": "String", "exempt": "Boolean",
                     "exempt_reason": "String"}


@dataclass(frozen=True)
class Facts:
    """An answer, where it came from (``materialized`` or ``computed``) and the time it holds for.

    ``table`` is the answer as it came: the computed polars DataFrame, or the materialized rows
    (facts.rows.Rows: a terminal table prints them without polars). ``frame`` is always a
    polars DataFrame (the rows converted on first use)."""

    table: object  # polars.DataFrame | Rows
    source: str
    as_of: datetime

    @cached_property
    def frame(self):
        return as_polars(self.table)


def _sql(name: str, **identifiers: str) -> str:
    """A read model query; ``identifiers`` fill its ``{{ name }}`` table / column names (from this
    module's lists, never from input)."""
    return load_sql(__package__, f"{name}.sql", **identifiers)


def _config_loaded_at(con) -> datetime | None:
    return con.execute(_sql("config_loaded_at")).fetchall()[0][0]


def _holds(con, table: str, columns) -> bool:
    """Whether ``table`` stores every column of the report (a report that grew a column is computed
    until a migration adds it: a materialized answer never lacks a figure)."""
    stored = {row[0] for row in con.execute(f'DESCRIBE "{table}"').fetchall()}
    return set(columns) <= stored


def _snapshot_fresh(con, table: str, columns, as_of: datetime, *, filled: str | None = None) -> bool:
    """Rows as of ``as_of`` exist, were all materialized after the config in force was loaded and,
    with ``filled`` (a column the report never leaves NULL), all have it: a row written before a
    migration added that column is stale."""
    assert table in SNAPSHOT_TABLES  # an identifier from the list above, never from input
    if not _holds(con, table, columns):
        return False
    assert filled is None or filled in columns
    rows, oldest, unfilled = con.execute(_sql("snapshot_state", table=table, filled=filled or "as_of"),
                                         {"as_of": as_of}).fetchall()[0]
    loaded = _config_loaded_at(con)
    return bool(rows) and not unfilled and (loaded is None or oldest >= loaded)


def _policy(policy):
    """A policy argument: the Policy, or a zero-argument callable returning it (called only when
    the answer is computed, so a materialized answer never validates the config)."""
    return policy() if callable(policy) else policy


def _policy_in_force(con, policy, part: str | None = None) -> bool:
    """Whether a materialized row can answer for ``policy``: rows are materialized under the
    stored config, so a caller holding another policy (enforcement handed a config, a test) gets
    the computed answer for its own. ``part``: only that section of the policy decides (the
    squatting rules, for findings). A callable (the CLI's stored config) or None is the stored one."""
    if policy is None or callable(policy):
        return True
    stored = stored_config_in_force(con)
    if stored is None:
        return False
    if part is not None:
        return getattr(stored.policy, part) == getattr(policy, part)
    return stored.policy == policy


def _snapshot(con, table: str, schema: dict, as_of: datetime, order: str, renamed: dict | None = None) -> Rows:
    """The snapshot's rows as of ``as_of`` in the report's column order (``renamed``: stored name
    -> the report's). Rows, not polars: DuckDB's .pl() goes through Arrow (pyarrow, numpy), and
    polars itself costs more to import than the whole materialized query."""
    renamed = renamed or {}
    names = ", ".join(f'"{c}" AS "{renamed.get(c, c)}"' for c in schema)
    rows = con.execute(f'SELECT {names} FROM "{table}" WHERE as_of = $as_of ORDER BY {order}',
                       {"as_of": as_of}).fetchall()
    return Rows(rows, {renamed.get(c, c): t for c, t in schema.items()})


def fairshare(con, *, policy, as_of: datetime | None = None, materialized: bool = True) -> Facts:
    """The fair-share tree as of ``as_of`` (default: the data's now), shaped like
    queries.fairshare_report (GPU-hours, ratios). ``policy``: a Policy, or a callable giving it
    (called only when computed). ``materialized=False``: always computed (the pipeline that
    writes the snapshot)."""
    at = as_of or data_now(con)
    if (materialized and _snapshot_fresh(con, "fairshare_snapshots", FAIRSHARE_COLUMNS, at)
            and _policy_in_force(con, policy)):
        rows = _snapshot(con, "fairshare_snapshots", FAIRSHARE_COLUMNS, at, "queue_order", {"queue_order": "order"})
        return Facts(rows, MATERIALIZED, at)
    from gpuledger.analytics import queries  # lazy: the fast path imports no polars (above)

    return Facts(queries.fairshare_report(con, policy=_policy(policy), as_of=at), COMPUTED, at)


def budget(con, *, policy, as_of: datetime | None = None, materialized: bool = True) -> Facts:
    """Budget burn per org node as of ``as_of`` (normalised GPU-hours), like queries.budget_report
    (``materialized=False``: always computed)."""
    at = as_of or data_now(con)
    # unweighted_gpu_hours: NULL in rows from before migration 016, 0.0 or more in the report
    if (materialized and _snapshot_fresh(con, "budget_snapshots", BUDGET_COLUMNS, at, filled="unweighted_gpu_hours")
            and _policy_in_force(con, policy)):
        # the snapshot keeps the report's row order (tree position, period) as it was inserted
        return Facts(_snapshot(con, "budget_snapshots", BUDGET_COLUMNS, at, "rowid"), MATERIALIZED, at)
    from gpuledger.analytics import queries  # lazy: the fast path imports no polars (above)

    return Facts(queries.budget_report(con, policy=_policy(policy), as_of=at), COMPUTED, at)


def delivery_balance(con, *, policy, as_of: datetime | None = None) -> Facts:
    """The delivery balance per org node and settlement period up to ``as_of``
    (queries.balance_report, GPU-hours). Always computed: it is a pass over a few windows of jobs."""
    at = as_of or data_now(con)
    from gpuledger.analytics import queries  # lazy: the fast path imports no polars (above)

    return Facts(queries.balance_report(con, policy=_policy(policy), as_of=at), COMPUTED, at)


def behind_owed(con, *, policy, as_of: datetime) -> frozenset[str]:
    """The projects delivered less than they are owed so far in the settlement period running at
    ``as_of`` (queries.behind_owed_projects; policy.enforcement.spare_behind_owed). Always computed."""
    from gpuledger.analytics import queries  # lazy: the fast path imports no polars (above)

    return queries.behind_owed_projects(con, policy=_policy(policy), as_of=as_of)


def _usage_fresh(con, table: str, start: datetime, end: datetime, now: datetime) -> bool:
    """Whether ``table``'s stored days answer [start, end) on whole hours as computing it at ``now``
    would: every UTC day of the range stored, after the config in force was loaded, and each day's
    rows computed at a data's now (``covered_until``, migration 029) that had passed the asked part
    of the day (a closed day computed after it ended), or that is still ``now`` (the running day,
    refreshed by every run: its hour in progress is then the range computation's). Rows stored before
    029 answer days that closed before ``now`` only."""
    whole_hours = all(t.minute == t.second == t.microsecond == 0 for t in (start, end))
    if not whole_hours or end <= start:
        return False  # a partial hour: the materialized rows cannot say
    first, stop = start.date(), (end - timedelta(microseconds=1)).date() + DAY
    days = {row[0]: row[1:] for row in con.execute(_sql("usage_days", table=table),
                                                    {"first": first, "stop": stop}).fetchall()}
    loaded = _config_loaded_at(con)
    for d in (first + i * DAY for i in range((stop - first).days)):
        if d not in days:
            return False
        materialized, covered, unstamped = days[d]
        day_end = datetime(d.year, d.month, d.day) + DAY
        if loaded is not None and materialized < loaded:
            return False
        if unstamped:  # before migration 029: a closed day, materialized after it ended
            if end > now or materialized < day_end:
                return False
        elif covered < min(end, day_end) and covered < now:
            return False
    return True


def usage(con, *, start: datetime, end: datetime, by: str = "project", policy=None,
          now: datetime | None = None, per_hour: bool = False, materialized: bool = True) -> Facts:
    """Allocated / active / idle / unknown GPU-hours, efficiency and energy (kWh) over [start, end)
    by ``by``, like queries.usage_report. ``per_hour`` (one row per key and UTC hour, what the
    usage tables store) and ``materialized=False`` are always computed."""
    at = now or data_now(con)
    table, keys = USAGE_TABLES.get(by, (None, ()))
    if (materialized and not per_hour and table is not None and _usage_fresh(con, table, start, end, at)
            and _policy_in_force(con, policy)):
        # summed in SQL by attribution.sum_usage's exact rule (no polars, no analytics to import)
        query = _sql("usage_sums", table=table, keys=", ".join(f'"{k}"' for k in keys),
                     order=", ".join(f'"{k}" ASC NULLS LAST' for k in keys))
        rows = con.execute(query, {"start": start, "end": end}).fetchall()
        return Facts(Rows(rows, {**dict.fromkeys(keys, "String"), **USAGE_FIGURES}), MATERIALIZED, at)
    from gpuledger.analytics import queries  # lazy: the fast path imports no polars (above)

    frame = queries.usage_report(con, start=start, end=end, by=by, policy=_policy(policy), now=at, per_hour=per_hour)
    return Facts(frame, COMPUTED, at)


def utilization(con, *, start: datetime, end: datetime, by: str = "model", policy=None,
                now: datetime | None = None, materialized: bool = True) -> Facts:
    """Allocation % and active % of installed capacity per hour of [start, end), like
    queries.utilization_report. Materialized for ``by="model"`` (the pipeline's grain, rows as
    stored) and ``"cluster"`` / ``"fleet"`` (those rows summed over models by the computation's own
    exact rule) when every day of the range is fresh as for usage; ``"kind"`` is computed
    (``materialized=False``: always computed)."""
    at = now or data_now(con)
    if (materialized and by in ("model", "cluster", "fleet") and _usage_fresh(con, "utilization_hourly", start, end, at)
            and _policy_in_force(con, policy)):
        if by == "model":
            rows = con.execute(_sql("utilization_by_model"), {"start": start, "end": end}).fetchall()
            return Facts(Rows(rows, UTILIZATION_COLUMNS), MATERIALIZED, at)
        keys = "cluster, " if by == "cluster" else ""
        rows = con.execute(_sql("utilization_sums", keys=keys), {"start": start, "end": end}).fetchall()
        # the computation's columns: (cluster,) hour, figures
        columns = {c: t for c, t in UTILIZATION_COLUMNS.items() if c != "model" and (by == "cluster" or c != "cluster")}
        return Facts(Rows(rows, columns), MATERIALIZED, at)
    from gpuledger.analytics import queries  # lazy: the fast path imports no polars (above)

    frame = queries.utilization_report(con, start=start, end=end, by=by, policy=_policy(policy), now=at)
    return Facts(frame, COMPUTED, at)


def funding(con, *, policy, now: datetime | None = None) -> Facts:
    """Per job not ended at ``now``: funded or not, why not, protected until (queries.funding_report).
    Computed from the jobs (no table materializes it) and the budgets' remaining as :func:`budget`
    answers it: the snapshot when fresh, so a cycle at Kueue's large shape does not recompute every
    allocation of the month (issue 41)."""
    at = now or data_now(con)
    from gpuledger.analytics import queries  # lazy: the fast path imports no polars (above)

    spent = budget(con, policy=policy, as_of=at).table  # Rows or a polars DataFrame: columns by name
    remaining = {node: left for node, own, left in zip(spent["node"], spent["budget_own"],
                                                        spent["remaining_gpu_hours"], strict=True) if own}
    return Facts(queries.funding_report(con, policy=_policy(policy), now=at, remaining=remaining), COMPUTED, at)


def findings(con, *, policy, now: datetime | None = None, include_exempt: bool = False,
             exact_moment: bool = False, materialized: bool = True) -> Facts:
    """The squatting findings open at ``now``.

    Materialized: the squatting pipeline's latest evaluation at or before ``now``, when it is
    recent (within half the policy's sustained-idle window), gives its episodes as they were then
    (squatting_findings rows, each with the finding and severity it had at that evaluation;
    ``Facts.as_of`` is the evaluation's time) — never a later one. With ``include_exempt``
    (enforcement's input) the exempt jobs' findings of that same evaluation are added
    (squatting_exempt_findings, migration 018; ``exempt`` false / true and ``exempt_reason`` as in
    the report), or the answer is computed when that evaluation stored none (recorded before 018).
    Otherwise, and for squatting rules other than the stored config's, computed at ``now``:
    queries.squatters_report rows.

    ``exact_moment`` (enforcement): only an evaluation at ``now`` itself is fresh. A finding even
    minutes old could preempt a job that has been busy since; at the same moment the stored
    findings are the computed ones (tests/pipelines/test_assets.py), so the plan is the same.

    ``materialized=False``: always computed (the squatting pipeline, which stores the evaluation).

    Without ``now``, whether the latest evaluation is still recent is asked of the rows near it
    (clock.data_now_within) before the data's now itself is read: the same answer, without reading
    the newest sample of every row group (issue 41)."""
    at, wall = now, utc_now()
    minutes = _sustained_minutes(con, policy) if materialized else None
    if minutes is not None:
        window = timedelta(0) if exact_moment else timedelta(minutes=minutes / 2)
        if at is None:
            # the latest evaluation not after the wall clock is the latest not after the data's
            # now (never after the wall clock) when the data's now is at or after it
            evaluated = _latest_evaluation(con, wall)
            if evaluated is None or not data_now_within(con, evaluated, evaluated + window, wall=wall):
                at = data_now(con, wall=wall)
        if at is not None:
            evaluated = _latest_evaluation(con, at)
            evaluated = evaluated if evaluated is not None and at - evaluated <= window else None
        found = None if evaluated is None else _stored_findings(con, evaluated, include_exempt)
        if found is not None:
            return found
    return _computed_findings(con, policy, at or data_now(con, wall=wall), include_exempt)


def _latest_evaluation(con, at: datetime) -> datetime | None:
    return con.execute(_sql("latest_evaluation"), {"now": at}).fetchall()[0][0]


def _stored_findings(con, evaluated: datetime, include_exempt: bool) -> Facts | None:
    """Evaluation ``evaluated``'s findings as stored, or None when its exempt ones, asked for,
    were not stored (recorded before migration 018)."""
    episodes = _sql("episodes_as_of")
    if not include_exempt:
        return Facts(Rows.from_cursor(con.execute(episodes, {"at": evaluated})), MATERIALIZED, evaluated)
    if _exempt_stored(con, evaluated):
        query = _sql("findings_with_exempt_as_of", episodes=episodes)
        return Facts(Rows.from_cursor(con.execute(query, {"at": evaluated})), MATERIALIZED, evaluated)
    return None


def _computed_findings(con, policy, at: datetime, include_exempt: bool) -> Facts:
    from gpuledger.analytics import queries  # lazy: the fast path imports no polars (above)

    return Facts(queries.squatters_report(con, policy=_policy(policy), now=at, include_exempt=include_exempt),
                 COMPUTED, at)


def squatters_table(found: Facts):
    """Findings (``facts.findings``) as queries.squatters_report gives them: its columns in its
    order, ``exempt`` false where the stored rows carry no flag (the CLI's `report squatters`)."""
    if isinstance(found.table, Rows):
        return found.table.project(SQUATTERS_COLUMNS, fill={"exempt": False})
    return found.table


def _exempt_stored(con, evaluated: datetime) -> bool:
    """Whether evaluation ``evaluated`` stored its exempt findings (every one from migration 018 on;
    before it, only the computed answer knows them)."""
    return bool(con.execute(_sql("exempt_evaluation"), {"at": evaluated}).fetchall())


def _sustained_minutes(con, policy) -> float | None:
    """The squatting rules' sustained-idle minutes when the stored findings can answer for
    ``policy`` (its squatting rules are the stored config's), else None. A callable policy (the
    CLI's stored config) is read from the stored setting: no config validation on the fast path."""
    if policy is None or callable(policy):
        stored = stored_config(con)
        return None if stored is None else stored.setting("policy.squatting.sustained_minutes")
    return policy.squatting.sustained_minutes if _policy_in_force(con, policy, "squatting") else None


def finding_episodes(con, *, at: datetime):
    """Every squatting episode first seen at or before ``at`` with its lifecycle (polars; the
    alerts' digests)."""
    return con.sql(_sql("episodes_since"), params={"at": at}).pl()


def waits(con, *, start: datetime, end: datetime, now: datetime | None = None, by: str = "project",
          every: str | None = None, projects: tuple[str, ...] = ()) -> Facts:
    """Wait times of the jobs submitted in [start, end) as of ``now`` (queries.waits_report:
    seconds, per ``by``; ``by="job"``: every waiting period with its cause). Always computed: no
    table materializes it (a week of a 1,024-GPU cluster's jobs is one scan of ``jobs``)."""
    from gpuledger.analytics import queries  # lazy: the fast path imports no polars (above)

    at = now or waits_now(con)
    return Facts(queries.waits_report(con, start=start, end=end, now=at, by=by, every=every, projects=projects),
                 COMPUTED, at)


def carbon(con, *, start: datetime, end: datetime, policy, now: datetime | None = None) -> Facts:
    """Per project over [start, end): GPU-hours, GPU and facility kWh, kgCO2e and the GPU-hours
    whose emissions are unknown (queries.carbon_report). Always computed: no table materializes it."""
    from gpuledger.analytics import queries  # lazy: the fast path imports no polars (above)

    at = now or data_now(con)
    return Facts(queries.carbon_report(con, start=start, end=end, now=at, policy=_policy(policy)), COMPUTED, at)


def chargeback(con, period: str, *, policy, level: str = "project", now: datetime | None = None) -> Facts:
    """Chargeback lines of ``period`` (``2026-10``, ``2026-W41``, ``A..B``; queries.chargeback_report)
    with ``policy``: not a statement (a closed month's stored lines are the ledger's:
    gpuledger.reports.statement.build). Always computed."""
    from gpuledger.analytics import queries  # lazy: the fast path imports no polars (above)

    at = now or data_now(con)
    return Facts(queries.chargeback_report(con, period, level=level, policy=_policy(policy), now=at), COMPUTED, at)


def in_tree_order(con, lines):
    """Node-level lines (a ``node`` and a ``line_kind`` column, e.g. chargeback's) with each line
    kind's nodes in the org tree's depth-first order (queries.tree_position: each parent above its
    children, as `report budget` lists them), not by name, where parents and leaves interleave."""
    import polars as pl  # lazy: the fast path imports no polars (above)

    from gpuledger.analytics import queries  # lazy: as above

    pos = queries.tree_position(con.sql("SELECT * FROM org_nodes").pl())
    return (lines.with_row_index("_i").join(pos, on="node", how="left")
            .with_columns(_kind=pl.col("_i").min().over("line_kind"))
            .sort("_kind", "_tree_pos", "_i", nulls_last=True).drop("_i", "_kind", "_tree_pos"))


def warehouse_summary(con) -> dict[str, object]:
    """What the warehouse holds as of the data's now: devices, jobs, allocated GPU-hours, samples,
    quarantine (queries.warehouse_summary)."""
    from gpuledger.analytics import queries  # lazy: the fast path imports no polars (above)

    return queries.warehouse_summary(con)
