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

import codecs
import contextlib
import csv
import io
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

import polars as pl

from gpuledger.ingest.jobs.checks import JobLimits, job_problem, whole_number
from gpuledger.rules.clock import naive_utc, parse_duration_s, parse_utc, utc_now
from gpuledger.sql import load_sql
from gpuledger.warehouse import QuarantineRow
from gpuledger.warehouse.job_columns import JOB_CORE

SOURCE = "jobs-csv"
REQUIRED = ("job_id", "cluster", "project", "user", "gpu_model", "gpus", "start_time", "end_time")
OPTIONAL = ("submit_time", "name", "kind", "min_runtime", "priority", "state", "namespace")
JOB_SCHEMA = dict(JOB_CORE)
# Rows parsed and written at a time by `ingest jobs-csv`: memory stays flat in the file's length
# (BENCHMARKS.md "Job CSV and sacct imports: peak memory").
CHUNK_ROWS = 50_000
_EARLIER = load_sql(__package__, "csv_earlier_rows.sql")


class CsvHeaderError(ValueError):
    """The file's header lacks a required column: nothing can be read from it."""


@dataclass
class ParsedJobs:
    jobs: pl.DataFrame
    rejected: list[QuarantineRow] = field(default_factory=list)
    rows_read: int = 0
    lines: dict[tuple[str, str], int] = field(default_factory=dict)  # (cluster, job_id) -> its line


def _row_to_job(row: dict[str, str], now: datetime) -> dict:
    """One CSV row -> one jobs row; raises ValueError naming the field that is wrong."""
    for name in ("job_id", "cluster", "project", "gpu_model", "start_time"):
        if _text(row, name) is None:
            raise ValueError(f"{name}: empty; every job needs one")
    project = _text(row, "project")  # a project of the tree? checks.job_problem, as for every source
    gpus = gpu_count(row)
    start, end, submit = job_times(row)
    min_runtime_s = min_runtime_of(row)
    priority_value = priority_of(row)
    return {
        "cluster": _text(row, "cluster"), "job_id": _text(row, "job_id"), "project": project,
        "user_name": _text(row, "user"), "name": _text(row, "name"), "kind": _text(row, "kind"),
        "gpu_model": _text(row, "gpu_model"), "gpus": gpus, "min_runtime_s": min_runtime_s,
        "submit_time": submit, "start_time": start, "end_time": end,
        "state": _text(row, "state") or ("RUNNING" if end is None else "COMPLETED"),
        "priority": priority_value, "namespace": _text(row, "namespace"), "source": SOURCE,
        "updated_at": now,
    }


def _text(row: dict[str, str], name: str) -> str | None:
    """A field with spaces trimmed; None when absent or blank."""
    value = (row.get(name) or "").strip()
    return value or None


def _time_field(row: dict[str, str], name: str) -> datetime | None:
    value = _text(row, name)
    if value is None:
        return None
    try:
        return parse_utc(value)
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None


def gpu_count(row: dict[str, str]) -> float:
    """``gpus``: a positive, finite number; fractions allowed (a shared GPU, a MIG slice)."""
    try:
        gpus = float(_text(row, "gpus") or "")
    except ValueError:
        raise ValueError(f"gpus: {row.get('gpus')!r} is not a number") from None
    if not gpus > 0 or gpus != gpus or gpus == float("inf"):
        raise ValueError(f"gpus: {gpus} must be a positive number of GPUs (fractions allowed)")
    return gpus


def job_times(row: dict[str, str]) -> tuple[datetime, datetime | None, datetime | None]:
    """(start, end, submit), naive UTC: the end not before the start, the submit not after it."""
    start = _time_field(row, "start_time")
    end = _time_field(row, "end_time")
    submit = _time_field(row, "submit_time")
    if end is not None and end < start:
        raise ValueError(f"end_time: {end.isoformat()} is before start_time {start.isoformat()}")
    if submit is not None and submit > start:
        raise ValueError(f"submit_time: {submit.isoformat()} is after start_time {start.isoformat()}")
    return start, end, submit


