"""Where the warehouse file is: the option, else $GPULEDGER_WAREHOUSE, else ./data/gpuledger.duckdb.
Light on purpose (no DuckDB import): every CLI command resolves the path before doing anything."""

from __future__ import annotations

import os
from pathlib import Path

WAREHOUSE_ENV = "GPULEDGER_WAREHOUSE"
DEFAULT_WAREHOUSE = Path("data/gpuledger.duckdb")


def resolve_warehouse_path(path: str | os.PathLike | None = None) -> Path:
    """The warehouse file: the argument, else $GPULEDGER_WAREHOUSE, else ./data/gpuledger.duckdb."""
    chosen = path or os.environ.get(WAREHOUSE_ENV) or DEFAULT_WAREHOUSE
    return Path(chosen)
