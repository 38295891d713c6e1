"""Checks every holding source (the Slurm prolog spool, scontrol, the node agents' spool, the
pod-resources agent) applies per record before a holding reaches ``device_holdings``.

The same rules as the sample path: the plausibility window of sample times (not before 2000-01-01,
:data:`~gpuledger.ingest.jobs.checks.EARLIEST`, nor later than now + the exposition's allowed
clock skew), text free of control characters (:func:`~gpuledger.ingest.jobs.checks.text_problem`),
integers the warehouse can store, and one physical device for one holder at a time (a UUID names
one GPU, as :mod:`gpuledger.ingest.metrics.plausible` says of hosts). A record that breaks one is
a quarantine row naming its file and record and why; the records beside it land.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime, timedelta

from gpuledger.ingest.holdings.devices import parse_device
from gpuledger.ingest.jobs.checks import EARLIEST, text_problem
from gpuledger.ingest.metrics.exposition import DEFAULT_MAX_FUTURE_S
from gpuledger.warehouse import QuarantineRow

WHERE, RAW = "_where", "_raw"  # what a reader puts on a record: its file/record, its text as read
MAX_GPU_INDEX = 65_535  # NVML indexes a node's GPUs from 0; a node has tens, never 65,536
MAX_MIG_INSTANCE = 255
MAX_ID_LEN = 256
_TEXT = ("cluster", "source", "scheduler_job", "host", "device_id")
_OPTIONAL_TEXT = ("gpu_uuid", "pod_uid", "namespace", "pod", "container", "resource")  # None or a text


def _device_problem(device_id: str) -> str | None:
    if len(device_id) > MAX_ID_LEN:
        return f"device_id: {len(device_id)} characters; a device id is a GPU index, UUID or MIG id"
    if device_id.startswith(("/", "\\", "~")) or "\\" in device_id or ".." in device_id.split("/"):
        return (f"device_id: {device_id[:80]!r} looks like a file path, not a GPU index, GPU-/MIG- UUID, "
                "MIG-GPU-<uuid>/<gi>/<ci> or DRA device; fix the device plugin or the spool writer")
    return None


def holding_problem(row: dict, *, now: datetime, max_future_s: float = DEFAULT_MAX_FUTURE_S) -> str | None:
    """Why one holding must not land (the field, the value, the fix), else None. ``now`` naive UTC."""
    for column in _TEXT:
        value = row.get(column)
        if not isinstance(value, str) or not value.strip():
            return f"{column}: {value!r} is not a non-empty text"
        problem = text_problem(column, value)
        if problem:
            return problem
    for column in _OPTIONAL_TEXT:
        value = row.get(column)
        if value is None:
            continue
        if not isinstance(value, str):
            return f"{column}: {value!r} is not a text"
        problem = text_problem(column, value)
        if problem:
            return problem
    problem = _device_problem(row["device_id"])
    if problem:
        return problem
    latest = now + timedelta(seconds=max_future_s)
    for column in ("first_seen", "last_seen"):
        stamp = row.get(column)
        if not isinstance(stamp, datetime):
            return f"{column}: {stamp!r} is not a time"
        if stamp < EARLIEST:
            return (f"{column}: {stamp:%Y-%m-%d %H:%M:%S} is before {EARLIEST:%Y-%m-%d}; a clock at the epoch or "
                    "a unit error (milliseconds read as seconds?); fix the node's clock")
        if stamp > latest:
            return (f"{column}: {stamp:%Y-%m-%d %H:%M:%S} is more than {max_future_s:g} s after now "
                    f"({now:%Y-%m-%d %H:%M:%S} UTC, the allowed clock skew); fix the node's clock")
    if row["last_seen"] < row["first_seen"]:
        return (f"last_seen: {row['last_seen']:%Y-%m-%d %H:%M:%S} is before first_seen "
                f"{row['first_seen']:%Y-%m-%d %H:%M:%S}: a holding cannot end before it starts")
    if not isinstance(row.get("ended"), bool):
        return f"ended: {row.get('ended')!r} is not true or false"
    for column, low, high in (("gpu_index", 0, MAX_GPU_INDEX), ("mig_instance_id", -1, MAX_MIG_INSTANCE)):
        value = row.get(column)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            return f"{column}: {value!r} is not a whole number"
        if not low <= value <= high:
            return f"{column}: {value} is outside {low}..{high}"
    share = row.get("share")
    if share is not None and (isinstance(share, bool) or not isinstance(share, int | float)
                              or not 0 < share <= 1):
        return f"share: {share!r} is not a fraction of one GPU in (0, 1]"
    return None


def gpu_key(row: dict) -> str | None:
    """The physical GPU a holding takes whole, as ``cluster/uuid`` or ``cluster/host/index N``, or
    None (a MIG instance, a time-sliced replica, a shared or fractional GPU: several holders at once
    are their point). A key the inventory knows MIG-partitioned (store.partitioned_gpus) is no whole
    GPU either: the caller drops those (``_whole_gpu``)."""
    if row.get("mig_instance_id", -1) not in (-1, None) or parse_device(row["device_id"]).replica_of:
        return None
    resource = row.get("resource") or ""
    if row.get("share") not in (None, 1, 1.0) or "shard" in resource or "mps" in resource:
        return None
    if row.get("gpu_uuid"):
        return f"{row['cluster']}/{row['gpu_uuid']}"
    if row.get("gpu_index") is not None:  # no UUID (GKE's nvidia<N>, a Slurm index): the host's GPU N
        return f"{row['cluster']}/{row['host']}/index {row['gpu_index']}"
    return None


def _whole_gpu(row: dict, partitioned: frozenset[str] = frozenset()) -> str | None:
    # a MIG-partitioned GPU named whole is an instance's parent (Slurm gives a MIG job its GPU's
    # index): several jobs on it at once are its instances (the link places each by dcgm's labels)
    key = gpu_key(row)
    return None if key in partitioned else key


def first_claim(holders: list[dict], row: dict) -> dict | None:
    """The one-holder rule for ``row`` on a GPU ``holders`` (rows kept on it, in the order kept,
    each first seen no later than ``row``) already hold: the first holder of another job whose time
    overlaps ``row``'s, else None. Holders that ended before ``row`` began are dropped from
    ``holders`` (no later row, first seen no earlier, can overlap them), so the list stays as short
    as the GPU's concurrent holders."""
    holders[:] = [h for h in holders if h["last_seen"] >= row["first_seen"]]
    return next((h for h in holders if h["scheduler_job"] != row["scheduler_job"]
                 and h["first_seen"] <= row["last_seen"] and row["first_seen"] <= h["last_seen"]), None)


