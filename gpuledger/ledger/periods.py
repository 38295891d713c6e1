"""Closed periods: a month's chargeback statement, frozen once issued, changed only by corrections.

* :func:`close_period` stores the month's lines at every level (job, project, node) exactly as
  ``queries.chargeback_report`` produces them with the warehouse's current config, with a sha256
  over the lines, the config version, who and when (revision 0). A month that is not over cannot
  be closed; a closed one cannot be closed again.
* :func:`correct_period` re-computes the month with today's config and data and stores only the
  differences against what was issued (all revisions so far) as ``credit`` (amount < 0) and
  ``debit`` (amount > 0) lines of a new revision, with the reason, who and when. Issued lines never
  change, so what finance signed stays readable and the corrections explain every cent since.
* :func:`statement_lines` is the one place statements are read (CLI, finance reports,
  dashboards): a closed month's issued lines plus its corrections, or computed lines for an open
  period. Stored lines are checked against their checksum on every read.

Exact amounts: since 2026-12 every revision stores each line's unrounded amount in its
checksummed line (``amount_exact``; no migration: the lines are JSON), so a correction rounds only
its own delta. Months closed before then cannot gain them (their lines are checksummed as issued,
and today's data would not reproduce what was issued): their corrections are the difference of the
rounded lines, and their statement says so (ROUNDED_FALLBACK_NOTE).

What "the rates known when it was closed" means: a closed month keeps the lines priced by the
config version current at its close (recorded per revision). A later config load — even one with
an effective_from inside that month — changes open periods only; ``config load`` names the closed
months it would have re-priced, and a correction is how they are re-issued.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal

import duckdb
import polars as pl

from gpuledger.analytics.chargeback import IDLE, PAD, with_org_paths
from gpuledger.analytics.load import load_tables
from gpuledger.analytics.money import RAW, half_up_cents, round_tree
from gpuledger.analytics.queries import chargeback_report, chargeback_reports
from gpuledger.config import Config, Policy
from gpuledger.config_store import policy_in_force, stored_config
from gpuledger.errors import RunError, UsageError
from gpuledger.ledger import audit
from gpuledger.rules.billing import billed, billed_expr, billed_sql
from gpuledger.rules.periods import PeriodError, month_bounds, next_month  # noqa: F401  (callers of the ledger)
from gpuledger.sql import load_sql
from gpuledger.warehouse.db import transaction

LEVELS = ("job", "project", "node")
# Summed by corrections; every other column of a line is part of its identity.
QUANTITIES = ("gpu_hours", "amount", "idle_amount_included", "amount_exact", "idle_amount_exact")
EXACT = ("amount_exact", "idle_amount_exact")  # stored, never shown: what a correction's delta is taken from
# Describe a line rather than identify it (as of when it was computed, derived from its kind).
DESCRIPTIVE = ("billed_through", "provisional", "billed", "note", "revision", "correction_of")
_LINE_COLUMNS_MISMATCH = load_sql(__package__, "line_columns_mismatch.sql")


def closed_periods(con: duckdb.DuckDBPyConnection) -> dict[str, tuple[datetime, datetime]]:
    """Closed months → [start, end)."""
    rows = con.execute("SELECT period, period_start, period_end FROM statement_revisions "
                       "WHERE revision = 0 ORDER BY period").fetchall()
    return {p: (s, e) for p, s, e in rows}


def is_closed(con: duckdb.DuckDBPyConnection, period: str) -> bool:
    return bool(con.execute("SELECT count(*) FROM statement_revisions WHERE period = ? AND revision = 0",
                            [period]).fetchall()[0][0])


@dataclass(frozen=True)
class Revision:
    """One issued revision of a closed month (statement_revisions): 0 is the close, later ones its
    corrections."""

    revision: int
    issued_at: datetime
    issued_by: str
    reason: str | None

    @property
    def sentence(self) -> str:
        what = "closed" if self.revision == 0 else "corrected"
        why = f": {self.reason}" if self.reason else ""
        return f"{what} {self.issued_at:%Y-%m-%d %H:%M} UTC by {self.issued_by} (revision {self.revision}){why}"


@dataclass(frozen=True)
class PeriodState:
    """The one truth about a month's statement, written the same in the manifest, on every line,
    in the HTML, the XLSX and the terminal.

    ``closed``: frozen (revision 0 issued); ``revision``: the latest revision of a closed month
    (None when computed); ``provisional``: the lines bill capacity only up to the data's end (an
    open month whose data ends before the month does, or a month closed with ``--provisional``
    whose latest revision was still computed so); ``data_through``: where its data ends."""

    closed: bool
    provisional: bool
    revision: int | None
    data_through: datetime | None = None
    # a closed month's close (revision 0) and corrections: who issued each, when, and why
    revisions: tuple[Revision, ...] = ()

    @property
    def final(self) -> bool:
        """Closed with complete data: what finance signs (anything else is a draft or provisional)."""
        return self.closed and not self.provisional

    @property
    def mark(self) -> str | None:
        """The watermark of a statement that is not final: DRAFT (open) or PROVISIONAL."""
        if self.final:
            return None
        return "PROVISIONAL" if self.provisional else "DRAFT"

    @property
    def history(self) -> list[str]:
        """One sentence per revision, e.g. "corrected 2026-12-03 09:00 UTC by bob (revision 1): rate fix"."""
        return [r.sentence for r in self.revisions]

    @property
    def corrected(self) -> bool:
        return bool(self.closed and self.revision)

    @property
    def token(self) -> str:
        """open | provisional | closed | closed-provisional | corrected | corrected-provisional."""
        if not self.closed:
            return "provisional" if self.provisional else "open"
        base = "corrected" if self.corrected else "closed"
        return f"{base}-provisional" if self.provisional else base

    @property
    def text(self) -> str:
        """The state as a reader is told it, e.g. "closed, provisional (revision 0)"."""
        if not self.closed:
            return "provisional (open, not yet closed)" if self.provisional else "open (computed, not yet closed)"
        words = ["closed"] + (["corrected"] if self.corrected else []) + (["provisional"] if self.provisional else [])
        return f"{', '.join(words)} (revision {self.revision})"

    def sentence(self, period_end: datetime) -> str:
        """What the state means for the reader's figures, one line."""
        through = f"{self.data_through:%Y-%m-%d %H:%M} UTC" if self.data_through else "no data"
        if not self.closed:
            if self.provisional:
                return (f"{self.text}: data through {through} of a month ending {period_end:%Y-%m-%d %H:%M} UTC; "
                        "capacity (idle) is billed only up to the data, and the lines change as data arrives")
            return f"{self.text}: computed from the current config; lines change if the data or rates do"
        frozen = "frozen; only `gpuledger period correct` changes it"
        if self.provisional:
            return (f"{self.text}: closed before its data was complete (data through {through}); the lines are "
                    f"{frozen}, which is how the missing data gets billed")
        return f"{self.text}: {frozen}" + ("; the credit and debit lines are its corrections" if self.corrected else "")


