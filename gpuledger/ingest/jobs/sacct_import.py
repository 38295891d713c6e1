"""`ingest slurm`'s read and write: a sacct export (a file, or a live call's output) read a batch of
jobs at a time (slurm.iter_json: ijson's C parser; slurm.iter_parsable: line by line) and each
batch written in its own transaction, so memory follows the batch, not the export (BENCHMARKS.md
"Job imports: peak memory"). Per-record checks and quarantine are write_batch's, as for a whole
export; the device tier rules run once at the end.

A requeued job's runs (``sacct -D``: one record per run, same JobID) may fall in two batches:
a record whose JobID this import already stored is told apart from it as one file's runs are
(slurm.split_runs: the later run keeps the JobID), and a run that started before the stored run
of that JobID (from any import) is an earlier run, never an overwrite. Re-importing is idempotent.

A failure after some batches were written (a full disk, a document that turns out not to be JSON
further in) says how many job records were stored before it; rerunning the import completes it."""

from __future__ import annotations

import io
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import duckdb
import polars as pl

from gpuledger import warehouse
from gpuledger.ingest.jobs.slurm import (
    CHUNK_JOBS,
    SOURCE,
    SacctFormatError,
    SlurmBatch,
    detect_format,
    iter_json,
    iter_parsable,
    run_id,
    write_batch,
)
from gpuledger.ingest.tiers import apply_tier_rules
from gpuledger.warehouse.db import WarehouseDiskFullError, disk_full

_FIRST_SHOWN = 20  # rejects kept to print; the rest are counted (and in the quarantine table)


@dataclass
class SacctImport:
    """What one import read and wrote, summed over its batches."""

    records_read: int = 0
    jobs_offered: int = 0
    jobs_new: int = 0
    skipped_no_gpu: int = 0
    skipped_steps: int = 0
    quarantined: int = 0
    first_rejected: list = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def summary(self, origin: str) -> str:
        return (f"{origin}: {self.records_read} job records, {self.jobs_offered} GPU jobs written "
                f"({self.jobs_new} new, {self.jobs_offered - self.jobs_new} updated), "
                f"{self.skipped_no_gpu} without GPUs skipped, {self.skipped_steps} step lines skipped, "
                f"{self.quarantined} quarantined")


@contextmanager
def open_export(path: Path, fmt: str = "auto", *, cluster: str | None = None, tz: str = "UTC",
                now: datetime | None = None, chunk_jobs: int | None = None) -> Iterator[Iterator[SlurmBatch]]:
    """The batches of the export at ``path`` (``fmt`` json, parsable or auto: from its first
    character), ``chunk_jobs`` job records each (default CHUNK_JOBS). OSError for a file that
    cannot be read."""
    chunk_jobs = chunk_jobs or CHUNK_JOBS
    with open(path, "rb") as fh:
        chosen = detect_format(fh.read(4096).decode("utf-8", errors="replace")) if fmt == "auto" else fmt
        fh.seek(0)
        if chosen == "json":
            yield iter_json(fh, origin=str(path), cluster=cluster, now=now, chunk_jobs=chunk_jobs)
        elif chosen == "parsable":
            lines = io.TextIOWrapper(fh, encoding="utf-8-sig", errors="replace", newline="")
            yield iter_parsable(lines, origin=str(path), cluster=cluster, tz=tz, now=now, chunk_jobs=chunk_jobs)
            lines.detach()
        else:
            raise ValueError(f"format must be json, parsable or auto, not {fmt!r}")


def text_batches(text: str, fmt: str, *, origin: str, cluster: str | None = None, tz: str = "UTC",
                 now: datetime | None = None, chunk_jobs: int | None = None) -> Iterator[SlurmBatch]:
    """The batches of sacct output already in memory (a live call's)."""
    chunk_jobs = chunk_jobs or CHUNK_JOBS
    chosen = detect_format(text) if fmt == "auto" else fmt
    if chosen == "json":
        return iter_json(io.BytesIO(text.encode("utf-8", errors="replace")), origin=origin, cluster=cluster,
                         now=now, chunk_jobs=chunk_jobs)
    if chosen == "parsable":
        return iter_parsable(io.StringIO(text), origin=origin, cluster=cluster, tz=tz, now=now, chunk_jobs=chunk_jobs)
    raise ValueError(f"format must be json, parsable or auto, not {fmt!r}")


