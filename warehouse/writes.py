"""Idempotent writes: upserts on natural keys, device registration, sample batches, quarantine.

Every writer takes polars frames. Re-writing the same rows changes nothing (samples keep the first
value seen for a (gpu_id, ts); jobs and inventory take the newest values).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import duckdb
import polars as pl
from gpuledger.warehouse.db import transaction
from gpuledger.warehouse.rollups import final_before, gpu_hourly_kept, hour_span

from gpuledger.rules.clock import naive_utc, utc_now

# Natural keys of every table; `upsert` uses them to dedupe a batch before it reaches DuckDB
# (DuckDB refuses to update the same row twice in one statement).
NATURAL_KEYS: dict[str, tuple[str, ...]] = {
    "gpus": ("cluster", "gpu_uuid", "mig_instance_id"),
    "gpu_samples": ("gpu_id", "ts"),
    "jobs": ("cluster", "job_id"),
    "job_allocations": ("cluster", "job_id", "gpu_id", "start_time"),
    "org_nodes": ("node",),
    "budgets": ("node", "period_start"),
    "rate_card": ("gpu_model", "tier", "effective_from"),
    "quarantine": ("source", "location", "raw_md5"),
    "ingest_checkpoints": ("source", "scope"),
    "device_holdings": ("cluster", "source", "scheduler_job", "host", "device_id", "first_seen"),
    "attribution_disagreements": ("gpu_id", "ts"),
    "gpu_hourly": ("gpu_id", "hour"),  # rollup, kept by warehouse.rollups.refresh_gpu_hourly
}

SAMPLE_METRIC_COLUMNS = (
    "sm_active_ratio",
    "gr_engine_active_ratio",
    "tensor_active_ratio",
    "dram_active_ratio",
    "gpu_util_ratio",
    "fb_used_bytes",
    "fb_total_bytes",
    "power_w",
    "energy_total_j",
)
SAMPLE_LABEL_COLUMNS = ("namespace", "pod", "container", "hpc_job")
_ROLLUP_COLUMNS = ("sm_active_ratio", "gr_engine_active_ratio", "gpu_util_ratio", "energy_total_j")


def _columns(con: duckdb.DuckDBPyConnection, table: str) -> list[str]:
    return [r[0] for r in con.execute(f"DESCRIBE {table}").fetchall()]


def upsert(
    con: duckdb.DuckDBPyConnection,
    table: str,
    frame: pl.DataFrame,
    *,
    on_conflict: str = "update",
) -> int:
    """Insert ``frame`` into ``table`` by column name; rows whose natural key exists are updated
    (``on_conflict="update"``) or left alone (``"ignore"``). Returns the number of rows offered.

    ``table`` must be one of NATURAL_KEYS (a fixed list, never user input).
    """
    if table not in NATURAL_KEYS:
        raise ValueError(f"unknown warehouse table {table!r}; expected one of {sorted(NATURAL_KEYS)}")
    if frame.is_empty():
        return 0
    keys = NATURAL_KEYS[table]
    missing = [k for k in keys if k not in frame.columns]
    if missing:
        raise ValueError(f"rows for {table} lack key column(s) {missing}")
    have = set(_columns(con, table))  # one DESCRIBE, not one per column
    unknown = [c for c in frame.columns if c not in have]
    if unknown:
        raise ValueError(f"rows for {table} carry column(s) the table does not have: {unknown}")
    batch = frame.unique(subset=list(keys), keep="last", maintain_order=True)
    names = ", ".join(batch.columns)
    con.register("_upsert_batch", batch.to_arrow())
    try:
        if on_conflict == "ignore":
            con.execute(f"INSERT OR IGNORE INTO {table} ({names}) SELECT {names} FROM _upsert_batch")
        elif on_conflict == "update":
            updates = [c for c in batch.columns if c not in keys]
            conflict = ", ".join(keys)
            action = (
                "DO UPDATE SET " + ", ".join(f"{c} = excluded.{c}" for c in updates)
                if updates
                else "DO NOTHING"
            )
            con.execute(
                f"INSERT INTO {table} ({names}) SELECT {names} FROM _upsert_batch "
                f"ON CONFLICT ({conflict}) {action}"
            )
        else:
            raise ValueError(f"on_conflict must be 'update' or 'ignore', not {on_conflict!r}")
    finally:
        con.unregister("_upsert_batch")
    return batch.height


def register_gpus(con: duckdb.DuckDBPyConnection, inventory: pl.DataFrame) -> pl.DataFrame:
    """Upsert devices into ``gpus`` and return ``inventory`` with its ``gpu_id`` column.

    ``inventory`` needs cluster, gpu_uuid, host, model; mig_instance_id defaults to -1 (whole GPU).
    ``first_seen`` is kept from the first registration; other attributes take the newest values.
    """
    inv = inventory
    if "mig_instance_id" not in inv.columns:
        inv = inv.with_columns(pl.lit(-1, pl.Int32).alias("mig_instance_id"))
    inv = inv.with_columns(pl.col("mig_instance_id").fill_null(-1).cast(pl.Int32))
    if "gpu_id" in inv.columns:
        inv = inv.drop("gpu_id")
    keys = list(NATURAL_KEYS["gpus"])
    inv = inv.unique(subset=keys, keep="last", maintain_order=True)
    cols = inv.columns
    con.register("_gpu_batch", inv.to_arrow())
    try:
        updates = [c for c in cols if c not in keys and c != "first_seen"]
        action = ", ".join(f"{c} = excluded.{c}" for c in updates)
        con.execute(
            f"INSERT INTO gpus ({', '.join(cols)}) SELECT {', '.join(cols)} FROM _gpu_batch "
            f"ON CONFLICT ({', '.join(keys)}) "
            + (f"DO UPDATE SET {action}" if action else "DO NOTHING")
        )
        ids = con.sql(
            "SELECT g.cluster, g.gpu_uuid, g.mig_instance_id, g.gpu_id FROM gpus g "
            "JOIN _gpu_batch b USING (cluster, gpu_uuid, mig_instance_id)"
        ).pl()
    finally:
        con.unregister("_gpu_batch")
    return inv.join(ids, on=keys, how="left")


def write_samples(con: duckdb.DuckDBPyConnection, samples: pl.DataFrame, source: str) -> int:
    """Insert cleaned samples (``gpu_id``, ``ts`` and any metric / label columns) and bring the
    ``gpu_hourly`` rollup of the hours they touch up to date, in one transaction (the caller's, if
    open).

    The first value stored for a (gpu_id, ts) wins, so re-ingesting is a no-op and a late copy of
    a sample cannot overwrite it (within one batch the last copy is the one offered). Samples older
    than the retention's pruned hours (rollups.final_before) are not stored: their hours' rollups
    are final (a re-ingest of history already pruned). Returns the number of rows that were new.
    """
    if samples.is_empty():
        return 0
    wanted = ["gpu_id", "ts", *SAMPLE_METRIC_COLUMNS, *SAMPLE_LABEL_COLUMNS, "sample_n", "covered_ms"]
    batch = samples.select([c for c in wanted if c in samples.columns]).with_columns(
        pl.lit(source).alias("source"))
    floor = final_before(con)
    if floor is not None:
        batch = batch.filter(pl.col("ts") >= floor)
        if batch.is_empty():
            return 0
    keys = list(NATURAL_KEYS["gpu_samples"])
    batch = batch.unique(subset=keys, keep="last", maintain_order=True)
    lo, hi = batch.select(pl.col("ts").min().alias("lo"), pl.col("ts").max().alias("hi")).row(0)
    hi += timedelta(microseconds=1)  # [lo, hi)
    names = ", ".join(batch.columns)
    # the rollup reads these; a batch without one of them holds NULLs there, as the table does
    batch = batch.with_columns(pl.lit(None, pl.Float64).alias(c) for c in _ROLLUP_COLUMNS
                               if c not in batch.columns)
    if "sample_n" not in batch.columns:  # a raw sample: the rollup counts it once
        batch = batch.with_columns(pl.lit(None, pl.Int32).alias("sample_n"))
    _, hour_end = hour_span(lo, hi)
    with transaction(con):
        # Stored rows from the batch's first ts to the end of its last hour (a count DuckDB prunes
        # by the row groups' ts ranges; a new scrape round finds none): the batch's copies of
        # stored rows are among them, and the rollup checks that new rows come after them. The
        # copies are left out here, so the rest goes in by a plain INSERT (INSERT OR IGNORE would
        # probe the key index for every row twice).
        stored_after = con.execute("SELECT count(*) FROM gpu_samples WHERE ts >= $lo AND ts < $hi",
                                   {"lo": lo, "hi": hour_end}).fetchall()[0][0] > 0
        if stored_after:
            stored = con.sql("SELECT gpu_id, ts FROM gpu_samples WHERE ts >= $lo AND ts < $hi",
                             params={"lo": lo, "hi": hi}).pl()
            batch = batch.join(stored.cast({k: batch.schema[k] for k in keys}), on=keys, how="anti",
                               maintain_order="left")
        if batch.is_empty():
            return 0
        groups = batch.select(pl.struct("gpu_id", pl.col("ts").dt.truncate("1h")).n_unique()).item()
        con.register("_new_samples", batch.to_arrow())
        try:
            with gpu_hourly_kept(con, lo, hi, groups=groups, stored_after=stored_after):
                con.execute(f"INSERT INTO gpu_samples ({names}) SELECT {names} FROM _new_samples").fetchall()
        finally:
            con.unregister("_new_samples")
    return batch.height


@dataclass(frozen=True)
class QuarantineRow:
    """One input that could not be read: where it was, its raw text and what is wrong with it."""

    source: str
    location: str
    raw_text: str
    reason: str


def quarantine(
    con: duckdb.DuckDBPyConnection, rows: Iterable[QuarantineRow], *, now: datetime | None = None
) -> int:
    """Store rejected input; the same raw text at the same place is stored once. Returns rows offered."""
    rows = list(rows)
    if not rows:
        return 0
    stamp = naive_utc(now) if now else utc_now()
    frame = pl.DataFrame(
        {
            "source": [r.source for r in rows],
            "location": [r.location for r in rows],
            "raw_text": [r.raw_text for r in rows],
            "raw_md5": [hashlib.md5(r.raw_text.encode()).hexdigest() for r in rows],
            "reason": [r.reason for r in rows],
            "quarantined_at": [stamp] * len(rows),
        },
        schema_overrides={"quarantined_at": pl.Datetime("us")},
    )
    return upsert(con, "quarantine", frame, on_conflict="ignore")


def table_counts(con: duckdb.DuckDBPyConnection, tables: Sequence[str] = tuple(NATURAL_KEYS)) -> dict[str, int]:
    """Row count of each table, for summaries and idempotency checks."""
    return {t: con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0] for t in tables}


def replace_reference(
    con: duckdb.DuckDBPyConnection,
    org_nodes: pl.DataFrame,
    budgets: pl.DataFrame,
    rate_card: pl.DataFrame,
) -> None:
    """Make the org tree, budgets and rate card exactly the config's, in one transaction.

    The config file is the source of truth for reference data, so a node or rate removed from it
    disappears here too; facts (samples, jobs) are never touched.
    """
    with transaction(con):
        for table, frame in (("org_nodes", org_nodes), ("budgets", budgets), ("rate_card", rate_card)):
            con.execute(f"DELETE FROM {table}").fetchall()
            upsert(con, table, frame)
