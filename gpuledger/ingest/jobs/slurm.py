"""Slurm job records from ``sacct``: a file export or a live call, both into the ``jobs`` table.

Two formats are read, with one mapping:

* ``sacct -a -X --parsable2 --format=<SACCT_FIELDS>`` — ``|``-separated, one header line. Columns
  are found by header name, so any order and extra columns work; JobID, Account, State and one of
  AllocTRES / ReqTRES are required. Times are Slurm's local-time strings
  (``2026-11-29T21:22:33``); they are read in the zone given as ``tz`` (default UTC) and stored
  as naive UTC. ``Unknown`` / ``None`` / empty mean no time (a running job has ``End=Unknown``).
* ``sacct -a -X --json`` — Slurm 22.05's ``openapi/dbv0.0.38`` document (times are epoch
  seconds, 0 = not set) and the later shapes (``{"set": .., "number": ..}`` numbers, a list of
  states) alike. No time zone is involved.

Mapping: Account → project, User → user_name, JobName → name, the GPU count and model from the
TRES string (``gres/gpu=2``, ``gres/gpu:h100=2`` → gpus 2, gpu_model H100; MIG types such as
``gres/gpu:nvidia_a100_3g.40gb=1`` count 3/7 of a GPU each, an A30's ``2g.12gb`` 2/4: the rule lives
in gpuledger.rules.mig). AllocTRES is used once a job has an
allocation, ReqTRES before that (pending, or cancelled before it started), so ``gpus`` is what
the job holds or asks for. State "CANCELLED by 123" → CANCELLED. The cluster is the export's own
(Cluster column / JSON ``cluster``); the caller's ``cluster`` fills it where the export has none.

Jobs without GPUs are skipped and counted, as are job steps (``123.batch``: sacct without -X).
A line or job that cannot be read goes to quarantine (source ``slurm-sacct``, location
``file:line`` / ``file:job ID`` / ``sacct:ID``, the reason naming the field) and the others land.
Writes are upserts on (cluster, job_id): re-importing changes no row counts, and a newer export
updates a job (RUNNING → COMPLETED, End filled in).
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from fractions import Fraction
from typing import BinaryIO
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import duckdb
import polars as pl

from gpuledger.errors import printable
from gpuledger.ingest.device_links import link_devices_for_jobs
from gpuledger.ingest.jobs.checks import job_limits, screen_jobs, whole_number
from gpuledger.ingest.scheduler_reasons import NO_REASON, SLURM, SchedulerReason, record_reasons
from gpuledger.rules.clock import naive_utc, utc_now
from gpuledger.rules.mig import find_profile, mig_fraction
from gpuledger.rules.model_keys import gpu_model_key
from gpuledger.sql import load_sql
from gpuledger.warehouse import QuarantineRow, quarantine, upsert
from gpuledger.warehouse.job_columns import JOB_CORE, job_schema

SOURCE = "slurm-sacct"
LIVE_ORIGIN = "sacct"
# Job records per batch of a streamed export (~2 KB each as sacct --json; 5,000 peaked at 310 MiB where
# 20,000 did at 455 MiB on 50,000 jobs): memory follows the batch
CHUNK_JOBS = 5_000

# The documented field list for parsable exports and the live call. TimelimitRaw is minutes
# (or UNLIMITED / Partition_Limit); QOS, Partition and the time limit ride along in the parsed
# frame (qos, partition, time_limit_s) but reach the warehouse only where `jobs` has those columns.
SACCT_FIELDS = (
    "JobID", "JobName", "Cluster", "Account", "User", "AllocTRES", "ReqTRES",
    "Submit", "Start", "End", "State", "QOS", "Partition", "Priority", "TimelimitRaw", "Reason",
)
REQUIRED_FIELDS = ("JobID", "Account", "State")
_FREE_TEXT_FIELDS = ("JobName", "Comment", "AdminComment", "SystemComment", "WCKey", "Reason")

JOB_SCHEMA: dict[str, pl.DataType] = {
    **JOB_CORE,
    # scheduler_job: the JobID every run of a requeued job shares (job_id: one run)
    **job_schema("qos", "partition", "time_limit_s", "scheduler_job"),
    # Where the row came from and its text, for the write-time checks' quarantine (never written).
    "_location": pl.String, "_raw": pl.String,
    # the scheduler's reason for a pending job (scheduler_reasons, migration 027; never a jobs column)
    "_reason": pl.String,
}

_NO_TIME = {"", "unknown", "none", "n/a"}
_JOB_ID = re.compile(r"^\d+(?:_(?:\d+|\[[0-9,%\-]+\]))?(?:\+\d+)?$")
_STEP_ID = re.compile(r"^\d+(?:_(?:\d+|\[[0-9,%\-]+\]))?(?:\+\d+)?\.[A-Za-z0-9_\-]+$")
_STATE = re.compile(r"^[A-Z][A-Z_]*$")


class SacctFormatError(ValueError):
    """The export as a whole cannot be read (no header, not JSON): nothing in it can be imported."""


class SacctCallError(RuntimeError):
    """Running ``sacct`` failed: not installed, no controller/database, or a bad time range."""


@dataclass
class SlurmBatch:
    """What one export held: job rows for ``jobs``, rejects for ``quarantine``, and counts."""

    jobs: pl.DataFrame
    rejected: list[QuarantineRow] = field(default_factory=list)
    records_read: int = 0      # job records seen (steps excluded)
    skipped_no_gpu: int = 0    # jobs that neither hold nor ask for a GPU
    skipped_steps: int = 0     # step lines (123.batch, 123.0) of an export made without -X
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class WriteResult:
    jobs_offered: int
    jobs_new: int
    quarantined: int


# --- field readers: each raises ValueError naming the field and what would fix it ---------------


def parse_tres_gpus(tres: str, field_name: str = "AllocTRES") -> tuple[float, str | None]:
    """GPUs (fractional for MIG slices) and model key in a TRES string; (0, None) without GPUs.

    ``billing=21,cpu=1,gres/gpu:h100=2,gres/gpu=2,node=1`` → (2.0, "H100"). Several types in one
    job give their model keys joined by "+" (``A100+H100``), sorted.
    """
    total: int | None = None
    typed: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in tres.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"{field_name}: {item!r} is not key=value in {tres!r}")
        key = key.strip().lower()
        if key != "gres/gpu" and not key.startswith("gres/gpu:"):
            continue
        try:
            count = int(value)
        except ValueError:
            raise ValueError(f"{field_name}: GPU count {value!r} in {item!r} is not a whole number") from None
        if count < 0:
            raise ValueError(f"{field_name}: negative GPU count in {item!r}")
        if key == "gres/gpu":
            total = count
        else:
            typed[key.removeprefix("gres/gpu:")] = typed.get(key.removeprefix("gres/gpu:"), 0) + count
    return _gpus_and_model(total, typed)


def _gpus_and_model(total: int | None, typed: dict[str, int]) -> tuple[float, str | None]:
    typed = {t: c for t, c in typed.items() if c > 0}
    models = sorted({gpu_model_key(t) or t.upper() for t in typed})
    model = "+".join(models) if models else None
    mig_share = {t: mig_fraction(find_profile(t), gpu_model_key(t)) for t in typed if find_profile(t)}
    if mig_share:
        # A MIG slice counts by its compute slices of its model (gpuledger.rules.mig: 3g = 3/7, A30 2g = 2/4).
        unknown = [t for t, share in mig_share.items() if share is None]
        if unknown:
            raise ValueError(f"GPU type {unknown[0]!r}: more MIG slices than its GPU model has")
        gpus = sum(Fraction(mig_share[t]).limit_denominator(28) * c for t, c in typed.items() if t in mig_share)
        gpus += sum(c for t, c in typed.items() if t not in mig_share)
        return float(gpus), model
    whole = sum(typed.values())
    return float(max(total or 0, whole)), model


def _local_time(value: str, field_name: str, zone: ZoneInfo) -> datetime | None:
    text = value.strip()
    if text.lower() in _NO_TIME:
        return None
    try:
        parsed = datetime.strptime(text, "%Y-%m-%dT%H:%M:%S")
    except ValueError:
        raise ValueError(
            f"{field_name}: {text!r} is not a Slurm time (YYYY-MM-DDTHH:MM:SS, Unknown or None); "
            "export with SLURM_TIME_FORMAT unset or =standard"
        ) from None
    return parsed.replace(tzinfo=zone).astimezone(UTC).replace(tzinfo=None)


def _state(value: str | None, field_name: str = "State") -> str:
    text = (value or "").strip()
    # "CANCELLED by 123" carries who cancelled; the state is the first word.
    word = text.split()[0] if text else ""
    if not _STATE.match(word):
        raise ValueError(f"{field_name}: {text!r} is not a Slurm job state (e.g. RUNNING, COMPLETED)")
    return word


def _optional_int(value: str, field_name: str) -> int | None:
    text = value.strip()
    if not text:
        return None
    try:
        number = int(text)
    except ValueError:
        raise ValueError(f"{field_name}: {text!r} is not a whole number") from None
    return whole_number(number, field_name)


_SLURM_DURATION = re.compile(r"^(?:(?P<d>\d+)-)?(?P<a>\d+)(?::(?P<b>\d+))?(?::(?P<c>\d+))?$")


def _slurm_duration_s(value: str, field_name: str) -> int | None:
    """A Slurm time (``--time-min``): minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS → seconds."""
    text = (value or "").strip()
    if text.lower() in _NO_TIME or text.upper() in ("UNLIMITED", "INFINITE"):
        return None
    match = _SLURM_DURATION.match(text)
    if not match:
        raise ValueError(f"{field_name}: {text!r} is not a Slurm time (minutes, HH:MM:SS or D-HH:MM:SS)")
    d, a, b, c = (int(x) if x else None for x in match.group("d", "a", "b", "c"))
    if d is not None:  # D-HH[:MM[:SS]]
        return ((d * 24 + a) * 60 + (b or 0)) * 60 + (c or 0)
    if c is not None:
        return (a * 60 + b) * 60 + c
    if b is not None:  # MM:SS
        return a * 60 + b
    return a * 60


def _time_limit_s(value: str) -> int | None:
    text = value.strip()
    # UNLIMITED / Partition_Limit / empty: no limit of the job's own.
    return int(text) * 60 if text.isdigit() else None


def _zone(tz: str) -> ZoneInfo:
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"time zone {tz!r} is unknown: use an IANA name such as UTC or Europe/Berlin") from None


def _job_row(
    *, cluster, job_id, project, user, name, gpus, model, submit, start, end, state, qos,
    partition, priority, time_limit_s, now, min_runtime_s=None, reason=None,
) -> dict:
    return {
        "cluster": cluster, "job_id": job_id, "scheduler_job": job_id, "project": project,
        "user_name": user or None, "name": name or None, "kind": None, "gpu_model": model, "gpus": gpus,
        "min_runtime_s": min_runtime_s,
        "submit_time": submit, "start_time": start, "end_time": end, "state": state,
        "priority": priority, "namespace": None, "source": SOURCE, "updated_at": now,
        "qos": qos or None, "partition": partition or None, "time_limit_s": time_limit_s,
        # Slurm's "None": nothing holds it (a running job's, or sacct's for a pending one)
        "_reason": None if (reason or "").strip().lower() in NO_REASON else reason.strip(),
    }


def run_id(job_id: str, start: datetime) -> str:
    """The job_id of an earlier run of a requeued job: ``123@2026-12-01T06:49:39`` (its start)."""
    return f"{job_id}@{start:%Y-%m-%dT%H:%M:%S}"


def split_runs(rows: list[dict]) -> list[dict]:
    """A requeued job appears once per run in ``sacct -D`` (same JobID; the earlier runs REQUEUED,
    each with its own Start and End — Slurm resets Submit to the requeue time). The latest run keeps
    the JobID as job_id; every earlier run gets :func:`run_id`, so its GPU-hours stay."""
    runs: dict[tuple[str, str], list[dict]] = {}
    for row in rows:
        runs.setdefault((row["cluster"], row["job_id"]), []).append(row)
    for same in runs.values():
        if len(same) < 2:
            continue
        same.sort(key=lambda r: (r["start_time"] is None, r["start_time"] or r["submit_time"] or datetime.min))
        for earlier in same[:-1]:
            earlier["job_id"] = run_id(earlier["job_id"], earlier["start_time"] or earlier["submit_time"])
    return rows


def _frame(rows: list[dict]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=JOB_SCHEMA, orient="row") if rows else pl.DataFrame(schema=JOB_SCHEMA)


def _now(now: datetime | None) -> datetime:
    """The import's updated_at, naive UTC."""
    return naive_utc(now) if now else utc_now()