def record_refused(row: dict, problem: str, source: str) -> QuarantineRow:
    """The quarantine row of a holding a check refused: its file and record (:data:`WHERE`), its text."""
    return QuarantineRow(source, str(row.get(WHERE) or source), record_text(row), problem)


def claim_refused(row: dict, clash: dict, source: str) -> QuarantineRow:
    """The quarantine row of ``row`` refused because ``clash`` holds its whole GPU at the same time."""
    return record_refused(
        row,
        f"GPU {row['gpu_uuid'] or row['device_id']} on {row['host']} is held by job {clash['scheduler_job']} from "
        f"{clash['first_seen']:%Y-%m-%d %H:%M:%S} and by job {row['scheduler_job']} from "
        f"{row['first_seen']:%Y-%m-%d %H:%M:%S} at once; a whole GPU serves one job, so the first is kept: "
        "fix the device plugin or the spool writer that listed it twice", source)


def record_text(row: dict) -> str:
    """A holding's text for its quarantine row: as read (:data:`RAW`), else its fields as JSON."""
    if row.get(RAW) is not None:
        return str(row[RAW])[:4000]
    return json.dumps({k: v for k, v in row.items() if not k.startswith("_")}, default=str, sort_keys=True)


def screen_holdings(rows: Iterable[dict], *, source: str, now: datetime,
                    max_future_s: float = DEFAULT_MAX_FUTURE_S,
                    partitioned: frozenset[str] = frozenset()) -> tuple[list[dict], list[QuarantineRow]]:
    """(the holdings that may land, quarantine rows for the others). Each row may carry
    :data:`WHERE` (its file and record) and :data:`RAW` (its text), dropped from what lands. A
    whole GPU held by two jobs at overlapping times keeps the first holder (by first seen, then
    job) and refuses the others — unless the inventory knows it MIG-partitioned (``partitioned``:
    store.partitioned_gpus). All in memory, for one poll's rows; a spool folder is screened in
    bounded batches by :class:`~gpuledger.ingest.holdings.screening.SpoolScreen`, same rules."""
    good: list[dict] = []
    rejected: list[QuarantineRow] = []
    for row in rows:
        problem = holding_problem(row, now=now, max_future_s=max_future_s)
        if problem:
            rejected.append(record_refused(row, problem, source))
        else:
            good.append(row)
    kept: list[dict] = []
    holders: dict[str, list[dict]] = {}
    for row in sorted(good, key=lambda r: (r["first_seen"], r["scheduler_job"], r["device_id"])):
        gpu = _whole_gpu(row, partitioned)
        clash = first_claim(holders.setdefault(gpu, []), row) if gpu else None
        if clash is not None:
            rejected.append(claim_refused(row, clash, source))
            continue
        if gpu:
            holders[gpu].append(row)
        kept.append(row)
    return [{k: v for k, v in r.items() if not k.startswith("_")} for r in kept], rejected
