"""`ingest jobs-csv`'s write: a job CSV read and written a chunk at a time, each chunk its own
transaction, so memory grows with neither the file's text nor an uncommitted transaction
(BENCHMARKS.md "Job CSV import: peak memory"). A chunk is all or nothing; a failure (a full disk)
says which lines were stored before it, and a rerun completes the import (re-importing is
idempotent)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from gpuledger import warehouse
from gpuledger.ingest.device_links import link_devices_for_jobs
from gpuledger.ingest.jobs.checks import JobLimits
from gpuledger.ingest.jobs.jobs_csv import CHUNK_ROWS, earlier_chunk_repeats, iter_jobs_csv, open_jobs_csv
from gpuledger.ingest.tiers import apply_tier_rules
from gpuledger.warehouse.db import WarehouseDiskFullError, disk_full


@dataclass
class CsvImport:
    rows_read: int = 0
    imported: int = 0
    quarantined: int = 0
    first_rejected: list = field(default_factory=list)  # up to 20, to show


def import_jobs_csv(con, path: Path, projects: set[str], *, limits: JobLimits | None = None,
                    chunk_rows: int = CHUNK_ROWS) -> CsvImport:
    """Import ``path`` into ``jobs`` (bad rows quarantined with their line), ``chunk_rows`` at a
    time, all in one transaction; device links made per chunk, tier rules once. CsvHeaderError for a
    file that cannot be read at all (nothing written)."""
    out = CsvImport()
    with open_jobs_csv(path) as lines:
        try:
            for parsed in iter_jobs_csv(lines, str(path), projects, limits=limits, chunk_rows=chunk_rows):
                with warehouse.transaction(con):
                    parsed = earlier_chunk_repeats(con, parsed, str(path))
                    warehouse.upsert(con, "jobs", parsed.jobs)
                    link_devices_for_jobs(con, parsed.jobs)
                    warehouse.quarantine(con, parsed.rejected)
                out.rows_read += parsed.rows_read
                out.imported += parsed.jobs.height
                out.quarantined += len(parsed.rejected)
                out.first_rejected += parsed.rejected[:20 - len(out.first_rejected)]
                warehouse.yield_to_readers(con)  # between chunks, a waiting reader gets in
            with warehouse.transaction(con):
                apply_tier_rules(con)  # cluster rules price jobs without devices
        except Exception as exc:
            if not out.rows_read:
                raise
            full = disk_full(Path(getattr(con, "_path", path)), exc)
            if full is None:
                raise
            said = str(full).split(": this write was rolled back")[0]
            raise WarehouseDiskFullError(
                f"{said}: the chunk being written was rolled back; the first {out.rows_read:,} rows of {path} "
                f"({out.imported:,} jobs) were stored before it. Free space on that disk, then rerun the import "
                "(the rows stored are not imported twice)") from exc
    return out
