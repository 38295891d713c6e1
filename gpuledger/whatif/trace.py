"""Read a trace from the warehouse: the jobs of a range (any source), the pools they ran in, their
activity per hour of runtime, and the inventory (the warehouse's, or one from a file).

* pool — the (cluster, model, MIG profile) of the devices the job held (job_allocations ⋈ gpus);
  a job without device allocations: its cluster, jobs.gpu_model and a MIG profile named in it;
* units — devices of the pool: whole GPUs = the GPU count; MIG = GPU count ÷ the profile's
  fraction (gpuledger.rules.mig); a shared GPU (< 1 and no MIG) is one device, that share of it;
* work — end − start as recorded; still running at the range's end: up to that end (a lower
  bound); never started: *drawn* once per job from its class (jobs of its kind that ran; a job
  whose class never ran: its declared minimum runtime, else 1 h): a donor picked by a stable hash
  of (trace seed, cluster, job_id), whose runtime — scaled by the job's declared minimum runtime
  over the donor's, when both declare one — and hourly activity the job takes. The draw reads
  nothing of the config, so every policy and every setting replays the same work;
* activity — per hour of its runtime, the mean over its devices of the best signal the hourly
  rollup has (SM active, then graphics engine active, then GPU utilisation, never on MIG:
  gpuledger.rules.activity),
  where gpu_hourly covers it; a job without device allocations, from the samples its scheduler
  label names (Slurm ``hpc_job``, a pod's namespace/pod); a job never started, its donor's; else
  by kind (:data:`KIND_ACTIVITY`);
* resource — the pool of the devices it held; never started: the MIG profile its model or name
  names, else the one its fraction of a GPU is (a 2/7 notebook of an H100 cluster with 2g
  instances: one 2g instance, never a share of a whole H100), else its model;
* declared priority — jobs.priority as an integer, else none (a NULL or unreadable value: none).

Jobs submitted before the range and not ended by its start are submitted at its start; one that
was already running then replays what was left of it (its runtime and activity from the start).
"""

from __future__ import annotations

import csv
import random
from collections import Counter, defaultdict
from datetime import datetime
from pathlib import Path
from typing import NamedTuple

import yaml

from gpuledger.errors import UsageError
from gpuledger.rules import activity
from gpuledger.rules.mig import find_profile, mig_fraction
from gpuledger.rules.model_keys import gpu_model_key
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
    time_limit_s: int | None = None


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


class Donor(NamedTuple):
    """A job that ran start to end in the range: what a never-started job of its class may take."""

    job_id: str
    runtime_s: float
    min_runtime_s: int
    activity: dict[int, float] | None  # hour of its runtime -> activity ratio, where measured


def donors_by_kind(jobs: list[JobRow], activity: dict[JobKey, dict[int, float]]) -> dict[str | None, list[Donor]]:
    """The jobs that started and ended, by kind, in (cluster, job_id) order (the draw's order)."""
    donors: dict[str | None, list[Donor]] = defaultdict(list)
    for j in sorted(jobs, key=lambda j: (j.cluster, j.job_id)):
        if j.start_time is not None and j.end_time is not None and j.end_time > j.start_time:
            donors[j.kind].append(Donor(j.job_id, (j.end_time - j.start_time).total_seconds(),
                                        int(j.min_runtime_s or 0), activity.get((j.cluster, j.job_id))))
    return donors


def draw_donor(job: JobRow, donors: dict[str | None, list[Donor]], seed: int) -> Donor | None:
    """The donor of a never-started job: one of its kind's, picked by a stable hash of (seed,
    cluster, job_id) — the same pick on every run, machine and policy; None when its kind never ran."""
    pool = donors.get(job.kind)
    if not pool:
        return None
    # random.Random seeds a str through SHA-512: stable across processes (unlike hash())
    return pool[random.Random(f"{seed}:{job.cluster}:{job.job_id}").randrange(len(pool))]


def drawn_work(job: JobRow, donor: Donor | None) -> float:
    """Seconds of work of a never-started job: its donor's runtime, scaled by the job's declared
    minimum runtime over the donor's when both declare one (an eval that declares 30 min is a
    short eval of its kind); no donor: its declared minimum runtime, else 1 h."""
    mine = int(job.min_runtime_s or 0)
    if donor is None:
        return float(mine) if mine > 0 else 3600.0
    if mine > 0 and donor.min_runtime_s > 0:
        return mine * donor.runtime_s / donor.min_runtime_s
    return donor.runtime_s


def job_model_profile(job: JobRow, held: dict[JobKey, Counter],
                      models_by_cluster: dict[str, Counter],
                      profiles_by_model: dict[tuple[str, str], list[str]] | None = None) -> tuple[str | None, str | None]:
    """The (model, MIG profile) a job runs on: the kind of device it held most (ties: by model, then
    profile, the larger name); no device allocations: the MIG profile its model or name names, else
    the one its fraction of a GPU is (``profiles_by_model``: the cluster's MIG profiles per model),
    and its model's key, else the cluster's most common model."""
    got = held.get((job.cluster, job.job_id))
    if got:
        (model, prof), _ = max(got.items(), key=lambda kv: (kv[1], kv[0][0], kv[0][1] or ""))
        return model, prof
    prof = find_profile(job.gpu_model) or find_profile(job.name)
    models = models_by_cluster.get(job.cluster)
    model = _model_key(job.gpu_model) or (models.most_common(1)[0][0] if models else None)
    if prof is None and model is not None and profiles_by_model:
        prof = profile_of_fraction(float(job.gpus), model, profiles_by_model.get((job.cluster, model), []))
    return model, prof


