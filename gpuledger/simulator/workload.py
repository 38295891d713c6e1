"""The job stream and its placement on the simulated cluster.

Demand per project follows the config's shares (the product of normalised shares down the tree),
about ``DEMAND_FACTOR`` times what the cluster can run; a greedy scheduler places what fits, in
priority then submit order, with limited backfill, and queues the rest. Every job but a squatter
declares a minimum runtime (design.md: without one a job is never funded, so a project of evals
or notebooks could never use its budget): training and inference the 8 h cap, a fine-tune (it
checkpoints) up to 2 h, batch evals and notebook sessions (they do not) their whole runtime. Times are epoch seconds
(UTC). Ground truth for tests and demos: squatters are named ``squat-...`` and failing jobs end in
state FAILED within minutes.
"""

from __future__ import annotations

import bisect
import heapq
from dataclasses import dataclass

import numpy as np
import polars as pl

from gpuledger.config import Config
from gpuledger.simulator.cluster import GPUS_PER_NODE, Hardware

DEMAND_FACTOR = 2.0
BACKFILL_DEPTH = 64  # queued jobs examined per scheduling pass (like Slurm's bf_max_job_test)
MIN_RUNTIME_CAP_S = 8 * 3600

# Behaviour codes drive the signal shapes (signals.py).
IDLE, TRAINING, FINE_TUNE, BATCH, INFERENCE, INTERACTIVE, SQUAT, FAILING = range(8)
BEHAVIOUR_NAMES = ("idle", "training", "fine-tune", "batch", "inference", "interactive", "squat", "failing")

# Project name keywords -> mix of job templates (weights of GPU-hour demand).
_MIXES = (
    (("pretrain",), {"chain": 0.85, "fine-tune": 0.1, "batch": 0.05}),
    (("posttrain", "finetune", "fine-tune", "rl"), {"chain": 0.3, "fine-tune": 0.5, "batch": 0.2}),
    (("gen", "train"), {"chain": 0.5, "fine-tune": 0.35, "batch": 0.15}),
    (("eval", "ci", "test"), {"batch": 1.0}),
    (("serving", "inference", "serve"), {"mig-inference": 0.5, "inference": 0.5}),
    (("ranking", "search", "recsys"), {"inference": 0.6, "batch": 0.4}),
    (("notebook", "interactive", "dev"), {"interactive": 1.0}),
)
_DEFAULT_MIX = {"chain": 0.3, "fine-tune": 0.45, "batch": 0.25}


def project_mix(project: str) -> dict[str, float]:
    """Job-template weights for a project, from keywords in its name."""
    lowered = project.lower()
    for words, mix in _MIXES:
        if any(w in lowered for w in words):
            return mix
    return _DEFAULT_MIX


def global_shares(cfg: Config) -> dict[str, float]:
    """Each leaf project's share of the whole cluster: product of normalised shares on its path."""
    out: dict[str, float] = {}

    def walk(node, share):
        if not node.children:
            out[node.name] = share
            return
        total = sum(c.shares for c in node.children)
        for child in node.children:
            walk(child, share * child.shares / total)

    walk(cfg.org, 1.0)
    return out


@dataclass
class JobSpec:
    project: str
    user: str
    name: str
    kind: str
    behaviour: int
    pool: str  # whole:<model> / mig:<profile> / shared
    count: int  # lanes wanted
    duration_s: int
    submit_s: int
    priority: int
    min_runtime_s: int
    scheduler: str  # slurm / k8s
    chain: int = -1  # training chain id, -1 for none


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

    def squatter_job_ids(self) -> list[str]:
        return self.jobs.filter(pl.col("name").str.starts_with("squat-"))["job_id"].to_list()


