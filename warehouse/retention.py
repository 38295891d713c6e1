"""Raw-sample retention, and disk use per table.

Raw samples are the bulk of the warehouse (~3.5 M rows a day per 1,024 GPUs). The reports read
whole GPU-hours from the ``gpu_hourly`` rollup and raw samples only for the partial hours at the
edges of allocations (analytics.attribution.partial_hour_keys), so a sample older than the
retention can go once its (device, hour) rollup is complete, except in those partial hours.
Rollups, jobs, allocations, findings, statements and audit rows are never pruned.

Each pruned hour records the mark in ``retention_marks`` (migration 010): below it the rollup is
final (rollups.final_before) — readers trust it, and writes do not rebuild it from the samples
that are left. A prune works only between the last mark and the new cutoff, so its cost follows
what it removes (a day a day), not the history.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import duckdb
from gpuledger.warehouse.db import transaction, yield_to_readers
from gpuledger.warehouse.rollups import HOUR, final_before, refresh_gpu_hourly

from gpuledger.rules.clock import utc_now
from gpuledger.sql import load_sql

DEFAULT_RAW_SAMPLE_DAYS = 35.0


@dataclass(frozen=True)
class PruneStats:
    """What one prune did. ``pruned_before``: the new mark (None: nothing old enough)."""

    pruned_before: datetime | None
    rows_deleted: int
    rows_kept: int  # older than the cutoff but kept: partial hours the reports read raw
    hours_completed: int  # (device, hour) rollups that were behind and were refreshed first


# (device, hour) pairs of [lo, cutoff) an allocation starts or ends inside (read raw by attribution),
# and per (device, hour) the samples stored vs counted in the rollup
_PARTIAL_HOURS = load_sql(__package__, "retention_partial_hours.sql")
_HOUR_COUNTS = load_sql(__package__, "retention_hour_counts.sql")


def retention_cutoff(con: duckdb.DuckDBPyConnection, keep_days: float, *, now: datetime | None = None) -> datetime | None:
    """The hour before which raw samples may go: ``keep_days`` before the newest sample (never
    after ``now``, default the wall clock, naive UTC), down to a whole hour. None without samples."""
    newest = con.execute("SELECT max(ts) FROM gpu_samples").fetchall()[0][0]
    if newest is None:
        return None
    ref = min(newest, now or utc_now())
    return (ref - timedelta(days=keep_days)).replace(minute=0, second=0, microsecond=0)


def prune_raw_samples(
    con: duckdb.DuckDBPyConnection, *, keep_days: float = DEFAULT_RAW_SAMPLE_DAYS, now: datetime | None = None,
) -> PruneStats:
    """Delete raw samples older than :func:`retention_cutoff` whose hourly rollup is complete,
    keeping the partial hours the reports read raw; completes rollups that are behind first.

    Works an hour at a time, each hour one transaction that also moves the mark, so an interrupted
    prune resumes and, on a connection from ``open_writer``, readers get a turn between hours
    (a day of 1,024 GPUs is ~3.5 M rows, ~10 s to delete). Idempotent: a second run with the same
    cutoff does nothing. ``keep_days`` > 0 (config ``policy.retention.raw_sample_days``)."""
    if keep_days <= 0:
        raise ValueError(f"keep_days must be positive, not {keep_days}")
    cutoff = retention_cutoff(con, keep_days, now=now)
    previous = final_before(con)
    if cutoff is None or (previous is not None and cutoff <= previous):
        return PruneStats(None, 0, 0, 0)
    oldest = con.execute("SELECT min(ts) FROM gpu_samples WHERE ts >= $lo",
                         {"lo": previous or datetime.min}).fetchall()[0][0]
    hour = max(previous or oldest, oldest.replace(minute=0, second=0, microsecond=0))
    deleted = kept = completed = 0
    con.execute("SET enable_progress_bar = false")  # DuckDB would draw one on the terminal
    while hour < cutoff:
        step = _prune_hour(con, hour, min(hour + HOUR, cutoff))
        deleted, kept, completed = deleted + step[0], kept + step[1], completed + step[2]
        hour += HOUR
        yield_to_readers(con)
    return PruneStats(cutoff, deleted, kept, completed)


def _prune_hour(con: duckdb.DuckDBPyConnection, lo: datetime, cutoff: datetime) -> tuple[int, int, int]:
    """Prune [lo, cutoff) and move the mark to ``cutoff``: (deleted, kept, rollups completed)."""
    params = {"lo": lo, "cutoff": cutoff}
    with transaction(con):
        behind = con.execute(
            f"SELECT DISTINCT hour FROM ({_HOUR_COUNTS}) WHERE s_n IS DISTINCT FROM n ORDER BY hour", params,
        ).fetchall()
        completed = 0
        for (h,) in behind:  # rare: a writer that did not refresh, a warehouse older than 004
            completed += refresh_gpu_hourly(con, h, h + HOUR)
        con.execute(
            f"CREATE OR REPLACE TEMP TABLE _prunable AS SELECT gpu_id, hour FROM ({_HOUR_COUNTS}) "
            f"WHERE s_n = n EXCEPT SELECT gpu_id, hour FROM ({_PARTIAL_HOURS})", params,  # not A EXCEPT B UNION C
        ).fetchall()
        try:
            deleted = con.execute(
                "DELETE FROM gpu_samples s USING _prunable p WHERE s.gpu_id = p.gpu_id "
                "AND date_trunc('hour', s.ts) = p.hour AND s.ts >= $lo AND s.ts < $cutoff", params,
            ).fetchall()[0][0]
        finally:
            con.execute("DROP TABLE IF EXISTS _prunable").fetchall()
        kept = con.execute("SELECT count(*) FROM gpu_samples WHERE ts >= $lo AND ts < $cutoff", params).fetchall()[0][0]
        con.execute(
            "INSERT INTO retention_marks VALUES ('gpu_samples', $cutoff, now()::TIMESTAMP, $deleted, $kept)",
            {"cutoff": cutoff, "deleted": deleted, "kept": kept},
        ).fetchall()
    return deleted, kept, completed


@dataclass(frozen=True)
class TableDiskUse:
    """One table's share of the file. ``bytes``: its column segments' DuckDB blocks (a block
    shared by several segments is split by their count); indexes are not in it (see below)."""

    table: str
    rows: int
    bytes: int


def table_disk_use(con: duckdb.DuckDBPyConnection) -> tuple[list[TableDiskUse], dict[str, int]]:
    """Disk use per table, largest first, and the file's totals: ``pragma_storage_info`` lists
    each table's column segments with their block; blocks are ``block_size`` bytes (256 KiB).
    The totals (``pragma database_size``): file, used and free bytes, and ``indexes_and_metadata``
    = used − Σ tables (primary-key indexes such as gpu_samples' are most of it)."""
    size = con.execute("SELECT block_size, total_blocks, used_blocks, free_blocks FROM pragma_database_size()").fetchall()[0]
    block, total, used, free = (int(v) for v in size)
    names = [r[0] for r in con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() AND NOT temporary "
        "ORDER BY table_name").fetchall()]
    if not names:
        return [], {"file_bytes": total * block, "used_bytes": used * block, "free_bytes": free * block,
                    "indexes_and_metadata_bytes": used * block}
    union = " UNION ALL ".join(
        f"SELECT '{n}' AS t, block_id, additional_block_ids FROM pragma_storage_info('{n}') WHERE persistent"
        for n in names)  # names from the catalog, not user input
    rows = dict(con.execute(" UNION ALL ".join(f"SELECT '{n}', count(*) FROM {n}" for n in names)).fetchall())
    shares = con.execute(load_sql(__package__, "retention_table_blocks.sql", segments=union)).fetchall()
    blocks = {t: float(b) for t, b in shares}
    out = [TableDiskUse(n, int(rows.get(n) or 0), round(blocks.get(n, 0.0) * block)) for n in names]
    out.sort(key=lambda u: (-u.bytes, u.table))
    tables_bytes = sum(u.bytes for u in out)
    return out, {"file_bytes": total * block, "used_bytes": used * block, "free_bytes": free * block,
                 "indexes_and_metadata_bytes": max(0, used * block - tables_bytes)}
