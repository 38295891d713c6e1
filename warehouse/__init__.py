"""The DuckDB warehouse: schema migrations, serialized writers, non-blocking readers, upserts.

Everything that touches the DuckDB file goes through this package (design.md, "Storage rules").
"""

from gpuledger.lazy import lazy_attributes

# Names resolve on first use (PEP 562), so `from gpuledger import warehouse` costs nothing until a
# command really opens the file: `gpuledger --help` must not import DuckDB and polars.
_HOMES = {
    "WAREHOUSE_ENV": "paths",
    "DEFAULT_WAREHOUSE": "paths",
    "WarehouseError": "db",
    "WarehouseBusyError": "db",
    "WarehouseCorruptError": "db",
    "WarehouseNewerSchemaError": "db",
    "WarehouseDiskFullError": "db",
    "apply_migrations": "db",
    "open_reader": "db",
    "kept_reader": "kept",
    "open_writer": "db",
    "resolve_warehouse_path": "paths",
    "schema_version": "db",
    "snapshot_path": "db",
    "transaction": "db",
    "yield_to_readers": "db",
    "WriterConnection": "db",
    "prune_raw_samples": "retention",
    "table_disk_use": "retention",
    "retire_gpu": "inventory",
    "refresh_gpu_hourly": "rollups",
    "refresh_gpu_hourly_for": "rollups",
    "rebuild_device_hours": "rollups",
    "QuarantineRow": "writes",
    "quarantine": "writes",
    "register_gpus": "writes",
    "replace_reference": "writes",
    "table_counts": "writes",
    "upsert": "writes",
    "write_samples": "writes",
}



__getattr__ = lazy_attributes("gpuledger.warehouse", _HOMES, globals())


__all__ = [
    "WAREHOUSE_ENV",
    "WarehouseError",
    "WarehouseBusyError",
    "WarehouseCorruptError",
    "WarehouseNewerSchemaError",
    "WarehouseDiskFullError",
    "DEFAULT_WAREHOUSE",
    "QuarantineRow",
    "apply_migrations",
    "open_reader",
    "kept_reader",
    "open_writer",
    "quarantine",
    "refresh_gpu_hourly",
    "refresh_gpu_hourly_for",
    "rebuild_device_hours",
    "register_gpus",
    "replace_reference",
    "table_counts",
    "resolve_warehouse_path",
    "schema_version",
    "snapshot_path",
    "transaction",
    "upsert",
    "write_samples",
    "yield_to_readers",
    "WriterConnection",
    "prune_raw_samples",
    "table_disk_use",
]
