"""Read a trace from the warehouse: the jobs of a range (any source), the pools they ran in, their
activity per hour of runtime, and the inventory (the warehouse's, or one from a file).

* pool — the (cluster, model, MIG profile) of the devices the job held (job_allocations ⋈ gpus);
  a job without device allocations: its cluster, jobs.gpu_model and a MIG profile named in it;
* units — devices of the pool: whole GPUs = the GPU count; MIG = GPU count ÷ the profile's
  fraction (gpuledger.ingest.mig); a shared GPU (< 1 and no MIG) is one device, that share of it;
* work — end − start as recorded; still running at the range's end: up to that end (a lower
  bound); never started: its declared minimum runtime when it cannot checkpoint and is not of a
  kind exempt from preemption (the runtime it says it needs), else the median runtime of its kind
  in the trace (else 1 h);
* activity — per hour of its runtime, the mean over its devices of the best signal the hourly
  rollup has (SM active, then graphics engine active, then GPU utilisation; attribution.SIGNALS),
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

from gpuledger.errors import UsageError
from gpuledger.ingest.mig import find_profile, mig_fraction
from gpuledger.whatif.inventory import Device, Inventory, pool_key
from gpuledger.whatif.model import Params, SimJob, Trace

# Typical activity ratio of a job's running hours when no samples say (simulator/workload.py's
# behaviours in the same spirit): inference idles between requests, notebooks mostly idle.
KIND_ACTIVITY = {"training": 0.85, "fine-tune": 0.75, "batch": 0.6, "inference": 0.4, "interactive": 0.15}
DEFAULT_ACTIVITY = 0.6

_GPUS = """
SELECT gpu_id, cluster, gpu_uuid, model, mig_profile, gpu_fraction, pricing_tier
FROM gpus WHERE (first_seen IS NULL OR first_seen < $end) AND (retired_at IS NULL OR retired_at > $start)
ORDER BY gpu_id
"""
_JOBS = """
SELECT cluster, job_id, project, user_name, name, kind, namespace, gpu_model, gpus, min_runtime_s,
       coalesce(submit_time, start_time) AS submit_time, start_time, end_time, priority, source
FROM jobs
WHERE coalesce(submit_time, start_time) < $end AND (end_time IS NULL OR end_time > $start)
ORDER BY cluster, job_id
"""
_ALLOC_POOLS = """
SELECT a.cluster, a.job_id, g.model, g.mig_profile, count(DISTINCT a.gpu_id) AS devices
FROM job_allocations a JOIN gpus g USING (gpu_id) JOIN jobs j ON j.cluster = a.cluster AND j.job_id = a.job_id
WHERE coalesce(j.submit_time, j.start_time) < $end AND (j.end_time IS NULL OR j.end_time > $start)
GROUP BY ALL
"""
_ACTIVITY = """
SELECT a.cluster, a.job_id,
       CAST(floor(epoch(h.hour - date_trunc('hour', j.start_time)) / 3600) AS BIGINT) AS run_hour,
       avg(CASE WHEN h.s_n_sm_active > 0 THEN h.s_sm_active / h.s_n_sm_active
                WHEN h.s_n_gr_engine_active > 0 THEN h.s_gr_engine_active / h.s_n_gr_engine_active
                WHEN h.s_n_gpu_util > 0 AND g.mig_profile IS NULL THEN h.s_gpu_util / h.s_n_gpu_util END) AS activity
FROM job_allocations a
JOIN jobs j ON j.cluster = a.cluster AND j.job_id = a.job_id
JOIN gpus g ON g.gpu_id = a.gpu_id
JOIN gpu_hourly h ON h.gpu_id = a.gpu_id AND h.hour >= date_trunc('hour', a.start_time)
     AND h.hour < coalesce(a.end_time, $end)
WHERE j.start_time IS NOT NULL AND coalesce(j.submit_time, j.start_time) < $end
  AND (j.end_time IS NULL OR j.end_time > $start) AND h.hour >= $start AND h.hour < $end
GROUP BY ALL
"""

# Jobs without device allocations: their samples by the label DCGM puts on them (a Slurm job's
# hpc_job, a pod's namespace/pod), as gpuledger.ingest.device_links matches them. Jobs with
# allocations are read from gpu_hourly first and keep those values.
_ACTIVITY_LABELS = """
SELECT j.cluster, j.job_id,
       CAST(floor(epoch(date_trunc('hour', s.ts) - date_trunc('hour', j.start_time)) / 3600) AS BIGINT) AS run_hour,
       avg(coalesce(s.sm_active_ratio, s.gr_engine_active_ratio, s.gpu_util_ratio)) AS activity
FROM gpu_samples s
JOIN jobs j ON {match}
WHERE s.ts >= $start AND s.ts < $end AND j.start_time IS NOT NULL AND s.ts >= j.start_time
  AND (j.end_time IS NULL OR s.ts < j.end_time)