def import_batches(con, batches: Iterator[SlurmBatch], origin: str) -> SacctImport:
    """Write every batch (each its own transaction), then the tier rules for the clusters written."""
    out, clusters = SacctImport(), set()
    try:
        for batch in batches:
            with warehouse.transaction(con):
                batch.jobs = earlier_runs(con, batch.jobs)
                result = write_batch(con, batch, tier_rules=False)
            clusters |= set(batch.jobs["cluster"].unique().to_list()) if batch.jobs.height else set()
            _add(out, batch, result)
            warehouse.yield_to_readers(con)  # between batches, a waiting reader gets in
        with warehouse.transaction(con):
            for cluster in sorted(clusters):
                apply_tier_rules(con, cluster=cluster)  # partition rules price the jobs without devices
    except SacctFormatError as exc:
        if not out.records_read:
            raise
        raise SacctFormatError(f"{exc}; the {out.records_read:,} job records before it were stored (re-importing the "
                               "fixed export stores none twice)") from None
    except Exception as exc:
        full = disk_full(Path(getattr(con, "_path", origin)), exc) if out.records_read else None
        if full is None:
            raise
        said = str(full).split(": this write was rolled back")[0]
        raise WarehouseDiskFullError(
            f"{said}: the batch being written was rolled back; the first {out.records_read:,} job records of {origin} "
            "were stored before it. Free space on that disk, then rerun the import (nothing is stored twice)") from exc
    return out


def _add(out: SacctImport, batch: SlurmBatch, result) -> None:
    out.records_read += batch.records_read
    out.jobs_offered += result.jobs_offered
    out.jobs_new += result.jobs_new
    out.skipped_no_gpu += batch.skipped_no_gpu
    out.skipped_steps += batch.skipped_steps
    out.quarantined += len(batch.rejected)
    out.first_rejected += batch.rejected[:_FIRST_SHOWN - len(out.first_rejected)]
    out.warnings += batch.warnings


def earlier_runs(con: duckdb.DuckDBPyConnection, jobs: pl.DataFrame) -> pl.DataFrame:
    """``jobs`` (one batch, runs within it already split) with each record that is an earlier run
    than the row stored under its JobID renamed to its run id (slurm.run_id): against a row this
    import stored (an earlier batch of the same export), ordered as split_runs orders one file's
    runs (by start, a run not yet started last, else by submit); against a row of another import,
    only when both started and this one first (a run's start never moves back, so a run that
    started earlier is another run; a job seen pending before and started now is the same run)."""
    if jobs.is_empty():
        return jobs
    con.register("_sacct_batch_keys", jobs.select("cluster", "job_id").to_arrow())
    try:
        stored = con.execute(
            "SELECT j.cluster, j.job_id, j.start_time, j.submit_time, j.updated_at FROM jobs j "
            "JOIN _sacct_batch_keys k ON j.cluster = k.cluster AND j.job_id = k.job_id WHERE j.source = ?",
            [SOURCE]).fetchall()
    finally:
        con.unregister("_sacct_batch_keys")
    if not stored:
        return jobs
    by_key = {(c, j): (start, submit, updated) for c, j, start, submit, updated in stored}
    ids = []
    for cluster, job_id, start, submit, now in jobs.select(
            "cluster", "job_id", "start_time", "submit_time", "updated_at").iter_rows():
        have = by_key.get((cluster, job_id))
        ids.append(run_id(job_id, start or submit) if have and _is_earlier(start, submit, now, *have) else job_id)
    return jobs.with_columns(job_id=pl.Series(ids, dtype=pl.String))


def _is_earlier(start, submit, now, stored_start, stored_submit, stored_updated) -> bool:
    if start is None and submit is None:
        return False  # nothing to name a run by: the record updates the stored row
    if stored_updated == now:  # this import's own row: another run in the same export
        def key(s, sub):
            return (s is None, s or sub or datetime.min)

        return key(start, submit) < key(stored_start, stored_submit)
    return start is not None and stored_start is not None and start < stored_start
