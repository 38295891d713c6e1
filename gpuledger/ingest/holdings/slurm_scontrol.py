"""``scontrol -d show job`` → holdings, for sites that cannot install the prolog.

The detailed view lists, per node group, the GPU indices each running job holds:
``Nodes=gpu[01-02] CPU_IDs=0-7 Mem=0 GRES=gpu:h100:4(IDX:0-3)``. Slurm 22.05 prints it as text
(``-o``: one job a line); 23.02+ also as JSON (``--json``: ``gres_detail``, one entry per node of
``nodes``). Both are read. A poll sees a running job: the holding starts at the job's StartTime
and is seen until the poll; a job no longer running ends at its EndTime. Indices are the node's
GPU indices; the warehouse finds the device by host + index (the DCGM ``gpu`` label).
"""

from __future__ import annotations

import json
import re
import subprocess
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from gpuledger.ingest.holdings.devices import expand_hostlist, index_ranges
from gpuledger.ingest.metrics.dcgm_fields import canonical_host

SOURCE = "slurm-scontrol"
_RUNNING = frozenset({"RUNNING", "SUSPENDED", "COMPLETING"})
_IDX = re.compile(r"gpu(?::[^:(]+)?:\d+\(IDX:(?P<idx>[0-9,\-]+)\)")
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
            idx = _IDX.search(m[2])
            if idx:
                node_idx.append((m[1], index_ranges(idx["idx"])))
        node_idx = [(host, ix) for hosts, ix in node_idx for host in expand_hostlist(hosts)]
        try:
            start, end = _local(fields.get("StartTime", ""), zone), _local(fields.get("EndTime", ""), zone)
        except ValueError as exc:
            raise ScontrolError(f"line {n}: job {fields['JobId']}: {exc}") from None
        out.extend(_rows(cluster, fields["JobId"], fields.get("JobState", ""), start, end, now, node_idx))
    return out


def parse_json(text: str, *, cluster: str, now: datetime) -> list[dict]:
    """Holdings in ``scontrol --json -d show job`` output (Slurm 23.02+: ``gres_detail``)."""
    try:
        jobs = json.loads(text)["jobs"]
    except (ValueError, KeyError, TypeError) as exc:
        raise ScontrolError(f"not scontrol --json output ({exc})") from None
    out = []
    for job in jobs:
        state = job.get("job_state")
        state = state[0] if isinstance(state, list) and state else state
        nodes = expand_hostlist(job.get("nodes") or "")
        detail = job.get("gres_detail") or []
        node_idx = []
        for node, gres in zip(nodes, detail, strict=False):
            m = _IDX.search(gres or "")
            if m:
                node_idx.append((node, index_ranges(m["idx"])))

        def epoch(value):
            value = value.get("number") if isinstance(value, dict) else value
            return datetime.fromtimestamp(value, UTC).replace(tzinfo=None) if value else None

        out.extend(_rows(job.get("cluster") or cluster, str(job.get("job_id")), str(state or ""),
                         epoch(job.get("start_time")), epoch(job.get("end_time")), now, node_idx))
    return out


def run_scontrol(scontrol: str = "scontrol", timeout_s: float = 30.0) -> str:
    """``scontrol -d -o show job`` here (text: every Slurm version prints it)."""
    try:
        done = subprocess.run([scontrol, "-d", "-o", "show", "job"], capture_output=True, text=True,
                              timeout=timeout_s, check=False)
    except FileNotFoundError:
        raise ScontrolError(f"{scontrol}: not found (install slurm-client, or give --scontrol PATH)") from None
    except subprocess.TimeoutExpired:
        raise ScontrolError(f"{scontrol} -d -o show job: no answer within {timeout_s:.0f} s") from None
    if done.returncode != 0:
        raise ScontrolError(f"{scontrol} -d -o show job exited {done.returncode}: {done.stderr.strip()[:300]}")
    return done.stdout