# --- parsable2 ---------------------------------------------------------------------------------


def parse_parsable(
    text: str,
    *,
    origin: str,
    cluster: str | None = None,
    tz: str = "UTC",
    now: datetime | None = None,
) -> SlurmBatch:
    """Read ``sacct --parsable2`` output (header line first) whole: :func:`iter_parsable` in one
    chunk. ``origin`` is the file name, or ``"sacct"`` for a live call (quarantine locations then
    name the job id). Raises SacctFormatError when the header lacks a required field or the zone
    is unknown."""
    return merged(iter_parsable(text.splitlines(), origin=origin, cluster=cluster, tz=tz, now=now, chunk_jobs=None))


def iter_parsable(
    lines: Iterable[str], *, origin: str, cluster: str | None = None, tz: str = "UTC",
    now: datetime | None = None, chunk_jobs: int | None = CHUNK_JOBS,
) -> Iterator[SlurmBatch]:
    """``sacct --parsable2`` output read from ``lines`` (e.g. an open file) in batches of at most
    ``chunk_jobs`` job records (None: one batch), so memory follows the chunk, not the export.
    The header is checked before the first batch is given (SacctFormatError). A requeued job's
    runs are told apart within a batch (:func:`split_runs`); across batches the writer compares
    with what it stored (``sacct_import``)."""
    try:
        zone = _zone(tz)
    except ValueError as exc:
        raise SacctFormatError(str(exc)) from None
    stamp = _now(now)
    numbered = enumerate((line.rstrip("\r\n") for line in lines), start=1)
    header_no, header_line = next(((n, line) for n, line in numbered if line.strip()), (None, None))
    if header_no is None:
        yield SlurmBatch(jobs=_frame([]), warnings=[f"{origin}: empty sacct output"])
        return
    header = [h.strip() for h in header_line.split("|")]
    index = {name.lower(): i for i, name in enumerate(header)}
    missing = [f for f in REQUIRED_FIELDS if f.lower() not in index]
    if "alloctres" not in index and "reqtres" not in index:
        missing.append("AllocTRES (or ReqTRES)")
    if missing:
        raise SacctFormatError(
            f"{origin}:{header_no}: the header lacks {', '.join(missing)}; export with "
            f"sacct -a -X --parsable2 --format={','.join(SACCT_FIELDS)}"
        )
    # Reason is Slurm's own word (Resources, Priority, QOSMaxGRESPerUser): never holds a "|"
    free_text = [f for f in _FREE_TEXT_FIELDS if f.lower() in index and f != "Reason"]
    names = [h.lower() for h in header]
    while True:
        batch, rows, ended = SlurmBatch(jobs=_frame([])), [], True
        for line_no, line in numbered:
            if not line.strip():
                continue
            values = line.split("|")
            first = values[0].strip()
            location = f"{LIVE_ORIGIN}:{first}" if origin == LIVE_ORIGIN and first else f"{origin}:{line_no}"
            if _STEP_ID.match(first):
                batch.skipped_steps += 1
                continue
            batch.records_read += 1
            try:
                record = dict(zip(names, _fit_fields(values, header, free_text), strict=True))
                row = _parsable_record_to_row(record, cluster, zone, stamp)
            except ValueError as exc:
                batch.rejected.append(QuarantineRow(SOURCE, location, line, str(exc)))
            else:
                if row is None:
                    batch.skipped_no_gpu += 1
                else:
                    rows.append({**row, "_location": location, "_raw": line})
            if chunk_jobs is not None and batch.records_read >= chunk_jobs:
                ended = False
                break
        batch.jobs = _frame(split_runs(rows))
        yield batch
        if ended:
            return


