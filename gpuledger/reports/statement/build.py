"""A month's finance statement as data: the ledger's project × GPU model × tier lines with usage
beside them, grouped by business unit, GPU-hours by Slurm partition and by host, the month over
month history and the reconciliation (Σ charges + idle + corrections = Σ capacity × price).

Units: GPU-hours (one whole GPU for one hour), money in exact decimals (cents, rounded half-up by
the ledger; nothing here rounds money again — sums of cent amounts are exact).

A *business unit* is a child of the org tree's root (the level finance bills); a project's unit is
its ancestor at that level. Idle capacity and the memo lines (over-allocated, capacity unknown)
belong to the whole org, not to a unit.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from decimal import Decimal

import duckdb
import polars as pl

from gpuledger.analytics.carbon import carbon_sums, known_sum, with_carbon
from gpuledger.analytics.carbon_inputs import site_inputs
from gpuledger.analytics.chargeback import chargeback_totals, statement_notes
from gpuledger.analytics.load import load_tables
from gpuledger.analytics.queries import attribution_by_day, data_now, job_waits_report
from gpuledger.analytics.tree import Tree
from gpuledger.analytics.waits import wait_summary
from gpuledger.config_store import policy_in_force, stored_config, stored_config_in_force
from gpuledger.errors import UsageError
from gpuledger.ledger.config_versions import rate_card_version
from gpuledger.ledger.periods import (
    NO_DATA_NOTE,
    ROUNDED_FALLBACK_NOTE,
    PeriodState,
    exact_stored,
    is_closed,
    no_data,
    period_state,
    statement_lines,
    verify_period,
)
from gpuledger.reports.statement import frozen_parts
from gpuledger.rules.billing import BILLED_KINDS, CORRECTION_KINDS, MEMO_KINDS, billed_expr, billed_kind
from gpuledger.rules.billing import billed as is_billed
from gpuledger.rules.periods import month_bounds

ORG_LINES = "(org)"  # business_unit of idle and memo lines
UNASSIGNED = "(unassigned)"  # business_unit of a project not in the org tree
# a statement lists the billed lines, their corrections, then the memo lines
KIND_ORDER = {k: i for i, k in enumerate((*BILLED_KINDS, *CORRECTION_KINDS, *MEMO_KINDS))}
LINE_COLUMNS = ["period", "business_unit", "line_kind", "project", "gpu_model", "tier", "currency", "gpu_hours",
                "gpu_hours_active", "gpu_hours_unknown", "efficiency_ratio", "energy_kwh", "energy_kwh_facility", "kg_co2e",
                "gpu_hours_co2_unknown", "amount", "idle_amount_included", "billed", "revision",
                "correction_of", "revision_issued_at", "revision_issued_by", "revision_reason", "status", "provisional",
                "note"]
ENERGY_COLS = ["energy_kwh", "energy_kwh_facility", "kg_co2e", "gpu_hours_co2_unknown"]
HISTORY_MONTHS = 3  # this month and the two before it, where the inventory existed
HISTORY_SCHEMA = {"period": pl.String, "currency": pl.String, "line_kind": pl.String, "amount": pl.Decimal(38, 2),
                  "gpu_hours": pl.Float64}


@dataclass
class Reconciliation:
    """Per currency: what the statement adds up to and what the capacity costs."""

    currency: str
    charges: Decimal
    idle: Decimal
    corrections: Decimal
    total: Decimal
    capacity_gpu_hours: float | None
    capacity_amount: Decimal | None
    over_allocated: Decimal
    # why a difference is its pools' own: a month issued before pools were rounded first (set by
    # build_statement when the difference is exactly the sum of those pools' differences)
    explained_by_pools: str | None = None

    @property
    def difference(self) -> Decimal | None:
        if self.capacity_amount is None:
            return None
        return self.total - self.capacity_amount - self.over_allocated

    @property
    def reconciles(self) -> bool:
        return self.difference == Decimal("0.00")

    def sentence(self) -> str:
        c = self.currency
        left = f"charges {self.charges:,.2f} + idle {self.idle:,.2f}"
        if self.corrections:
            left += f" + corrections {self.corrections:,.2f}"
        if self.capacity_amount is None:
            return f"{c}: {left} = {self.total:,.2f}; capacity unknown, nothing to reconcile against"
        right = f"capacity {self.capacity_gpu_hours:,.3f} GPU-hours × price = {self.capacity_amount:,.2f}"
        if self.over_allocated:
            right += f" + over-allocated {self.over_allocated:,.2f}"
        verdict = "reconciles to the cent" if self.reconciles else f"DOES NOT reconcile: off by {self.difference:,.2f}"
        if not self.reconciles and self.explained_by_pools:
            verdict = f"differs by {self.difference:+,.2f}: {self.explained_by_pools}"
        return f"{c}: {left} = {self.total:,.2f}; {right}; {verdict}"


@dataclass
class PoolReconciliation:
    """Per GPU pool (currency, GPU model, tier): charges + idle + corrections of its lines against
    its capacity × price. The ledger rounds pool first (analytics/chargeback.py), so a pool's
    lines add up to its exact total rounded half-up: its capacity × price to the cent. Two cases
    can still differ, and the sentence says which: over-allocation (its memo line is rounded on
    its own) and a month issued before pools were rounded first (2026-12; issued lines never
    move, and a correction takes only its own delta)."""

    currency: str
    gpu_model: str
    tier: str
    billed: Decimal
    capacity_gpu_hours: float
    capacity_amount: Decimal
    over_allocated: Decimal
    capacity_unknown: Decimal = Decimal("0.00")  # charges of clusters without an inventory
    issued: bool = False  # the lines are a closed month's (frozen)

    @property
    def difference(self) -> Decimal:
        return self.billed - self.capacity_amount - self.over_allocated - self.capacity_unknown

    def sentence(self) -> str:
        right = f"capacity {self.capacity_gpu_hours:,.3f} GPU-hours × price = {self.capacity_amount:,.2f}"
        if self.over_allocated:
            right += f" + over-allocated {self.over_allocated:,.2f}"
        if self.capacity_unknown:
            right += f" + charges of clusters of unknown capacity {self.capacity_unknown:,.2f}"
        if not self.difference:
            verdict = "reconciles to the cent"
        elif self.over_allocated:
            verdict = (f"differs by {self.difference:+,.2f}: the over-allocated memo is rounded on its own (each "
                       "line within a cent)")
        elif self.issued:
            verdict = (f"differs by {self.difference:+,.2f} of rounding: issued before pools were rounded first, "
                       "and issued lines never move (each line within a cent)")
        else:
            verdict = f"DOES NOT reconcile: off by {self.difference:+,.2f}"
        return f"{self.currency} {self.gpu_model} / {self.tier}: billed {self.billed:,.2f}; {right}; {verdict}"


@dataclass
class Statement:
    period: str
    period_start: datetime
    period_end: datetime
    scope: str  # the org root's name, or the business unit / node of --node
    state: PeriodState  # closed / provisional / corrected: the one truth every file states
    config_version: int | None
    billed_through: datetime  # the data's end inside the month (the statement's one timestamp)
    lines: pl.DataFrame  # LINE_COLUMNS
    units: list[str]  # business units, tree order
    usage: pl.DataFrame  # project, model, tier, partition, host: allocated / active / unknown GPU-hours
    history: pl.DataFrame  # period, currency, line_kind (charge / idle / corrections), amount, gpu_hours
    # per job: GPU-hours, GPU kWh, facility kWh, kgCO2e, GPU-hours whose kgCO2e is unknown (NULL: unknown)
    job_energy: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=JOB_ENERGY_SCHEMA))
    energy_sites: list[str] = field(default_factory=list)  # each site's PUE and intensity, as stated
    reconciliation: list[Reconciliation] = field(default_factory=list)  # org scope only
    pools: list[PoolReconciliation] = field(default_factory=list)  # org scope only, per GPU pool
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    empty: bool = False  # no data for the month (periods.no_data): the statement says so
    # per project, the jobs submitted in the month: waits submit -> start in seconds (p50 / p90), as of
    # the statement's billed-through time; a closed month's as stored at its close (issue 38)
    waits: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=WAITS_SCHEMA))
    # a business unit's statement (for_unit): what the org it belongs to owes, per currency
    parent: str | None = None
    parent_totals: dict[str, Decimal] = field(default_factory=dict)

    @property
    def closed(self) -> bool:
        return self.state.closed

    @property
    def provisional(self) -> bool:
        return self.state.provisional

    @property
    def revision(self) -> int | None:
        return self.state.revision

    @property
    def status(self) -> str:
        """The state as a reader is told it, e.g. "closed, provisional (revision 0)"."""
        return self.state.text

    @property
    def status_sentence(self) -> str:
        return self.state.sentence(self.period_end)


    @property
    def sections(self) -> list[str]:
        """The business units, then lines of projects outside the tree (UNASSIGNED) and the org's
        own idle / memo lines (ORG_LINES) where there are any: every line belongs to one section."""
        present = set(self.lines["business_unit"].to_list())
        return [*self.units, *(s for s in (UNASSIGNED, ORG_LINES) if s in present)]

    def unit_lines(self, unit: str) -> pl.DataFrame:
        return self.lines.filter(pl.col("business_unit") == unit)

    @property
    def by_partition(self) -> pl.DataFrame:
        """GPU-hours per Slurm partition and GPU model (empty when no job names a partition)."""
        if not self.usage.height or self.usage["partition"].is_null().all():
            return pl.DataFrame()
        return _grouped_usage(self.usage, "partition", "(no partition)")

    @property
    def by_host(self) -> pl.DataFrame:
        """GPU-hours per host (node) and GPU model."""
        return _grouped_usage(self.usage, "host", "(no device record)") if self.usage.height else pl.DataFrame()

    def for_unit(self, unit: str) -> Statement:
        """This statement cut to one business unit: its lines and usage; no reconciliation (idle
        capacity is the org's) and no month-over-month history."""
        lines = self.unit_lines(unit)
        projects = set(lines["project"].drop_nulls().to_list())
        return Statement(
            period=self.period, period_start=self.period_start, period_end=self.period_end, scope=unit,
            state=self.state, config_version=self.config_version, billed_through=self.billed_through, lines=lines, units=[unit],
            usage=self.usage.filter(pl.col("project").is_in(list(projects))), history=self.history.clear(),
            job_energy=self.job_energy.filter(pl.col("project").is_in(list(projects))), energy_sites=self.energy_sites,
            waits=self.waits.filter(pl.col("project").is_in(list(projects))),
            notes=[self.status_sentence] + [n for n in self.notes if n.startswith("no data")],
            empty=self.empty, parent=self.scope, parent_totals=self.totals())

    def project_subtotals(self) -> pl.DataFrame:
        """Per project and currency of the billed lines: GPU-hours and amount (a unit's projects)."""
        billed = self.lines.filter(is_billed(self.lines) & pl.col("currency").is_not_null())
        return (billed.group_by("project", "currency").agg(pl.col("gpu_hours").sum().round(3), pl.col("amount").sum())
                .sort("currency", "amount", "project", descending=[False, True, False]))

    def unit_sentences(self) -> list[str]:
        """A business unit's statement tied out: per currency, what it owes, its share of the org's
        total, and that its projects' subtotals add up to it to the cent."""
        if self.parent is None:
            return []
        subtotals = self.project_subtotals()
        out = []
        for cur, amount in self.totals().items():
            org = self.parent_totals.get(cur)
            projects = subtotals.filter(pl.col("currency") == cur)
            summed = Decimal(projects["amount"].sum()) if projects.height else Decimal("0.00")
            share = f"{amount / org:.1%} of {self.parent}'s {org:,.2f} {cur}" if org else f"{self.parent} owes no {cur}"
            tie = ("reconciles to the cent" if summed == amount else f"DOES NOT reconcile: off by {summed - amount}")
            out.append(f"{self.scope} owes {amount:,.2f} {cur}: {share}; its {projects.height} project(s)' "
                       f"subtotals add up to {summed:,.2f} {cur} — {tie}")
        return out

    def totals(self, frame: pl.DataFrame | None = None) -> dict[str, Decimal]:
        """Σ amount of the billed lines per currency (what is owed)."""
        return owed(self.lines if frame is None else frame)


def owed(lines: pl.DataFrame) -> dict[str, Decimal]:
    """Σ amount of the billed lines per currency (what is owed), currencies in order."""
    billed = lines.filter(is_billed(lines) & pl.col("currency").is_not_null())
    return {c: Decimal(a) for c, a in billed.group_by("currency").agg(pl.col("amount").sum())
            .sort("currency").iter_rows()}


def business_units(org_nodes: pl.DataFrame) -> tuple[str, dict[str, str], list[str]]:
    """(root name, node -> its business unit, units in tree order). A root with no children is its
    own and only unit; several roots are each a unit."""
    tree = Tree.from_frame(org_nodes)
    roots = sorted(tree.roots)
    if len(roots) == 1 and tree.children[roots[0]]:
        root = roots[0]
        units = [n for n, depth in tree.walk() if depth == 1]
    else:
        root = roots[0] if len(roots) == 1 else "org"
        units = [n for n, depth in tree.walk() if depth == 0]
    unit_of = {}
    for node in tree.parent:
        chain = tree.ancestors(node)  # node .. root
        hit = next((n for n in chain if n in units), None)
        unit_of[node] = hit if hit is not None else ORG_LINES  # the root itself
    return root, unit_of, units


def subtree(org_nodes: pl.DataFrame, node: str) -> set[str]:
    tree = Tree.from_frame(org_nodes)
    return {n for n in tree.parent if node in tree.ancestors(n)}


USAGE_SCHEMA = {"project": pl.String, "model": pl.String, "tier": pl.String, "partition": pl.String,
                "host": pl.String, "mig_profile": pl.String, "gpu_hours_allocated": pl.Float64, "gpu_hours_active": pl.Float64,
                "gpu_hours_unknown": pl.Float64, "gpu_hours_time_sliced": pl.Float64,
                "gpu_hours_no_energy": pl.Float64, "gpu_hours_mig": pl.Float64, "energy_kwh": pl.Float64,
                "energy_kwh_gpu": pl.Float64, "energy_kwh_facility": pl.Float64, "kg_co2e": pl.Float64,
                "gpu_hours_co2_unknown": pl.Float64}
WAITS_SCHEMA = {"project": pl.String, "jobs": pl.Int64, "still_waiting": pl.Int64, "wait_p50_s": pl.Int64,
                "wait_p90_s": pl.Int64}


def project_waits(con: duckdb.DuckDBPyConnection, start: datetime, end: datetime, now: datetime) -> pl.DataFrame:
    """Per project: jobs submitted in [start, end) up to ``now``, how many still waited then, and
    their p50 / p90 wait (submit -> start; a job still waiting counts its wait so far) in whole
    seconds, half up (gpuledger report waits --by project: the same figures)."""
    if now <= start:
        return pl.DataFrame(schema=WAITS_SCHEMA)
    waits = wait_summary(job_waits_report(con, start=start, end=end, now=now), by="project")
    half_up = lambda c: (pl.col(c) + 0.5).floor().cast(pl.Int64)  # noqa: E731 - seconds, as the CLI rounds
    return waits.select("project", pl.col("jobs").cast(pl.Int64), "still_waiting", half_up("wait_p50_s"),
                        half_up("wait_p90_s")).cast(WAITS_SCHEMA)


JOB_ENERGY_SCHEMA = {"cluster": pl.String, "job_id": pl.String, "project": pl.String, "gpu_hours": pl.Float64,
                     "energy_kwh": pl.Float64, "energy_kwh_facility": pl.Float64, "kg_co2e": pl.Float64,
                     "gpu_hours_co2_unknown": pl.Float64}


def _usage(con, t, *, start: datetime, end: datetime, now: datetime, policy,
           spans: list[tuple[datetime, datetime]] | None = None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Per allocation piece's (project, model, tier, partition, host, MIG profile): allocated, active and
    unknown GPU-hours; of the unknown, those on time-sliced GPUs (``gpu_hours_time_sliced``);
    ``energy_kwh`` of the hours with a reading of their own and ``gpu_hours_no_energy`` for the
    others (not time-sliced; of them ``gpu_hours_mig`` on MIG slices). A time-sliced GPU's energy is split by allocation fraction and a MIG
    instance's is its GPU's split by compute slice: neither measures the holder, so showback's
    energy basis counts those hours as without a reading.

    Attributed a UTC day at a time (queries.attribution_by_day; ``spans``: other cuts of [start,
    end), for the tests), each day summed by the keys and the days' sums added: a month at once
    held ~50 KiB per GPU-day (12 GiB at 16,384 GPUs x 15 days, issue 41)."""
    jobs = t.jobs.select("cluster", "job_id", "project", "partition").unique(["cluster", "job_id"])
    hosts = t.gpus.select(pl.col("gpu_id").cast(pl.Int32), "host", "mig_profile")

    def day(attributed: pl.LazyFrame, lo: datetime, hi: datetime) -> tuple[pl.DataFrame, pl.DataFrame]:
        # facility kWh and kgCO2e from the GPUs' own energy (MIG share, shared GPUs by fraction), each
        # hour at its site's PUE and grid intensity (analytics/carbon.py); collected once, read twice
        used = with_carbon(attributed, *site_inputs(con, lo, hi)) \
            .with_columns(energy_kwh_gpu=pl.col("energy_kwh")).collect(engine="in-memory").lazy()
        alloc, sliced = pl.col("gpu_hours_allocated"), pl.col("gpu_hours_time_sliced").fill_null(0.0)
        own = (alloc - sliced).clip(lower_bound=0.0)
        reading = pl.col("energy_kwh").is_not_null() & ~pl.col("is_mig").fill_null(False)
        return (
            used.join(jobs, on=["cluster", "job_id"], how="left")
            .join(hosts, on="gpu_id", how="left")
            .with_columns(
                gpu_hours_time_sliced=sliced,
                gpu_hours_no_energy=pl.when(reading).then(0.0).otherwise(own),
                gpu_hours_mig=pl.when(pl.col("is_mig").fill_null(False)).then(own).otherwise(0.0),
                energy_kwh=pl.when(reading & (alloc > 0)).then(pl.col("energy_kwh") * own / alloc).otherwise(0.0))
            .group_by(*_USAGE_KEYS).agg(pl.col(*_USAGE_SUMS).sum(), *(known_sum(c) for c in _USAGE_KNOWN),
                                        pl.col("gpu_hours_co2_unknown").sum())
            # in-memory engine: the streaming one sums in a different order on every run (notes/tables.md)
            .collect(engine="in-memory")
        ), (
            used.join(jobs.select("cluster", "job_id", "project"), on=["cluster", "job_id"], how="left")
            .group_by(*_JOB_KEYS).agg(pl.col("gpu_hours_allocated").sum().alias("gpu_hours"), *carbon_sums())
            .collect(engine="in-memory")
        )

    days = attribution_by_day(con, t, start=start, end=end, now=now, policy=policy, reduce=day, spans=spans)
    usage = _add_days([u for u, _ in days], _USAGE_KEYS, [*_USAGE_SUMS, "gpu_hours_co2_unknown"], _USAGE_KNOWN)
    job_energy = _add_days([j for _, j in days], _JOB_KEYS, ["gpu_hours", "gpu_hours_co2_unknown"],
                           ("energy_kwh", "energy_kwh_facility", "kg_co2e"))  # carbon_sums' known ones
    return (usage.select(list(USAGE_SCHEMA)).cast(USAGE_SCHEMA),
            job_energy.select(list(JOB_ENERGY_SCHEMA)).cast(JOB_ENERGY_SCHEMA)
            .sort("project", "cluster", "job_id", nulls_last=True))


_USAGE_KEYS = ("project", "model", "tier", "partition", "host", "mig_profile")
_USAGE_SUMS = ("gpu_hours_allocated", "gpu_hours_active", "gpu_hours_unknown", "gpu_hours_time_sliced",
               "gpu_hours_no_energy", "gpu_hours_mig", "energy_kwh")
_USAGE_KNOWN = ("energy_kwh_gpu", "energy_kwh_facility", "kg_co2e")  # NULL where no hour knows it
_JOB_KEYS = ("cluster", "job_id", "project")


def _add_days(frames: list[pl.DataFrame], keys, sums, known) -> pl.DataFrame:
    """The days' sums by ``keys`` added: ``sums`` plainly, ``known`` NULL where no day knows them."""
    if len(frames) == 1:
        return frames[0]
    return (pl.concat(frames).lazy().group_by(*keys).agg(pl.col(*sums).sum(), *(known_sum(c) for c in known))
            .collect(engine="in-memory"))


def _site_sentences(con, clusters: list[str]) -> list[str]:
    """What each site's energy figures rest on, for the reader: "sim: PUE 1.2, grid 0.35 kgCO2e/kWh"."""
    cfg = stored_config_in_force(con)
    out = []
    for name in clusters:
        site = cfg.clusters.get(name) if cfg is not None else None
        pue = f"PUE {site.pue:g}" if site is not None and site.pue is not None else "no PUE (facility kWh unknown)"
        grid = site.grid_intensity if site is not None else None
        intensity = ("no grid intensity (kgCO2e unknown)" if grid is None else
                     f"grid {grid.kg_co2e_per_kwh:g} kgCO2e/kWh" if grid.kg_co2e_per_kwh is not None else
                     f"grid intensity hourly from {grid.csv}")
        out.append(f"{name}: {pue}, {intensity}")
    return out


def _round_hours(frame: pl.DataFrame, cols: list[str]) -> pl.DataFrame:
    # GPU-hours to the microhour (3.6 ms): float sums of the same data in another order must not
    # make two regenerations differ
    # make two regenerations differ; + 0.0 turns a rounded -0.0 into 0.0 (no "-0.000000" printed)
    return frame.with_columns(pl.col(c).round(6) + 0.0 for c in cols if c in frame.columns)


def _grouped_usage(usage: pl.DataFrame, key: str, missing: str) -> pl.DataFrame:
    out = (usage.with_columns(pl.col(key).fill_null(missing))
           .group_by(key, pl.col("model").alias("gpu_model"))
           .agg(pl.col("gpu_hours_allocated").sum().alias("gpu_hours"),
                pl.col("gpu_hours_active").sum(), pl.col("gpu_hours_unknown").sum())
           .with_columns(efficiency_ratio=pl.when(pl.col("gpu_hours") - pl.col("gpu_hours_unknown") > 1e-9)
                         .then(pl.col("gpu_hours_active") / (pl.col("gpu_hours") - pl.col("gpu_hours_unknown")))
                         .otherwise(None)))
    return _round_hours(out, ["gpu_hours", "gpu_hours_active", "gpu_hours_unknown", "efficiency_ratio"]) \
        .sort(key, "gpu_model", nulls_last=True)


def _config_version(con, period: str, closed: bool) -> int | None:
    if closed:
        row = con.execute("SELECT config_version FROM statement_revisions WHERE period = ? "
                          "ORDER BY revision DESC LIMIT 1", [period]).fetchall()
        return row[0][0] if row else None
    stored = stored_config(con)
    return stored.version if stored else None


def _capacity(con, t, *, start: datetime, end: datetime, config_version: int | None, closed: bool,
              retire_grace: timedelta, by: tuple[str, ...] = ()) -> dict:
    """currency -> (capacity GPU-hours, Σ capacity × price) over [start, end), priced by the rate
    card the statement was priced with (a closed month: its latest revision's config version)."""
    rate_card = t.rate_card
    if closed and config_version is not None:
        rate_card = rate_card_version(con, config_version).lazy()
    totals = chargeback_totals(t.gpus, rate_card, start=start, end=end, retire_grace=retire_grace, by=by).collect()
    # GPU-hours to the micro-hour: a float sum's last digit follows the order the parallel sum
    # took, and a file written twice must not differ in it (issue 36)
    totals = totals.with_columns(pl.col("gpu_hours_capacity").round(6))
    if by:  # (currency, *by) -> (GPU-hours, amount)
        return {tuple(r[:-2]): (r[-2], Decimal(r[-1])) for r in totals.select(
            "currency", *by, "gpu_hours_capacity", "capacity_amount").iter_rows()}
    return {c: (h, Decimal(a)) for c, h, a in totals.select("currency", "gpu_hours_capacity", "capacity_amount")
            .iter_rows()}


def _history(con, period: str, start: datetime, policy, first_seen: datetime | None,
             current: pl.DataFrame) -> pl.DataFrame:
    """Charge, idle and correction amounts and GPU-hours per month for this month and the two
    before it (months before the first device was seen are left out). ``current``: this month's
    statement lines, as the statement has them (not read again, and as of the statement's now)."""
    months = []
    moment = start
    for _ in range(HISTORY_MONTHS):
        months.append(f"{moment:%Y-%m}")
        moment = (moment - timedelta(days=1)).replace(day=1)
    rows = []
    for month in reversed(months):
        _, m_end = month_bounds(month)
        if month != period and (first_seen is None or first_seen >= m_end):
            continue
        lines = current if month == period else statement_lines(con, month, level="project", policy=policy)
        billed = lines.filter(is_billed(lines) & pl.col("currency").is_not_null())
        billed = billed.with_columns(line_kind=pl.when(pl.col("line_kind").is_in(["credit", "debit"]))
                                     .then(pl.lit("corrections")).otherwise(pl.col("line_kind")))
        agg = billed.group_by("currency", "line_kind").agg(pl.col("amount").sum(), pl.col("gpu_hours").sum())
        rows.append(agg.with_columns(period=pl.lit(month)))
    if not rows:
        return pl.DataFrame(schema=HISTORY_SCHEMA)
    out = pl.concat([r.select(list(HISTORY_SCHEMA)) for r in rows], how="vertical_relaxed")
    return _round_hours(out, ["gpu_hours"]).sort("period", "currency", "line_kind")


def revision_columns(state) -> dict[str, pl.Expr]:
    """revision_issued_at / _by / _reason of each line, from its ``revision`` (null: computed, not issued)."""
    issued = {r.revision: r for r in state.revisions}

    def pick(attr: str, dtype):
        values = {k: getattr(r, attr) for k, r in issued.items()}
        if not values:
            return pl.lit(None, dtype=dtype)
        return pl.col("revision").replace_strict(values, default=None, return_dtype=dtype)

    return {"revision_issued_at": pick("issued_at", pl.Datetime("us")), "revision_issued_by": pick("issued_by", pl.String),
            "revision_reason": pick("reason", pl.String)}


def sort_lines(frame: pl.DataFrame) -> pl.DataFrame:
    """A statement's lines in its one order (kind, business unit, project, model, tier, ...), LINE_COLUMNS."""
    return (frame.with_columns(_rank=pl.col("line_kind").replace_strict(KIND_ORDER, default=99, return_dtype=pl.Int32))
            .sort("_rank", "business_unit", "project", "gpu_model", "tier", "currency", "revision", "note",
                  nulls_last=True).select(LINE_COLUMNS))


def build_statement(
    con: duckdb.DuckDBPyConnection, period: str, *, node: str | None = None, policy=None,
    now: datetime | None = None, lines: pl.DataFrame | None = None, history: bool = True,
) -> Statement:
    """The statement of ``period`` (YYYY-MM) for the whole org, or for ``node`` and its subtree.

    A closed month is read back as it was stored at its close or latest correction
    (``freeze_statement``): its lines, usage, energy, business units, capacity, history and
    notes, never recomputed, so its files stay byte-identical whatever config or inventory is
    loaded later. Otherwise (an open month, or one closed before migration 028): lines come from
    ``ledger.periods.statement_lines`` (a closed month: its frozen issued lines and corrections);
    active GPU-hours and efficiency are computed from the activity data beside them (they are
    not billed). ``now`` is the data's "now" for an open month (default: the newest data).
    ``lines``: that month's statement_lines at ``now``, when the caller has them (the pipeline);
    ``history=False`` leaves the month-over-month history empty (the dashboards' view has none).
    """
    month_bounds(period)  # a usage error naming the form for anything but YYYY-MM
    parts = frozen_parts.latest(con, period) if is_closed(con, period) else None
    if parts is not None:
        st, org_nodes, sites = _thawed(con, period, *parts)
    else:
        st, org_nodes, sites = _computed(con, period, policy=policy, now=now, lines=lines, history=history)
    if not history:
        st.history = pl.DataFrame(schema=HISTORY_SCHEMA)
    return st if node is None else _cut_to_node(st, node, org_nodes, sites)


def freeze_statement(con: duckdb.DuckDBPyConnection, period: str, *, now: datetime | None = None) -> None:
    """Store closed ``period``'s whole-org statement as of its latest revision (migration 028):
    computed once, here, from its issued lines and the data and config of this moment (``now``:
    the data's "now" its lines were computed at). Called in the transaction that issues the
    revision (reports.statement.closing), so a revision and its statement are stored together."""
    st, org_nodes, sites = _computed(con, period, policy=None, now=now, lines=None, history=True)
    facts = {
        "scope": st.scope, "units": st.units, "config_version": st.config_version,
        "billed_through": st.billed_through.isoformat(), "notes": st.notes, "warnings": st.warnings,
        "empty": st.empty, "sites": sites,
        "capacity": [[c, h, str(a)] for c, (h, a) in sorted(_capacity_of(st.reconciliation).items())],
        "pools": [[p.currency, p.gpu_model, p.tier, p.capacity_gpu_hours, str(p.capacity_amount)] for p in st.pools],
        # the month's waits per project (whole seconds) as of its close: a later import of its
        # jobs moves no closed statement (issue 38)
        "waits": [list(r) for r in st.waits.rows()],
    }
    frames = {"lines": st.lines, "usage": st.usage, "job_energy": st.job_energy, "history": st.history,
              "org_nodes": org_nodes}
    frozen_parts.store(con, period, st.state.revision, facts, frames)


def _capacity_of(reconciliation: list[Reconciliation]) -> dict[str, tuple[float, Decimal]]:
    return {r.currency: (r.capacity_gpu_hours, r.capacity_amount) for r in reconciliation
            if r.capacity_amount is not None}


def _thawed(con, period: str, facts: dict, frames: dict[str, pl.DataFrame]) -> tuple[Statement, pl.DataFrame, dict]:
    """A closed month's statement from its stored parts (``freeze_statement``); its issued lines
    are checked against their checksum as on every read."""
    verify_period(con, period)
    start, end = month_bounds(period)
    st = Statement(
        period=period, period_start=start, period_end=end, scope=facts["scope"], state=period_state(con, period),
        config_version=facts["config_version"], billed_through=datetime.fromisoformat(facts["billed_through"]),
        lines=frames["lines"], units=facts["units"], usage=frames["usage"], history=frames["history"],
        job_energy=frames["job_energy"], energy_sites=[facts["sites"][c] for c in sorted(facts["sites"])],
        notes=facts["notes"], warnings=facts["warnings"], empty=facts["empty"],
        # stored from issue 38 on; a month stored before shows no waits rather than today's
        waits=pl.DataFrame(facts.get("waits", []), schema=WAITS_SCHEMA, orient="row"))
    capacity = {c: (h, Decimal(a)) for c, h, a in facts["capacity"]}
    pools = {(c, m, t): (h, Decimal(a)) for c, m, t, h, a in facts["pools"]}
    st.reconciliation, st.pools = _reconciled(st.lines, capacity, pools, issued=True)
    return st, frames["org_nodes"], facts["sites"]


def _cut_to_node(st: Statement, node: str, org_nodes: pl.DataFrame, sites: dict[str, str]) -> Statement:
    """The whole-org statement ``st`` cut to ``node``'s subtree: its projects' lines with the node
    as their business unit, their usage and energy, no reconciliation (idle capacity is the
    org's); history and notes as the org's."""
    names = set(org_nodes["node"].to_list())
    if node not in names:
        raise UsageError(f"--node {node!r}: not a node of the org tree; choose one of {', '.join(sorted(names))}")
    mine = pl.col("project").is_in(list(subtree(org_nodes, node)))
    job_energy = st.job_energy.filter(mine).with_columns(business_unit=pl.lit(node))
    return replace(st, scope=node, units=[node],
                   lines=sort_lines(st.lines.filter(mine).with_columns(business_unit=pl.lit(node))),
                   usage=st.usage.filter(mine), job_energy=job_energy, reconciliation=[], pools=[],
                   waits=st.waits.filter(mine),
                   energy_sites=[sites[c] for c in sorted(set(job_energy["cluster"].drop_nulls().to_list()))])


def _computed(con, period: str, *, policy, now: datetime | None, lines: pl.DataFrame | None,
              history: bool) -> tuple[Statement, pl.DataFrame, dict[str, str]]:
    """The whole org's statement computed from the lines, data and config (with the org tree and
    each site's sentence by cluster, to cut it to a node)."""
    start, end = month_bounds(period)
    policy = policy_in_force(con, policy)
    now = now or data_now(con)
    closed = is_closed(con, period)
    if lines is None:
        lines = statement_lines(con, period, level="project", policy=policy, now=now)
    t = load_tables(con, start=start, end=end, samples=False)
    org_nodes = t.org_nodes.collect()
    root, unit_of, units = business_units(org_nodes)
    billed_through = lines["billed_through"].max() if lines.height else min(end, now)
    usage_end = min(end, billed_through or end)
    usage, job_energy = (_usage(con, t, start=start, end=usage_end, now=min(now, usage_end), policy=policy)
                         if usage_end > start else (pl.DataFrame(schema=USAGE_SCHEMA),
                                                    pl.DataFrame(schema=JOB_ENERGY_SCHEMA)))
    # efficiency over the GPU-hours whose activity is known (hours without samples are neither
    # active nor idle: counting them as 0 % would blame a job for a scrape gap)
    per_line = usage.group_by("project", "model", "tier").agg(
        pl.col("gpu_hours_active").sum(), pl.col("gpu_hours_unknown").sum(),
        (pl.col("gpu_hours_allocated") - pl.col("gpu_hours_unknown")).sum().alias("_alloc"),
        known_sum("energy_kwh_gpu").alias("energy_kwh"), known_sum("energy_kwh_facility"), known_sum("kg_co2e"),
        pl.col("gpu_hours_co2_unknown").sum())
    special = {"(idle)", "(over-allocated)", "(capacity unknown)"}
    unit_expr = (pl.when(pl.col("project").is_in(list(special)) | pl.col("project").is_null()).then(pl.lit(ORG_LINES))
                 .otherwise(pl.col("project").replace_strict(unit_of, default=UNASSIGNED, return_dtype=pl.String)))
    joined = (
        lines.join(per_line, left_on=["project", "gpu_model", "tier"], right_on=["project", "model", "tier"],
                   how="left", nulls_equal=True)
        .with_columns(
            business_unit=unit_expr,
            gpu_hours_active=pl.when(pl.col("line_kind") == "charge").then(pl.col("gpu_hours_active")),
            gpu_hours_unknown=pl.when(pl.col("line_kind") == "charge").then(pl.col("gpu_hours_unknown")),
            efficiency_ratio=pl.when((pl.col("line_kind") == "charge") & (pl.col("_alloc") > 0))
            .then(pl.col("gpu_hours_active") / pl.col("_alloc")),
            # energy beside the charge it belongs to: NULL = unknown (no reading, or the site has
            # no PUE / intensity), never 0
            **{c: pl.when(pl.col("line_kind") == "charge").then(pl.col(c))
               for c in ("energy_kwh", "energy_kwh_facility", "kg_co2e", "gpu_hours_co2_unknown")},
        )
    )
    out = _round_hours(joined, ["gpu_hours", "gpu_hours_active", "gpu_hours_unknown", "efficiency_ratio", *ENERGY_COLS])
    state = period_state(con, period, lines)
    # every line states the statement's state (a line frozen at a provisional close says so too), and
    # who issued its revision, when and why (a correction's reason travels with its lines)
    out = sort_lines(out.with_columns(status=pl.lit(state.token), provisional=pl.lit(state.provisional),
                                      **revision_columns(state)))
    version = _config_version(con, period, closed)
    st = Statement(
        period=period, period_start=start, period_end=end, scope=root, state=state,
        config_version=version, billed_through=billed_through or end, lines=out,
        units=units, usage=usage, job_energy=_round_hours(job_energy.with_columns(
            business_unit=pl.col("project").replace_strict(unit_of, default=UNASSIGNED, return_dtype=pl.String)),
            ["gpu_hours", *ENERGY_COLS]),
        history=_history(con, period, start, policy, t.gpus.select(pl.col("first_seen").min()).collect().item(), lines)
        if history else pl.DataFrame(schema=HISTORY_SCHEMA),
    )
    st.waits = project_waits(con, start, end, min(end, now, st.billed_through))
    clusters = sorted(set(job_energy["cluster"].drop_nulls().to_list()))
    sites = dict(zip(clusters, _site_sentences(con, clusters), strict=True))
    st.energy_sites = list(sites.values())
    notes, st.warnings = statement_notes(lines)
    # the state's sentence replaces chargeback's provisional note (which says lines change: not
    # so once closed)
    st.notes = [st.status_sentence] + [n for n in notes if not n.startswith("provisional")]
    if closed and not exact_stored(con, period):
        st.notes.append(ROUNDED_FALLBACK_NOTE.format(period=period))
    st.empty = no_data(con, period, lines)
    if st.empty:
        st.notes.insert(0, NO_DATA_NOTE.format(period=period))
    cap_end, grace = min(end, st.billed_through), timedelta(hours=policy.chargeback.retire_after_hours)
    capacity = _capacity(con, t, start=start, end=cap_end, config_version=version, closed=closed, retire_grace=grace)
    pools = _capacity(con, t, start=start, end=cap_end, config_version=version, closed=closed, retire_grace=grace,
                      by=("model", "tier"))
    st.reconciliation, st.pools = _reconciled(out, capacity, pools, issued=closed)
    return st, org_nodes, sites


def _reconciled(lines: pl.DataFrame, capacity: dict, pools: dict, *,
                issued: bool) -> tuple[list[Reconciliation], list[PoolReconciliation]]:
    """Per currency and per pool: the lines against capacity × price; a closed month's currency
    whose difference is its issued pools' rounding says so."""
    reconciliation = _reconcile(lines, capacity)
    pool_recs = _reconcile_pools(lines, pools, issued=issued)
    if issued:
        for rec in reconciliation:
            mine = [p for p in pool_recs if p.currency == rec.currency and p.difference]
            if rec.difference and mine and not any(p.over_allocated for p in mine) \
                    and sum(p.difference for p in mine) == rec.difference:
                rec.explained_by_pools = ("the sum of its pools' rounding, issued before pools were rounded "
                                          "first; issued lines never move (each line within a cent)")
    return reconciliation, pool_recs


def _reconcile_pools(lines: pl.DataFrame, capacity: dict[tuple, tuple[float, Decimal]], *,
                     issued: bool = False) -> list[PoolReconciliation]:
    kind = billed_kind()
    money = lines.filter(pl.col("currency").is_not_null() & pl.col("gpu_model").is_not_null())
    sums = {(c, m, t): (Decimal(b or 0), Decimal(o or 0), Decimal(u or 0)) for c, m, t, b, o, u in money.group_by(
        "currency", "gpu_model", "tier").agg(
        pl.col("amount").filter(billed_expr()).sum().alias("billed"),
        pl.col("amount").filter(kind == "over-allocated").sum().alias("over"),
        pl.col("amount").filter(kind == "capacity-unknown").sum().alias("unknown")).iter_rows()}
    cent = Decimal("0.01")
    out = []
    for key in sorted(set(sums) | set(capacity)):
        billed, over, unknown = sums.get(key, (Decimal("0.00"),) * 3)
        hours, amount = capacity.get(key, (0.0, Decimal("0.00")))
        out.append(PoolReconciliation(*key, billed=billed.quantize(cent) + 0, capacity_gpu_hours=hours,
                                      capacity_amount=amount, over_allocated=over.quantize(cent) + 0,
                                      capacity_unknown=unknown.quantize(cent) + 0, issued=issued))
    return out


def _reconcile(lines: pl.DataFrame, capacity: dict[str, tuple[float, Decimal]]) -> list[Reconciliation]:
    zero = Decimal("0.00")
    out = []
    currencies = sorted(set(lines["currency"].drop_nulls().to_list()) | set(capacity))
    for c in currencies:
        mine = lines.filter(pl.col("currency") == c)

        def total(kinds, frame=mine):
            return Decimal(frame.filter(pl.col("line_kind").is_in(kinds))["amount"].sum() or 0).quantize(zero)

        charges, idle = total(["charge"]), total(["idle"])
        corrections = total(["credit", "debit"])
        hours, amount = capacity.get(c, (None, None))
        out.append(Reconciliation(currency=c, charges=charges, idle=idle, corrections=corrections,
                                  total=charges + idle + corrections, capacity_gpu_hours=hours,
                                  capacity_amount=amount, over_allocated=total(["over-allocated"])))
    return out
