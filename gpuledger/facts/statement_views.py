"""The chargeback page's statement view of a month (reports.statement.summary.StatementSummary),
materialized by the chargeback pipeline beside chargeback_statements (migration 019) and read
back while it is as new as the data: built at the data's current "now" (or, for a month that has
ended, at any "now" after its end: the whole month either way) from the same inputs
(statement_view_inputs.sql: the ledger, inventory, org tree, rate card, jobs, allocations and the
month's activity, fingerprinted). Otherwise ``fresh`` says None and the reader builds the
statement, exactly as before; finance's files are always written from a statement built when
asked, never from this row.

The lines travel as Arrow IPC, so every dtype comes back as built (Decimal(38, 2) amounts, Int32
revisions): the page shows exactly the figures ``build_statement`` makes (tests/pipelines/
test_assets.py compares them field by field, for the org and every node)."""

from __future__ import annotations

import io
import json
from datetime import datetime

import duckdb
import polars as pl

from gpuledger import warehouse
from gpuledger.ledger.periods import PeriodState
from gpuledger.reports.statement.build import LINE_COLUMNS
from gpuledger.reports.statement.summary import StatementSummary
from gpuledger.rules.clock import utc_now
from gpuledger.rules.periods import month_bounds
from gpuledger.sql import load_sql
from gpuledger.warehouse.clock import data_now


def inputs_mark(con, period: str, now: datetime) -> str:
    """A string that changes whenever anything ``period``'s statement at ``now`` is built from does."""
    start, end = month_bounds(period)
    return con.execute(load_sql(__package__, "statement_view_inputs.sql"),
                       {"start": start, "end": end, "now": now}).fetchall()[0][0]


def store(con, summary: StatementSummary, *, now: datetime, mark: str) -> None:
    """Replace ``summary.period``'s stored view with ``summary`` (the whole org's statement built
    at the data's ``now`` from inputs that read ``mark`` (``inputs_mark``) when it was built)."""
    buf = io.BytesIO()
    summary.lines.write_ipc(buf)
    state = summary.state
    row = {
        "period": summary.period, "data_now": now, "materialized_at": utc_now(), "inputs_mark": mark,
        "scope": summary.scope,
        "state_json": json.dumps({"closed": state.closed, "provisional": state.provisional, "revision": state.revision,
                                  "data_through": state.data_through.isoformat() if state.data_through else None}),
        "billed_through": summary.billed_through,
        "reconciliation_json": json.dumps([list(r) for r in summary.reconciliation]),
        "notes_json": json.dumps(list(summary.notes)),
        "usage_json": json.dumps({"by_partition": summary.by_partition, "by_host": summary.by_host,
                                  "projects": sorted(summary.usage_projects),
                                  "partition_projects": sorted(summary.partition_projects)}),
        "line_count": summary.lines.height, "lines_arrow": buf.getvalue(),
    }
    names = ", ".join(row)
    with warehouse.transaction(con):
        con.execute("DELETE FROM statement_views WHERE period = ?", [summary.period]).fetchall()
        con.execute(f"INSERT INTO statement_views ({names}) VALUES ({', '.join('?' * len(row))})",
                    list(row.values())).fetchall()


def fresh(con, period: str) -> StatementSummary | None:
    """The stored view of ``period`` (YYYY-MM) if it is as new as the data, else None (also on
    a warehouse a reader opened before migration 019 reached it)."""
    try:
        now = data_now(con)
        rows = con.execute(load_sql(__package__, "statement_view_lookup.sql"),
                           {"period": period, "end": month_bounds(period)[1], "now": now}).fetchall()
    except (duckdb.CatalogException, duckdb.BinderException):  # no statement_views table (or an older one) yet
        return None
    # the inputs' fingerprint (~25-40 ms) only when a row built at this "now" exists
    if not rows or rows[0][0] != inputs_mark(con, period, now):
        return None
    _, scope, state_json, billed_through, reconciliation_json, notes_json, usage_json, lines_arrow = rows[0]
    lines = pl.read_ipc(io.BytesIO(lines_arrow))
    if set(LINE_COLUMNS) - set(lines.columns):  # stored by a release with fewer columns: build anew
        return None
    state, usage = json.loads(state_json), json.loads(usage_json)
    through = state["data_through"]
    return StatementSummary(
        period=period, scope=scope, billed_through=billed_through,
        state=PeriodState(closed=state["closed"], provisional=state["provisional"], revision=state["revision"],
                          data_through=datetime.fromisoformat(through) if through else None),
        lines=lines,
        reconciliation=tuple((sentence, ok) for sentence, ok in json.loads(reconciliation_json)),
        notes=tuple(json.loads(notes_json)), by_partition=usage["by_partition"], by_host=usage["by_host"],
        usage_projects=frozenset(usage["projects"]), partition_projects=frozenset(usage["partition_projects"]))
