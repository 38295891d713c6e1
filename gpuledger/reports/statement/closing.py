"""Closing and correcting a month as `gpuledger period close / correct` do it: the ledger issues
the revision (ledger.periods) and, in the same transaction, the month's statement is stored as
of that revision (reports.statement.build.freeze_statement), so its files are written from stored,
rounded values from then on. Here, above both, because the ledger may not import the reports."""

from __future__ import annotations

from datetime import datetime

import duckdb

from gpuledger.ledger.periods import close_period, correct_period
from gpuledger.reports.statement.build import freeze_statement
from gpuledger.warehouse.db import transaction


def close(con: duckdb.DuckDBPyConnection, period: str, *, by: str | None = None, now: datetime | None = None,
          data_now: datetime | None = None, allow_provisional: bool = False) -> dict:
    """``ledger.periods.close_period`` and the closed statement stored with it."""
    with transaction(con):
        done = close_period(con, period, by=by, now=now, data_now=data_now, allow_provisional=allow_provisional)
        freeze_statement(con, period, now=data_now)
    return done


def correct(con: duckdb.DuckDBPyConnection, period: str, *, reason: str, by: str | None = None,
            now: datetime | None = None, data_now: datetime | None = None) -> dict | None:
    """``ledger.periods.correct_period`` and, when it issued a revision, the statement as of it."""
    with transaction(con):
        done = correct_period(con, period, reason=reason, by=by, now=now, data_now=data_now)
        if done is not None:
            freeze_statement(con, period, now=data_now)
    return done
