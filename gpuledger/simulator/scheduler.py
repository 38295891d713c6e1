"""The simulated cluster's scheduler: a queue per pool, ordered by fair share, with full backfill.

The cluster runs under gpuledger's policy: at every event (a job ends, jobs are submitted) each
pool that changed is filled. Among the jobs waiting for that pool that fit now, the job of the
project with the lowest fair-share key goes first — (decayed usage + running GPUs × ``TAU_H``) ÷
global share, usage decayed with the config's half-life, as the fair-share rank orders projects —
and within a project debug jobs, sessions and production replicas first, then submission order. A job that does not fit is passed
over (backfill) and a pool is filled until nothing waiting fits, so no pool keeps free lanes
while a job that fits them waits, and a job that cannot be placed never holds up another pool.
Declared priorities (inflated, demand.py) are recorded but not obeyed. A notebook session not
started ``SESSION_PATIENCE_S`` after it was opened is given up (gpuledger.rules.job_class); a
planted squatter is opened at the first instant its pool has room, before the queue. A training chain's next
segment takes the nodes its previous segment left, at the same instant (it resumes from its
checkpoint). Users top up their queues every ``demand.TOP_UP_S`` (closed loop), and production
replicas to traffic (``Demand.serving_gpus``).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from gpuledger.simulator.cluster import GPUS_PER_NODE
from gpuledger.simulator.demand import TOP_UP_S, Demand
from gpuledger.simulator.pools import Placer
from gpuledger.simulator.specs import JobSpec

STARVED = 0.5  # a small job's project this far behind a whole-node job's takes a free node first
TAU_H = 4.0  # running GPUs count as this many hours of usage: one pass never hands a pool to one project
_END, _SUBMIT, _TOP_UP, _GIVE_UP = 0, 1, 2, 3  # at one instant: free lanes first, then new jobs, then the users look


@dataclass
class Schedule:
    """What ran: every job submitted (specs, by index) and, for those that started, (start, lanes)."""

    specs: list[JobSpec]
    started: dict[int, tuple[int, list[int]]] = field(default_factory=dict)
    abandoned: dict[int, int] = field(default_factory=dict)  # index -> when its user gave up (never started)


class _FairShare:
    """Decayed usage per project (GPU-hours), advanced to each event."""

    def __init__(self, shares: dict[str, float], half_life_s: float, start_s: int):
        self.shares = shares
        self.half_life_s = half_life_s
        self.usage = dict.fromkeys(shares, 0.0)
        self.running = dict.fromkeys(shares, 0.0)
        self.at = start_s

    def advance(self, t: int) -> None:
        dt = t - self.at
        if dt <= 0:
            return
        keep = 2.0 ** (-dt / self.half_life_s)
        for p in self.usage:
            self.usage[p] = self.usage[p] * keep + self.running[p] * dt / 3600.0
        self.at = t

    def key(self, project: str) -> float:
        return (self.usage[project] + self.running[project] * TAU_H) / max(self.shares[project], 1e-12)


def run(demand: Demand, placer: Placer, *, start_s: int, end_s: int, half_life_s: float) -> Schedule:
    """Simulate [start_s, end_s): submissions, placements and ends. Deterministic for the
    demand's random generator."""
    sched = Schedule(specs=[])
    specs = sched.specs
    fair = _FairShare(demand.shares, half_life_s, start_s)
    outstanding = dict.fromkeys(demand.projects, 0.0)  # GPUs running or queued of the closed loop
    serving = dict.fromkeys(demand.projects, 0.0)  # GPUs of production replicas (they follow traffic)
    load: dict[str, int] = {}  # lanes running or queued per pool: where users see room
    open_sessions: dict[str, int] = {}  # lanes of sessions running or waiting per pool
    opening: dict[str, list[int]] = {}  # pool -> planted squatters due, to start when it has room
    # pool -> project -> lanes wanted -> heap of (not debug, submit, index)
    queues: dict[str, dict[str, dict[int, list[tuple[int, int, int]]]]] = {}
    events: list[tuple[int, int, int, int]] = []  # (time, order, sequence, job index or -1)
    seq = 0

    def push(t: int, order: int, idx: int) -> None:
        nonlocal seq
        heapq.heappush(events, (t, order, seq, idx))
        seq += 1

    def submit(spec: JobSpec) -> None:
        specs.append(spec)
        load[spec.pool] = load.get(spec.pool, 0) + spec.count
        push(spec.submit_s, _SUBMIT, len(specs) - 1)
        if spec.patience_s is not None:
            push(spec.submit_s + spec.patience_s, _GIVE_UP, len(specs) - 1)

    def first_in_project(spec: JobSpec) -> bool:
        """Debug jobs, sessions and production replicas start before the rest of their project's work."""
        return spec.debug or spec.patience_s is not None or demand.serves(spec)

    def give_up(idx: int, t: int) -> None:
        """A session not started by ``t``: its user gave up; out of its queue, never started."""
        spec = specs[idx]
        heap = queues[spec.pool][spec.project][spec.count]
        heap.remove(next(e for e in heap if e[2] == idx))
        heapq.heapify(heap)
        load[spec.pool] -= spec.count
        open_sessions[spec.pool] -= spec.count
        sched.abandoned[idx] = t

    def start(idx: int, t: int, lanes: list[int]) -> None:
        spec = specs[idx]
        sched.started[idx] = (t, lanes)
        fair.running[spec.project] += spec.gpus
        push(t + spec.duration_s, _END, idx)

    def next_job(by_project, fits) -> tuple[float, str, int] | None:
        """(fair-share key, project, lanes wanted) of the job to start next among those ``fits``
        allows: the project of the lowest key, its first such job in queue order."""
        best = None
        for project, by_count in by_project.items():
            head = None
            for count, heap in by_count.items():
                if heap and (head is None or heap[0] < head[0]) and fits(count):
                    head = (heap[0], count)
            if head is not None:
                rank = (fair.key(project), project)
                if best is None or rank < best[0]:
                    best = (rank, project, head[1])
        return None if best is None else (best[0][0], best[1], best[2])

    def fill(pool: str, t: int) -> None:
        """Start waiting jobs in ``pool`` until none fits, in fair-share order. Whole-GPU pools
        keep node shapes: a job of fewer than 8 GPUs goes first to a node already in use, a free
        node goes first to a whole-node job — unless a project with a small job waiting is owed
        far more (its fair-share key under ``STARVED`` times the whole-node job's) — and only then
        to smaller jobs. Else small jobs would break every node as it frees and whole-node jobs
        would seldom start. No free lane is ever held back."""
        for idx in list(opening.get(pool, ())):  # planted squatters first: opened when there is room
            spec = specs[idx]
            lanes = placer.take(pool, spec.count)
            if lanes is not None:
                opening[pool].remove(idx)
                spec.submit_s = t  # the user opened it now, seeing the GPUs free
                start(idx, t, lanes)
        by_project = queues.get(pool)
        whole = pool.startswith("whole:")
        while by_project and placer.free_total.get(pool, 0) > 0:
            chosen = None
            if whole:
                chosen = next_job(by_project, lambda c: c < GPUS_PER_NODE and placer.fits_partly_used(pool, c))
                if chosen is None:
                    node_job = next_job(by_project, lambda c: c >= GPUS_PER_NODE and placer.fits(pool, c))
                    small = next_job(by_project, lambda c: c < GPUS_PER_NODE and placer.fits(pool, c))
                    chosen = (small if node_job is None or (small is not None and small[0] < STARVED * node_job[0])
                              else node_job)
            else:
                chosen = next_job(by_project, lambda c: placer.fits(pool, c))
            if chosen is None:
                return
            _, project, count = chosen
            _, _, idx = heapq.heappop(by_project[project][count])
            start(idx, t, placer.take(pool, count))

    for spec in demand.initial():
        (serving if demand.serves(spec) else outstanding)[spec.project] += spec.gpus
        submit(spec)
    for t in range(start_s, end_s, TOP_UP_S):
        push(t, _TOP_UP, -1)
    while events and events[0][0] < end_s:
        t = events[0][0]
        fair.advance(t)
        dirty: set[str] = set()
        giving_up: list[int] = []  # after this instant's placements: a session placed now was in time
        while events and events[0][0] == t:
            _, order, _, idx = heapq.heappop(events)
            if order == _END:
                spec = specs[idx]
                lanes = sched.started[idx][1]
                placer.give_back(lanes)
                load[spec.pool] -= spec.count
                fair.running[spec.project] -= spec.gpus
                if demand.serves(spec):
                    serving[spec.project] -= spec.gpus
                elif spec.patience_s is None:
                    outstanding[spec.project] -= spec.gpus
                else:  # a session: opened outside the loop (demand.sessions)
                    open_sessions[spec.pool] -= spec.count
                dirty.add(spec.pool)
                if spec.chain >= 0:  # the next segment resumes on the nodes just left
                    nxt = demand.next_segment(spec, t)
                    specs.append(nxt)
                    load[nxt.pool] += nxt.count
                    outstanding[nxt.project] += nxt.gpus
                    lanes = placer.take(nxt.pool, nxt.count)
                    if lanes is not None:
                        start(len(specs) - 1, t, lanes)
                    else:  # never so far: its nodes were whole; then it queues like any job
                        specs.pop()
                        load[nxt.pool] -= nxt.count
                        submit(nxt)
            elif order == _SUBMIT and specs[idx].opens_when_free:
                opening.setdefault(specs[idx].pool, []).append(idx)
                dirty.add(specs[idx].pool)
            elif order == _SUBMIT:
                spec = specs[idx]
                heapq.heappush(queues.setdefault(spec.pool, {}).setdefault(spec.project, {})
                               .setdefault(spec.count, []), (0 if first_in_project(spec) else 1,
                                                              spec.submit_s, idx))
                dirty.add(spec.pool)
            elif order == _GIVE_UP:
                giving_up.append(idx)
            else:
                seen = dict(load)
                for spec in demand.top_up(t, outstanding, seen, serving) + demand.sessions(t, seen, open_sessions):
                    if spec.submit_s < end_s:
                        submit(spec)
        for pool in sorted(dirty):
            fill(pool, t)
        for idx in giving_up:
            if idx not in sched.started:
                give_up(idx, t)
    return sched
