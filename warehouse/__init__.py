"""The DuckDB warehouse: schema migrations, serialized writers, non-blocking readers, upserts.

Everything that touches the DuckDB file goes through this package (design.md, "Storage rules").
"""

from gpuledger.warehouse.db import (
    WAREHOUSE_ENV,
    DEFAULT_WAREHOUSE,
    WarehouseError,
    apply_migrations,
    open_reader,
    open_writer,
    resolve_warehouse_path,
    schema_version,
    snapshot_path,
    transaction,
)
from gpuledger.warehouse.rollups import refresh_gpu_hourly, refresh_gpu_hourly_for
from gpuledger.warehouse.writes import (
    QuarantineRow,
    quarantine,
    register_gpus,
    replace_reference,
    table_counts,
    upsert,
    write_samples,
)

__all__ = [
    "WAREHOUSE_ENV",
    "WarehouseError",
    "DEFAULT_WAREHOUSE",
    "QuarantineRow",
    "apply_migrations",
    "open_reader",
    "open_writer",
    "quarantine",
    "refresh_gpu_hourly",
    "refresh_gpu_hourly_for",
    "register_gpus",
    "replace_reference",
    "table_counts",
    "resolve_warehouse_path",
    "schema_version",
    "snapshot_path",
    "transaction",
    "upsert",
    "write_samples",
]