def period_state(con: duckdb.DuckDBPyConnection, period: str, lines: pl.DataFrame | None = None) -> PeriodState:
    """The state of ``period``: a closed month's from its stored revisions (provisional as its
    latest revision's lines were computed; an empty provisional close says so in revision 0's
    reason); an open month's from its computed ``lines``."""
    if not is_closed(con, period):
        provisional = bool(lines is not None and lines.height and lines["provisional"].any())
        through = lines["billed_through"].max() if lines is not None and lines.height else None
        return PeriodState(closed=False, provisional=provisional, revision=None, data_through=through)
    issued = tuple(Revision(*r) for r in con.execute(
        "SELECT revision, issued_at, issued_by, reason FROM statement_revisions WHERE period = ? ORDER BY revision",
        [period]).fetchall())
    rows = con.execute(
        "SELECT r.revision, r.reason, r.data_now, "
        "bool_or(json_extract(l.line_json, '$.provisional')::BOOLEAN), max(json_extract_string(l.line_json, "
        "'$.billed_through')) FROM statement_revisions r LEFT JOIN statement_lines l ON l.period = r.period "
        "AND l.revision = r.revision AND l.level = 'project' WHERE r.period = ? GROUP BY ALL ORDER BY r.revision",
        [period]).fetchall()
    # revision 0 says in its reason whether it was closed provisionally (ends early, or no data);
    # a later correction recomputed with complete data clears it
    provisional, through = bool((rows[0][1] or "").startswith(PROVISIONAL_REASON)), None
    for revision, _, _, lines_provisional, lines_through in rows:
        if lines_through is not None:
            through = datetime.fromisoformat(lines_through)
        if revision > 0 and lines_provisional is not None:
            provisional = bool(lines_provisional)
    return PeriodState(closed=True, provisional=provisional, revision=rows[-1][0], data_through=through,
                       revisions=issued)


PROVISIONAL_REASON = "closed provisionally"
NO_DATA_NOTE = ("no data: no GPU sample and no job allocated in {period}; any idle lines are only the inventory's "
                "capacity")


def state_notes(con: duckdb.DuckDBPyConnection, period: str, lines: pl.DataFrame, notes: list[str]) -> list[str]:
    """``notes`` (chargeback.statement_notes) with the month's state stated first, as every
    statement file states it. The state's sentence says what chargeback's "provisional" note says
    (data through when, capacity billed to it, lines change as data arrives; or, closed, that they
    do not), so that note is not repeated under it. Periods other than a calendar month are never
    closed: their notes stand."""
    if not re.fullmatch(r"\d{4}-\d{2}", period.strip()):
        return notes
    _, end = month_bounds(period.strip())
    state = period_state(con, period.strip(), lines)
    kept = [n for n in notes if not n.startswith("provisional")]
    head = [f"period {period.strip()}: {state.sentence(end)}"]
    if no_data(con, period.strip(), lines):
        head.append(NO_DATA_NOTE.format(period=period.strip()))
    return head + kept


