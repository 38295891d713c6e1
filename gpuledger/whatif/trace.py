"""Read a trace from the warehouse: the jobs of a range (any source), the pools they ran in, their
activity per hour of runtime, and the inventory (the warehouse's, or one from a file).

* pool — the (cluster, model, MIG profile) of the devices the job held (job_allocations ⋈ gpus);
  a job without device allocations: its cluster, jobs.gpu_model and a MIG profile named in it;
* units — devices of the pool: whole GPUs = the GPU count; MIG = GPU count ÷ the profile's
  fraction (gpuledger.rules.mig); a shared GPU (< 1 and no MIG) is one device, that share of it;
* work — end − start as recorded; still running at the range's end: up to that end (a lower
  bound); never started: its declared minimum runtime when it cannot checkpoint and is not of a
  kind exempt from preemption (the runtime it says it needs), else the median runtime of its kind
  in the trace (else 1 h);
* activity — per hour of its runtime, the mean over its devices of the best signal the hourly
  rollup has (SM active, then graphics engine active, then GPU utilisation, never on MIG:
  gpuledger.rules.activity),
  where gpu_hourly covers it; a job without device allocations, from the samples its scheduler
  label names (Slurm ``hpc_job``, a pod's namespace/pod); else by kind (:data:`KIND_ACTIVITY`).

Jobs submitted before the range and not ended by its start are submitted at its start; one that
was already running then replays what was left of it (its runtime and activity from the start).
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from datetime import datetime
from pathlib import Path
from typing import NamedTuple

from gpuledger.errors import UsageError
from gpuledger.rules import activity
from gpuledger.rules.mig import find_profile, mig_fraction
from gpuledger.sql import load_sql
from gpuledger.whatif.inventory import Device, Inventory, pool_key
from gpuledger.whatif.model import Params, SimJob, Trace

# Typical activity ratio of a job's running hours when no samples say (simulator/workload.py's
# behaviours in the same spirit): inference idles between requests, notebooks mostly idle.
KIND_ACTIVITY = {"training": 0.85, "fine-tune": 0.75, "batch": 0.6, "inference": 0.4, "interactive": 0.15}
DEFAULT_ACTIVITY = 0.6

_GPUS = load_sql(__package__, "trace_gpus.sql")
_JOBS = load_sql(__package__, "trace_jobs.sql")
_ALLOC_POOLS = load_sql(__package__, "trace_alloc_pools.sql")
# Jobs with device allocations read gpu_hourly first and keep those values; the others, their
# samples by the label DCGM puts on them (one query per way of matching, below).
_ACTIVITY = load_sql(__package__, "job_activity_hourly.sql",
                     activity_ratio=activity.ratio_of_sums_sql("h", activity.is_mig_sql("g")))
_MATCH_SLURM = "s.hpc_job = coalesce(j.scheduler_job, j.job_id)"
# a pod: namespace/pod as the Kubernetes ingest records it (jobs.scheduler_job), else a pod named
# after its job plus the controller's five-character suffix (the simulator's pods)
_MATCH_POD = "coalesce(s.namespace, '') || '/' || s.pod = j.scheduler_job"
_MATCH_POD_NAME = (
    "regexp_replace(s.pod, '-[0-9a-z]{5}$', '') = j.name AND s.namespace = j.namespace "
    "AND j.scheduler_job IS NULL"
)


def _activity_labels(match: str) -> str:
    return load_sql(__package__, "job_activity_labels.sql", match=match,
                    activity_ratio=activity.sample_ratio_sql("s", activity.is_mig_sql("g")))


def inventory_from_warehouse(con, *, start: datetime, end: datetime) -> Inventory:
    devices = [
        Device(int(gid), pool_key(cl, model, prof), float(frac), uuid, tier or "reserved")
        for gid, cl, uuid, model, prof, frac, tier in con.execute(
            _GPUS, {"start": start, "end": end}
        ).fetchall()
    ]
    return Inventory(devices)


def inventory_from_file(path: Path) -> Inventory:
    """A YAML or CSV inventory: rows of cluster, model, count (physical GPUs), optional
    mig_profile (each GPU carved into instances of it) and tier."""
    import csv

    import yaml

    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the inventory file ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: not a text file (byte {exc.start} is not UTF-8); --inventory takes a "
                         "YAML or CSV list of cluster, model, count") from None
    if "\x00" in text:
        raise UsageError(f"{path}: not a text file (NUL bytes); --inventory takes a YAML or CSV list of "
                         "cluster, model, count")
    if path.suffix.lower() == ".csv":
        rows = list(csv.DictReader(text.splitlines()))
    else:
        try:
            raw = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise UsageError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
        rows = raw.get("gpus") if isinstance(raw, dict) else raw
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            raise UsageError(
                f"{path}: expected a list of rows (or `gpus:` with one) like "
                "{cluster: sim, model: H100, count: 64}"
            )
    try:
        return Inventory.from_counts(rows)
    except ValueError as exc:
        raise UsageError(f"{path}: {exc}") from None


def _units(gpus: float, fraction: float) -> tuple[int, float]:
    """(devices, share of each) for a job of ``gpus`` whole-GPU equivalents on devices of ``fraction``."""
    per_device = gpus / fraction
    if per_device >= 1 - 1e-6:
        n = round(per_device)
        if abs(per_device - n) < 1e-6:
            return max(1, n), 1.0
        n = int(-(-per_device // 1))  # 1.5 GPUs: two devices, three quarters of each
        return n, per_device / n
    return 1, per_device


class JobRow(NamedTuple):
    """One row of trace_jobs.sql."""

    cluster: str
    job_id: str
    project: str | None
    user_name: str | None
    name: str | None
    kind: str | None
    namespace: str | None
    gpu_model: str | None
    gpus: float
    min_runtime_s: int | None
    submit_time: datetime
    start_time: datetime | None
    end_time: datetime | None
    priority: int | None
    source: str | None


JobKey = tuple[str, str]  # (cluster, job_id)


def held_devices(rows) -> dict[JobKey, Counter]:
    """trace_alloc_pools.sql's rows -> per job, how many devices of each (model, MIG profile) it held."""
    held: dict[JobKey, Counter] = defaultdict(Counter)
    for cl, jid, model, prof, n in rows:
        held[(cl, jid)][(model, prof)] += n
    return held


