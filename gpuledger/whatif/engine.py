"""The discrete-event loop: replay a trace on an inventory under one policy.

Events, in this order at equal times: a job's finish, a submission, the enforcement cycle (every
``cycle_minutes``; policies 2 and 3 only). After each event the freed or fed pool is filled:
waiting jobs in queue order, each placed when it fits (backfill: a job that does not fit does not
block the ones behind it; the scheduler looks past at most ``backfill_depth`` of them).

Queue order: policy 1 and the slot-limit baseline, declared priority (higher first), then
submission; policies 2 and 3, the
priority enforce sets (funded above unfunded, fair-share rank, declared priority inside the
project), then submission. A preempted job goes back to the queue with its submission time (as
Slurm requeues); one that resumes has lost the work since its last checkpoint (every
``checkpoint_interval_minutes`` of its own runtime), one that does not starts over; a notebook
session's user gives it up if it has not restarted within its patience. A squatter
reclaimed by policy 3 is stopped: its owner had left it idle, and it does not come back; so is a job
preempted for waiting work that cannot checkpoint and was idle through the last squatting grace of
its run (its owner had left it too: ``JobOutcome.abandoned``).

Slot limits (Ai2's old caps): each project holds at most its global share of the physical GPUs
(whole-GPU equivalents, all pools together); a job that would take its project past the cap
waits without blocking anyone (as Slurm passes over a job held by a QOS limit), and one larger than
the whole cap starts only when its project holds nothing (else it could never run). No cycle, no
preemption.

Deterministic: no clock, no randomness beyond the trace; ties broken by job id.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections import defaultdict
from collections.abc import Callable
from datetime import timedelta

import polars as pl

from gpuledger.analytics.delivery_balance import credited_usage
from gpuledger.analytics.fairshare import fair_share
from gpuledger.analytics.tree import Tree
from gpuledger.config import Config, QuickLane
from gpuledger.enforce.bands import QUICK_BASE
from gpuledger.enforce.model import PREEMPT, WARN
from gpuledger.rules import job_class
from gpuledger.rules.severity import STAGES
from gpuledger.whatif import policies
from gpuledger.whatif.inventory import EPS, PoolState, pool_label
from gpuledger.whatif.metrics import wait_class
from gpuledger.whatif.model import (
    ALL_POLICIES,
    BUDGET_MODES,
    FAIR_SHARE,
    PRIORITY,
    QUICK,
    RECLAIM,
    SLOT_LIMITS,
    JobOutcome,
    Params,
    RunResult,
    Segment,
    Trace,
)
from gpuledger.whatif.usage import BalanceTracker, UsageTracker

FINISH, SUBMIT, CYCLE, GIVE_UP = 0, 1, 2, 3  # at one instant: a session placed then was in time


def effective_policy(cfg: Config, params: Params):
    """(usage policy, funding cap s, squatting policy) with the run's overrides applied."""
    usage = cfg.policy.usage.model_copy(
        update={
            k: v
            for k, v in {
                "mode": params.usage_mode,
                "window_days": params.window_days,
                "half_life_days": params.half_life_days,
            }.items()
            if v is not None
        }
    )
    cap_h = (
        cfg.policy.funding.min_runtime_cap_hours
        if params.min_runtime_cap_hours is None
        else params.min_runtime_cap_hours
    )
    squatting = cfg.policy.squatting
    if params.idle_threshold_ratio is not None:
        squatting = squatting.model_copy(update={"idle_threshold_ratio": params.idle_threshold_ratio})
    return usage, int(cap_h * 3600), squatting


def org_nodes_frame(cfg: Config, params: Params):
    frame = cfg.org_frame()
    if params.share_overrides:
        known = set(frame["node"])
        for node, _ in params.share_overrides:
            if node not in known:
                raise ValueError(f"share override {node!r}: no such node in the org tree")
        over = dict(params.share_overrides)
        frame = frame.with_columns(
            shares=pl.struct("node", "shares").map_elements(
                lambda r: float(over.get(r["node"], r["shares"])), return_dtype=pl.Float64
            )
        )
    return frame


def replayed_lane(cfg: Config, params: Params) -> QuickLane:
    """The config's quick lane with the run's override of its reserve (--lane-reserve) applied."""
    lane = cfg.policy.enforcement.quick_lane
    if params.lane_reserve_share is None:
        return lane
    if not 0 <= params.lane_reserve_share < 0.5:
        raise ValueError(f"lane reserve share {params.lane_reserve_share:g}: give 0 or more, under 0.5")
    return lane.model_copy(update={"reserve_share": params.lane_reserve_share})


