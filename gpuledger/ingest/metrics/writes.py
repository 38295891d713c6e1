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
    registered = warehouse.register_gpus(con, inventory.drop("first_seen", "last_seen"))
    apply_tier_rules(con, cluster=cluster, jobs=False)  # pricing tier from the stored config's rules
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