def hourly_activity(rows) -> dict[JobKey, dict[int, float]]:
    """(cluster, job_id, hour of runtime, activity) rows, best source first -> per job, hour -> activity
    in [0, 1]: the first row of an hour wins; a NULL activity or hour, or a negative hour, says nothing."""
    out: dict[JobKey, dict[int, float]] = defaultdict(dict)
    for cl, jid, hour, act in rows:
        if act is not None and hour is not None and hour >= 0:
            out[(cl, jid)].setdefault(int(hour), max(0.0, min(1.0, float(act))))
    return out


def runtimes_by_kind(jobs: list[JobRow]) -> dict[str | None, list[float]]:
    """The recorded runtimes (s) of the jobs that started and ended, by kind."""
    runtimes: dict[str | None, list[float]] = defaultdict(list)
    for j in jobs:
        if j.start_time is not None and j.end_time is not None:
            runtimes[j.kind].append((j.end_time - j.start_time).total_seconds())
    return runtimes


def job_model_profile(job: JobRow, held: dict[JobKey, Counter],
                      models_by_cluster: dict[str, Counter]) -> tuple[str | None, str | None]:
    """The (model, MIG profile) a job runs on: the kind of device it held most (ties: by model, then
    profile, the larger name); no device allocations: the MIG profile its model or name names and
    its model's key, else the cluster's most common model."""
    got = held.get((job.cluster, job.job_id))
    if got:
        (model, prof), _ = max(got.items(), key=lambda kv: (kv[1], kv[0][0], kv[0][1] or ""))
        return model, prof
    prof = find_profile(job.gpu_model) or find_profile(job.name)
    models = models_by_cluster.get(job.cluster)
    model = _model_key(job.gpu_model) or (models.most_common(1)[0][0] if models else None)
    return model, prof