class Simulation:
    def __init__(
        self,
        trace: Trace,
        cfg: Config,
        policy: str,
        params: Params | None = None,
        progress: Callable[[float], None] | None = None,
    ):
        if policy not in ALL_POLICIES:
            raise ValueError(f"policy {policy!r}: choose one of {', '.join(ALL_POLICIES)}")
        self.params = params or Params()
        if self.params.budgets not in BUDGET_MODES:
            raise ValueError(f"budgets {self.params.budgets!r}: choose {' or '.join(BUDGET_MODES)}")
        if self.params.budgets == "fit":  # the config's budgets scaled to this cluster's capacity
            cfg = policies.fitted_budgets(cfg, trace.inventory, trace.origin)
        self.trace, self.cfg, self.policy = trace, cfg, policy
        self.progress = progress
        # the replay's jobs checkpoint every params.checkpoint_interval_minutes: enforce's victim choice
        # weighs the work a preemption throws away by the same interval
        # policy 4 turns the quick lane on (small short jobs first, a cycle on each arrival that finds
        # no GPU); every policy ranks its other jobs without it (self.ranking)
        lane = replayed_lane(cfg, self.params)
        self.lane = policy == QUICK
        # policy.enforcement.spare_behind_owed (rails.spared_behind_owed), the run's override applied
        spare = self.params.spare_behind_owed
        self.spare = cfg.policy.enforcement.spare_behind_owed if spare is None else bool(spare)
        # policy.enforcement.spare_own_project (rails.own_project_spared), the run's override applied
        own = self.params.spare_own_project
        own = cfg.policy.enforcement.spare_own_project if own is None else bool(own)
        self.enforcement = cfg.policy.enforcement.model_copy(
            update={"checkpoint_interval_minutes": self.params.checkpoint_interval_minutes,
                    "quick_lane": lane.model_copy(update={"enabled": self.lane}),
                    "spare_behind_owed": self.spare, "spare_own_project": own}
        )
        self.ranking = self.enforcement.model_copy(update={"quick_lane": lane.model_copy(update={"enabled": False})})
        self.lane_cap = lane.max_running_per_project
        self.lane_running: dict[str, int] = defaultdict(int)  # project -> its lane jobs running
        usage_policy, self.cap_s, self.squatting = effective_policy(cfg, self.params)
        self.org_nodes = org_nodes_frame(cfg, self.params)

        self.tree = Tree.from_frame(self.org_nodes)
        self.jobs = list(trace.jobs)
        self.out = [JobOutcome(job=j) for j in self.jobs]
        self.index = {j.job_id: i for i, j in enumerate(self.jobs)}
        pools = trace.inventory.pools()
        self.pool_devices = {p: [d.device_id for d in devs] for p, devs in pools.items()}
        self.pools = {p: PoolState(ids) for p, ids in self.pool_devices.items()}
        # pool -> priority key -> [(submit_s, job_id, idx)] in submission order
        self.waiting: dict[tuple, dict[tuple, list]] = defaultdict(dict)
        self.bands: dict[tuple, list[list[tuple]]] = {}  # pool -> group keys by descending priority
        self.ending: dict[tuple, list[tuple]] = defaultdict(list)  # pool -> running [(ends_s, job_id, idx)]
        self.ends_at: dict[int, int] = {}
        self.running: dict[int, tuple[int, float, list[int]]] = {}  # idx -> (seg start, progress, device idx)
        self.progress_s = [0.0] * len(self.jobs)
        self.patience_until: dict[int, int] = {}  # a session waiting now -> when its user gives up (GIVE_UP)
        self.gen = [0] * len(self.jobs)
        self.events: list[tuple] = []
        self.seq = 0
        projects = sorted({j.project for j in self.jobs} | set(cfg.projects()))
        self.usage = UsageTracker(
            projects,
            mode=usage_policy.mode,
            window_s=usage_policy.window_days * 86400,
            half_life_s=usage_policy.half_life_days * 86400,
        )
        # policy.usage.delivery_balance: fair share ranked on usage less what the run still owes; the
        # same tracker says which projects are behind what they are owed this settlement period
        # (policy.enforcement.spare_behind_owed)
        credit = self.params.delivery_balance
        self.credit = cfg.policy.usage.delivery_balance.credit_fair_share if credit is None else bool(credit)
        self.balance = (
            BalanceTracker(policies.entitled_gpus(self.org_nodes, self.tree, trace.inventory.capacity_gpus()),
                           self.usage.rate, period_s=usage_policy.window_days * 86400)
            if self.credit or self.spare else None
        )
        self.weights = policies.budget_weights(cfg, trace.origin)
        self.funding = policies.Funding(cfg, trace.origin, self.org_nodes, self.cap_s, projects)
        self.budget_rate: dict[str, float] = defaultdict(float)
        self.now = 0
        self.verdict: dict[str, tuple[bool, str | None]] = {}
        self.ranks: dict[str, int] = {}
        self.fs_projects = 0
        self.over: frozenset[str] = frozenset()  # projects over their share (exempt_queue)
        self.prio: dict[tuple, int] = {}  # priority_key -> enforce's priority
        self.reps: dict[tuple, policies.JobView] = {}
        # what a job's priority depends on besides its project's funding and rank (policies.priority_key)
        self.static = [
            (
                j.cluster,
                j.project,
                j.declared_priority,
                j.kind,
                j.namespace,
                j.resumable,
                min(self._min_runtime(j), self.cap_s) > 0,
                self.lane and policies.lane_eligible(j, self.enforcement),
            )
            for j in self.jobs
        ]
        # the lane's reserve (quick_lane.reserve_share, policy 4 only): per pool where lane jobs run
        # (on whole GPUs reserve_share_whole where set), the last devices held for lane jobs and
        # lent to other work meanwhile (_borrowed)
        self.reserve: dict[tuple, PoolState] = {}
        self.reserve_devices: dict[tuple, list[int]] = {}
        self.in_reserve: set[int] = set()  # running jobs placed on a reserve
        if self.lane:
            lane_pools = {self.jobs[i].pool for i, key in enumerate(self.static) if key[-1]}
            for pool in sorted(lane_pools, key=_pool_order):
                ids = self.pool_devices[pool]
                share = lane.reserve_for(mig=pool[2] is not None)  # pool[2]: a MIG profile
                k = min(len(ids), math.ceil(share * len(ids) - EPS))
                if k:
                    self.pool_devices[pool], self.reserve_devices[pool] = ids[:-k], ids[-k:]
                    self.pools[pool] = PoolState(ids[:-k])
                    self.reserve[pool] = PoolState(ids[-k:])
        self.debug = [wait_class(j) == "debug" for j in self.jobs]  # whose forced wait is measured
        self.warnings: dict = {}
        self.preempt_count: dict[tuple[str, str], int] = {}
        self.applied: dict[str, int] = {}
        self.actions: dict[str, int] = defaultdict(int)
        self.decide_calls = 0
        self.managed = policy in (FAIR_SHARE, RECLAIM, QUICK)
        # slot limits: project -> the most GPUs it may hold, and what it holds now
        self.slot_cap = slot_caps(self.org_nodes, trace.inventory.physical_gpus()) if policy == SLOT_LIMITS else None
        self.held: dict[str, float] = defaultdict(float)

    # --- events ------------------------------------------------------------------------
    def _push(self, t: int, kind: int, idx: int = -1) -> None:
        self.seq += 1
        heapq.heappush(
            self.events,
            (
                t,
                kind,
                self.jobs[idx].job_id if idx >= 0 else "",
                self.seq,
                idx,
                self.gen[idx] if idx >= 0 else 0,
            ),
        )

    def run(self) -> RunResult:
        horizon = self.trace.horizon_s
        for i, j in enumerate(self.jobs):
            if j.submit_s < horizon:
                self._push(max(j.submit_s, 0), SUBMIT, i)
        if self.managed:
            self._push(0, CYCLE)
        step = max(60, int(self.params.cycle_minutes * 60))
        shown = 0.0
        while self.events:
            t, kind, _, _, idx, gen = heapq.heappop(self.events)
            if t >= horizon:
                break
            self._advance(t)
            if kind == FINISH:
                if gen != self.gen[idx] or idx not in self.running:
                    continue
                self._stop(idx, "done")
                self.out[idx].done_s = t
                if self.balance is not None:
                    self.balance.demand[self.jobs[idx].project] -= self.jobs[idx].gpus
                self._fill(self.jobs[idx].pool)
                if self.slot_cap is not None:  # room under the project's cap, in any pool
                    self._fill_project(self.jobs[idx].project)
            elif kind == SUBMIT:
                if self.balance is not None:
                    self.balance.demand[self.jobs[idx].project] += self.jobs[idx].gpus
                self._enqueue(idx)
                self._fill(self.jobs[idx].pool)
                if idx not in self.running and self._lane_now(idx):
                    self._arrival(idx)
                if self.debug[idx]:
                    self.out[idx].forced_wait_s = 0 if idx in self.running else self._forced_wait(idx)
                if idx not in self.running:
                    self._wait_with_patience(idx, t)
            elif kind == GIVE_UP:
                if self.patience_until.get(idx) == t:  # still waiting since that wait began
                    self._give_up(idx, t)
            else:
                self._cycle()
                if t + step < horizon:
                    self._push(t + step, CYCLE)
            if self.progress and t - shown >= 3600:
                shown = t
                self.progress(t / horizon)
        self._advance(horizon)
        for idx in sorted(self.running):
            self._stop(idx, "horizon")
        if self.progress:
            self.progress(1.0)
        return RunResult(
            policy=self.policy,
            params=self.params,
            trace=self.trace,
            outcomes=self.out,
            decide_calls=self.decide_calls,
            actions=dict(self.actions),
        )

    def _advance(self, t: int) -> None:
        if t <= self.now:
            return
        dt = t - self.now
        self.usage.advance(t)
        if self.balance is not None:
            self.balance.advance(t)
        for p, r in self.budget_rate.items():
            if r:
                self.funding.consumed[p] = self.funding.consumed.get(p, 0.0) + r * dt / 3600.0
        self.now = t

    # --- queue -------------------------------------------------------------------------
    def _group_priority(self, key: tuple, idx: int) -> int:
        """The queue priority of a group of waiting jobs (higher first)."""
        if not self.managed:
            return -0 if self.jobs[idx].declared_priority is None else self.jobs[idx].declared_priority
        if key not in self.prio:  # a new kind of job since the cycle: rank it with the others
            self.reps[key] = self._view(idx)
            self.prio = policies.priorities(self.reps, self.fs_projects, self.trace.origin, self.ranking, self.over)
            self.bands.clear()
        if key[-1] and self._in_lane(key[1]):
            return QUICK_BASE
        return self.prio[key]

    def _in_lane(self, project: str) -> bool:
        """Whether ``project``'s lane jobs are served in the quick lane now (enforce.policy.quick_jobs):
        its budget has room and it runs fewer lane jobs than the per-project limit."""
        return self.verdict.get(project, (False, None))[0] and self.lane_running[project] < self.lane_cap

    def _lane_now(self, idx: int) -> bool:
        """Whether the waiting job ``idx`` is served in the quick lane now."""
        return self._lane_job(idx) and self._in_lane(self.jobs[idx].project)

    def _count_lane(self, idx: int, step: int) -> None:
        """A lane job starts (+1) or stops (-1): crossing the project's limit re-ranks the queues."""
        if self._lane_job(idx):
            project = self.jobs[idx].project
            before = self.lane_running[project] < self.lane_cap
            self.lane_running[project] += step
            if before != (self.lane_running[project] < self.lane_cap):
                self.bands.clear()

    def _enqueue(self, idx: int) -> None:
        """Waiting jobs are kept per pool in groups of one priority key (policies.priority_key),
        each in submission order, which never changes: a cycle re-ranks groups, not jobs."""
        j = self.jobs[idx]
        groups = self.waiting[j.pool]
        key = self.static[idx]
        if not groups.get(key):  # a new group, or one emptied: the pool's cached bands leave it out
            groups.setdefault(key, [])
            self.bands.pop(j.pool, None)
        bisect.insort(groups[key], (j.submit_s, j.job_id, idx))
        self._group_priority(key, idx)

    def _wait_with_patience(self, idx: int, t: int) -> None:
        """A session waiting from ``t`` (submitted, or preempted and back in its queue): its user
        gives up if it has not started within its patience (no other job has one)."""
        patience = job_class.patience_s(self.jobs[idx].kind)
        if patience is not None:
            self.patience_until[idx] = t + patience
            self._push(t + patience, GIVE_UP, idx)

    def _give_up(self, idx: int, t: int) -> None:
        """A session not started within its patience of its submission, or not restarted within it
        after a preemption: its user gave up. It leaves its queue and its project's demand, and
        never runs (again), as the recorded cluster's sessions did (a session's user does not
        wait days for a notebook the cluster stopped)."""
        j = self.jobs[idx]
        entries = self.waiting[j.pool][self.static[idx]]
        entries.remove((j.submit_s, j.job_id, idx))
        if not entries:
            self.bands.pop(j.pool, None)
        if self.balance is not None:
            self.balance.demand[j.project] -= j.gpus
        self.out[idx].given_up_s = t
        del self.patience_until[idx]

    def _queue(self, pool):
        """Waiting jobs of ``pool`` in queue order: (entry, group list), lazily."""
        groups = self.waiting.get(pool)
        if not groups:
            return
        bands = self.bands.get(pool)
        if bands is None:
            by_value: dict[int, list] = defaultdict(list)
            for key, entries in groups.items():
                if entries:
                    by_value[self._group_priority(key, entries[0][2])].append(key)
            bands = self.bands[pool] = [sorted(by_value[v]) for v in sorted(by_value, reverse=True)]
        # lazily: callers change the lists only after they stop iterating
        for keys in bands:
            if self.slot_cap is not None:  # a project at its cap: none of its jobs can start
                keys = [k for k in keys if not self._at_cap(k[1])]
                if not keys:
                    continue
            lists = [groups[k] for k in keys]
            if len(lists) == 1:
                yield from ((e, lists[0]) for e in lists[0])
            else:
                yield from heapq.merge(*(_tagged(lst) for lst in lists), key=lambda x: x[0])

    def _head(self, pool, n: int) -> list[int]:
        out = []
        for entry, _ in self._queue(pool):
            out.append(entry[2])
            if len(out) >= n:
                break
        return out

    def _fill(self, pool) -> None:
        """Start waiting jobs in queue order while they fit. The first that does not fit gets a
        reservation (EASY backfill, as Slurm's backfill does): the time its GPUs will be free by
        the running jobs' ends (their runtimes are known here; a live scheduler uses time limits);
        a job behind it starts now only if it ends by then or fits in what the reservation leaves.
        The scheduler looks past at most ``backfill_depth`` jobs that cannot start."""
        self._fill_regular(pool)
        if pool in self.reserve:
            self._fill_reserve(pool)

    def _fill_regular(self, pool) -> None:
        state = self.pools.get(pool)
        if state is None or state.free_units <= EPS or not self.waiting.get(pool):
            return
        misses = 0
        placed = []
        shadow, spare = None, 0.0
        for entry, lst in self._queue(pool):
            idx = entry[2]
            j = self.jobs[idx]
            if self.slot_cap is not None and not self._within_cap(j):
                continue  # held by its project's limit: passed over, no reservation, not a miss
            need = j.units * j.unit_size
            if shadow is not None:
                ends = self.now + j.work_s - self.progress_s[idx]
                if not (ends <= shadow or need <= spare + EPS) or not state.fits(j.units, j.unit_size):
                    misses += 1
                    if misses > self.params.backfill_depth:
                        break
                    continue
                if ends > shadow:
                    spare -= need
            taken = state.take(j.units, j.unit_size)
            if taken is not None:
                placed.append((entry, lst))
                self._start(idx, taken)
                if state.free_units <= EPS:
                    break
                continue
            shadow, spare = self._reservation(pool, need)
            misses += 1
            if misses > self.params.backfill_depth:
                break
        for entry, lst in placed:
            lst.pop(bisect.bisect_left(lst, entry))
            if not lst:
                self.bands.pop(pool, None)

    def _fill_reserve(self, pool) -> None:
        """The lane's reserve of ``pool``: waiting lane jobs first (they lead the queue: the lane's
        band is its top), then other work in queue order, lent as burst — never an exempt job, which
        could not be given back. The scheduler looks past at most ``backfill_depth`` that do not fit."""
        state = self.reserve[pool]
        for lane_pass in (True, False):
            if state.free_units <= EPS or not self.waiting.get(pool):
                return
            placed, misses = [], 0
            for entry, lst in (self._lane_waiting(pool) if lane_pass else self._queue(pool)):
                idx = entry[2]
                j = self.jobs[idx]
                if not lane_pass and (self._lane_now(idx) or _exempt(j, self.enforcement)
                                      or j.units * j.unit_size > state.size + EPS):
                    continue  # a lane job (its own pass), one never lent to, or one the reserve can never hold
                taken = state.take(j.units, j.unit_size)
                if taken is None:
                    misses += 1
                    if misses > self.params.backfill_depth:
                        break
                    continue
                placed.append((entry, lst))
                self._start(idx, taken, reserve=True)
                if state.free_units <= EPS:
                    break
            for entry, lst in placed:
                lst.pop(bisect.bisect_left(lst, entry))
                if not lst:
                    self.bands.pop(pool, None)

    def _lane_waiting(self, pool):
        """Waiting lane jobs of ``pool`` in queue order: the lane's band sits below the exempt band
        and above every other, so the walk stops at the first job below it."""
        for entry, lst in self._queue(pool):
            idx = entry[2]
            if self._group_priority(self.static[idx], idx) < QUICK_BASE:
                return
            if self._lane_now(idx):
                yield entry, lst

    def _borrowed(self, idx: int) -> bool:
        """Whether running job ``idx`` is on a lane reserve as a borrower (not a lane job)."""
        return idx in self.in_reserve and not self._lane_job(idx)

    def _lane_job(self, idx: int) -> bool:
        """Whether ``idx`` is small and short enough for the lane (its project's standing aside)."""
        return bool(self.static[idx][-1])

    def _give_back_reserve(self, pool) -> None:
        """Lane jobs of ``pool`` wait that neither its devices nor its reserve can take now: the
        scheduler reclaims lent reserve devices (Kueue's reclaimWithinCohort, Slurm's partition
        preemption), the borrower that loses least work first, until the first waiting lane job fits."""
        state = self.reserve.get(pool)
        if state is None:
            return
        while True:
            waiting = next((e[2] for e, _ in self._lane_waiting(pool)), None)
            if waiting is None:
                return
            j = self.jobs[waiting]
            if self.pools[pool].fits(j.units, j.unit_size) or state.fits(j.units, j.unit_size):
                self._fill(pool)
                if waiting in self.running:
                    continue
                return
            borrowers = [i for i in self.in_reserve if self.jobs[i].pool == pool and not self._lane_job(i)]
            if not borrowers:
                return
            victim = min(borrowers, key=lambda i: (self._loss_if_stopped(i), self.jobs[i].job_id))
            self.actions["preempt:lane-reserve"] += 1
            self._preempt(victim, resumes=self.jobs[victim].resumable)

    def _loss_if_stopped(self, idx: int) -> float:
        """GPU-seconds of work a preemption of running ``idx`` throws away now."""
        start, p0, _ = self.running[idx]
        j = self.jobs[idx]
        p1 = p0 + (self.now - start)
        ckpt = max(1.0, self.params.checkpoint_interval_minutes * 60)
        kept = (p1 // ckpt) * ckpt if j.resumable else 0.0
        return j.gpus * (p1 - kept)

    def _at_cap(self, project: str) -> bool:
        return self.held[project] > 0 and self.held[project] >= self.slot_cap.get(project, 0.0) - EPS

    def _within_cap(self, j) -> bool:
        held = self.held[j.project]
        return held <= EPS or held + j.gpus <= self.slot_cap.get(j.project, 0.0) + EPS

    def _reservation(self, pool, need: float) -> tuple[float, float]:
        """(when ``need`` device shares of ``pool`` are free as running jobs end, what is left then)."""
        free, shadow = self.pools[pool].free_units, float(self.now)
        for ends, _, idx in self.ending[pool]:
            if free >= need - EPS:
                break
            j = self.jobs[idx]
            free += j.units * j.unit_size
            shadow = float(ends)
        if free < need - EPS:
            return float("inf"), 0.0
        return shadow, free - need

    # --- a job's life ------------------------------------------------------------------
    def _start(self, idx: int, taken: list[int], reserve: bool = False) -> None:
        j = self.jobs[idx]
        self.running[idx] = (self.now, self.progress_s[idx], taken)
        self.patience_until.pop(idx, None)  # a session started in time: no give-up is due
        if reserve:
            self.in_reserve.add(idx)
        o = self.out[idx]
        if o.first_start_s is None:
            o.first_start_s = self.now
        self.usage.hold(j.project, j.gpus)
        self.held[j.project] += j.gpus
        self._count_lane(idx, +1)
        self.budget_rate[j.project] += j.gpus * self.weights.get(j.pool[1], 1.0)
        self.gen[idx] += 1
        ends = self.now + max(1, round(j.work_s - self.progress_s[idx]))
        self._push(ends, FINISH, idx)
        if not reserve:  # the backfill's reservations count the pool's own devices only
            bisect.insort(self.ending[j.pool], (ends, j.job_id, idx))
        self.ends_at[idx] = ends

    def _stop(self, idx: int, why: str) -> float:
        """End the job's current segment; its progress at the end (s)."""
        j = self.jobs[idx]
        start, p0, taken = self.running.pop(idx)
        ends = self.ends_at.pop(idx)
        reserve = idx in self.in_reserve
        if reserve:
            self.in_reserve.discard(idx)
            devices, state = self.reserve_devices[j.pool], self.reserve[j.pool]
        else:
            ending = self.ending[j.pool]
            ending.pop(bisect.bisect_left(ending, (ends, j.job_id, idx)))
            devices, state = self.pool_devices[j.pool], self.pools[j.pool]
        p1 = p0 + (self.now - start)
        self.out[idx].segments.append(Segment(start, self.now, tuple(devices[i] for i in taken), p0, p1, why))
        state.give_back(taken, j.unit_size)
        self.usage.release(j.project, j.gpus)
        self._count_lane(idx, -1)
        self.held[j.project] -= j.gpus
        if abs(self.held[j.project]) < EPS:
            self.held[j.project] = 0.0
        self.budget_rate[j.project] -= j.gpus * self.weights.get(j.pool[1], 1.0)
        self.progress_s[idx] = p1
        self.gen[idx] += 1
        return p1

    def _preempt(self, idx: int, resumes: bool) -> None:
        j = self.jobs[idx]
        p1 = self._stop(idx, "preempted")
        ckpt = max(1.0, self.params.checkpoint_interval_minutes * 60)
        p_new = (p1 // ckpt) * ckpt if resumes else 0.0
        o = self.out[idx]
        o.preemptions += 1
        o.lost_gpu_hours += j.gpus * (p1 - p_new) / 3600
        o.lost_active_gpu_hours += j.gpus * j.active_seconds(p_new, p1) / 3600
        self.progress_s[idx] = p_new
        self.preempt_count[(j.cluster, j.job_id)] = self.preempt_count.get((j.cluster, j.job_id), 0) + 1
        if not resumes and self._left_idle(idx, p1):
            # its owner had left it idle, as a reclaimed squatter's: nobody is there to submit it again
            o.abandoned = True
            if self.balance is not None:
                self.balance.demand[j.project] -= j.gpus
            return
        self._enqueue(idx)
        self._wait_with_patience(idx, self.now)

    def _left_idle(self, idx: int, p1: float) -> bool:
        """Whether the job's owner had left it: its GPUs were idle (activity under the squatting
        threshold) through the last squatting grace (30 min by default) of the run just stopped. A
        session nobody touched for that long is not one its user is there to submit again."""
        grace = max(1.0, self.squatting.grace_minutes * 60)
        if p1 < grace:
            return False
        return self.jobs[idx].active_seconds(p1 - grace, p1) < self.squatting.idle_threshold_ratio * grace

    def _reclaim(self, idx: int) -> None:
        self._stop(idx, "squatter-reclaimed")
        self.out[idx].reclaimed = True
        if self.balance is not None:  # it does not come back: its project no longer wants its GPUs
            self.balance.demand[self.jobs[idx].project] -= self.jobs[idx].gpus

    # --- the enforcement cycle (policies 2 and 3) ------------------------------------------
    def _view(self, idx: int) -> policies.JobView:
        j = self.jobs[idx]
        ok, why = self.verdict.get(j.project, (False, "no budget"))
        eff = min(self._min_runtime(j), self.cap_s)
        borrowed = self._borrowed(idx)
        funded = ok and eff > 0 and not borrowed
        reason = None if funded else (
            "burst on the quick lane's lent reserve" if borrowed
            else why if not ok else "no minimum runtime declared")
        run = self.running.get(idx)
        start = run[0] if run else None
        return policies.JobView(
            job=j,
            running=run is not None,
            start_s=start,
            funded=funded,
            unfunded_reason=reason,
            protected_until_s=start + eff if (funded and start is not None) else None,
            fs_rank=self.ranks.get(j.project),
        )

    def _forced_wait(self, idx: int) -> int:
        """Seconds from now that the rules alone keep waiting job ``idx`` from starting: no device
        of its pool (nor of the lane's reserve) is free, and every job holding one is work no rule
        lets a cycle preempt — exempt work, or funded work inside its minimum runtime — so nothing
        can start it before the first of them ends or leaves its protection. A lower bound on its
        wait under any order of the queue (another waiting job may take that device first); 0 when
        a device was free or a job that may be preempted held one (the rails on lost work and
        victim size are left out, so the bound stays below what they allow). Protection is taken
        as the last cycle's budget verdicts give it: a budget that runs dry before the bound ends
        could lift it sooner."""
        j = self.jobs[idx]
        states = (self.pools.get(j.pool), self.reserve.get(j.pool))
        if any(s is not None and s.fits(j.units, j.unit_size) for s in states):
            return 0
        holders = [r for _, _, r in self.ending[j.pool]]
        holders += [r for r in self.in_reserve if self.jobs[r].pool == j.pool]
        release = None
        for r in holders:
            ends = self.ends_at[r]
            if not _exempt(self.jobs[r], self.enforcement):
                until = self._view(r).protected_until_s
                if until is None or until <= self.now:
                    return 0  # unfunded, or past its minimum runtime: a cycle may take it
                ends = min(ends, until)
            release = ends if release is None else min(release, ends)
        # within the run: its waits are measured to the horizon (a job still waiting there counts that)
        return 0 if release is None else max(0, min(release, self.trace.horizon_s) - self.now)

    def _min_runtime(self, j) -> int:
        """The job's declared minimum runtime (s), or the what-if default for jobs that declare none."""
        return j.min_runtime_s or int(self.params.default_min_runtime_hours * 3600)

    def _cycle(self) -> None:
        t = self.now
        self.verdict = self.funding.verdicts(t)
        used = self.usage.usage()
        if self.credit:
            used = credited_usage(used, self.balance.credit())
        self.ranks, self.fs_projects, self.over = policies.fs_ranks(self.org_nodes, used, self.tree)
        # enforce's priority per kind of job present (policies.priorities): same value for the same key
        self.reps, self.prio = {}, {}
        firsts = [entries[0][2] for groups in self.waiting.values() for entries in groups.values() if entries]
        for idx in [*self.running, *firsts]:
            key = self.static[idx]
            if key not in self.reps:
                self.reps[key] = self._view(idx)
        if self.reps:
            self.prio = policies.priorities(self.reps, self.fs_projects, self.trace.origin, self.ranking, self.over)
        self.bands.clear()
        findings = []
        if self.policy in (RECLAIM, QUICK):
            for idx in sorted(self.running):
                start, p0, _ = self.running[idx]
                f = policies.squat_finding(
                    self.jobs[idx],
                    seg_start_s=start,
                    progress_start_s=p0,
                    now_s=t,
                    origin=self.trace.origin,
                    threshold=self.squatting.idle_threshold_ratio,
                    squatting=self.squatting,
                )
                if f is not None:
                    findings.append(f)
        self._decide(findings, sorted(self.waiting, key=_pool_order))
        for pool in self.reserve:  # lane jobs that became lane work since (a project's count fell)
            self._give_back_reserve(pool)

    def _arrival(self, idx: int) -> None:
        """A lane job found no GPU on arrival: gpuledger's cycle runs for its pool at once (live, a
        sensor on new pending lane jobs), with the ranks and verdicts of the last full cycle — the
        scheduler preempting for it through enforce's rails, so it need not wait for the next cycle.
        With a lane reserve, the scheduler first takes lent reserve devices back."""
        pool = self.jobs[idx].pool
        self._give_back_reserve(pool)
        if idx in self.running:
            return
        self._decide([], [pool])

    def _decide(self, findings: list, pools: list) -> None:
        """enforce.policy.decide on the heads of ``pools``' queues, the squatters among ``findings``
        and the running jobs a preemption may touch; its actions carried out, then the pools filled."""
        t = self.now
        head = [i for pool in pools for i in self._head(pool, self.params.queue_head)]
        # Demand preemption weighs like against like (one pool), so the cycle needs the running jobs
        # of pools where funded (or exempt) work waits and does not fit, and the squatters.
        head_views = {idx: self._view(idx) for idx in head}
        short = {
            self.jobs[i].pool
            for i, v in head_views.items()
            if (v.funded or _exempt(self.jobs[i], self.enforcement) or self._lane_now(i))
            and not self.pools[self.jobs[i].pool].fits(self.jobs[i].units, self.jobs[i].unit_size)
        }
        # ... and of those only the ones a preemption may touch: protected and exempt jobs are never
        # candidates (decide's rails), and a candidate must rank below the best waiting funded job
        best = defaultdict(lambda: -1)
        for i, v in head_views.items():
            if (v.funded or _exempt(self.jobs[i], self.enforcement) or self._lane_now(i)) and self.jobs[i].pool in short:
                best[self.jobs[i].pool] = max(best[self.jobs[i].pool], self._group_priority(self.static[i], i))
        squatters = {(f.cluster, f.job_id) for f in findings if f.severity in STAGES}
        chosen = []
        for i in sorted(self.running):
            j = self.jobs[i]
            if (j.cluster, j.job_id) in squatters:
                chosen.append(i)
            elif (
                j.pool in short
                and self._group_priority(self.static[i], i) < best[j.pool]
                and not _exempt(j, self.enforcement)
            ):
                v = self._view(i)
                if not (v.funded and v.protected_until_s is not None and t < v.protected_until_s):
                    chosen.append(i)
        findings = [f for f in findings if (f.cluster, f.job_id) in squatters]
        if not chosen:
            self._fill_all()
            return  # nothing a cycle could do: no squatter, no funded work short of GPUs
        views = {i: self._view(i) for i in chosen}
        views.update(head_views)
        running_views = [views[i] for i in chosen]
        free = {(pool[0], pool_label(pool)): s.free_units for pool, s in self.pools.items()}
        free_whole = {(pool[0], pool_label(pool)): float(s.whole_free_units) for pool, s in self.pools.items()}
        actions = policies.cycle_actions(
            origin=self.trace.origin,
            now_s=t,
            views=running_views + [views[i] for i in head],
            findings=findings,
            warnings=self.warnings,
            preemptions=self.preempt_count,
            applied=self.applied,
            free=free,
            free_whole=free_whole,
            fs_projects=self.fs_projects,
            policy=self.enforcement,
            over=self.over,
            behind=self._behind_owed(),
        )
        self.decide_calls += 1
        now = self.trace.origin + timedelta(seconds=t)
        for a in actions:
            if a.priority is not None:
                self.applied[a.job_id] = a.priority
            if a.action == WARN:
                policies.record_warning(self.warnings, a, now)
                self.out[self.index[a.job_id]].warnings += 1
                self.actions["warn"] += 1
            elif a.action == PREEMPT:
                idx = self.index[a.job_id]
                if idx not in self.running:
                    continue
                self.actions[f"preempt:{a.rule}"] += 1
                if a.rule == "squatter":
                    self._reclaim(idx)
                else:
                    self._preempt(idx, resumes=a.mode == "requeue")
        self._fill_all()

    def _behind_owed(self) -> frozenset[str] | None:
        """The projects delivered less than they are owed so far in the running settlement period
        (allocated < owed; BalanceTracker), when policy.enforcement.spare_behind_owed is on."""
        if not self.spare:
            return None
        b = self.balance
        return frozenset(p for p, owed in b.owed.items() if b.allocated.get(p, 0.0) < owed - 1e-9)

    def _fill_project(self, project: str) -> None:
        """Fill the pools where ``project`` has waiting jobs (slot limits: its cap has room)."""
        for pool in sorted(self.waiting, key=_pool_order):
            if any(key[1] == project and entries for key, entries in self.waiting[pool].items()):
                self._fill(pool)

    def _fill_all(self) -> None:
        for pool in sorted(self.pools, key=_pool_order):
            self._fill(pool)


def _tagged(entries: list):
    """(entry, the list it is in), for each entry in order."""
    for e in entries:
        yield e, entries


def _pool_order(pool) -> tuple:
    return (pool[0], pool[1], pool[2] or "")


def slot_caps(org_nodes, physical_gpus: int) -> dict[str, float]:
    """Project -> the GPUs it may hold under slot limits: its global share × the physical GPUs."""
    none = pl.LazyFrame({"node": [], "u": []}, schema={"node": pl.String, "u": pl.Float64})
    shares = fair_share(org_nodes, none, usage_col="u").select("node", "share_global", "fs_rank").collect()
    return {n: float(s) * physical_gpus for n, s, r in shares.iter_rows() if r is not None}


def exempt_rule(cfg: Config):
    """The predicate of exempt jobs under ``cfg`` (policy.enforcement's exempt kinds and
    namespaces: on top, never preempted), for the figures that set exempt work apart."""
    enforcement = cfg.policy.enforcement
    return lambda job: _exempt(job, enforcement)


def _exempt(job, enforcement) -> bool:
    return bool(
        (job.kind and job.kind in enforcement.exempt_kinds)
        or (job.namespace and job.namespace in enforcement.exempt_namespaces)
    )


def simulate(
    trace: Trace,
    cfg: Config,
    policy: str,
    params: Params | None = None,
    progress: Callable[[float], None] | None = None,
) -> RunResult:
    """Replay ``trace`` under ``policy`` (model.PRIORITY / SLOT_LIMITS / FAIR_SHARE / RECLAIM)."""
    return Simulation(trace, cfg, policy, params, progress).run()


__all__ = ["FAIR_SHARE", "PRIORITY", "RECLAIM", "SLOT_LIMITS", "Simulation", "exempt_rule", "simulate"]