# --- serialising lines ------------------------------------------------------------------------

def _plain(value):
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, datetime | date):
        return value.isoformat()
    return value


def _line_json(row: dict) -> str:
    return json.dumps({k: _plain(v) for k, v in row.items()}, sort_keys=True, separators=(",", ":"))


_PLAIN_DTYPES = {name: getattr(pl, name) for name in (
    "String", "Boolean", "Float32", "Float64", "Int8", "Int16", "Int32", "Int64", "Int128", "UInt8", "UInt16",
    "UInt32", "UInt64", "Date", "Time", "Null")}


def _dtype(text: str) -> pl.DataType:
    """The polars dtype whose str() is ``text`` (the types chargeback lines use)."""
    if text in _PLAIN_DTYPES:
        return _PLAIN_DTYPES[text]
    if m := re.fullmatch(r"Decimal\(precision=(\d+), scale=(\d+)\)", text):
        return pl.Decimal(int(m[1]), int(m[2]))
    if m := re.fullmatch(r"Datetime\(time_unit='(ns|us|ms)', time_zone=(?:None|'([^']+)')\)", text):
        return pl.Datetime(m[1], m[2])
    raise RunError(f"statement column type {text!r}: not one gpuledger stores; the warehouse was altered "
                   "or written by a newer gpuledger (upgrade it)")


def _typed(value, dtype: pl.DataType):
    if value is None:
        return None
    if isinstance(dtype, pl.Decimal):
        return Decimal(value)
    if isinstance(dtype, pl.Datetime):
        return datetime.fromisoformat(value)
    if dtype == pl.Date:
        return date.fromisoformat(value)
    return value


def _checksum(encoded: list[tuple[str, str]]) -> str:
    return hashlib.sha256("\n".join(f"{level}\t{line}" for level, line in encoded).encode()).hexdigest()


def _store_revision(
    con, period: str, revision: int, frames: dict[str, pl.DataFrame], *, start: datetime, end: datetime,
    config_version: int | None, who: str, at: datetime, reason: str | None, data_now: datetime | None,
) -> str:
    encoded: list[tuple[str, str]] = []
    rows = []
    for level in LEVELS:
        frame = frames[level]
        for line_no, row in enumerate(frame.iter_rows(named=True)):
            text = _line_json(row)
            encoded.append((level, text))
            rows.append((period, revision, level, line_no, row["line_kind"], row.get("currency"),
                         row.get("amount"), text))
    sha = _checksum(encoded)
    columns = {level: [[c, str(t)] for c, t in frames[level].schema.items()] for level in LEVELS}
    con.execute(
        "INSERT INTO statement_revisions VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [period, revision, start, end, config_version, at, who, reason, data_now, len(rows), sha,
         json.dumps(columns)],
    )
    if rows:
        # One INSERT from a registered frame: executemany ran one statement per line (a 16,384-GPU
        # month's close sat there for minutes). The amount travels as its text, cast by DuckDB as
        # it cast the bound Decimal.
        lines = pl.DataFrame([(*r[:6], None if r[6] is None else str(r[6]), r[7]) for r in rows], orient="row",
                             schema={"period": pl.String, "revision": pl.Int32, "level": pl.String,
                                     "line_no": pl.Int32, "line_kind": pl.String, "currency": pl.String,
                                     "amount": pl.String, "line_json": pl.String})
        con.register("_statement_lines_in", lines.to_arrow())
        try:
            con.execute("INSERT INTO statement_lines SELECT period, revision, level, line_no, line_kind, currency, "
                        "CAST(amount AS DECIMAL(38, 2)), line_json FROM _statement_lines_in")
        finally:
            con.unregister("_statement_lines_in")
    return sha


def _stored(con, period: str, revision: int, sha: str, count: int) -> list[tuple[str, str]]:
    """A revision's stored (level, line_json) in line order, checked against its sha256 (an amount
    edited outside gpuledger is an error wherever the lines are read)."""
    stored = con.execute("SELECT level, line_json FROM statement_lines WHERE period = ? AND revision = ? "
                         "ORDER BY array_position(['job', 'project', 'node'], level), line_no",
                         [period, revision]).fetchall()
    if len(stored) != count or _checksum(stored) != sha:
        raise RunError(f"statement {period} revision {revision}: its lines do not match their sha256 "
                       f"{sha[:12]}; the warehouse was altered outside gpuledger (restore it from a backup)")
    # The columns beside the JSON (what SQL readers and `period list` read) must say what the
    # checksummed line says: every one of them, the currency as much as the amount.
    mismatch = con.execute(_LINE_COLUMNS_MISMATCH, {"period": period, "revision": revision}).fetchall()
    if mismatch:
        line_no, level, column = mismatch[0]
        raise RunError(f"statement {period} revision {revision}: the {column} of {level} line {line_no} differs from "
                       "its checksummed line; the warehouse was altered outside gpuledger (restore it from a backup)")
    return stored


