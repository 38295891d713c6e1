"""The spool the Slurm prolog/epilog (``deploy/slurm/gpuledger-holdings.sh``) write → holdings.

One file per event, ``<job>.<node>.<epoch s>.<start|end>``, lines ``key<TAB>value`` and
``gpu<TAB><index><TAB><uuid>``. A start opens a holding of each listed GPU on that node; the
next end of the same job and node closes it. Reading is pure and repeatable: the same spool gives
the same rows, so ``ingest slurm-gpus`` may run as often as wanted. A file that cannot be read
(truncated, a foreign format, an end without its start) becomes a quarantine row naming the file.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from gpuledger.errors import printable
from gpuledger.ingest.holdings.checks import WHERE
from gpuledger.ingest.holdings.devices import parse_device
from gpuledger.ingest.holdings.screening import BATCH, Scratch
from gpuledger.ingest.metrics.dcgm_fields import canonical_host
from gpuledger.warehouse import QuarantineRow

FORMAT = "gpuledger-slurm-gpus/1"
SOURCE = "slurm-prolog"
QUARANTINE_SOURCE = "slurm-gpus"
# One event file is a few hundred bytes (a node's GPUs); read at most this much of any file, so a
# stray huge file in the spool is refused, never held whole
MAX_EVENT_BYTES = 64 << 10


@dataclass
class SpoolRead:
    holdings: list[dict] = field(default_factory=list)
    quarantined: list[QuarantineRow] = field(default_factory=list)
    files: int = 0


@dataclass(frozen=True)
class _Event:
    path: Path
    kind: str
    cluster: str
    job: str
    node: str
    at: datetime
    gpus: tuple[tuple[int | None, str | None], ...]


def _read_bounded(path: Path, limit: int) -> str:
    """The file's text, or ValueError when it is larger than ``limit`` bytes (only that much is read)."""
    with open(path, "rb") as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"larger than {limit // 1024} KiB: not an event file of deploy/slurm/")
    return data.decode("utf-8", errors="replace")


def _parse(path: Path, default_cluster: str | None) -> _Event:
    text = _read_bounded(path, MAX_EVENT_BYTES)
    fields: dict[str, str] = {}
    gpus: list[tuple[int | None, str | None]] = []
    for n, line in enumerate(text.splitlines(), 1):
        parts = line.split("\t")
        if parts[0] == "gpu":
            index = parts[1] if len(parts) > 1 else ""
            uuid = parts[2].strip() if len(parts) > 2 else ""
            if index and (not index.isdigit() or len(index) > 6):
                raise ValueError(f"line {n}: GPU index {index[:40]!r} is not a GPU index (0, 1, ...)")
            gpus.append((int(index) if index else None, uuid or None))
        elif len(parts) == 2:
            fields[parts[0]] = parts[1].strip()
        elif line.strip():
            raise ValueError(f"line {n}: expected key<TAB>value")
    if fields.get("format") != FORMAT:
        raise ValueError(f"format {fields.get('format')!r}: expected {FORMAT} (written by deploy/slurm/)")
    for key in ("event", "job_id", "node", "time"):
        if not fields.get(key):
            raise ValueError(f"missing {key} (the file was cut short?)")
    if fields["event"] not in ("start", "end"):
        raise ValueError(f"event {fields['event']!r}: expected start or end")
    if not fields["time"].isdigit() or len(fields["time"]) > 12:
        raise ValueError(f"time {fields['time'][:40]!r}: expected epoch seconds")
    cluster = fields.get("cluster") or default_cluster
    if not cluster:
        raise ValueError("no cluster (SLURM_CLUSTER_NAME was empty): give --cluster")
    return _Event(path=path, kind=fields["event"], cluster=cluster, job=fields["job_id"],
                  node=canonical_host(fields["node"]) or fields["node"],
                  at=datetime.fromtimestamp(int(fields["time"]), UTC).replace(tzinfo=None), gpus=tuple(gpus))


def _bad(path: Path, reason: str) -> QuarantineRow:
    try:
        with open(path, "rb") as fh:  # the file's head only: it may be huge
            raw = fh.read(4000).decode("utf-8", errors="replace")
    except OSError as exc:
        raw = f"(unreadable: {exc.strerror})"
    return QuarantineRow(source=QUARANTINE_SOURCE, location=str(path), raw_text=raw, reason=printable(reason))