def min_runtime_of(row: dict[str, str]) -> int | None:
    """``min_runtime`` in seconds (seconds, 4h, 2h30m or HH:MM:SS); None when blank."""
    min_runtime = _text(row, "min_runtime")
    try:
        return parse_duration_s(min_runtime) if min_runtime else None
    except ValueError as exc:
        raise ValueError(f"min_runtime: {exc}") from None


def priority_of(row: dict[str, str]) -> int | None:
    """``priority``: a whole number within the table's range; None when blank."""
    priority = _text(row, "priority")
    try:
        priority_value = int(priority) if priority else None
    except ValueError:
        raise ValueError(f"priority: {priority!r} is not an integer") from None
    if priority_value is not None:
        whole_number(priority_value, "priority")
    return priority_value


def parse_jobs_csv(
    text: str, location: str, projects: set[str], *, now: datetime | None = None,
    limits: JobLimits | None = None,
) -> ParsedJobs:
    """Parse the whole CSV text. ``location`` (the file name) prefixes every quarantine line number.
    Rows must also pass :func:`gpuledger.ingest.jobs.checks.job_problem` under ``limits`` (from the
    warehouse: checks.job_limits), else under the org tree's ``projects`` alone."""
    return _merged(iter_jobs_csv(io.StringIO(text), location, projects, now=now, limits=limits, chunk_rows=None))


def iter_jobs_csv(
    source: Iterable[str], location: str, projects: set[str], *, now: datetime | None = None,
    limits: JobLimits | None = None, chunk_rows: int | None = CHUNK_ROWS,
) -> Iterator[ParsedJobs]:
    """The CSV read from ``source`` (its lines, e.g. an open file) in chunks of at most
    ``chunk_rows`` records (None: one chunk), so memory stays flat however long the file is: only
    a chunk's rows and the line being read are held. A (cluster, job_id) repeated within a chunk
    keeps its first row (a later row with other values is refused); across chunks the caller
    compares against what the earlier chunks stored (:func:`earlier_chunk_repeats`). The header is
    checked before the first chunk is given (CsvHeaderError)."""
    now = naive_utc(now) if now else utc_now()
    limits = limits_with_projects(limits, projects)
    source_lines = _CountedLines(source)
    reader = csv.DictReader(source_lines, restkey="__extra__")
    header = read_header(reader, location)
    while True:
        good: dict[tuple[str, str], tuple[int, dict, str]] = {}
        rejected: list[QuarantineRow] = []
        rows_read = 0
        ended = False
        while chunk_rows is None or rows_read < chunk_rows:
            try:
                row = next(reader)
            except StopIteration:
                ended = True
                break
            except csv.Error as exc:  # e.g. a field over the csv module's limit: this row only
                rows_read += 1
                rejected.append(unreadable_row(exc, location, source_lines.count, source_lines.last))
                continue
            rows_read += 1
            line_no = reader.line_num  # physical line where this record ended (1 = header)
            raw = source_lines.last
            where = f"{location}:{line_no}"
            try:
                job = checked_job(row, header, now, limits)
            except ValueError as exc:
                rejected.append(QuarantineRow(SOURCE, where, _cut(raw), str(exc)))
                continue
            duplicate = keep_one_per_job(good, job, line_no, raw, where)
            if duplicate:
                rejected.append(duplicate)
        frame = pl.DataFrame([job for _, job, _ in good.values()], schema=JOB_SCHEMA, orient="row")
        if rows_read or ended:
            yield ParsedJobs(jobs=frame, rejected=rejected, rows_read=rows_read,
                             lines={key: line_no for key, (line_no, _, _) in good.items()})
        if ended:
            return


def _merged(chunks: Iterable[ParsedJobs]) -> ParsedJobs:
    parts = list(chunks)
    if len(parts) == 1:
        return parts[0]
    return ParsedJobs(jobs=pl.concat([p.jobs for p in parts]), rejected=[r for p in parts for r in p.rejected],
                      rows_read=sum(p.rows_read for p in parts))


