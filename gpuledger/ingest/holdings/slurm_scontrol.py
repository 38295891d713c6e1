"""``scontrol -d show job`` → holdings, for sites that cannot install the prolog.

The detailed view lists, per node group, the GPU indices each running job holds:
``Nodes=gpu[01-02] CPU_IDs=0-7 Mem=0 GRES=gpu:h100:4(IDX:0-3)``. Every version prints it as text
(``-o``: one job a line); 23.02+ also as JSON (``scontrol --json``: ``gres_detail``, one entry per
node of ``nodes``), and 22.05's ``squeue --json`` prints the same job documents (its scontrol has
no ``--json``). Both forms are read. A poll sees a running job: the holding starts at the job's StartTime
and is seen until the poll; a job no longer running ends at its EndTime. Indices are the node's
GPU indices; the warehouse finds the device by host + index (the DCGM ``gpu`` label).
"""

from __future__ import annotations

import json
import re
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

from gpuledger.ingest.holdings.devices import expand_hostlist, index_ranges
from gpuledger.ingest.metrics.dcgm_fields import canonical_host

SOURCE = "slurm-scontrol"
_RUNNING = frozenset({"RUNNING", "SUSPENDED", "COMPLETING"})
# one GPU entry of a GRES string: gpu[:type]:count[(S:sockets)](IDX:ranges); a node's string may hold
# several (``gpu:a100:2(IDX:0,2),gpu:v100:1(IDX:4),mps:10``) and an empty one (``gpu:0(IDX:)``)
_IDX = re.compile(r"gpu(?::[^:(,]+)?:\d+(?:\(S:[^)]*\))?\(IDX:(?P<idx>[0-9,\-]+)\)")
_FIELD = re.compile(r"(?:^|\s)(JobId|JobState|StartTime|EndTime)=(\S+)")


class ScontrolError(RuntimeError):
    """scontrol could not be run or said something unreadable."""


def _local(text: str, zone: ZoneInfo) -> datetime | None:
    if not text or text in ("Unknown", "None", "N/A"):
        return None
    return datetime.fromisoformat(text).replace(tzinfo=zone).astimezone(ZoneInfo("UTC")).replace(tzinfo=None)


def _rows(cluster, job, state, start, end, now, node_idx) -> list[dict]:
    running = state in _RUNNING
    if start is None or (not running and end is None):
        return []
    rows = []
    for node, indices in node_idx:
        for i in indices:
            rows.append({
                "cluster": cluster, "source": SOURCE, "scheduler_job": job,
                "host": canonical_host(node) or node, "device_id": f"index:{i}", "gpu_index": i,
                "first_seen": start, "last_seen": now if running else end, "ended": not running,
                "resource": "gres/gpu",
            })
    return rows


def parse_text(text: str, *, cluster: str, now: datetime, tz: str = "UTC") -> list[dict]:
    """Holdings in ``scontrol -d -o show job`` output (one job a line)."""
    zone = ZoneInfo(tz)
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = dict(_FIELD.findall(line))
        if "JobId" not in fields:
            raise ScontrolError(f"line {n}: no JobId= (expected `scontrol -d -o show job` output)")
        node_idx = []
        # each "Nodes=... GRES=..." group of the detailed view
        for m in re.finditer(r"\bNodes=(\S+) CPU_IDs=\S+ Mem=\S+ GRES=(\S*)", line):
            indices = _indices(m[2])
            if indices:
                node_idx.append((m[1], indices))
        node_idx = [(host, ix) for hosts, ix in node_idx for host in expand_hostlist(hosts)]
        try:
            start, end = _local(fields.get("StartTime", ""), zone), _local(fields.get("EndTime", ""), zone)
        except ValueError as exc:
            raise ScontrolError(f"line {n}: job {fields['JobId']}: {exc}") from None
        out.extend(_rows(cluster, fields["JobId"], fields.get("JobState", ""), start, end, now, node_idx))
    return out


def _indices(gres: str) -> list[int]:
    """Every GPU index in one node's GRES string, in order, each once."""
    found: list[int] = []
    for m in _IDX.finditer(gres or ""):
        found.extend(i for i in index_ranges(m["idx"]) if i not in found)
    return found


def _epoch(value) -> datetime | None:
    """A time of scontrol's JSON: epoch seconds (22.05's data_parser v0.0.38) or, from 23.02 on,
    ``{"set": bool, "infinite": bool, "number": seconds}``; unset, infinite or 0 is no time."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return None
    return datetime.fromtimestamp(value, UTC).replace(tzinfo=None)


def parse_json(text: str, *, cluster: str, now: datetime) -> list[dict]:
    """Holdings in ``scontrol --json -d show job`` output: ``gres_detail`` holds one GRES string per
    node of ``nodes`` (in the hostlist's order); ``job_state`` is a string (22.05) or a list of
    the state and its flags (23.02+); times as _epoch reads them. A document whose ``errors`` is
    not empty is an error naming the first one."""
    try:
        doc = json.loads(text)
        jobs = doc["jobs"]
        if not isinstance(jobs, list):
            raise TypeError("`jobs` is not a list")
    except (ValueError, KeyError, TypeError) as exc:
        raise ScontrolError(f"not scontrol --json output ({exc})") from None
    errors = doc.get("errors") or []
    if errors:
        first = errors[0]
        said = first.get("error") or first.get("description") or first if isinstance(first, dict) else first
        raise ScontrolError(f"scontrol --json reported {len(errors)} error(s): {said}")
    out = []
    for n, job in enumerate(jobs):
        if not isinstance(job, dict) or "job_id" not in job:
            raise ScontrolError(f"scontrol --json: jobs[{n}] has no job_id")
        state = job.get("job_state")
        state = state[0] if isinstance(state, list) and state else state
        nodes = expand_hostlist(job.get("nodes") or "")
        node_idx = [(node, ix) for node, gres in zip(nodes, job.get("gres_detail") or [], strict=False)
                    if (ix := _indices(gres))]
        out.extend(_rows(job.get("cluster") or cluster, str(job["job_id"]), str(state or ""),
                         _epoch(job.get("start_time")), _epoch(job.get("end_time")), now, node_idx))
    return out


def _run(argv: list[str], timeout_s: float) -> subprocess.CompletedProcess:
    said = " ".join(argv)
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except FileNotFoundError:
        raise ScontrolError(f"{argv[0]}: not found (install slurm-client, or give --scontrol-bin PATH)") from None
    except subprocess.TimeoutExpired:
        raise ScontrolError(f"{said}: no answer within {timeout_s:.0f} s") from None


def run_scontrol(scontrol: str = "scontrol", timeout_s: float = 30.0, *, form: str = "text") -> str:
    """The jobs as ``scontrol -d -o show job`` prints them (``form="text"``: every Slurm version)
    or as JSON (``form="json"``): ``scontrol --json -d show job`` (Slurm 23.02+); where scontrol
    has no ``--json`` (22.05, seen on the rig: "unrecognized option '--json'"), ``squeue --json``
    beside it, which prints the same job documents there (data_parser v0.0.38, gres_detail
    included). Its stdout."""
    argv = [scontrol, "-d", "-o", "show", "job"] if form == "text" else [scontrol, "--json", "-d", "show", "job"]
    done = _run(argv, timeout_s)
    if done.returncode != 0 and form == "json" and "unrecognized option" in done.stderr:
        squeue = str(Path(scontrol).with_name("squeue")) if "/" in scontrol else "squeue"
        argv = [squeue, "--json"]
        done = _run(argv, timeout_s)
    if done.returncode != 0:
        raise ScontrolError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()[:300]}")
    return done.stdout