def work_seconds(job: JobRow, *, start: datetime, end: datetime, params: Params, exempt_kinds: set[str],
                 runtimes: dict[str | None, list[float]]) -> tuple[float, int]:
    """(seconds of work to replay, hours of it already done before ``start``): see the module
    docstring's *work*."""
    kind = job.kind or ""
    if job.start_time is not None:
        st = job.start_time
        work = ((job.end_time or end) - max(st, start)).total_seconds()
        skip_h = 0  # a job already running at the range's start replays what was left of it
        if st < start:
            skip_h = int((start - st.replace(minute=0, second=0, microsecond=0)).total_seconds() // 3600)
        return work, skip_h
    if job.min_runtime_s and kind not in params.resumable_kinds and kind not in exempt_kinds:
        # never started, cannot checkpoint, may be preempted, declares a minimum runtime: that is
        # the runtime it says it needs (preempted sooner it loses everything). The kind's median
        # instead would make it outlive its protection, be preempted and start over at every
        # cycle past it. (An exempt service is never preempted: its median stands.)
        return float(job.min_runtime_s), 0
    known = runtimes.get(job.kind) or []
    return (statistics.median(known) if known else 3600.0), 0


def activity_profile(acts: dict[int, float] | None, *, skip_h: int, work_s: float,
                     kind: str | None) -> tuple[tuple[float, ...], str]:
    """(activity per hour of the replayed runtime, "samples"), from the hours measured (an hour
    missing between them: the kind's typical activity), as many hours as the work or the last
    measured hour needs; or ((the kind's typical activity,), "kind") when nothing measured remains."""
    default = KIND_ACTIVITY.get(kind or "", DEFAULT_ACTIVITY)
    if acts and max(acts) >= skip_h:
        n = max(max(acts) + 1 - skip_h, int(-(-work_s // 3600)))
        return tuple(acts.get(h + skip_h, default) for h in range(n)), "samples"
    return (default,), "kind"


def sim_job(job: JobRow, *, pool, units: int, size: float, frac: float, work_s: float,
            activity: tuple[float, ...], source: str, start: datetime, params: Params) -> SimJob:
    """The SimJob the engine replays: submitted at its offset from ``start`` (0 if before it),
    ``units`` devices of ``size`` each, ``gpus`` = units x size x the device's fraction of a GPU."""
    return SimJob(
        job_id=job.job_id,
        project=job.project,
        submit_s=max(0, int((job.submit_time - start).total_seconds())),
        work_s=round(work_s),
        pool=pool,
        units=units,
        unit_size=size,
        gpus=units * size * frac,
        cluster=job.cluster,
        kind=job.kind,
        name=job.name,
        namespace=job.namespace,
        user_name=job.user_name,
        declared_priority=None if job.priority is None else int(job.priority),
        min_runtime_s=int(job.min_runtime_s or 0),
        resumable=(job.kind or "") in params.resumable_kinds,
        activity=activity,
        activity_source=source,
    )


def trace_jobs(rows: list[JobRow], *, pools: dict, held: dict[JobKey, Counter],
               activity: dict[JobKey, dict[int, float]], start: datetime, end: datetime, params: Params,
               exempt_kinds: set[str]) -> tuple[list[SimJob], list[tuple[str, str]]]:
    """The jobs' rows as SimJobs on the inventory's ``pools``, and the (job_id, reason) of each that
    cannot be replayed: no such devices, more devices than the pool has, no time to run."""
    models_by_cluster: dict[str, Counter] = defaultdict(Counter)
    for p, devices in pools.items():  # (cluster, model, profile)
        models_by_cluster[p[0]][p[1]] += len(devices)
    runtimes = runtimes_by_kind(rows)
    jobs, skipped = [], []
    for job in rows:
        model, prof = job_model_profile(job, held, models_by_cluster)
        pool = pool_key(job.cluster, model, prof)
        if pool not in pools:
            what = f"{model} {prof}" if prof else f"{model}"
            skipped.append((job.job_id, f"no {what} GPUs of cluster {job.cluster} in the inventory"))
            continue
        frac = pools[pool][0].fraction if prof else 1.0
        if prof and mig_fraction(prof, model):
            frac = mig_fraction(prof, model)
        units, size = _units(float(job.gpus), frac)
        if units > len(pools[pool]):
            skipped.append((job.job_id, f"asks {units} devices of {pool[1]}, the inventory has {len(pools[pool])}"))
            continue
        work, skip_h = work_seconds(job, start=start, end=end, params=params, exempt_kinds=exempt_kinds,
                                    runtimes=runtimes)
        if work <= 0:
            skipped.append((job.job_id, "ran for no time"))
            continue
        profile, source = activity_profile(activity.get((job.cluster, job.job_id)), skip_h=skip_h, work_s=work,
                                           kind=job.kind)
        jobs.append(sim_job(job, pool=pool, units=units, size=size, frac=frac if prof else 1.0, work_s=work,
                            activity=profile, source=source, start=start, params=params))
    return jobs, skipped


def load_trace(
    con,
    cfg,
    *,
    start: datetime,
    end: datetime,
    params: Params | None = None,
    inventory: Inventory | None = None,
    samples: bool = True,
) -> Trace:
    """The jobs of [start, end) as a Trace (see the module docstring). ``samples=False`` reads
    activity from gpu_hourly only (jobs without device allocations then go by kind)."""
    params = params or Params()
    args = {"start": start, "end": end}
    inv = inventory or inventory_from_warehouse(con, start=start, end=end)
    if not inv.devices:
        raise UsageError(
            "the inventory is empty: the warehouse has no GPUs in the range "
            "(give --inventory FILE, or load samples first)"
        )
    pools = inv.pools()
    held = held_devices(con.execute(_ALLOC_POOLS, args).fetchall())
    queries = [_ACTIVITY]
    if samples:
        queries += [_activity_labels(m) for m in (_MATCH_SLURM, _MATCH_POD, _MATCH_POD_NAME)]
    activity = hourly_activity(row for query in queries for row in con.execute(query, args).fetchall())
    rows = [JobRow(*r) for r in con.execute(_JOBS, args).fetchall()]
    jobs, skipped = trace_jobs(rows, pools=pools, held=held, activity=activity, start=start, end=end,
                               params=params, exempt_kinds=set(cfg.policy.enforcement.exempt_kinds))
    return Trace(
        origin=start,
        horizon_s=int((end - start).total_seconds()),
        jobs=tuple(jobs),
        inventory=inv,
        skipped=tuple(skipped),
    )


def _model_key(gpu_model: str | None) -> str | None:
    from gpuledger.rules.model_keys import gpu_model_key

    return gpu_model_key(gpu_model) if gpu_model else None