def earlier_chunk_repeats(con, parsed: ParsedJobs, location: str) -> ParsedJobs:
    """``parsed`` (one chunk) without the jobs an earlier chunk of the same import already stored:
    with other values a quarantine row each (as within a chunk), the same values again dropped
    silently (a harmless repeat). The import's rows are known by their ``updated_at`` (the import's now)."""
    if parsed.jobs.is_empty():
        return parsed
    now = parsed.jobs["updated_at"][0]
    con.register("_csv_chunk_keys", parsed.jobs.select("cluster", "job_id").to_arrow())
    try:
        stored = con.sql(_EARLIER, params={"source": SOURCE, "now": now}).pl()
    finally:
        con.unregister("_csv_chunk_keys")
    if stored.is_empty():
        return parsed
    columns = [c for c in JOB_SCHEMA if c != "updated_at"]
    before = {(r["cluster"], r["job_id"]): r for r in stored.select(columns).iter_rows(named=True)}
    keep, rejected = [], list(parsed.rejected)
    for job in parsed.jobs.iter_rows(named=True):
        earlier = before.get((job["cluster"], job["job_id"]))
        keep.append(earlier is None)  # the same values again: already stored, a harmless repeat
        if earlier is not None and any(earlier[c] != job[c] for c in columns):
            line_no = parsed.lines.get((job["cluster"], job["job_id"]), 0)
            rejected.append(QuarantineRow(
                SOURCE, f"{location}:{line_no}", "",
                f"job_id: {job['job_id']!r} on cluster {job['cluster']!r} already given earlier in the file "
                "with other values; keep one row per job"))
    return ParsedJobs(jobs=parsed.jobs.filter(pl.Series(keep, dtype=pl.Boolean)), rejected=rejected,
                      rows_read=parsed.rows_read, lines=parsed.lines)


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


def unreadable_row(exc: csv.Error, location: str, bad_line: int, raw: str) -> QuarantineRow:
    """The quarantine row for a line the csv module cannot read; ``bad_line`` is the line the reader
    stopped inside, ``raw`` its text. The raw text is cut (a runaway field can be megabytes)."""
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
    """The source's lines for csv.reader, counting how many it has taken (the physical line number
    of a row the reader fails on: its own ``line_num`` lags by the failing line) and keeping the
    last one (the raw text a quarantine row shows): nothing else of the file is held."""

    def __init__(self, lines: Iterable[str]) -> None:
        self._lines = iter(lines)
        self.count = 0
        self.last = ""

    def __iter__(self):
        return self

    def __next__(self) -> str:
        line = next(self._lines)
        self.count += 1
        self.last = line.rstrip("\r\n")
        return line


MAX_RAW_CHARS = 4096  # a quarantined line is kept up to this long (a runaway field can be megabytes)


def _cut(raw: str) -> str:
    return raw if len(raw) <= MAX_RAW_CHARS else raw[:MAX_RAW_CHARS] + f"… ({len(raw):,} characters)"


def read_jobs_csv(
    path: Path, projects: set[str], *, now: datetime | None = None, limits: JobLimits | None = None
) -> ParsedJobs:
    """The whole file as one ParsedJobs (read as a stream: the text is never held whole)."""
    with open_jobs_csv(path) as lines:
        return _merged(iter_jobs_csv(lines, str(path), projects, now=now, limits=limits, chunk_rows=None))


@contextlib.contextmanager
def open_jobs_csv(path: Path) -> Iterator[Iterable[str]]:
    """The file's lines, decoded as UTF-8 (a leading BOM dropped), after one pass that checks it is
    UTF-8 text throughout in 1 MiB blocks (so a bad byte near the end refuses the file before any
    of it is written, without holding it). CsvHeaderError for a file that cannot be read."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    offset = 0
    try:
        with open(path, "rb") as fh:
            while block := fh.read(1 << 20):
                try:
                    decoder.decode(block)
                except UnicodeDecodeError as exc:
                    raise CsvHeaderError(f"{path}: not UTF-8 text ({exc.reason} at byte {offset + exc.start})") from None
                offset += len(block)
            try:
                decoder.decode(b"", final=True)
            except UnicodeDecodeError as exc:
                raise CsvHeaderError(f"{path}: not UTF-8 text ({exc.reason} at byte {offset + exc.start})") from None
        fh = open(path, encoding="utf-8-sig", newline="")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise CsvHeaderError(f"{path}: cannot read the file ({exc.strerror or exc})") from None
    with fh:
        yield fh
