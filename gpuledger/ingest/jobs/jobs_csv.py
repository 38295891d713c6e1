"""The generic job CSV: one row per job, for clusters whose scheduler gpuledger does not read.

Columns (header names; order free):
  required  job_id, cluster, project, user, gpu_model, gpus, start_time, end_time
  optional  submit_time, name, kind, min_runtime, priority, state, namespace
``gpus`` may be fractional (0.46 of a shared GPU, 0.142857 for a 1g MIG slice). Times are ISO-8601
(an offset or Z is converted to UTC; none means UTC) or epoch seconds; an empty ``end_time`` means
still running. ``min_runtime`` is seconds or 4h / 2h30m / HH:MM:SS.

A row that cannot be read goes to quarantine with its line number and reason; the rows beside it
land. Importing the same file again changes nothing (jobs are keyed by cluster + job_id).
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

import polars as pl

from gpuledger.ingest.jobs.checks import JobLimits, job_problem, whole_number
from gpuledger.rules.clock import naive_utc, parse_duration_s, parse_utc, utc_now
from gpuledger.warehouse import QuarantineRow
from gpuledger.warehouse.job_columns import JOB_CORE

SOURCE = "jobs-csv"
REQUIRED = ("job_id", "cluster", "project", "user", "gpu_model", "gpus", "start_time", "end_time")
OPTIONAL = ("submit_time", "name", "kind", "min_runtime", "priority", "state", "namespace")
JOB_SCHEMA = dict(JOB_CORE)


class CsvHeaderError(ValueError):
    """The file's header lacks a required column: nothing can be read from it."""


@dataclass
class ParsedJobs:
    jobs: pl.DataFrame
    rejected: list[QuarantineRow] = field(default_factory=list)
    rows_read: int = 0


def _row_to_job(row: dict[str, str], now: datetime) -> dict:
    """One CSV row -> one jobs row; raises ValueError naming the field that is wrong."""

    def text(name: str) -> str | None:
        value = (row.get(name) or "").strip()
        return value or None

    def time_field(name: str) -> datetime | None:
        value = text(name)
        if value is None:
            return None
        try:
            return parse_utc(value)
        except ValueError as exc:
            raise ValueError(f"{name}: {exc}") from None

    for name in ("job_id", "cluster", "project", "gpu_model", "start_time"):
        if text(name) is None:
            raise ValueError(f"{name}: empty; every job needs one")
    project = text("project")  # a project of the tree? checks.job_problem, as for every source
    try:
        gpus = float(text("gpus") or "")
    except ValueError:
        raise ValueError(f"gpus: {row.get('gpus')!r} is not a number") from None
    if not gpus > 0 or gpus != gpus or gpus == float("inf"):
        raise ValueError(f"gpus: {gpus} must be a positive number of GPUs (fractions allowed)")
    start, end, submit = time_field("start_time"), time_field("end_time"), time_field("submit_time")
    if end is not None and end < start:
        raise ValueError(f"end_time: {end.isoformat()} is before start_time {start.isoformat()}")
    if submit is not None and submit > start:
        raise ValueError(f"submit_time: {submit.isoformat()} is after start_time {start.isoformat()}")
    min_runtime = text("min_runtime")
    try:
        min_runtime_s = parse_duration_s(min_runtime) if min_runtime else None
    except ValueError as exc:
        raise ValueError(f"min_runtime: {exc}") from None
    priority = text("priority")
    try:
        priority_value = int(priority) if priority else None
    except ValueError:
        raise ValueError(f"priority: {priority!r} is not an integer") from None
    if priority_value is not None:
        whole_number(priority_value, "priority")
    return {
        "cluster": text("cluster"), "job_id": text("job_id"), "project": project,
        "user_name": text("user"), "name": text("name"), "kind": text("kind"),
        "gpu_model": text("gpu_model"), "gpus": gpus, "min_runtime_s": min_runtime_s,
        "submit_time": submit, "start_time": start, "end_time": end,
        "state": text("state") or ("RUNNING" if end is None else "COMPLETED"),
        "priority": priority_value, "namespace": text("namespace"), "source": SOURCE,
        "updated_at": now,
    }


