"""How busy the simulated cluster is (issue 34): occupancy and share of jobs started, per size.

Builds the simulator's workload only (no samples, no warehouse) and prints, per run: jobs, the
share that started, the share of each kind that started, occupancy (allocated GPU-hours ÷
installed GPU-hours, MIG slices and time-sliced halves by their fraction) over the whole window
and after the first day (warm-up), the least busy pool after warm-up, and the seed and regime.

    .venv/bin/python benchmarks/simulator_bench.py                        # the four standard runs
    .venv/bin/python benchmarks/simulator_bench.py --gpus 256 --days 7 --seed 42
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np

from gpuledger.simulator import build_cluster

STANDARD = ((256, 7, 42), (256, 30, 1), (1024, 7, 42), (1024, 30, 1))
WARM_UP_S = 86400


def pool_names(sim) -> np.ndarray:
    """Pool of every lane: whole:<model>, mig:<profile> or shared (as the simulator's placer)."""
    hw = sim.hardware
    dev = hw.devices
    out = []
    for d in hw.lane_device:
        node = int(hw.dev_node[d])
        role = hw.node_role[node]
        out.append(f"mig:{dev['mig_profile'][int(d)]}" if role == "mig" else
                   "shared" if role == "shared" else f"whole:{hw.node_model[node]}")
    return np.array(out)


def figures(gpus: int, days: float, seed: int) -> dict:
    began = time.monotonic()
    sim = build_cluster(seed=seed, gpus=gpus, start=datetime(2026, 11, 1), days=days, dirt=False)
    built_s = time.monotonic() - began
    hw, wl = sim.hardware, sim.workload
    weight = hw.dev_fraction[hw.lane_device] * hw.lane_share  # GPUs a lane stands for
    lo_all, lo_warm, hi = sim.start_s, sim.start_s + WARM_UP_S, sim.end_s

    def busy(lo: int, lanes_mask: np.ndarray) -> float:
        s = np.clip(wl.alloc_start, lo, hi)
        e = np.clip(wl.alloc_end, lo, hi)
        held = (e - s) * weight[wl.alloc_lane] * lanes_mask[wl.alloc_lane]
        return float(held.sum() / ((hi - lo) * (weight * lanes_mask).sum()))

    every = np.ones(len(weight), dtype=bool)
    pools = pool_names(sim)
    per_pool = {p: busy(lo_warm, pools == p) for p in sorted(set(pools))}
    jobs = wl.jobs
    started = jobs["start_s"].is_not_null()
    kinds = {k: float(started.filter(jobs["kind"] == k).mean()) for k in sorted(set(jobs["kind"]))}
    return {"gpus": gpus, "days": days, "seed": seed, "regime": getattr(wl, "regime", "-"),
            "jobs": jobs.height, "started": float(started.mean()), "kinds_started": kinds,
            "occupancy": busy(lo_all, every), "occupancy_after_day1": busy(lo_warm, every),
            "least_busy_pool": min(per_pool.items(), key=lambda kv: kv[1]), "build_s": built_s}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int)
    ap.add_argument("--days", type=float, default=7)
    ap.add_argument("--seed", type=int, default=42)
    args = ap.parse_args()
    runs = [(args.gpus, args.days, args.seed)] if args.gpus else STANDARD
    for gpus, days, seed in runs:
        f = figures(gpus, days, seed)
        pool, occ = f["least_busy_pool"]
        print(f"{gpus} GPUs x {days:g} d, seed {seed}, regime {f['regime']}: {f['jobs']:,} jobs, "
              f"{f['started']:.1%} started; occupancy {f['occupancy']:.3f} (after day 1 "
              f"{f['occupancy_after_day1']:.3f}); least busy pool after day 1 {pool} {occ:.3f}; "
              f"started by kind " + ", ".join(f"{k} {v:.0%}" for k, v in f["kinds_started"].items())
              + f"; built in {f['build_s']:.1f} s", flush=True)


if __name__ == "__main__":
    main()
