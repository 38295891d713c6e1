"""The job stream and its placement on the simulated cluster: demand.py's users submit, scheduler.py
places (a queue per pool, fair-share order, full backfill), and the result is assembled here into
job rows and lane allocations. Times are epoch seconds (UTC). Ground truth for tests and demos:
squatters are named ``squat-...``, failing jobs end in state FAILED within minutes, sessions
not started in time end CANCELLED without a start (gpuledger.rules.job_class), and
``behaviour`` says what each job did. Every job records the partition (pool) it asked for.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from gpuledger.config import Config
from gpuledger.simulator import scheduler
from gpuledger.simulator.cluster import Hardware
from gpuledger.simulator.demand import MIN_RUNTIME_CAP_S, REGIME, Demand, global_shares, plan_for  # noqa: F401
from gpuledger.simulator.pools import Placer, partition_name
from gpuledger.simulator.specs import (  # noqa: F401 (signals.py and tests import the codes from here)
    BATCH,
    BEHAVIOUR_NAMES,
    FAILING,
    FINE_TUNE,
    IDLE,
    INFERENCE,
    INTERACTIVE,
    SQUAT,
    TRAINING,
    JobSpec,
)


@dataclass
class Workload:
    """Jobs (one row each) and lane allocations: lane, job index, start, end (epoch s)."""

    jobs: pl.DataFrame
    alloc_lane: np.ndarray
    alloc_job: np.ndarray
    alloc_start: np.ndarray
    alloc_end: np.ndarray
    job_behaviour: np.ndarray
    job_start: np.ndarray
    job_level: np.ndarray  # typical activity ratio of the job's busy phases
    job_fb_ratio: np.ndarray  # share of the device's memory the job holds
    job_ckpt_period_s: np.ndarray
    window_start_s: int
    window_end_s: int
    seed: int = 0
    regime: str = REGIME  # the demand regime (demand.py), named beside the seed in every figure

    def squatter_job_ids(self) -> list[str]:
        return self.jobs.filter(pl.col("name").str.starts_with("squat-"))["job_id"].to_list()


ID_ORIGIN_S = 1_577_836_800  # 2020-01-01 UTC
JOBS_PER_WINDOW = 1_000_000


def job_id_tag(start_s: int) -> int:
    """Minutes from 2020-01-01 UTC to the window start: job ids begin with it, so windows with
    different starts (a simulation extended with a later --start) never share a job id, and a
    rerun of the same window writes the same ids (idempotent). Slurm ids are tag × 10^6 + index,
    Kubernetes ids ``k8s-<tag>-<index>``."""
    return (start_s - ID_ORIGIN_S) // 60


def simulate_workload(cfg: Config, hw: Hardware, seed: int, start_s: int, end_s: int,
                      regime: str = REGIME) -> Workload:
    """Generate demand of the named regime (demand.REGIMES) for [start_s, end_s) and schedule it;
    deterministic for (seed, regime)."""
    rng = np.random.default_rng([seed, 7])
    placer = Placer(hw)
    demand = Demand(cfg, placer, seed, rng, start_s, end_s, regime)
    half_life_s = cfg.policy.usage.half_life_days * 86400
    done = scheduler.run(demand, placer, start_s=start_s, end_s=end_s, half_life_s=half_life_s)
    return _assemble(hw, done.specs, done.started, done.abandoned, rng, seed, start_s, end_s, regime)


def _assemble(hw, specs, started, abandoned, rng, seed, start_s, end_s, regime) -> Workload:
    n = len(specs)
    job_start = np.full(n, -1, dtype=np.int64)
    lanes_l, jobs_l, s_l, e_l = [], [], [], []
    for idx, (s, lanes) in started.items():
        job_start[idx] = s
        e = s + specs[idx].duration_s
        for lane in lanes:
            lanes_l.append(lane)
            jobs_l.append(idx)
            s_l.append(s)
            e_l.append(e)
    order = np.lexsort((np.array(s_l), np.array(lanes_l))) if lanes_l else np.array([], dtype=np.int64)
    alloc_lane = np.array(lanes_l, dtype=np.int64)[order]
    alloc_job = np.array(jobs_l, dtype=np.int64)[order]
    alloc_start = np.array(s_l, dtype=np.int64)[order]
    alloc_end = np.array(e_l, dtype=np.int64)[order]

    behaviour = np.array([s.behaviour for s in specs], dtype=np.int64)
    level = np.select(
        [behaviour == TRAINING, behaviour == FINE_TUNE, behaviour == BATCH, behaviour == INFERENCE,
         behaviour == INTERACTIVE],
        [rng.uniform(0.72, 0.92, n), rng.uniform(0.55, 0.85, n), rng.uniform(0.35, 0.75, n),
         rng.uniform(0.5, 1.0, n), rng.uniform(0.3, 0.8, n)], 0.1)
    fb = np.select(
        [behaviour == TRAINING, behaviour == FINE_TUNE, behaviour == BATCH, behaviour == INFERENCE,
         behaviour == INTERACTIVE, behaviour == SQUAT],
        [rng.uniform(0.85, 0.96, n), rng.uniform(0.6, 0.9, n), rng.uniform(0.3, 0.6, n),
         rng.uniform(0.6, 0.8, n), rng.uniform(0.15, 0.5, n), rng.uniform(0.7, 0.92, n)], 0.2)
    ckpt = rng.integers(1800, 3600, n)

    lane_dev = hw.lane_device
    dev_fraction = hw.dev_fraction
    lane_share = hw.lane_share
    gpus_of = np.zeros(n)
    np.add.at(gpus_of, alloc_job, dev_fraction[lane_dev[alloc_lane]] * lane_share[alloc_lane])

    rows = []
    tag = job_id_tag(start_s)
    if n >= JOBS_PER_WINDOW:  # the index would run into the next minute's ids
        raise ValueError(f"{n:,} jobs in one simulated window; simulate at most {JOBS_PER_WINDOW - 1:,} "
                         "(fewer --gpus or --days per run, extending with a later --start)")
    for idx, spec in enumerate(specs):
        s = int(job_start[idx])
        gpus = float(gpus_of[idx]) if s >= 0 else spec.gpus
        end = s + spec.duration_s if s >= 0 else None
        if s < 0 and idx in abandoned:  # a session its user gave up on: cancelled in the queue
            state, end = "CANCELLED", abandoned[idx]
        elif s < 0:
            state = "PENDING"
        elif end >= end_s:
            state, end = "RUNNING", None
        else:
            state = "FAILED" if spec.behaviour == FAILING else "COMPLETED"
        if spec.scheduler == "slurm":
            job_id, namespace = str(tag * JOBS_PER_WINDOW + idx), None
        else:
            job_id, namespace = f"k8s-{tag}-{idx}", spec.project
        rows.append((job_id, spec.project, spec.user, spec.name, spec.kind,
                     spec.pool.split(":")[1] if spec.pool.startswith("whole:") else "H100",
                     round(gpus, 6), spec.min_runtime_s, spec.submit_s, s if s >= 0 else None, end,
                     state, spec.priority, namespace, spec.scheduler, BEHAVIOUR_NAMES[spec.behaviour],
                     partition_name(spec.pool), spec.time_limit_s))
    jobs = pl.DataFrame(rows, orient="row", schema={
        "job_id": pl.String, "project": pl.String, "user_name": pl.String, "name": pl.String,
        "kind": pl.String, "gpu_model": pl.String, "gpus": pl.Float64, "min_runtime_s": pl.Int64,
        "submit_s": pl.Int64, "start_s": pl.Int64, "end_s": pl.Int64, "state": pl.String,
        "priority": pl.Int64, "namespace": pl.String, "scheduler": pl.String, "behaviour": pl.String,
        "partition": pl.String, "time_limit_s": pl.Int64})
    return Workload(jobs=jobs, alloc_lane=alloc_lane, alloc_job=alloc_job, alloc_start=alloc_start,
                    alloc_end=alloc_end, job_behaviour=behaviour, job_start=job_start, job_level=level,
                    job_fb_ratio=fb, job_ckpt_period_s=ckpt, window_start_s=start_s, window_end_s=end_s,
                    seed=seed, regime=regime)
