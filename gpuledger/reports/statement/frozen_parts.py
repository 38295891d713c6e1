"""A closed month's statement parts as stored (migration 028, closed_statements): plain facts as
JSON and frames as Arrow IPC (every dtype comes back as written: Decimal(38, 2) amounts, rounded
floats bit for bit), with a sha256 over all of it that is checked on every read.

Only storage: ``reports.statement.build`` turns a statement into these parts and back
(``freeze_statement``, ``build_statement``), so this module knows nothing of a statement."""

from __future__ import annotations

import hashlib
import io
import json

import duckdb
import polars as pl

from gpuledger.errors import RunError

FRAMES = ("lines", "usage", "job_energy", "history", "org_nodes")


def _arrow(frame: pl.DataFrame) -> bytes:
    buf = io.BytesIO()
    frame.write_ipc(buf, compression="uncompressed")
    return buf.getvalue()


def _sha(facts_json: str, blobs: list[bytes]) -> str:
    h = hashlib.sha256(facts_json.encode())
    for blob in blobs:
        h.update(len(blob).to_bytes(8, "big"))
        h.update(blob)
    return h.hexdigest()


def store(con: duckdb.DuckDBPyConnection, period: str, revision: int, facts: dict,
          frames: dict[str, pl.DataFrame]) -> None:
    """Store ``period``'s statement parts as of ``revision`` (replacing a row of that revision)."""
    facts_json = json.dumps(facts, sort_keys=True, separators=(",", ":"))
    blobs = [_arrow(frames[name]) for name in FRAMES]
    con.execute("DELETE FROM closed_statements WHERE period = ? AND revision = ?", [period, revision])
    con.execute("INSERT INTO closed_statements VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [period, revision, facts_json, *blobs, _sha(facts_json, blobs)])


def latest(con: duckdb.DuckDBPyConnection, period: str) -> tuple[dict, dict[str, pl.DataFrame]] | None:
    """(facts, frames) stored for ``period``'s latest revision, or None: none stored for it (closed
    before migration 028, or re-issued by a caller that stored none), or a reader opened before
    the migration reached its warehouse."""
    try:
        rows = con.execute(
            "SELECT c.facts_json, c.lines_arrow, c.usage_arrow, c.job_energy_arrow, c.history_arrow, "
            "c.org_nodes_arrow, c.content_sha256, c.revision FROM closed_statements c WHERE c.period = ? "
            "AND c.revision = (SELECT max(revision) FROM statement_revisions WHERE period = ?)",
            [period, period]).fetchall()
    except duckdb.CatalogException:  # no closed_statements table yet
        return None
    if not rows:
        return None
    facts_json, *blobs, sha, revision = rows[0]
    blobs = [bytes(b) for b in blobs]
    if _sha(facts_json, blobs) != sha:
        raise RunError(f"statement {period} revision {revision}: its stored statement does not match its sha256 "
                       f"{sha[:12]}; the warehouse was altered outside gpuledger (restore it from a backup)")
    frames = {name: pl.read_ipc(io.BytesIO(blob)) for name, blob in zip(FRAMES, blobs, strict=True)}
    return json.loads(facts_json), frames