class _Placer:
    """Free lanes per pool and node; whole-node placement for jobs of 8+ GPUs."""

    def __init__(self, hw: Hardware):
        dev = hw.devices
        self.free: dict[str, dict[int, list[int]]] = {}
        self.free_total: dict[str, int] = {}
        roles = hw.node_role
        for lane, d in enumerate(hw.lane_device):
            node = int(hw.dev_node[d])
            if roles[node] == "mig":
                pool = f"mig:{dev['mig_profile'][int(d)]}"
            elif roles[node] == "shared":
                pool = "shared"
            else:
                pool = f"whole:{hw.node_model[node]}"
            self.free.setdefault(pool, {}).setdefault(node, []).append(lane)
            self.free_total[pool] = self.free_total.get(pool, 0) + 1
        self.capacity = dict(self.free_total)
        self.lane_pool = {}
        for pool, nodes in self.free.items():
            for lanes in nodes.values():
                for lane in lanes:
                    self.lane_pool[lane] = pool
        self.lane_node = {lane: int(hw.dev_node[hw.lane_device[lane]]) for lane in range(len(hw.lane_device))}

    def take(self, pool: str, count: int) -> list[int] | None:
        if self.free_total.get(pool, 0) < count:
            return None
        nodes = self.free[pool]
        chosen: list[int] = []
        if pool.startswith("whole:") and count >= GPUS_PER_NODE:
            need = count // GPUS_PER_NODE
            full = [n for n, lanes in nodes.items() if len(lanes) == GPUS_PER_NODE]
            if len(full) < need:
                return None
            for n in sorted(full)[:need]:
                chosen += nodes[n]
                nodes[n] = []
        elif pool.startswith("whole:"):
            # best fit: the node with the fewest free GPUs that still fits, keeping whole nodes free
            fits = [(len(lanes), n) for n, lanes in nodes.items() if len(lanes) >= count]
            if not fits:
                return None
            _, n = min(fits)
            chosen = nodes[n][:count]
            nodes[n] = nodes[n][count:]
        else:
            for n in sorted(nodes):
                while nodes[n] and len(chosen) < count:
                    chosen.append(nodes[n].pop(0))
                if len(chosen) == count:
                    break
        self.free_total[pool] -= len(chosen)
        return chosen

    def give_back(self, lanes: list[int]) -> None:
        for lane in lanes:
            pool = self.lane_pool[lane]
            bisect.insort(self.free[pool][self.lane_node[lane]], lane)
            self.free_total[pool] += 1


