"""The ledger's audit trail: one row per config load, period close and correction."""

from __future__ import annotations

import getpass
import os
from datetime import datetime

import duckdb

from gpuledger.rules.clock import utc_now


def actor(by: str | None = None) -> str:
    """Who acts: ``--by`` when given, else the OS user."""
    if by:
        return by
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (containers): the environment's word, else unknown
        return os.environ.get("USER") or os.environ.get("LOGNAME") or "unknown"


def record(
    con: duckdb.DuckDBPyConnection, *, who: str, action: str, subject: str, reason: str | None = None,
    detail: str | None = None, at: datetime | None = None,
) -> None:
    """Append one audit row (never updated or deleted)."""
    con.execute(
        "INSERT INTO ledger_audit (acted_at, actor, action, subject, reason, detail) VALUES (?, ?, ?, ?, ?, ?)",
        [at or utc_now(), who, action, subject, reason, detail],
    )


def audit_rows(con: duckdb.DuckDBPyConnection, subject: str | None = None) -> list[tuple]:
    """(at, actor, action, subject, reason, detail), oldest first."""
    return con.execute(
        "SELECT acted_at, actor, action, subject, reason, detail FROM ledger_audit "
        "WHERE ? IS NULL OR subject = ? ORDER BY acted_at, action", [subject, subject],
    ).fetchall()
