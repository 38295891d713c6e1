"""Explicit inventory entries: retiring a device (decommissioned, moved away) so that it stops
being capacity at a known time rather than at its last sample plus the grace (analytics/capacity.py).
"""

from __future__ import annotations

from datetime import datetime

import duckdb
from gpuledger.warehouse.db import transaction

from gpuledger.errors import UsageError


def retire_gpu(con: duckdb.DuckDBPyConnection, gpu_uuid: str, *, at: datetime | None,
               cluster: str | None = None) -> tuple[str, int]:
    """Set ``retired_at`` (naive UTC; None clears it) on every row of the physical GPU
    ``gpu_uuid`` (its MIG instances too). Returns (cluster, rows updated). The UUID must name
    one device; ``cluster`` picks one when it is in several clusters."""
    clusters = [c for (c,) in con.execute(
        "SELECT DISTINCT cluster FROM gpus WHERE gpu_uuid = ? AND (? IS NULL OR cluster = ?) ORDER BY 1",
        [gpu_uuid, cluster, cluster]).fetchall()]
    if not clusters:
        where = f" in cluster {cluster!r}" if cluster else ""
        raise UsageError(f"no GPU with UUID {gpu_uuid!r}{where} in the warehouse; `gpuledger warehouse summary` "
                         "counts the devices it holds")
    if len(clusters) > 1:
        raise UsageError(f"GPU {gpu_uuid!r} is in clusters {', '.join(clusters)}; name one with --cluster")
    with transaction(con):
        rows = con.execute("UPDATE gpus SET retired_at = ? WHERE gpu_uuid = ? AND cluster = ?",
                           [at, gpu_uuid, clusters[0]]).fetchall()
    return clusters[0], int(rows[0][0]) if rows else 0