def profile_of_fraction(gpus: float, model: str, profiles: list[str]) -> str | None:
    """The MIG profile of ``model`` whose instances make up ``gpus`` (< 1) in the fewest instances:
    2/7 is one 2g instance (not two 1g); None when no profile does (0.5: a shared GPU)."""
    if not 0 < gpus < 1 - 1e-6:
        return None
    best = None
    for prof in sorted(profiles):
        frac = mig_fraction(prof, model)
        if frac:
            n = gpus / frac
            if n >= 1 - 1e-6 and abs(n - round(n)) < 1e-4 and (best is None or round(n) < best[0]):
                best = (round(n), prof)
    return best[1] if best else None


def recorded_work(job: JobRow, *, start: datetime, end: datetime) -> tuple[float, int]:
    """(seconds of work to replay, hours of it already done before ``start``) of a job that
    started: its recorded runtime inside the range (to ``end`` while still running)."""
    st = job.start_time
    work = ((job.end_time or end) - max(st, start)).total_seconds()
    skip_h = 0  # a job already running at the range's start replays what was left of it
    if st < start:
        skip_h = int((start - st.replace(minute=0, second=0, microsecond=0)).total_seconds() // 3600)
    return work, skip_h


def activity_profile(acts: dict[int, float] | None, *, skip_h: int, work_s: float,
                     kind: str | None, measured: str = "samples") -> tuple[tuple[float, ...], str]:
    """(activity per hour of the replayed runtime, "samples"), from the hours measured (an hour
    missing between them: the kind's typical activity), as many hours as the work or the last
    measured hour needs; or ((the kind's typical activity,), "kind") when nothing measured remains."""
    default = KIND_ACTIVITY.get(kind or "", DEFAULT_ACTIVITY)
    if acts and max(acts) >= skip_h:
        n = max(max(acts) + 1 - skip_h, int(-(-work_s // 3600)))
        return tuple(acts.get(h + skip_h, default) for h in range(n)), measured
    return (default,), "kind"


def declared_priority(value) -> int | None:
    """jobs.priority as an integer; None when absent or not a number (a priority is read, never
    guessed: the generator of the day may leave it NULL)."""
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None


def sim_job(job: JobRow, *, pool, units: int, size: float, frac: float, work_s: float,
            activity: tuple[float, ...], source: str, start: datetime, params: Params,
            work_source: str = "recorded") -> SimJob:
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
        declared_priority=declared_priority(job.priority),
        min_runtime_s=int(job.min_runtime_s or 0),
        time_limit_s=job.time_limit_s,
        resumable=(job.kind or "") in params.resumable_kinds,
        activity=activity,
        activity_source=source,
        work_source=work_source,
    )


def trace_jobs(rows: list[JobRow], *, pools: dict, held: dict[JobKey, Counter],
               activity: dict[JobKey, dict[int, float]], start: datetime, end: datetime, params: Params,
               seed: int = 1) -> tuple[list[SimJob], list[tuple[str, str]]]:
    """The jobs' rows as SimJobs on the inventory's ``pools``, and the (job_id, reason) of each that
    cannot be replayed: no such devices, more devices than the pool has, no time to run. A job
    that never started takes its work and activity from a donor drawn with ``seed``."""
    models_by_cluster: dict[str, Counter] = defaultdict(Counter)
    profiles_by_model: dict[tuple[str, str], list[str]] = defaultdict(list)
    for p, devices in pools.items():  # (cluster, model, profile)
        models_by_cluster[p[0]][p[1]] += len(devices)
        if p[2]:
            profiles_by_model[(p[0], p[1])].append(p[2])
    donors = donors_by_kind(rows, activity)
    jobs, skipped = [], []
    for job in rows:
        model, prof = job_model_profile(job, held, models_by_cluster, profiles_by_model)
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
        if job.start_time is not None:
            work, skip_h = recorded_work(job, start=start, end=end)
            acts, measured, work_source = activity.get((job.cluster, job.job_id)), "samples", "recorded"
        else:
            donor = draw_donor(job, donors, seed)
            work, skip_h = drawn_work(job, donor), 0
            acts, measured = (donor.activity if donor else None), "drawn"
            work_source = f"drawn:{donor.job_id}" if donor else ("declared" if job.min_runtime_s else "default")
        if work <= 0:
            skipped.append((job.job_id, "ran for no time"))
            continue
        profile, source = activity_profile(acts, skip_h=skip_h, work_s=work, kind=job.kind, measured=measured)
        jobs.append(sim_job(job, pool=pool, units=units, size=size, frac=frac if prof else 1.0, work_s=work,
                            activity=profile, source=source, start=start, params=params,
                            work_source=work_source))
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
    seed: int | None = None,
) -> Trace:
    """The jobs of [start, end) as a Trace (see the module docstring). ``samples=False`` reads
    activity from gpu_hourly only (jobs without device allocations then go by kind). ``seed``: the
    trace seed of the never-started jobs' draws (default ``params.seed``); ``cfg`` is not read
    for the jobs — only the caller's choices are — so a trace is the same under any policy."""
    params = params or Params()
    seed = params.seed if seed is None else seed
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
                               params=params, seed=seed)
    return Trace(
        origin=start,
        horizon_s=int((end - start).total_seconds()),
        jobs=tuple(jobs),
        inventory=inv,
        skipped=tuple(skipped),
        seed=seed,
    )


def _model_key(gpu_model: str | None) -> str | None:
    return gpu_model_key(gpu_model) if gpu_model else None