def merged(batches: Iterable[SlurmBatch]) -> SlurmBatch:
    """The batches of one export as one (counts summed, jobs and rejects in order)."""
    out, frames = SlurmBatch(jobs=_frame([])), []
    for batch in batches:
        frames.append(batch.jobs)
        out.rejected += batch.rejected
        out.warnings += batch.warnings
        out.records_read += batch.records_read
        out.skipped_no_gpu += batch.skipped_no_gpu
        out.skipped_steps += batch.skipped_steps
    out.jobs = pl.concat(frames) if frames else out.jobs
    return out


def _fit_fields(values: list[str], header: list[str], free_text: list[str]) -> list[str]:
    """Line fields matched to the header. parsable2 does not escape "|", so a job name holding
    one splits into extra fields; with exactly one free-text column they are joined back."""
    if len(values) == len(header):
        return values
    extra = len(values) - len(header)
    if extra > 0 and len(free_text) == 1:
        at = [h.lower() for h in header].index(free_text[0].lower())
        return values[:at] + ["|".join(values[at:at + extra + 1])] + values[at + extra + 1:]
    hint = " (a '|' inside a free-text field such as JobName or Comment?)" if extra > 0 else ""
    raise ValueError(f"line has {len(values)} field(s), the header {len(header)}{hint}")


