"""Writing cleaned DCGM samples (from ``exposition_parser.long_to_wide``) into the warehouse:
devices registered on (cluster, UUID, GPU_I_ID), samples on (gpu_id, ts), first value wins — but
for a window aggregate stored while its window was still filling, which the next run replaces
(:func:`forget_window`)."""

from __future__ import annotations

from datetime import datetime

import polars as pl

from gpuledger import warehouse
from gpuledger.ingest.device_links import link_devices_for_samples
from gpuledger.ingest.metrics.exposition import inventory_from_wide
from gpuledger.ingest.metrics.plausible import refuse_before_first_day, refuse_stored_host_conflicts
from gpuledger.ingest.tiers import apply_tier_rules


def store_wide(con, wide: pl.DataFrame, *, cluster: str, source: str, refused: list | None = None,
               location: str | None = None) -> int:
    """Register the devices of ``wide`` and insert its samples. Returns the number of new samples.

    Runs inside the caller's transaction (if any). first_seen / last_seen only ever widen, so a late
    or re-ingested batch does not move them backwards. Rows of a GPU UUID the warehouse already
    holds on another host, and rows stamped before the cluster's configured first day
    (``clusters.<name>.first_day``), are refused: quarantine rows appended to ``refused`` for the
    caller to store and count (stored here when it is None).
    """
    if wide.is_empty():
        return 0
    wide, clashes = refuse_stored_host_conflicts(con, wide, cluster=cluster, source=source,
                                                 location=location or source)
    wide, early = refuse_before_first_day(con, wide, cluster=cluster, source=source, location=location or source)
    clashes += early
    if clashes:
        if refused is None:
            warehouse.quarantine(con, clashes)
        else:
            refused += clashes
        if wide.is_empty():
            return 0
    inventory = inventory_from_wide(wide, cluster)
    registered, changed = _register_changed(con, inventory)
    if changed:  # pricing tier from the stored config's rules; storing a config or node labels
        apply_tier_rules(con, cluster=cluster, jobs=False)  # re-applies them to known devices itself
    con.register("_seen_batch", registered.select("gpu_id", "first_seen", "last_seen").to_arrow())
    try:
        con.execute(
            "UPDATE gpus SET first_seen = least(coalesce(gpus.first_seen, b.first_seen), b.first_seen),"
            " last_seen = greatest(coalesce(gpus.last_seen, b.last_seen), b.last_seen)"
            " FROM _seen_batch b WHERE gpus.gpu_id = b.gpu_id"
        )
    finally:
        con.unregister("_seen_batch")
    samples = wide.join(registered.select("gpu_uuid", "mig_instance_id", "gpu_id"),
                        on=["gpu_uuid", "mig_instance_id"], how="left")
    new = warehouse.write_samples(con, samples, source)
    if new:
        link_devices_for_samples(con, samples)  # pods / Slurm jobs named by the labels get devices
    return new


def forget_window(con, wide: pl.DataFrame, *, cluster: str, at: datetime) -> int:
    """Delete the stored window aggregates stamped ``at`` (naive UTC) of the devices ``wide`` holds
    a row for at that moment, and bring those devices' hour of ``gpu_hourly`` back to the rows
    left, so that :func:`store_wide` of ``wide`` stores the window anew: a window stored while still
    filling is replaced by what a later run saw of it (prometheus/aggregate.py). Raw samples
    (``sample_n`` NULL) are never deleted. Runs inside the caller's transaction. Returns the rows
    deleted."""
    devices = wide.filter(pl.col("ts") == at).select("gpu_uuid", "mig_instance_id").unique()
    if devices.is_empty():
        return 0
    con.register("_window_again", devices.to_arrow())
    try:
        con.execute(
            "CREATE OR REPLACE TEMP TABLE _window_rows AS SELECT s.gpu_id, date_trunc('hour', s.ts) AS hour"
            " FROM gpu_samples s JOIN gpus g USING (gpu_id) JOIN _window_again r"
            " ON g.gpu_uuid = r.gpu_uuid AND g.mig_instance_id = r.mig_instance_id"
            " WHERE g.cluster = $cluster AND s.ts = $at AND s.sample_n IS NOT NULL",
            {"cluster": cluster, "at": at}).fetchall()
    finally:
        con.unregister("_window_again")
    try:
        gone = con.execute("SELECT count(*) FROM _window_rows").fetchall()[0][0]
        if gone:
            con.execute("DELETE FROM gpu_samples s USING _window_rows w WHERE s.gpu_id = w.gpu_id AND s.ts = $at",
                        {"at": at}).fetchall()
            warehouse.rebuild_device_hours(con, "_window_rows")
    finally:
        con.execute("DROP TABLE IF EXISTS _window_rows").fetchall()
    return gone


_KEYS = ["cluster", "gpu_uuid", "mig_instance_id"]
_SEEN = ("first_seen", "last_seen")


def _register_changed(con, inventory: pl.DataFrame) -> tuple[pl.DataFrame, int]:
    """``register_gpus`` for the devices that are new or whose attributes changed; the others (every
    device, every round, once a cluster is known) only have their gpu_id read. Same table after, but
    DuckDB's ON CONFLICT DO UPDATE costs ~0.1 ms a row even when nothing changes (1 s a round at
    12,000 devices). Returns the inventory (its rows in order) with gpu_id, and how many devices
    were (re)registered. first_seen / last_seen are not attributes: the caller widens them."""
    attrs = [c for c in inventory.columns if c not in (*_KEYS, *_SEEN)]
    rows = inventory.with_row_index("_row")
    con.register("_device_batch", rows.select("_row", *_KEYS, *attrs).to_arrow())
    try:  # compared in DuckDB, so only row numbers and ids come back (not every stored attribute)
        same = " AND ".join(f"g.{c} IS NOT DISTINCT FROM b.{c}" for c in attrs) or "true"
        ids = con.sql(f"SELECT b._row, g.gpu_id FROM _device_batch b JOIN gpus g USING (cluster, gpu_uuid, "
                      f"mig_instance_id) WHERE {same}").pl()
    finally:
        con.unregister("_device_batch")
    if ids.height == rows.height:  # every device known and unchanged (keys are unique on both sides)
        return inventory.with_columns(ids.sort("_row")["gpu_id"]), 0
    changed = rows.join(ids, on="_row", how="anti")
    new = warehouse.register_gpus(con, changed.drop("_row", *_SEEN))
    new_ids = changed.select("_row", *_KEYS).join(new.select(*_KEYS, "gpu_id"), on=_KEYS, how="left")
    ids = pl.concat([ids, new_ids.select("_row", pl.col("gpu_id").cast(ids.schema["gpu_id"]))])
    return rows.join(ids, on="_row", how="left", maintain_order="left").drop("_row"), changed.height