ROUNDED_FALLBACK_NOTE = (
    "exact amounts: {period} was closed before gpuledger stored them (from 2026-12 every close and "
    "correction stores each line's unrounded amount beside its cents), so a correction of it is the "
    "difference of the rounded lines: re-pricing one pool can move a cent on another pool's lines (each "
    "line stays within a cent of exact; the total is exact). Its issued lines cannot gain exact amounts "
    "afterwards: they are checksummed as issued, and today's data would not be what was issued")


def exact_stored(con, period: str) -> bool:
    """Whether every revision of closed ``period`` stored its job lines' exact amounts (closed from
    2026-12 on), so a correction rounds only its own delta; otherwise corrections fall back to
    the difference of the rounded lines (ROUNDED_FALLBACK_NOTE)."""
    rows = con.execute("SELECT columns_json FROM statement_revisions WHERE period = ?", [period]).fetchall()
    return bool(rows) and all("amount_exact" in {c for c, _ in json.loads(text)["job"]} for (text,) in rows)


def verify_period(con, period: str) -> None:
    """Check every stored revision of ``period`` against its checksum (RunError naming it)."""
    for revision, sha, count in con.execute("SELECT revision, lines_sha256, line_count FROM statement_revisions "
                                            "WHERE period = ? ORDER BY revision", [period]).fetchall():
        _stored(con, period, revision, sha, count)


def _issued(con, period: str) -> dict[int, dict[str, pl.DataFrame]]:
    """Every stored revision of ``period``: revision → level → frame, each checked against its sha."""
    revisions = con.execute("SELECT revision, lines_sha256, columns_json, line_count FROM statement_revisions "
                            "WHERE period = ? ORDER BY revision", [period]).fetchall()
    out: dict[int, dict[str, pl.DataFrame]] = {}
    for revision, sha, columns_json, count in revisions:
        stored = _stored(con, period, revision, sha, count)
        columns = json.loads(columns_json)
        out[revision] = {}
        for level in LEVELS:
            schema = {c: _dtype(t) for c, t in columns[level]}
            decoded = [json.loads(text) for lvl, text in stored if lvl == level]
            out[revision][level] = pl.DataFrame(
                [{c: _typed(row.get(c), t) for c, t in schema.items()} for row in decoded],
                schema=schema, orient="row",
            )
    return out


# --- computing, closing, correcting -----------------------------------------------------------

def compute_lines(con, period: str, cfg: Config, *, now: datetime | None = None) -> dict[str, pl.DataFrame]:
    """The period's chargeback lines at every level with the warehouse's current reference data."""
    return chargeback_reports(con, period, levels=LEVELS, policy=cfg.policy, now=now, exact=True)


def _current_config(con) -> tuple[Config, int | None]:
    stored = stored_config(con)
    if stored is None:
        raise PeriodError("the warehouse holds no config: run `gpuledger config load --config FILE` before "
                          "issuing statements, so they say which rates priced them")
    return stored.config, stored.version


def close_period(
    con: duckdb.DuckDBPyConnection, period: str, *, by: str | None = None, now: datetime | None = None,
    data_now: datetime | None = None, allow_provisional: bool = False,
) -> dict:
    """Freeze ``period`` (YYYY-MM): store its lines (revision 0) with a checksum, audit it.

    ``now`` is the wall clock (UTC; injected by tests): a month that has not ended by then is
    refused. ``data_now`` is the data's "now" the lines are computed at (default: the newest data);
    when the data ends before the month does, the statement would be provisional (idle billed only
    up to the data) and is refused unless ``allow_provisional``.
    Returns period, revision, lines, sha256, config_version, totals (currency → amount).
    """
    start, end = month_bounds(period)
    now = now or audit.utc_now()
    if end > now:
        raise PeriodError(f"period {period} is not over (it ends {end:%Y-%m-%d %H:%M} UTC); close it after that")
    with transaction(con):
        if is_closed(con, period):
            raise PeriodError(_closed_message(con, period))
        cfg, version = _current_config(con)
        frames = compute_lines(con, period, cfg, now=data_now)
        project = frames["project"]
        why = None
        if no_data(con, period, project):
            why = (f"{PROVISIONAL_REASON}: no data for {period} (no GPU samples and no job allocated in the "
                   "month)")
            refusal = (f"period {period}: the warehouse holds no data for it (no GPU samples and no job allocated "
                       "in the month); closing it would freeze it empty before its data is ingested. Ingest it "
                       "first, or close it anyway with --provisional")
        elif "provisional" in project.columns and project["provisional"].any():
            through = project["billed_through"].max()
            why = f"{PROVISIONAL_REASON}: data through {through:%Y-%m-%d %H:%M} UTC"
            refusal = (f"period {period}: the warehouse's data ends at {through:%Y-%m-%d %H:%M} UTC, before the "
                       f"month does, so its statement is provisional; ingest the rest first (or close it anyway "
                       f"with --provisional)")
        if why and not allow_provisional:
            raise PeriodError(refusal)
        who = audit.actor(by)
        sha = _store_revision(con, period, 0, frames, start=start, end=end, config_version=version, who=who,
                              at=now, reason=why, data_now=data_now)
        totals = _totals(frames["project"])
        audit.record(con, who=who, action="period-close", subject=period,
                     detail=f"revision 0, config v{version}, sha256 {sha}, totals {totals}", at=now)
    return {"period": period, "revision": 0, "lines": sum(f.height for f in frames.values()), "sha256": sha,
            "config_version": version, "totals": totals, "provisional": why}