def _demand(cfg: Config, hw: Hardware, placer: _Placer, rng: np.random.Generator,
            start_s: int, end_s: int) -> tuple[list[JobSpec], list[tuple[str, str, int, str]]]:
    """Submitted jobs and training chains (project, model, GPUs per job, pool)."""
    hours = (end_s - start_s) / 3600
    whole_pools = {p: c for p, c in placer.capacity.items() if p.startswith("whole:")}
    mig_pools = {p: c for p, c in placer.capacity.items() if p.startswith("mig:")}
    whole_total = sum(whole_pools.values())
    capacity_gpu_h = (whole_total + sum(placer.capacity.get("shared", 0) / 2 for _ in [0])) * hours
    pool_names = sorted(whole_pools)
    pool_weights = np.array([whole_pools[p] for p in pool_names], dtype=float)
    pool_weights /= pool_weights.sum()
    shares = global_shares(cfg)
    jobs: list[JobSpec] = []
    chains: list[tuple[str, str, int, str]] = []
    chain_room = dict(whole_pools)
    chain_budget = whole_total * 0.8  # chains never hold more than 80 % of whole GPUs

    def users(project):
        return [f"{project.split('-')[0][:6]}-user{u}" for u in range(1, 5)]

    for project in sorted(shares):
        share = shares[project]
        target_h = share * capacity_gpu_h * DEMAND_FACTOR
        mix = project_mix(project)
        people = users(project)
        for template, weight in sorted(mix.items()):
            want_h = target_h * weight
            if template == "chain":
                size = 64 if share * whole_total >= 96 else 32 if share * whole_total >= 40 else 16
                n_chains = max(1, int(round(share * whole_total * 0.9 / size))) if share * whole_total >= 12 else 0
                for _ in range(n_chains):
                    pool = max(chain_room, key=lambda p: (chain_room[p], p))
                    if chain_room[pool] < size or chain_budget < size:
                        break
                    chain_room[pool] -= size
                    chain_budget -= size
                    chains.append((project, pool.split(":")[1], size, pool))
                continue
            if template == "mig-inference":
                if not mig_pools:
                    template = "inference"
                else:
                    n_services = max(1, int(sum(mig_pools.values()) * share / max(1e-9, sum(
                        s for p, s in shares.items() if "mig-inference" in project_mix(p)))))
                    profiles = sorted(mig_pools)
                    for k in range(n_services):
                        profile = profiles[k % len(profiles)]
                        jobs.append(JobSpec(project, people[k % 4], f"{project}-svc-{k}", "inference",
                                            INFERENCE, profile, 1, int(hours * 3600 * 2),
                                            start_s + int(rng.integers(0, 1800)), 1000, MIN_RUNTIME_CAP_S, "k8s"))
                    continue
            if template == "inference":
                n_services = max(1, int(want_h / DEMAND_FACTOR / hours / 2))
                for k in range(n_services):
                    pool = pool_names[int(rng.choice(len(pool_names), p=pool_weights))]
                    jobs.append(JobSpec(project, people[k % 4], f"{project}-serve-{k}", "inference",
                                        INFERENCE, pool, int(rng.choice([1, 2, 2, 4])),
                                        int(rng.uniform(0.5, 1.5) * hours * 3600),
                                        start_s + int(rng.uniform(0, 0.3) * hours * 3600), 900,
                                        MIN_RUNTIME_CAP_S, "k8s"))
                continue
            # Poisson streams of short jobs until the GPU-hours are spent
            spent = 0.0
            k = 0
            while spent < want_h:
                k += 1
                user = people[int(rng.integers(0, 4))]
                pool = pool_names[int(rng.choice(len(pool_names), p=pool_weights))]
                submit = start_s + int(rng.uniform(0, 1) * (end_s - start_s))
                if template == "fine-tune":
                    count, dur = 8, int(rng.uniform(1.5, 10) * 3600)
                    fail = rng.random() < 0.05
                    spec = JobSpec(project, user, f"{project}-ft-{k}", "fine-tune", FINE_TUNE, pool, count,
                                   dur, submit, 100, int(min(dur, 2 * 3600)), "slurm")
                elif template == "batch":
                    count = int(rng.choice([1, 1, 2, 4, 8]))
                    dur = int(rng.uniform(0.3, 1.8) * 3600)
                    fail = rng.random() < 0.08
                    # no checkpoints: preempted, it starts over, so it declares its whole runtime
                    spec = JobSpec(project, user, f"{project}-eval-{k}", "batch", BATCH, pool, count, dur,
                                   submit, 100, dur, "k8s")
                else:  # interactive
                    fail = False
                    dur = int(rng.uniform(0.5, 6) * 3600)
                    where = rng.random()
                    if where < 0.3 and mig_pools:
                        small = sorted(p for p in mig_pools if p.split(":")[1][0] in "12")
                        pool, count = small[int(rng.integers(0, len(small)))], 1
                    elif where < 0.55 and "shared" in placer.capacity:
                        pool, count = "shared", 1
                    else:
                        count = 1
                    # a session asked for dur: its user is at the keyboard for all of it
                    spec = JobSpec(project, user, f"nb-{user}-{k}", "interactive", INTERACTIVE, pool, count,
                                   dur, submit, 150, dur, "k8s")
                if fail:
                    spec.behaviour, spec.duration_s = FAILING, int(rng.uniform(60, 600))
                    spec.name = spec.name + "-fail"
                jobs.append(spec)
                share_of_gpu = 0.5 if spec.pool == "shared" else 1.0
                spent += spec.count * share_of_gpu * (dur / 3600)
    # a handful of squatters: memory held, nothing running, for hours
    n_squat = max(4, whole_total // 64)
    projects = sorted(shares)
    for k in range(n_squat):
        project = projects[int(rng.integers(0, len(projects)))]
        pool = pool_names[k % len(pool_names)]
        count = 8 if k == 0 and whole_total >= 32 else int(rng.choice([1, 2]))
        submit = start_s + int(rng.uniform(0.02, 0.6) * (end_s - start_s))
        if k == n_squat - 1 and end_s - start_s > 6 * 3600:
            # one squatter still idling when the window ends, so "now" always has a finding
            submit = end_s - 4 * 3600
        jobs.append(JobSpec(project, users(project)[k % 4], f"squat-{project}-{k}", "interactive", SQUAT,
                            pool, count, int(rng.uniform(5, 12) * 3600), submit, 2000, 0, "k8s"))
    return jobs, chains


ID_ORIGIN_S = 1_577_836_800  # 2020-01-01 UTC
JOBS_PER_WINDOW = 1_000_000


def job_id_tag(start_s: int) -> int:
    """Minutes from 2020-01-01 UTC to the window start: job ids begin with it, so windows with
    different starts (a simulation extended with a later --start) never share a job id, and a
    rerun of the same window writes the same ids (idempotent). Slurm ids are tag × 10^6 + index,
    Kubernetes ids ``k8s-<tag>-<index>``."""
    return (start_s - ID_ORIGIN_S) // 60


def simulate_workload(cfg: Config, hw: Hardware, seed: int, start_s: int, end_s: int) -> Workload:
    """Generate demand for [start_s, end_s) and place it greedily; deterministic for a seed."""
    rng = np.random.default_rng([seed, 7])
    placer = _Placer(hw)
    specs, chains = _demand(cfg, hw, placer, rng, start_s, end_s)
    # training chains: each chain resubmits its next job the moment the previous one ends
    chain_specs = []
    for c, (project, model, size, pool) in enumerate(chains):
        chain_specs.append(JobSpec(project, f"{project.split('-')[0][:6]}-user{1 + c % 4}",
                                   f"{project}-run{c}-0", "training", TRAINING, pool, size,
                                   int(rng.uniform(18, 60) * 3600), start_s, 5000,
                                   MIN_RUNTIME_CAP_S, "slurm", chain=c))
    specs = chain_specs + specs
    order = sorted(range(len(specs)), key=lambda i: (specs[i].submit_s, i))
    submit_heap = [(specs[i].submit_s, n, i) for n, i in enumerate(order)]
    heapq.heapify(submit_heap)
    seq = len(specs)
    queue: list[tuple[int, int, int]] = []  # (-priority, submit, idx)
    running: list[tuple[int, int]] = []  # (end, idx)
    started: dict[int, tuple[int, list[int]]] = {}
    chain_round: dict[int, int] = {}
    t = start_s
    while t < end_s:
        while running and running[0][0] <= t:
            end, idx = heapq.heappop(running)
            placer.give_back(started[idx][1])
            spec = specs[idx]
            if spec.chain >= 0:  # next run of the chain
                r = chain_round.get(spec.chain, 0) + 1
                chain_round[spec.chain] = r
                nxt = JobSpec(spec.project, spec.user, f"{spec.name.rsplit('-', 1)[0]}-{r}", "training",
                              TRAINING, spec.pool, spec.count, int(rng.uniform(18, 60) * 3600), end,
                              5000, MIN_RUNTIME_CAP_S, "slurm", chain=spec.chain)
                specs.append(nxt)
                heapq.heappush(submit_heap, (end, seq, len(specs) - 1))
                seq += 1
        while submit_heap and submit_heap[0][0] <= t:
            _, _, idx = heapq.heappop(submit_heap)
            bisect.insort(queue, (-specs[idx].priority, specs[idx].submit_s, idx))
        tried = 0
        i = 0
        while i < len(queue) and tried < BACKFILL_DEPTH:
            idx = queue[i][2]
            spec = specs[idx]
            lanes = placer.take(spec.pool, spec.count)
            if lanes is None:
                tried += 1
                i += 1
                continue
            started[idx] = (t, lanes)
            heapq.heappush(running, (t + spec.duration_s, idx))
            queue.pop(i)
        nxt = min(running[0][0] if running else end_s, submit_heap[0][0] if submit_heap else end_s)
        t = max(nxt, t + 1) if nxt <= t else nxt
    return _assemble(hw, specs, started, rng, seed, start_s, end_s)


def _assemble(hw, specs, started, rng, seed, start_s, end_s) -> Workload:
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
        if s < 0:
            gpus = spec.count * (0.5 if spec.pool == "shared" else 1.0)
            if spec.pool.startswith("mig:"):
                from gpuledger.rules.mig import mig_fraction

                gpus = mig_fraction(spec.pool[4:], "H100") * spec.count  # MIG nodes are H100 (gpu_model below)
        else:
            gpus = float(gpus_of[idx])
        end = s + spec.duration_s if s >= 0 else None
        if s < 0:
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
                     state, spec.priority, namespace, spec.scheduler, BEHAVIOUR_NAMES[spec.behaviour]))
    jobs = pl.DataFrame(rows, orient="row", schema={
        "job_id": pl.String, "project": pl.String, "user_name": pl.String, "name": pl.String,
        "kind": pl.String, "gpu_model": pl.String, "gpus": pl.Float64, "min_runtime_s": pl.Int64,
        "submit_s": pl.Int64, "start_s": pl.Int64, "end_s": pl.Int64, "state": pl.String,
        "priority": pl.Int64, "namespace": pl.String, "scheduler": pl.String, "behaviour": pl.String})
    return Workload(jobs=jobs, alloc_lane=alloc_lane, alloc_job=alloc_job, alloc_start=alloc_start,
                    alloc_end=alloc_end, job_behaviour=behaviour, job_start=job_start, job_level=level,
                    job_fb_ratio=fb, job_ckpt_period_s=ckpt, window_start_s=start_s, window_end_s=end_s)