def read_spool(spool: Path, *, cluster: str | None = None) -> SpoolRead:
    """Every holding the spool directory's files describe (see the module doc), in lists: for a
    small spool and the tests. ``ingest slurm-gpus`` streams it (:func:`stream_spool`)."""
    out = SpoolRead()
    with Scratch() as scratch:
        out.files = stream_spool(spool, cluster=cluster, scratch=scratch, holdings=out.holdings.extend,
                                 bad=out.quarantined.append)
    return out


_EVENT_SCHEMA = {"seq": pl.Int64, "cluster": pl.String, "job": pl.String, "node": pl.String,
                 "event_time": pl.Datetime("us"), "kind": pl.String, "path": pl.String,
                 "gpus": pl.List(pl.Struct({"index": pl.Int64, "uuid": pl.String}))}


def stream_spool(spool: Path, *, cluster: str | None, scratch: Scratch, holdings: Callable[[list[dict]], None],
                 bad: Callable[[QuarantineRow], None], batch: int = BATCH) -> int:
    """Read the spool's event files one at a time (at most MAX_EVENT_BYTES each) and hand over the
    holdings they describe, ``batch`` at a time, to ``holdings``; a file that cannot be read, or an
    end without its start, to ``bad``. The events are staged in ``scratch`` (a few hundred bytes
    each) and paired in (cluster, job, node, time) order read back from it, so a folder of any size
    is read in bounded memory. Returns the event files read."""
    scratch.create("events", _EVENT_SCHEMA)
    staged: list[tuple] = []

    def stage() -> None:
        frame = pl.DataFrame(staged, schema=_EVENT_SCHEMA, orient="row")
        scratch.insert("events", frame)
        staged.clear()

    files = 0
    for name in sorted(entry.name for entry in os.scandir(spool)):
        path = spool / name
        if name.startswith(".") or path.suffix not in (".start", ".end") or not path.is_file():
            continue  # half-written (.incoming.*) or foreign files
        files += 1
        try:
            e = _parse(path, cluster)
        except (ValueError, OSError, OverflowError) as exc:  # Overflow: a time past year 9999
            bad(_bad(path, f"{path.name}: {exc}"))
            continue
        staged.append((files, e.cluster, e.job, e.node, e.at, e.kind, str(e.path),
                       [{"index": i, "uuid": u} for i, u in e.gpus]))
        if len(staged) >= batch:
            stage()
    stage()
    out: list[dict] = []
    key, start = None, None  # the run open on the (cluster, job, node) being read
    for frame in scratch.batches("SELECT * FROM events ORDER BY cluster, job, node, event_time, kind <> 'start', seq",
                                 size=batch):
        for e in frame.iter_rows(named=True):
            e_key = (e["cluster"], e["job"], e["node"])
            if e_key != key:
                if start is not None:  # the last run of the key before ended with no end event
                    out += _holdings(start, None)
                key, start = e_key, None
            if e["kind"] == "start":
                if start is not None:  # a start with no end before it: that run's end is unknown
                    out += _holdings(start, None)
                start = e
            elif start is not None:
                out += _holdings(start, e)
                start = None
            else:
                bad(_bad(Path(e["path"]), f"{Path(e['path']).name}: an end for job {e['job']} on {e['node']} "
                                          "without its start (was the prolog installed?)"))
            if len(out) >= batch:
                holdings(out)
                out = []
    if start is not None:
        out += _holdings(start, None)
    if out:
        holdings(out)
    scratch.drop("events")
    return files


def _holdings(start: dict, end: dict | None) -> list[dict]:
    """The holdings of one run: each GPU its start event lists, from the start to the end (if any)."""
    out = []
    for gpu in start["gpus"]:
        index, uuid = gpu["index"], gpu["uuid"]
        dev = parse_device(uuid) if uuid else parse_device(str(index))
        out.append({
            "cluster": start["cluster"], "source": SOURCE, "scheduler_job": start["job"], "host": start["node"],
            "device_id": dev.device_id, "first_seen": start["event_time"],
            "last_seen": end["event_time"] if end else start["event_time"], "ended": end is not None,
            "gpu_uuid": dev.gpu_uuid, "mig_instance_id": dev.mig_instance_id,
            "gpu_index": index if index is not None else dev.gpu_index,
            "resource": "gres/gpu", WHERE: start["path"] + (f" .. {Path(end['path']).name}" if end else ""),
        })
    return out