def no_data(con, period: str, lines: pl.DataFrame) -> bool:
    """No GPU sample and no charged job in the month (``lines``: its chargeback lines): nothing
    was measured, whatever capacity the inventory lists. Such a month closes only provisionally
    and its statement says "no data"."""
    kind = pl.coalesce("correction_of", "line_kind") if "correction_of" in lines.columns else pl.col("line_kind")
    if lines.height and lines.select((kind == "charge").any()).item():
        return False
    start, end = month_bounds(period)
    return not con.execute("SELECT EXISTS (SELECT 1 FROM gpu_samples WHERE ts >= ? AND ts < ?)", [start, end]
                           ).fetchall()[0][0]


def _closed_message(con, period: str) -> str:
    at, who = con.execute("SELECT issued_at, issued_by FROM statement_revisions WHERE period = ? AND revision = 0",
                          [period]).fetchall()[0]
    return (f"period {period} is already closed (issued {at:%Y-%m-%d %H:%M} UTC by {who}); to re-issue it "
            f"after a change run `gpuledger period correct {period} --reason \"...\"`")


def _totals(frame: pl.DataFrame) -> dict[str, str]:
    if frame.is_empty():
        return {}

    sums = frame.filter(billed(frame)).group_by("currency").agg(pl.col("amount").sum()).sort("currency")
    return {c: str(a) for c, a in sums.iter_rows()}


def _keys(frame: pl.DataFrame) -> list[str]:
    return [c for c in frame.columns if c not in QUANTITIES and c not in DESCRIPTIVE]


def _effective(frames: list[pl.DataFrame]) -> pl.DataFrame:
    """Issued lines plus corrections, summed per line identity (a correction counts towards the
    line kind it corrects)."""
    parts = []
    for frame in frames:
        if "correction_of" in frame.columns:
            frame = frame.with_columns(line_kind=pl.coalesce("correction_of", "line_kind")).drop("correction_of")
        parts.append(frame)
    whole = pl.concat(parts, how="diagonal_relaxed")
    present = [q for q in QUANTITIES if q in whole.columns]
    others = [c for c in whole.columns if c in DESCRIPTIVE]
    return whole.group_by(_keys(whole), maintain_order=True).agg(
        [pl.col(q).sum().cast(whole.schema[q]) for q in present] + [pl.col(c).last() for c in others])


def _differences(issued: pl.DataFrame, fresh: pl.DataFrame) -> pl.DataFrame:
    """Correction lines (fresh − issued per line identity), in ``fresh``'s columns + correction_of."""
    keys = [k for k in _keys(fresh) if k in issued.columns]
    old = issued.select(*keys, *[pl.col(c).alias(f"_old_{c}") for c in issued.columns
                                 if c not in keys and c in fresh.columns])
    joined = fresh.join(old, on=keys, how="full", coalesce=True, nulls_equal=True)
    fixes = []
    for c in fresh.columns:
        before = f"_old_{c}"
        if c in QUANTITIES:
            zero = pl.lit(0).cast(fresh.schema[c])
            old_value = pl.col(before).fill_null(zero) if before in joined.columns else zero
            delta = (pl.col(c).fill_null(zero) - old_value).cast(fresh.schema[c])
            fixes.append((delta + 0.0 if fresh.schema[c].is_float() else delta).alias(c))  # no -0.0
        elif before in joined.columns:  # descriptive: today's, else as issued (a line that vanished)
            fixes.append(pl.coalesce(c, before).alias(c))
    diff = joined.with_columns(fixes).drop([c for c in joined.columns if c.startswith("_old_")])
    hours = pl.col("gpu_hours").abs() > 1e-9 if "gpu_hours" in diff.columns else pl.lit(False)
    diff = diff.filter((pl.col("amount").fill_null(0) != 0) | hours)
    sign = pl.when(pl.col("amount").fill_null(0) != 0).then(pl.col("amount") > 0).otherwise(pl.col("gpu_hours") > 0)
    return diff.with_columns(correction_of=pl.col("line_kind"),
                             line_kind=pl.when(sign).then(pl.lit("debit")).otherwise(pl.lit("credit"))
                             ).select(*fresh.columns, "correction_of")


