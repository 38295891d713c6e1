"""Writing cleaned DCGM samples (from ``exposition_parser.long_to_wide``) into the warehouse:
devices registered on (cluster, UUID, GPU_I_ID), samples on (gpu_id, ts), first value wins."""

from __future__ import annotations

import polars as pl

from gpuledger import warehouse
from gpuledger.ingest.device_links import link_devices_for_samples
from gpuledger.ingest.metrics.exposition import inventory_from_wide
from gpuledger.ingest.tiers import apply_tier_rules


def store_wide(con, wide: pl.DataFrame, *, cluster: str, source: str) -> int:
    """Register the devices of ``wide`` and insert its samples. Returns the number of new samples.

    Runs inside the caller's transaction (if any). first_seen / last_seen only ever widen, so a late
    or re-ingested batch does not move them backwards.
    """
    if wide.is_empty():
        return 0
    inventory = inventory_from_wide(wide, cluster)
    registered, changed = _register_changed(con, inventory.drop("first_seen", "last_seen"))
    if changed:  # pricing tier from the stored config's rules; storing a config or node labels
        apply_tier_rules(con, cluster=cluster, jobs=False)  # re-applies them to known devices itself
    seen = inventory.select("gpu_uuid", "mig_instance_id", "first_seen", "last_seen").join(
        registered.select("gpu_uuid", "mig_instance_id", "gpu_id"), on=["gpu_uuid", "mig_instance_id"])
    con.register("_seen_batch", seen.to_arrow())
    try:
        con.execute(
            "UPDATE gpus SET first_seen = least(coalesce(gpus.first_seen, b.first_seen), b.first_seen),"
            " last_seen = greatest(coalesce(gpus.last_seen, b.last_seen), b.last_seen)"
            " FROM _seen_batch b WHERE gpus.gpu_id = b.gpu_id"
        )
    finally:
        con.unregister("_seen_batch")
    samples = wide.join(seen.select("gpu_uuid", "mig_instance_id", "gpu_id"),
                        on=["gpu_uuid", "mig_instance_id"], how="left")
    new = warehouse.write_samples(con, samples, source)
    if new:
        link_devices_for_samples(con, samples)  # pods / Slurm jobs named by the labels get devices
    return new


_KEYS = ["cluster", "gpu_uuid", "mig_instance_id"]


def _register_changed(con, inventory: pl.DataFrame) -> tuple[pl.DataFrame, int]:
    """``register_gpus`` for the devices that are new or whose attributes changed; the others (every
    device, every round, once a cluster is known) only have their gpu_id read. Same table after, but
    DuckDB's ON CONFLICT DO UPDATE costs ~0.1 ms a row even when nothing changes (1 s a round at
    12,000 devices). Returns the inventory with gpu_id, and how many devices were (re)registered."""
    con.register("_device_batch", inventory.select(_KEYS).to_arrow())
    try:
        cols = ", ".join(f"g.{c}" for c in inventory.columns)
        stored = con.sql(f"SELECT g.gpu_id, {cols} FROM gpus g JOIN _device_batch b USING (cluster, gpu_uuid, "
                         "mig_instance_id)").pl()
    finally:
        con.unregister("_device_batch")
    stored = stored.cast({c: inventory.schema[c] for c in inventory.columns})
    same = stored.join(inventory, on=inventory.columns, how="semi", nulls_equal=True)
    changed = inventory.join(same, on=_KEYS, how="anti")
    if changed.is_empty():
        return inventory.join(same.select(*_KEYS, "gpu_id"), on=_KEYS, how="left"), 0
    new = warehouse.register_gpus(con, changed)
    new_ids = new.select(*_KEYS, "gpu_id").cast({"gpu_id": same.schema["gpu_id"]})
    ids = pl.concat([same.select(*_KEYS, "gpu_id"), new_ids])
    return inventory.join(ids, on=_KEYS, how="left"), changed.height
