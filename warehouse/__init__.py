"""The DuckDB warehouse: schema migrations, serialized writers, non-blocking readers, upserts.

Everything that touches the DuckDB file goes through this package (design.md, "Storage rules").
"""

from warehouse.db import (
    WAREHOUSE_ENV,
    DEFAULT_WAREHOUSE,
    apply_migrations,
    open_reader,
    open_writer,
    resolve_warehouse_path,
    schema_version,
    snapshot_path,
)
from warehouse.writes import (
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
    "DEFAULT_WAREHOUSE",
    "QuarantineRow",
    "apply_migrations",
    "open_reader",
    "open_writer",
    "quarantine",
    "register_gpus",
    "replace_reference",
    "table_counts",
    "resolve_warehouse_path",
    "schema_version",
    "snapshot_path",
    "upsert",
    "write_samples",
]