def _delta_corrections(con, period: str, effective: dict[str, pl.DataFrame],
                       fresh: dict[str, pl.DataFrame]) -> dict[str, pl.DataFrame]:
    """Corrections that touch only what changed: per job leaf, the exact delta (fresh exact −
    issued exact, Σ over revisions) is rounded top-down through the chargeback tree (currency →
    org path → model × tier → leaf), its root the cents that make the corrected total the new
    exact total rounded half-up. A leaf whose exact amount did not move gets no cent, so
    re-pricing one pool moves nothing in another; job, project and node corrections come from
    the one delta tree, so they add up to each other. Memo and unpriced lines (outside the total)
    keep the difference of their rounded lines."""
    start, end = month_bounds(period)
    org_nodes = load_tables(con, start=start, end=end, samples=False).org_nodes.collect()
    job_fresh = fresh["job"]
    deltas = delta_levels(delta_tree(delta_leaves(job_fresh, effective["job"]), org_nodes))
    described = {c: pl.lit(job_fresh[c][0] if job_fresh.height else None, job_fresh.schema[c])
                 for c in ("period", "period_start", "period_end", "billed_through", "provisional")
                 if c in job_fresh.columns}
    out = {}
    for level, frame in deltas.items():
        template = fresh[level]
        billed_part = correction_lines(frame, template, described)
        memo = _differences(effective[level].filter(~billed_expr(has_corrections=False)),
                            template.filter(~billed_expr(has_corrections=False)))
        out[level] = pl.concat([billed_part, memo], how="diagonal_relaxed").select(billed_part.columns)
    return out


# --- the stages of a delta correction, each on its own (tests/ledger/test_delta_stages.py) ---

def delta_leaves(job_fresh: pl.DataFrame, job_old: pl.DataFrame) -> pl.DataFrame:
    """The billed job lines, fresh beside issued (``_old_*``; Σ over revisions), with the exact
    deltas ``_d_raw`` (amount), ``_di_raw`` (idle included), ``_d_hours`` and the GPU ``_pool``."""
    keys = [k for k in _keys(job_fresh) if k in job_old.columns]
    zero = pl.lit(0).cast(RAW)
    old = job_old.filter(billed_expr(has_corrections=False)).select(
        *keys, *[pl.col(q).alias(f"_old_{q}") for q in ("gpu_hours", "amount", "idle_amount_included", *EXACT)])
    new = job_fresh.filter(billed_expr(has_corrections=False))
    joined = new.join(old, on=keys, how="full", coalesce=True, nulls_equal=True).with_columns(
        _d_raw=pl.col("amount_exact").fill_null(zero) - pl.col("_old_amount_exact").fill_null(zero),
        _di_raw=pl.col("idle_amount_exact").fill_null(zero) - pl.col("_old_idle_amount_exact").fill_null(zero),
        _d_hours=pl.col("gpu_hours").fill_null(0.0) - pl.col("_old_gpu_hours").fill_null(0.0) + 0.0)
    return joined.with_columns(_pool=pl.concat_str([pl.col("currency"), _MODEL_TIER], separator="|"))


_MODEL_TIER = pl.col("gpu_model") + pl.lit("|") + pl.col("tier")


def pool_root_cents(joined: pl.DataFrame) -> pl.DataFrame:
    """Per GPU pool, the cents its correction moves (``_root_amount``, ``_root_idle_amount_included``):
    its new exact total half-up less the cents already issued; none in a pool where no exact
    amount moved (a month issued before pools were rounded first keeps its cents where nothing
    changed). The currency's correction is the sum of its pools'."""
    zero = pl.lit(0).cast(RAW)

    def root_of(exact: str, issued: str, delta: str) -> pl.Expr:
        moved = (pl.col(delta) != zero).any()
        fresh_cents = half_up_cents(pl.col(exact).fill_null(zero).sum()) - pl.col(issued).fill_null(0).sum()
        return pl.when(moved).then(fresh_cents).otherwise(0).cast(RAW) * 100

    return joined.group_by("_pool").agg(
        _root_amount=root_of("amount_exact", "_old_amount", "_d_raw"),
        _root_idle_amount_included=root_of("idle_amount_exact", "_old_idle_amount_included", "_di_raw"))