GROUP BY ALL
"""
_MATCH_SLURM = "s.hpc_job = coalesce(j.scheduler_job, j.job_id)"
# a pod: namespace/pod as the Kubernetes ingest records it (jobs.scheduler_job), else a pod named
# after its job plus the controller's five-character suffix (the simulator's pods)
_MATCH_POD = "coalesce(s.namespace, '') || '/' || s.pod = j.scheduler_job"
_MATCH_POD_NAME = (
    "regexp_replace(s.pod, '-[0-9a-z]{5}$', '') = j.name AND s.namespace = j.namespace "
    "AND j.scheduler_job IS NULL"
)


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
    fraction = {p: devs[0].fraction for p, devs in pools.items()}
    held: dict[tuple[str, str], Counter] = defaultdict(Counter)
    for cl, jid, model, prof, n in con.execute(_ALLOC_POOLS, args).fetchall():
        held[(cl, jid)][(model, prof)] += n
    activity: dict[tuple[str, str], dict[int, float]] = defaultdict(dict)
    queries = [_ACTIVITY]
    if samples:
        queries += [_ACTIVITY_LABELS.format(match=m) for m in (_MATCH_SLURM, _MATCH_POD, _MATCH_POD_NAME)]
    for query in queries:
        for cl, jid, hour, act in con.execute(query, args).fetchall():
            if act is not None and hour is not None and hour >= 0:
                activity[(cl, jid)].setdefault(int(hour), max(0.0, min(1.0, float(act))))
    rows = con.execute(_JOBS, args).fetchall()
    models_by_cluster: dict[str, Counter] = defaultdict(Counter)
    for p in pools:
        models_by_cluster[p[0]][p[1]] += len(pools[p])
    runtimes: dict[str | None, list[float]] = defaultdict(list)
    for r in rows:
        if r[11] is not None and r[12] is not None:
            runtimes[r[5]].append((r[12] - r[11]).total_seconds())
    exempt_kinds = set(cfg.policy.enforcement.exempt_kinds)
    jobs, skipped = [], []
    for (
        cl,
        jid,
        project,
        user,
        name,
        kind,
        ns,
        gpu_model,
        gpus,
        min_rt,
        submit,
        st,
        en,
        prio,
        _source,
    ) in rows:
        if (cl, jid) in held:
            (model, prof), _ = max(held[(cl, jid)].items(), key=lambda kv: (kv[1], kv[0][0], kv[0][1] or ""))
        else:
            prof = find_profile(gpu_model) or find_profile(name)
            model = _model_key(gpu_model) or (
                models_by_cluster[cl].most_common(1)[0][0] if models_by_cluster[cl] else None
            )
        pool = pool_key(cl, model, prof)
        if pool not in pools:
            skipped.append(
                (jid, f"no {model}{' ' + prof if prof else ''} GPUs of cluster {cl} in the inventory")
            )
            continue
        frac = fraction[pool] if prof else 1.0
        if prof and mig_fraction(prof, model):
            frac = mig_fraction(prof, model)
        units, size = _units(float(gpus), frac)
        if units > len(pools[pool]):
            skipped.append((jid, f"asks {units} devices of {pool[1]}, the inventory has {len(pools[pool])}"))
            continue
        skip_h = 0  # a job already running at the range's start replays what was left of it
        if st is not None:
            work = ((en or end) - max(st, start)).total_seconds()
            if st < start:
                skip_h = int((start - st.replace(minute=0, second=0, microsecond=0)).total_seconds() // 3600)
        elif min_rt and (kind or "") not in params.resumable_kinds and (kind or "") not in exempt_kinds:
            # never started, cannot checkpoint, may be preempted, declares a minimum runtime: that is
            # the runtime it says it needs (preempted sooner it loses everything). The kind's median
            # instead would make it outlive its protection, be preempted and start over at every
            # cycle past it. (An exempt service is never preempted: its median stands.)
            work = float(min_rt)
        else:
            known = runtimes.get(kind) or []
            work = statistics.median(known) if known else 3600.0
        if work <= 0:
            skipped.append((jid, "ran for no time"))
            continue
        acts = activity.get((cl, jid))
        default = KIND_ACTIVITY.get(kind or "", DEFAULT_ACTIVITY)
        if acts and max(acts) >= skip_h:
            n = max(max(acts) + 1 - skip_h, int(-(-work // 3600)))
            profile = tuple(acts.get(h + skip_h, default) for h in range(n))
            source = "samples"
        else:
            profile, source = (default,), "kind"
        submit_s = max(0, int((submit - start).total_seconds()))
        jobs.append(
            SimJob(
                job_id=jid,
                project=project,
                submit_s=submit_s,
                work_s=round(work),
                pool=pool,
                units=units,
                unit_size=size,
                gpus=units * size * (frac if prof else 1.0),
                cluster=cl,
                kind=kind,
                name=name,
                namespace=ns,
                user_name=user,
                declared_priority=None if prio is None else int(prio),
                min_runtime_s=int(min_rt or 0),
                resumable=(kind or "") in params.resumable_kinds,
                activity=profile,
                activity_source=source,
            )
        )
    return Trace(
        origin=start,
        horizon_s=int((end - start).total_seconds()),
        jobs=tuple(jobs),
        inventory=inv,
        skipped=tuple(skipped),
    )


def _model_key(gpu_model: str | None) -> str | None:
    from gpuledger.ingest.model_keys import gpu_model_key

    return gpu_model_key(gpu_model) if gpu_model else None
