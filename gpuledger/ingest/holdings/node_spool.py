"""The node agents' spool: how `ingest agent pod-resources --spool DIR` on every GPU node hands its
holdings to the one warehouse writer (`ingest node-holdings --spool DIR`).

The warehouse is one DuckDB file with one writer and a flock that serializes processes on one
kernel only, so an agent on another node must never open it. Each agent instead keeps ONE file
``<cluster>.<host>.json`` in a directory shared with the writer (a ReadWriteMany volume): the
holdings it has open and those that ended in the last :data:`KEEP_ENDED`, rewritten after every
poll through a temporary file and a rename (a reader sees the old file or the new one, never half
of one). The file is the agent's memory across restarts too (it resumes what it left open).

Reading is pure and repeatable: ``write_holdings`` upserts on the holdings' natural key and only
moves ``last_seen`` / ``ended`` forward, so the writer may read the spool as often as it likes. A
file that cannot be read (cut short, a foreign format) becomes one quarantine row naming it."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from gpuledger.errors import printable
from gpuledger.ingest.holdings.checks import RAW, WHERE
from gpuledger.warehouse import QuarantineRow

FORMAT = "gpuledger.node-holdings/1"
QUARANTINE_SOURCE = "node-holdings"
KEEP_ENDED = timedelta(days=1)  # ended holdings stay in the file this long: the writer's reads overlap
_TIMES = ("first_seen", "last_seen")
_REQUIRED = ("cluster", "source", "scheduler_job", "host", "device_id", "first_seen", "last_seen", "ended")
# A node's file holds its open holdings and a day of ended ones (~300 bytes each: a few MB at most);
# a larger file is refused unread, never held whole
MAX_NODE_FILE_BYTES = 32 << 20


def spool_file(spool: Path, cluster: str, host: str) -> Path:
    return spool / f"{cluster}.{host}.json"


def _key(row: dict) -> tuple:
    return (row["scheduler_job"], row["device_id"], row["first_seen"])


def _record(row, n: int, path: Path) -> dict:
    """holdings[n] of ``path`` with its times read; ValueError naming the field that cannot be."""
    missing = [k for k in _REQUIRED if not isinstance(row, dict) or row.get(k) is None]
    if missing:
        raise ValueError(f"holdings[{n}]: no {', '.join(missing)}")
    times = {}
    for k in _TIMES:
        try:
            times[k] = datetime.fromisoformat(row[k]) if isinstance(row[k], str) else None
        except ValueError:
            times[k] = None
        if times[k] is None:
            raise ValueError(f"holdings[{n}]: {k} {str(row[k])[:60]!r} is not an ISO-8601 time")
        if times[k].tzinfo is not None:  # stored naive UTC
            times[k] = times[k].astimezone(UTC).replace(tzinfo=None)
    return {**row, **times, WHERE: f"{path}:holdings[{n}]", RAW: json.dumps(row, sort_keys=True, default=str)}


def _load(path: Path, *, per_record: list | None = None) -> dict:
    """The node file's document with its holdings read. A record that cannot be read raises, or
    with ``per_record`` (a list) is appended there as (n, raw record, why) and skipped."""
    with open(path, "rb") as fh:
        data = fh.read(MAX_NODE_FILE_BYTES + 1)
    if len(data) > MAX_NODE_FILE_BYTES:
        raise ValueError(f"larger than {MAX_NODE_FILE_BYTES >> 20} MiB: not a node agent's file")
    doc = json.loads(data.decode("utf-8"))
    del data
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError(f"format {doc.get('format') if isinstance(doc, dict) else None!r}: expected {FORMAT} "
                         "(written by `gpuledger ingest agent pod-resources --spool`)")
    rows = doc.get("holdings")
    if not isinstance(rows, list):
        raise ValueError("no `holdings` list")
    out = []
    for n, row in enumerate(rows):
        try:
            out.append(_record(row, n, path))
        except ValueError as exc:
            if per_record is None:
                raise
            per_record.append((n, row, str(exc)))
    return {**doc, "holdings": out}


def open_rows(spool: Path, cluster: str, host: str) -> list[dict]:
    """What this node's agent left open (to resume), from its own file; none when there is none.
    A file it cannot read is left for the writer to quarantine, and the agent starts afresh."""
    path = spool_file(spool, cluster, host)
    try:
        return [r for r in _load(path)["holdings"] if not r["ended"]]
    except FileNotFoundError:
        return []
    except (ValueError, OSError, TypeError):
        return []


def write_node(spool: Path, cluster: str, host: str, rows: list[dict], now: datetime) -> int:
    """Merge one poll's ``rows`` into the node's file and replace it atomically; returns the
    holdings the file now carries."""
    path = spool_file(spool, cluster, host)
    try:
        kept = {_key(r): r for r in _load(path)["holdings"]}
    except (FileNotFoundError, ValueError, OSError, TypeError):
        kept = {}
    for row in rows:
        kept[_key(row)] = row
    cutoff = now - KEEP_ENDED
    holdings = [r for r in kept.values() if not r["ended"] or r["last_seen"] >= cutoff]
    doc = {"format": FORMAT, "cluster": cluster, "host": host, "written": now.isoformat(),
           "holdings": [{**{k: v for k, v in r.items() if not k.startswith("_")},
                         **{k: r[k].isoformat() for k in _TIMES}} for r in holdings]}
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=spool)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(doc, out)
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would keep the writer (another user) out
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return len(holdings)


@dataclass
class NodeSpoolRead:
    holdings: list[dict] = field(default_factory=list)
    quarantined: list[QuarantineRow] = field(default_factory=list)
    files: int = 0


def read_node_spool(spool: Path) -> NodeSpoolRead:
    """Every holding in the spool's node files, in lists (:func:`stream_node_spool`'s, collected)."""
    out = NodeSpoolRead()
    out.files = stream_node_spool(spool, holdings=out.holdings.extend, bad=out.quarantined.append)
    return out


def stream_node_spool(spool: Path, *, holdings: Callable[[list[dict]], None],
                      bad: Callable[[QuarantineRow], None]) -> int:
    """Hand over the holdings of the spool's node files one file at a time (temporary files, names
    starting with a dot, are being written and are skipped); returns the files read. A file that
    cannot be read is one quarantine row; a record that cannot be is one naming ``file:holdings[n]``
    and the file's other records are kept (the writer then screens each one: holdings/checks.py)."""
    files = 0
    for name in sorted(e.name for e in os.scandir(spool) if e.name.endswith(".json")):
        path = spool / name
        if path.name.startswith(".") or not path.is_file():
            continue
        files += 1
        unread: list = []
        try:
            holdings(_load(path, per_record=unread)["holdings"])
            for n, row, why in unread:
                bad(QuarantineRow(source=QUARANTINE_SOURCE, location=f"{path}:holdings[{n}]",
                                  raw_text=json.dumps(row, sort_keys=True, default=str)[:4000],
                                  reason=printable(f"{path.name}: {why}")))
        except (ValueError, OSError, TypeError, UnicodeDecodeError, RecursionError) as exc:
            try:
                with open(path, "rb") as fh:  # the file's head only: it may be huge
                    raw = fh.read(4000).decode("utf-8", errors="replace")
            except OSError as err:
                raw = f"(unreadable: {err.strerror})"
            bad(QuarantineRow(source=QUARANTINE_SOURCE, location=str(path), raw_text=raw,
                              reason=printable(f"{path.name}: {exc}")))
    return files