@dataclass
class DeltaTree:
    """The deltas rounded top-down as the chargeback tree: pool → org path p1..pD → job leaf."""
    levels: list[pl.LazyFrame]  # money.round_tree's, each with its pool's currency
    leaves: pl.DataFrame
    path: list[str]
    depth: int


def delta_tree(joined: pl.DataFrame, org_nodes: pl.DataFrame) -> DeltaTree:
    """:func:`delta_leaves`' deltas rounded top-down from :func:`pool_root_cents`, pool first."""
    root = pool_root_cents(joined)
    lf, depth = with_org_paths(joined.lazy(), org_nodes)
    path = ["_pool", *(f"p{i}" for i in range(1, depth + 1)), "_leaf"]
    leaves = lf.with_columns(_mt=_MODEL_TIER, _leaf=pl.concat_str(
        [pl.col("cluster"), pl.col("job_id").fill_null(""), _MODEL_TIER], separator="|")).collect()
    levels = round_tree(leaves.lazy(), path=path, amounts={"_d_raw": "amount", "_di_raw": "idle_amount_included"},
                        sums=["_d_hours"], root_cents=root.lazy())
    currency_of = leaves.select("_pool", "currency").unique("_pool").lazy()
    return DeltaTree([lv.join(currency_of, on="_pool", how="left") for lv in levels], leaves, path, depth)


def delta_levels(tree: DeltaTree) -> dict[str, pl.DataFrame]:
    """The delta tree read out per level: job (the leaves), project (above them) and node (each
    org node's parts in every pool summed)."""
    levels, path = tree.levels, tree.path
    meta = tree.leaves.select(*path, "line_kind", "cluster", "job_id", "project", "user_name", "gpu_model", "tier")
    job = levels[-1].collect().join(meta, on=path, how="left", nulls_equal=True)
    proj = levels[-2].collect().join(meta.unique(path[:-1]).drop("_leaf", "cluster", "job_id", "user_name"),
                                     on=path[:-1], how="left")
    node_parts = []
    for k in range(1, tree.depth + 1):  # a node: its parts in every pool summed
        lv = (levels[k].collect().filter(pl.col(f"p{k}") != PAD)
              .group_by("currency", pl.col(f"p{k}").alias("node"), maintain_order=True)
              .agg(pl.col("_d_raw", "_di_raw", "_d_hours", "amount", "idle_amount_included").sum()))
        node_parts.append(lv.select("currency", "node", "_d_raw", "_di_raw", "_d_hours",
                                    "amount", "idle_amount_included",
                                    line_kind=pl.when(pl.col("node") == IDLE).then(pl.lit("idle"))
                                    .otherwise(pl.lit("charge"))))
    node = pl.concat(node_parts).with_columns(gpu_model=pl.lit(None, pl.String), tier=pl.lit(None, pl.String))
    return {"job": job, "project": proj, "node": node}


def correction_lines(frame: pl.DataFrame, template: pl.DataFrame, described: dict[str, pl.Expr]) -> pl.DataFrame:
    """A level's rounded deltas as debit (positive) / credit lines in ``template``'s columns +
    correction_of; a line whose cents and hours did not move is left out."""
    nonzero = frame.filter((pl.col("amount") != 0) | (pl.col("_d_hours").abs() > 1e-9))
    # an idle line is all idle: its idle cents are its cents, one rounding for both columns (the two
    # trees could round them a cent apart: 21.51 beside 21.52)
    if "idle_amount_included" in nonzero.columns:
        nonzero = nonzero.with_columns(idle_amount_included=pl.when(pl.col("line_kind") == "idle")
                                       .then(pl.col("amount")).otherwise(pl.col("idle_amount_included")))
    out = nonzero.with_columns(
        gpu_hours=pl.col("_d_hours"), amount_exact=pl.col("_d_raw"), idle_amount_exact=pl.col("_di_raw"),
        billed=pl.lit(True), note=pl.lit(None, pl.String), **described,
        correction_of=pl.col("line_kind"),
        line_kind=pl.when(pl.col("amount") != 0).then(pl.col("amount") > 0).otherwise(pl.col("_d_hours") > 0)
        .replace_strict({True: "debit", False: "credit"}, return_dtype=pl.String))
    cols = [*template.columns, "correction_of"]
    return out.select([pl.col(c).cast(template.schema[c]) if c in template.columns else pl.col(c) for c in cols])