def _parsable_record_to_row(record: dict[str, str], cluster: str | None, zone: ZoneInfo, now: datetime):
    get = lambda name: (record.get(name.lower()) or "").strip()  # noqa: E731
    job_id = get("JobID")
    if not _JOB_ID.match(job_id):
        raise ValueError(f"JobID: {job_id!r} is not a Slurm job id (123, 123_4, 123+0)")
    gpus, model = _gpus_from_tres(get("AllocTRES"), get("ReqTRES"), "alloctres" in record)
    if gpus <= 0:
        return None  # skipped and counted: GPU-time accounting has nothing to say about it
    state = _state(get("State"))
    project = get("Account")
    if not project:
        raise ValueError("Account: empty; the account is the job's project (sacctmgr add account)")
    the_cluster = get("Cluster") or cluster
    if not the_cluster:
        raise ValueError("Cluster: not in the export; pass --cluster or add Cluster to --format")
    submit = _local_time(get("Submit"), "Submit", zone)
    start = _local_time(get("Start"), "Start", zone)
    end = _local_time(get("End"), "End", zone)
    priority = _optional_int(get("Priority"), "Priority")
    return _job_row(
        cluster=the_cluster, job_id=job_id, project=project, user=get("User"), name=get("JobName"),
        gpus=gpus, model=model, submit=submit, start=start, end=end, state=state, qos=get("QOS"),
        partition=get("Partition"), priority=priority, time_limit_s=_time_limit_s(get("TimelimitRaw")),
        now=now, min_runtime_s=_slurm_duration_s(get("TimeMin"), "TimeMin"), reason=get("Reason"),
    )


def _gpus_from_tres(alloc: str, req: str, has_alloc: bool) -> tuple[float, str | None]:
    # What a job holds once it has an allocation, else what it asks for.
    if has_alloc and alloc:
        return parse_tres_gpus(alloc, "AllocTRES")
    return parse_tres_gpus(req, "ReqTRES")


# --- JSON --------------------------------------------------------------------------------------