def parse_jobs_csv(
    text: str, location: str, projects: set[str], *, now: datetime | None = None,
    limits: JobLimits | None = None,
) -> ParsedJobs:
    """Parse the whole CSV text. ``location`` (the file name) prefixes every quarantine line number.
    Rows must also pass :func:`gpuledger.ingest.jobs.checks.job_problem` under ``limits`` (from the
    warehouse: checks.job_limits), else under the org tree's ``projects`` alone."""
    now = naive_utc(now) if now else utc_now()
    limits = limits_with_projects(limits, projects)
    lines = text.splitlines()
    source_lines = _CountedLines(text)
    reader = csv.DictReader(source_lines, restkey="__extra__")
    header = read_header(reader, location)
    good: dict[tuple[str, str], tuple[int, dict, str]] = {}
    rejected: list[QuarantineRow] = []
    rows_read = 0
    while True:
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:  # e.g. a field over the csv module's limit: this row only
            rows_read += 1
            rejected.append(unreadable_row(exc, location, source_lines.count, lines))
            continue
        rows_read += 1
        line_no = reader.line_num  # physical line where this record ended (1 = header)
        raw = _line_at(lines, line_no)
        where = f"{location}:{line_no}"
        try:
            job = checked_job(row, header, now, limits)
        except ValueError as exc:
            rejected.append(QuarantineRow(SOURCE, where, raw, str(exc)))
            continue
        duplicate = keep_one_per_job(good, job, line_no, raw, where)
        if duplicate:
            rejected.append(duplicate)
    frame = pl.DataFrame([job for _, job, _ in good.values()], schema=JOB_SCHEMA, orient="row")
    return ParsedJobs(jobs=frame, rejected=rejected, rows_read=rows_read)


def limits_with_projects(limits: JobLimits | None, projects: set[str]) -> JobLimits:
    """The limits rows are checked under; the org tree's ``projects`` when they name none."""
    if limits is None:
        return JobLimits(projects=frozenset(projects))
    if limits.projects is None:
        return replace(limits, projects=frozenset(projects))
    return limits


def read_header(reader: csv.DictReader, location: str) -> list[str]:
    """The header's column names (spaces trimmed; the reader is told them), refused when a required
    column is missing: nothing can be read without it."""
    try:
        fieldnames = reader.fieldnames
    except csv.Error as exc:
        raise CsvHeaderError(f"{location}:1: the header cannot be read as CSV ({exc})") from None
    header = [h.strip() for h in (fieldnames or [])]
    reader.fieldnames = header
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise CsvHeaderError(
            f"{location}:1: header lacks required column(s) {', '.join(missing)}; "
            f"expected at least {', '.join(REQUIRED)}"
        )
    return header


def _line_at(lines: list[str], line_no: int) -> str:
    """Physical line ``line_no`` (1-based) of the file, "" when there is none."""
    return lines[line_no - 1] if 0 < line_no <= len(lines) else ""


def unreadable_row(exc: csv.Error, location: str, bad_line: int, lines: list[str]) -> QuarantineRow:
    """The quarantine row for a line the csv module cannot read; ``bad_line`` is the line the reader
    stopped inside. The raw text is cut (a runaway field can be megabytes)."""
    raw = _line_at(lines, bad_line)
    return QuarantineRow(SOURCE, f"{location}:{bad_line}", _cut(raw),
                         f"unreadable CSV row ({exc}, line {len(raw):,} characters)")


def checked_job(row: dict, header: list[str], now: datetime, limits: JobLimits) -> dict:
    """One CSV record → its jobs row, once it has the header's shape and passes job_problem;
    raises ValueError saying what is wrong."""
    if row.get("__extra__"):
        raise ValueError(f"{len(header) + len(row['__extra__'])} fields but the header has {len(header)}")
    absent = [c for c in header if row.get(c) is None]
    if absent:
        raise ValueError(f"missing column(s) {', '.join(absent)} (row has too few fields)")
    job = _row_to_job(row, now)
    problem = job_problem(job, limits, now=now)
    if problem:
        raise ValueError(problem)
    return job


def keep_one_per_job(
    good: dict[tuple[str, str], tuple[int, dict, str]], job: dict, line_no: int, raw: str, where: str
) -> QuarantineRow | None:
    """Keep the first row of each (cluster, job_id) in ``good``. The same line again is a harmless
    repeat; a later row with other values is refused (the quarantine row is returned)."""
    key = (job["cluster"], job["job_id"])
    if key in good and good[key][2] != raw:
        return QuarantineRow(
            SOURCE, where, raw,
            f"job_id: {key[1]!r} on cluster {key[0]!r} already given at line {good[key][0]} "
            "with other values; keep one row per job",
        )
    good.setdefault(key, (line_no, job, raw))
    return None


class _CountedLines:
    """The text's lines for csv.reader, counting how many it has taken (the physical line number
    of a row the reader fails on: its own ``line_num`` lags by the failing line)."""

    def __init__(self, text: str) -> None:
        self._lines = iter(io.StringIO(text))
        self.count = 0

    def __iter__(self):
        return self

    def __next__(self) -> str:
        line = next(self._lines)
        self.count += 1
        return line


MAX_RAW_CHARS = 4096  # a quarantined line is kept up to this long (a runaway field can be megabytes)


def _cut(raw: str) -> str:
    return raw if len(raw) <= MAX_RAW_CHARS else raw[:MAX_RAW_CHARS] + f"… ({len(raw):,} characters)"


def read_jobs_csv(
    path: Path, projects: set[str], *, now: datetime | None = None, limits: JobLimits | None = None
) -> ParsedJobs:
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise CsvHeaderError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise CsvHeaderError(f"{path}: cannot read the file ({exc.strerror or exc})") from None
    return parse_jobs_csv(text, str(path), projects, now=now, limits=limits)