def correct_period(
    con: duckdb.DuckDBPyConnection, period: str, *, reason: str, by: str | None = None,
    now: datetime | None = None, data_now: datetime | None = None,
) -> dict | None:
    """Re-issue closed ``period`` with today's config and data: store the differences from what
    was issued as credit / debit lines of the next revision, with ``reason``, who and when.
    Returns the revision's summary, or None when nothing differs (nothing is stored)."""
    if not reason or not reason.strip():
        raise PeriodError("--reason: say why the statement is re-issued (it is kept in the audit trail)")
    start, end = month_bounds(period)
    now = now or audit.utc_now()
    with transaction(con):
        if not is_closed(con, period):
            raise PeriodError(f"period {period} is not closed, so nothing was issued to correct: its report is "
                              f"computed from the current config (freeze it with `gpuledger period close {period}`)")
        issued = _issued(con, period)
        cfg, version = _current_config(con)
        fresh = compute_lines(con, period, cfg, now=data_now)
        effective = {level: _effective([issued[r][level] for r in sorted(issued)]) for level in LEVELS}
        exact = exact_stored(con, period)
        if exact:
            corrections = _delta_corrections(con, period, effective, fresh)
        else:  # closed before exact amounts were stored: the difference of the rounded lines
            # (ROUNDED_FALLBACK_NOTE, which the statement and the command state)
            corrections = {level: _differences(effective[level], fresh[level]) for level in LEVELS}
        if all(f.is_empty() for f in corrections.values()):
            return None
        revision = max(issued) + 1
        who = audit.actor(by)
        sha = _store_revision(con, period, revision, corrections, start=start, end=end, config_version=version,
                              who=who, at=now, reason=reason.strip(), data_now=data_now)
        net = _totals(corrections["project"])
        audit.record(con, who=who, action="period-correct", subject=period, reason=reason.strip(),
                     detail=f"revision {revision}, config v{version}, sha256 {sha}, net {net}", at=now)
    return {"period": period, "revision": revision, "lines": sum(f.height for f in corrections.values()),
            "rounded_fallback": not exact,
            "sha256": sha, "config_version": version, "net": net,
            "credit_lines": corrections["project"].filter(pl.col("line_kind") == "credit").height,
            "debit_lines": corrections["project"].filter(pl.col("line_kind") == "debit").height}


# --- reading -----------------------------------------------------------------------------------

def statement_lines(
    con: duckdb.DuckDBPyConnection, period: str, *, level: str = "project", policy: Policy | None = None,
    now: datetime | None = None,
) -> pl.DataFrame:
    """The statement of ``period`` at ``level``: for a closed month the issued lines (revision 0)
    followed by every correction's credit / debit lines; otherwise computed now (revision NULL).

    Columns: those of ``queries.chargeback_report`` plus ``revision`` (Int32) and ``correction_of``
    (the line kind a credit / debit corrects). Summed per currency, ``amount`` is what is owed as
    of the latest revision. ``policy`` is used for open periods only; default the stored config's.
    """
    if level not in LEVELS:
        raise UsageError(f"level={level!r}: choose job, project or node")
    if re.fullmatch(r"\d{4}-\d{2}", period.strip()) and is_closed(con, period.strip()):
        issued = _issued(con, period.strip())
        parts = []
        for revision in sorted(issued):
            frame = issued[revision][level]
            if "correction_of" not in frame.columns:
                frame = frame.with_columns(pl.lit(None, pl.String).alias("correction_of"))
            parts.append(frame.with_columns(pl.lit(revision, pl.Int32).alias("revision")))
        whole = pl.concat(parts, how="diagonal_relaxed")
        head = [c for c in whole.columns if c not in ("revision", "correction_of", *EXACT)]
        return whole.select(*head, "revision", "correction_of")

    policy = policy_in_force(con, policy)
    lines = chargeback_report(con, period, level=level, policy=policy, now=now)
    return lines.with_columns(pl.lit(None, pl.Int32).alias("revision"),
                              pl.lit(None, pl.String).alias("correction_of"))


def period_list(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """Closed months: period, state (closed / corrected / provisional), revisions, closed_at /
    closed_by, last revision's time, who and reason, config version, and the statement's total per
    currency as of its latest revision. Every revision is checked against its checksum first."""
    heads = con.sql(load_sql(__package__, "period_heads.sql")).pl()
    is_billed = billed_sql("line_kind", "json_extract_string(line_json, '$.correction_of')")
    totals = con.sql(
        "SELECT period, currency, sum(amount) AS total FROM statement_lines WHERE level = 'project' "
        f"AND {is_billed} GROUP BY period, currency"
    ).pl()
    if totals.height:
        totals = totals.with_columns(total=pl.col("currency") + pl.lit(" ") + pl.col("total").cast(pl.String)) \
            .group_by("period").agg(pl.col("total").sort().str.join(", "))
        heads = heads.join(totals, on="period", how="left")
    else:
        heads = heads.with_columns(pl.lit(None, pl.String).alias("total"))
    for period in heads["period"].to_list():  # the figures listed are the checksummed ones, or an error
        verify_period(con, period)
    states = {p: period_state(con, p).text for p in heads["period"].to_list()}
    heads = heads.with_columns(state=pl.col("period").replace_strict(states, return_dtype=pl.String))
    return heads.sort("period")