def _number(value, field_name: str) -> int | None:
    """22.05 writes plain numbers; 23.02+ writes {"set": bool, "infinite": bool, "number": n}."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        raise ValueError(f"{field_name}: {value!r} is not a number")
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"{field_name}: {value!r} is not a finite number")
    return whole_number(int(value), field_name)


def _epoch(value, field_name: str) -> datetime | None:
    seconds = _number(value, field_name)
    if not seconds:  # 0 = not set (a pending job's start, a running job's end)
        return None
    return datetime.fromtimestamp(seconds, UTC).replace(tzinfo=None)


def _json_tres(entries, field_name: str) -> tuple[float, str | None]:
    if entries is None:
        return 0.0, None
    if not isinstance(entries, list):
        raise ValueError(f"{field_name}: expected a list of TRES entries, got {type(entries).__name__}")
    total: int | None = None
    typed: dict[str, int] = {}
    for entry in entries:
        if not isinstance(entry, dict) or entry.get("type") != "gres":
            continue
        name = str(entry.get("name") or "").lower()
        if name != "gpu" and not name.startswith("gpu:"):
            continue
        count = _number(entry.get("count"), f"{field_name} {name}") or 0
        if name == "gpu":
            total = count
        else:
            typed[name.removeprefix("gpu:")] = typed.get(name.removeprefix("gpu:"), 0) + count
    return _gpus_and_model(total, typed)


def _json_job_id(job: dict) -> str:
    job_id = _number(job.get("job_id"), "job_id")
    if job_id is None:
        raise ValueError("job_id: missing")
    array = job.get("array") or {}
    array_job = _number(array.get("job_id"), "array.job_id")
    if array_job:
        task = array.get("task_id")
        task_id = _number(task, "array.task_id") if task is not None else None
        if task_id is not None:
            return f"{array_job}_{task_id}"
        if array.get("task"):
            return f"{array_job}_[{array['task']}]"
    het = job.get("het") or {}
    het_job = _number(het.get("job_id"), "het.job_id")
    offset = het.get("job_offset")
    if het_job and offset is not None:
        return f"{het_job}+{_number(offset, 'het.job_offset')}"
    return str(job_id)


def _json_state(job: dict) -> str:
    state = job.get("state")
    current = state.get("current") if isinstance(state, dict) else state
    if isinstance(current, list):  # 23.11+: a list of flags, the base state first
        current = current[0] if current else None
    return _state(current if isinstance(current, str) else None, "state.current")


def _json_record_to_row(job: dict, cluster: str | None, now: datetime):
    job_id = _json_job_id(job)
    tres = job.get("tres") or {}
    if not isinstance(tres, dict):
        raise ValueError("tres: expected an object with allocated / requested")
    # What a job holds once it has an allocation, else what it asks for.
    gpus, model = _json_tres(tres.get("allocated"), "tres.allocated")
    if gpus <= 0 and not tres.get("allocated"):
        gpus, model = _json_tres(tres.get("requested"), "tres.requested")
    if gpus <= 0:
        return None
    state = _json_state(job)
    association = job.get("association") or {}
    project = job.get("account") or association.get("account")
    if not project:
        raise ValueError("account: empty; the account is the job's project (sacctmgr add account)")
    the_cluster = job.get("cluster") or association.get("cluster") or cluster
    if not the_cluster:
        raise ValueError("cluster: not in the export; pass --cluster")
    times = job.get("time") or {}
    if not isinstance(times, dict):
        raise ValueError("time: expected an object with submission / start / end")
    submit = _epoch(times.get("submission"), "time.submission")
    start = _epoch(times.get("start"), "time.start")
    end = _epoch(times.get("end"), "time.end")
    priority = _number(job.get("priority"), "priority")
    limit_min = _number(times.get("limit"), "time.limit")
    # --time-min, in minutes, where the export carries it (sacct 22.05 does not).
    minimum = _number(times.get("minimum", job.get("time_minimum")), "time.minimum")
    return _job_row(
        cluster=str(the_cluster), job_id=job_id, project=str(project),
        user=job.get("user") or association.get("user"), name=job.get("name"), gpus=gpus, model=model,
        submit=submit, start=start, end=end, state=state, qos=job.get("qos"),
        partition=job.get("partition"), priority=priority,
        time_limit_s=limit_min * 60 if limit_min is not None else None, now=now,
        min_runtime_s=minimum * 60 if minimum else None, reason=_json_reason(job),
    )


def _json_reason(job: dict) -> str | None:
    """22.05: ``state.reason``; later shapes the same, or a top-level ``state_reason``."""
    state = job.get("state")
    reason = state.get("reason") if isinstance(state, dict) else None
    reason = reason if reason is not None else job.get("state_reason")
    return reason if isinstance(reason, str) else None


def parse_json(
    text: str,
    *,
    origin: str,
    cluster: str | None = None,
    now: datetime | None = None,
) -> SlurmBatch:
    """Read ``sacct --json`` output whole: :func:`iter_json` in one chunk. A job that cannot be
    read is quarantined with its JSON text. Raises SacctFormatError when the document is not JSON
    or has no ``jobs`` list."""
    return merged(iter_json(io.BytesIO(text.encode("utf-8", errors="replace")), origin=origin, cluster=cluster,
                            now=now, chunk_jobs=None))


# A syntax error in a document this small is re-read with the json module for its line and column.
_PRECISE_ERROR_BYTES = 64 << 20


def iter_json(
    source: BinaryIO, *, origin: str, cluster: str | None = None, now: datetime | None = None,
    chunk_jobs: int | None = CHUNK_JOBS,
) -> Iterator[SlurmBatch]:
    """``sacct --json`` output read from ``source`` (a seekable binary file) a job at a time
    (ijson's C parser), in batches of at most ``chunk_jobs`` job records (None: one batch): only a
    batch's jobs are held, never the document. Then a second pass reads the document's ``errors``
    (sacct's own, given as warnings on a last batch). SacctFormatError for a document that is not
    JSON (naming how many job records came before the fault) or has no ``jobs`` list."""
    import ijson

    stamp = _now(now)
    jobs = ijson.items(source, "jobs.item", use_float=True)
    seen = 0
    while True:
        batch, rows, ended = SlurmBatch(jobs=_frame([])), [], True
        try:
            for job in jobs:
                _json_job(job, seen, batch, rows, origin=origin, cluster=cluster, now=stamp)
                seen += 1
                if chunk_jobs is not None and batch.records_read >= chunk_jobs:
                    ended = False
                    break
        except ijson.JSONError as exc:
            raise SacctFormatError(_not_json(source, origin, exc, seen)) from None
        if ended and not seen:
            _check_jobs_list(source, origin)
        batch.jobs = _frame(split_runs(rows))
        if ended:
            source.seek(0)
            batch.warnings += [f"sacct reported: {err}" for err in ijson.items(source, "errors.item")]
        yield batch
        if ended:
            return


def _json_job(job, i: int, batch: SlurmBatch, rows: list[dict], *, origin: str, cluster: str | None,
              now: datetime) -> None:
    """One job of the export into ``rows``, or a quarantine row, or a count of jobs without GPUs."""
    batch.records_read += 1
    raw_id = job.get("job_id") if isinstance(job, dict) else None
    label = raw_id if isinstance(raw_id, int | str) and not isinstance(raw_id, bool) else None
    if origin == LIVE_ORIGIN and label is not None:
        location = f"{LIVE_ORIGIN}:{label}"
    elif label is not None:
        location = f"{origin}:job {label}"
    else:
        location = f"{origin}:jobs[{i}]"
    try:
        if not isinstance(job, dict):
            raise ValueError(f"jobs[{i}]: expected an object, got {type(job).__name__}")
        row = _json_record_to_row(job, cluster, now)
    except (ValueError, TypeError, AttributeError) as exc:
        batch.rejected.append(QuarantineRow(SOURCE, location, json.dumps(job, sort_keys=True, default=str), str(exc)))
        return
    if row is None:
        batch.skipped_no_gpu += 1
    else:
        rows.append({**row, "_location": location, "_raw": json.dumps(job, sort_keys=True, default=str)})


def _not_json(source: BinaryIO, origin: str, exc: Exception, seen: int) -> str:
    """What is wrong with a document the parser gave up on: line and column from the json module
    for a small one, else the parser's words and how many job records came before the fault."""
    hint = "export with sacct -a -X --json, or use --input-format parsable"
    source.seek(0, io.SEEK_END)
    if source.tell() <= _PRECISE_ERROR_BYTES:
        source.seek(0)
        try:
            json.loads(source.read().decode("utf-8", errors="replace"))
        except json.JSONDecodeError as precise:
            return f"{origin}:{precise.lineno}: not JSON ({precise.msg} at column {precise.colno}); {hint}"
    words = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return f"{origin}: not JSON after {seen:,} job records ({printable(words, 200)}); {hint}"


def _check_jobs_list(source: BinaryIO, origin: str) -> None:
    """A document that gave no job: fine when it has an empty ``jobs`` list, else not sacct's."""
    import ijson

    source.seek(0)
    for prefix, event, _ in ijson.parse(source):
        if prefix == "jobs" and event == "start_array":
            return
    raise SacctFormatError(f"{origin}: no 'jobs' list; is this `sacct --json` output?")


# --- sources -----------------------------------------------------------------------------------


def detect_format(text: str) -> str:
    """'json' when the text starts with '{', else 'parsable'."""
    return "json" if text.lstrip()[:1] == "{" else "parsable"


def parse_sacct(
    text: str, *, fmt: str, origin: str, cluster: str | None = None, tz: str = "UTC",
    now: datetime | None = None,
) -> SlurmBatch:
    """Either format; ``fmt`` is 'json', 'parsable' or 'auto'."""
    chosen = detect_format(text) if fmt == "auto" else fmt
    if chosen == "json":
        return parse_json(text, origin=origin, cluster=cluster, now=now)
    if chosen == "parsable":
        return parse_parsable(text, origin=origin, cluster=cluster, tz=tz, now=now)
    raise ValueError(f"format must be json, parsable or auto, not {fmt!r}")


def sacct_command(fmt: str, start: str, end: str, sacct: str = "sacct", jobs: Sequence[str] = ()) -> list[str]:
    """The documented call: all users, allocations only (-X), the time window, one format; with
    ``jobs``, those jobs whatever their times (-j: a held job has no eligible time, so no window
    lists it)."""
    # -D: every run of a requeued job, so an earlier run keeps its GPU-hours.
    window = ["-j", ",".join(jobs)] if jobs else ["-S", start, "-E", end]
    command = [sacct, "-a", "-X", "-D", *window]
    if fmt == "json":
        return [*command, "--json"]
    return [*command, "--parsable2", f"--format={','.join(SACCT_FIELDS)}"]


def run_sacct(
    fmt: str, start: str, end: str, *, tz: str = "UTC", sacct: str = "sacct", timeout_s: float = 300.0,
    env: dict[str, str] | None = None, jobs: Sequence[str] = (),
) -> str:
    """Run ``sacct`` and return its output. sacct prints local times of its TZ, so TZ is set to
    ``tz`` (the zone the parser then reads them in) and SLURM_TIME_FORMAT to ISO ('standard')."""
    _zone(tz)
    command = sacct_command(fmt, start, end, sacct, jobs)
    call_env = {**os.environ, **(env or {}), "TZ": tz, "SLURM_TIME_FORMAT": "standard"}
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout_s, env=call_env, check=False
        )
    except FileNotFoundError:
        raise SacctCallError(
            f"{sacct!r} not found: install slurm-client (and point SLURM_CONF at the cluster), "
            "or import an export with --file"
        ) from None
    except subprocess.TimeoutExpired:
        raise SacctCallError(f"`{' '.join(command)}` did not answer in {timeout_s:.0f} s") from None
    if done.returncode != 0:
        raise SacctCallError(
            f"`{' '.join(command)}` exited {done.returncode}: {done.stderr.strip() or done.stdout.strip()}"
        )
    return done.stdout


SQUEUE = "squeue"  # where a reason came from, when not sacct
SQUEUE_FORMAT = "%i|%T|%r"  # JobID as sacct lists it (12_[0-1] for a pending array), state, reason


def run_squeue(*, squeue: str = "squeue", timeout_s: float = 60.0, env: dict[str, str] | None = None) -> str:
    """``squeue -h -a -t PENDING -o "%i|%T|%r"``: Slurm's reason for every pending job. sacct
    keeps ``Reason=None`` for a pending job (22.05: the database hears the reason only at the
    job's next event), so the live reason comes from the controller. Raises SacctCallError."""
    command = [squeue, "-h", "-a", "-t", "PENDING", "-o", SQUEUE_FORMAT]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s,
                              env={**os.environ, **(env or {})}, check=False)
    except FileNotFoundError:
        raise SacctCallError(f"{squeue!r} not found: install slurm-client") from None
    except subprocess.TimeoutExpired:
        raise SacctCallError(f"`{' '.join(command)}` did not answer in {timeout_s:.0f} s") from None
    if done.returncode != 0:
        raise SacctCallError(f"`{' '.join(command)}` exited {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def parse_squeue_reasons(text: str) -> dict[str, str]:
    """JobID -> reason of :func:`run_squeue`'s lines (pending jobs only; malformed lines skipped)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 3 and parts[1] == "PENDING" and _JOB_ID.match(parts[0]) and parts[2].strip():
            out[parts[0]] = parts[2].strip()
    return out


def unlisted_pending(batch: SlurmBatch, reasons: dict[str, str]) -> list[str]:
    """The pending jobs squeue lists that the windowed sacct call did not (held, or waiting for a
    begin time or a dependency: no eligible time inside the window), by their array / het base id
    (sacct -j names a whole array by it)."""
    known = set(batch.jobs["job_id"].to_list()) if batch.jobs.height else set()
    return sorted({j.split("_")[0].split("+")[0] for j in reasons if j not in known}, key=lambda j: (len(j), j))


def with_live_reasons(batch: SlurmBatch, reasons: dict[str, str]) -> SlurmBatch:
    """The batch with the controller's reason (``reasons``: :func:`parse_squeue_reasons`) on its
    pending jobs, in place of sacct's."""
    if batch.jobs.height and reasons:
        live = pl.DataFrame({"job_id": list(reasons), "_live": list(reasons.values())},
                            schema={"job_id": pl.String, "_live": pl.String})
        batch.jobs = (batch.jobs.join(live, on="job_id", how="left")
                      .with_columns(_reason=pl.coalesce("_live", "_reason"),
                                    _reason_from=pl.when(pl.col("_live").is_not_null()).then(pl.lit(SQUEUE)))
                      .drop("_live"))
    return batch


def with_controller_reasons(batch: SlurmBatch, fmt: str, *, start: str, end: str, tz: str, sacct: str,
                            cluster: str | None) -> SlurmBatch:
    """A live call's batch with the controller's pending reasons (sacct's stay None until the
    job's next event) and the pending jobs no window lists (held, begin time, dependency: read by
    ``sacct -j``). squeue is looked for beside ``sacct``. When squeue or that call cannot be read
    the batch keeps sacct's reasons and carries a warning: a live import never fails for them."""
    squeue = os.path.join(os.path.dirname(sacct), SQUEUE) if "/" in sacct else SQUEUE
    try:
        live_reasons = parse_squeue_reasons(run_squeue(squeue=squeue))
        missing = unlisted_pending(batch, live_reasons)
        if missing:
            more = parse_sacct(run_sacct(fmt, start, end, tz=tz, sacct=sacct, jobs=missing), fmt=fmt,
                               origin=LIVE_ORIGIN, cluster=cluster, tz=tz)
            batch.jobs = pl.concat([batch.jobs, more.jobs], how="vertical_relaxed").unique(
                ["cluster", "job_id"], keep="first", maintain_order=True)
            batch.rejected.extend(more.rejected)
            batch.records_read += more.records_read
            batch.skipped_no_gpu += more.skipped_no_gpu
        with_live_reasons(batch, live_reasons)
    except (SacctCallError, SacctFormatError) as exc:
        batch.warnings.append(f"pending jobs' Slurm reasons not read: {exc}")
    return batch


# --- warehouse ---------------------------------------------------------------------------------


def keep_earlier_runs(con: duckdb.DuckDBPyConnection, frame: pl.DataFrame) -> int:
    """Before a job's row is overwritten by a later run (an export without -D shows only the
    latest run of a requeued job), move the stored run to its own :func:`run_id` so its GPU-hours
    stay: it ended at its End if known, else when the new run was queued (Slurm resets Submit on
    requeue), else when the new run started. Its allocations move with it. Returns runs kept."""
    if frame.is_empty():
        return 0
    con.register("_slurm_incoming", frame.select("cluster", "job_id", "submit_time", "start_time",
                                                 "updated_at").to_arrow())
    try:
        con.execute(load_sql(__package__, "slurm_requeued_runs.sql"))
    finally:
        con.unregister("_slurm_incoming")
    kept = con.execute("SELECT count(*) FROM _slurm_runs").fetchall()[0][0]
    if kept:
        jobs_cols = [r[0] for r in con.execute("DESCRIBE jobs").fetchall()]
        pick = {"job_id": "r.run_job_id", "end_time": "r.run_end",
                "state": "CASE WHEN r.was_open THEN 'REQUEUED' ELSE j.state END"}
        select = ", ".join(pick.get(c, f"j.{c}") for c in jobs_cols)
        join = "JOIN _slurm_runs r ON j.cluster = r.cluster AND j.job_id = r.job_id"
        con.execute(f"INSERT OR IGNORE INTO jobs ({', '.join(jobs_cols)}) SELECT {select} FROM jobs j {join}")
        alloc_cols = [r[0] for r in con.execute("DESCRIBE job_allocations").fetchall()]
        pick = {"job_id": "r.run_job_id", "end_time": "coalesce(j.end_time, r.run_end)"}
        select = ", ".join(pick.get(c, f"j.{c}") for c in alloc_cols)
        con.execute(f"INSERT OR IGNORE INTO job_allocations ({', '.join(alloc_cols)}) "
                    f"SELECT {select} FROM job_allocations j {join}")
        for table in ("job_allocations", "jobs"):
            con.execute(f"DELETE FROM {table} WHERE (cluster, job_id) IN (SELECT cluster, job_id FROM _slurm_runs)")
    con.execute("DROP TABLE _slurm_runs")
    return kept


def write_batch(con: duckdb.DuckDBPyConnection, batch: SlurmBatch, *, tier_rules: bool = True) -> WriteResult:
    """Upsert the batch's jobs on (cluster, job_id) and store its rejects. Rows the warehouse's
    limits refuse (checks.job_problem: an account that is not a project of the tree, a future end,
    absurd GPU counts, unknown models) join the rejects, counted in ``batch.rejected``.
    ``tier_rules=False``: one batch of several (sacct_import), whose writer applies them once."""
    columns = {r[0] for r in con.execute("DESCRIBE jobs").fetchall()}
    jobs = batch.jobs
    if jobs.height:
        now = jobs["updated_at"].max()
        jobs, refused = screen_jobs(jobs, job_limits(con), now=now, source=SOURCE,
                                    locations=jobs["_location"].to_list(), raw_texts=jobs["_raw"].to_list(),
                                    project_field="Account")
        batch.rejected.extend(refused)
    frame = jobs.select([c for c in jobs.columns if c in columns])
    before = con.execute("SELECT count(*) FROM jobs").fetchall()[0][0]
    keep_earlier_runs(con, frame)
    offered = upsert(con, "jobs", frame)
    link_devices_for_jobs(con, frame)  # devices from the hpc_job labels on samples already stored
    from gpuledger.ingest.tiers import apply_tier_rules

    for cluster in frame["cluster"].unique().to_list() if frame.height and tier_rules else []:
        apply_tier_rules(con, cluster=cluster)  # partition rules price the jobs without devices
    after = con.execute("SELECT count(*) FROM jobs").fetchall()[0][0]
    stored = quarantine(con, batch.rejected)
    record_reasons(con, pending_reasons(jobs))
    return WriteResult(jobs_offered=offered, jobs_new=after - before, quarantined=stored)


def pending_reasons(jobs: pl.DataFrame) -> list[SchedulerReason]:
    """Slurm's reason for each pending job of an import, as of the import (``updated_at``): a
    started job's Reason says nothing about a wait (sacct keeps the last one, or None)."""
    if not jobs.height or "_reason" not in jobs.columns:
        return []
    waiting = jobs.filter(pl.col("_reason").is_not_null() & pl.col("start_time").is_null()
                          & (pl.col("state") == "PENDING"))
    return [SchedulerReason(r["cluster"], r["job_id"], r["updated_at"], SLURM, r["state"], r["_reason"], None,
                            r.get("_reason_from") or LIVE_ORIGIN) for r in waiting.iter_rows(named=True)]


__all__: Sequence[str] = (
    "SACCT_FIELDS", "SOURCE", "SacctCallError", "SacctFormatError", "SlurmBatch", "WriteResult",
    "detect_format", "iter_json", "iter_parsable", "merged", "parse_json", "parse_parsable", "parse_sacct",
    "parse_squeue_reasons", "parse_tres_gpus", "run_sacct", "run_squeue", "sacct_command", "unlisted_pending",
    "with_controller_reasons", "with_live_reasons", "write_batch",
)
