"""The demand stage's candidates as arrays: each cluster's preemptible running jobs (not exempt, not
protected) once a cycle, with what each waiting job asks of them — rank below it, same pool, not taken,
whole GPUs when it needs whole ones — answered by numpy masks instead of a Python scan per waiting job.

At Kueue's large shape (1,000 projects, ~50,000 jobs, issue 41) a cycle has ~12,000 waiting jobs
each looking at ~8,000 running ones; the scan was most of the cycle (BENCHMARKS "Enforcement cycle
at Kueue's large shape"). The rails' verdicts (too costly, held back) depend on the job alone, so
they are judged once per job here; each held job is noted once per cycle, as before."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from gpuledger.enforce.model import JobFacts, Situation
from gpuledger.enforce.rails import (
    exemption,
    held_by_rails,
    lost_minutes,
    protected,
    spared_behind_owed,
    spares_own_project,
    stale,
)

Key = tuple[str, str]
TOL = 1e-9


def whole_gpus(job: JobFacts) -> bool:
    """The job holds whole GPUs (1, 2, 8 ...), not slices or fractions of them."""
    return job.gpus >= 1 - TOL and abs(job.gpus - round(job.gpus)) < TOL


def too_costly(job: JobFacts, now, policy) -> bool:
    """A funded job past its minimum runtime whose preemption now would lose more than
    ``max_lost_minutes`` of work: it waits for its next checkpoint. Unfunded work runs on burst
    and goes whenever funded work needs its GPUs."""
    if policy.max_lost_minutes is None or not job.funded:
        return False
    return lost_minutes(job, now, policy) > policy.max_lost_minutes + TOL


def preemptible_by_cluster(situation: Situation, policy) -> dict[str, list[JobFacts]]:
    """The running jobs that may go for waiting work at all this cycle (not exempt, not
    protected), per cluster, in the situation's order."""
    out: dict[str, list[JobFacts]] = {}
    for j in situation.jobs:
        if j.running and not exemption(j, policy) and not protected(j, situation.now):
            out.setdefault(j.cluster, []).append(j)
    return out


class _Cluster:
    """One cluster's preemptible jobs, column by column (position i is ``jobs[i]``)."""

    def __init__(self, jobs: list[JobFacts], situation: Situation, policy, targets, taken: set[Key]) -> None:
        now = situation.now
        self.jobs = jobs
        self.rank = np.array([targets[j.key][0] for j in jobs], dtype=np.int64)
        self.gpus = np.array([j.gpus for j in jobs], dtype=np.float64)
        self.whole = np.array([whole_gpus(j) for j in jobs], dtype=bool)
        models = sorted({j.gpu_model for j in jobs if j.gpu_model is not None})
        self.model_code = {m: i for i, m in enumerate(models)}
        self.model = np.array([self.model_code.get(j.gpu_model, -1) for j in jobs], dtype=np.int64)
        parts = sorted({j.partition for j in jobs if j.partition})
        self.part_code = {p: i for i, p in enumerate(parts)}
        self.part = np.array([self.part_code[j.partition] if j.partition else -1 for j in jobs], dtype=np.int64)
        projects = sorted({j.project for j in jobs})
        self.project_code = {p: i for i, p in enumerate(projects)}
        self.project = np.array([self.project_code[j.project] for j in jobs], dtype=np.int64)
        self.free = np.array([j.key not in taken for j in jobs], dtype=bool)  # not chosen yet
        self._fits: dict[tuple, np.ndarray] = {}  # (model, partition, whole GPUs) -> who can serve it
        self.short = np.zeros(len(jobs), dtype=bool)  # noted once this cycle (held back, or could not serve)
        self.costly = np.array([too_costly(j, now, policy) for j in jobs], dtype=bool)
        self.why = [stale(situation, policy, j.cluster, "jobs") or held_by_rails(j, situation, policy)
                    or spared_behind_owed(j, situation, policy) for j in jobs]
        self.held = np.array([w is not None for w in self.why], dtype=bool) & ~self.costly
        self.kept = self.costly | self.held  # may not go now, whoever waits
        self.lost = [lost_minutes(j, now, policy) for j in jobs]
        self.cost = np.array([m * j.gpus for m, j in zip(self.lost, jobs, strict=True)], dtype=np.float64)
        self.cost_per_gpu = self.cost / np.maximum(self.gpus, TOL)
        order = sorted(range(len(jobs)), key=lambda i: jobs[i].key)
        self.key_order = np.empty(len(jobs), dtype=np.int64)
        self.key_order[order] = np.arange(len(jobs))
        self.at = {j.key: i for i, j in enumerate(jobs)}

    def take(self, i: int) -> None:
        """Job ``i`` is chosen: no later waiting job sees it."""
        self.free[i] = False
        self._fits.clear()  # answered while it was free

    def fits(self, model: str | None, partition: str | None, whole_gpus: bool) -> np.ndarray:
        """Whose GPUs a request can use and are not taken: same model (any, when it names none),
        same partition when both are known, whole GPUs when it needs them. Asked per waiting job,
        the same few requests over and over: each answered once until a job is taken."""
        key = (model, partition, whole_gpus)
        if key not in self._fits:
            mask = self.free.copy()
            if model is not None:
                mask &= self.model == self.model_code.get(model, -2)
            if partition:
                mask &= (self.part == -1) | (self.part == self.part_code.get(partition, -2))
            if whole_gpus:
                mask &= self.whole
            self._fits[key] = mask
        return self._fits[key]


class Preemptible:
    """The cycle's index of preemptible running jobs; selections are (cluster, positions)."""

    def __init__(self, situation: Situation, policy, targets, taken: set[Key]) -> None:
        self.clusters = {c: _Cluster(js, situation, policy, targets, taken)
                         for c, js in preemptible_by_cluster(situation, policy).items()}
        self.own_project_spared = spares_own_project(policy)  # rails.own_project_spared, as a mask

    def below(self, w: JobFacts, rank: int, *, whole_gpus: bool) -> tuple[_Cluster | None, np.ndarray]:
        """Running jobs whose GPUs ``w`` can use and that may go for it: not chosen yet, below
        ``rank``, of whole GPUs when ``whole_gpus``; same model (any, when ``w`` names none), same
        partition when both are known; of another project than ``w``'s when
        ``policy.spare_own_project`` (rails.own_project_spared). In the situation's order."""
        c = self.clusters.get(w.cluster)
        if c is None:
            return None, np.empty(0, dtype=np.int64)
        mask = c.fits(w.gpu_model, w.partition, whole_gpus) & (c.rank < rank)
        if self.own_project_spared:
            mask &= c.project != c.project_code.get(w.project, -1)
        return c, np.flatnonzero(mask)

    def own_project_below(self, w: JobFacts, rank: int, *, whole_gpus: bool) -> int:
        """How many running jobs of ``w``'s own project :meth:`below` leaves out for it (they would
        serve it otherwise; ``policy.spare_own_project``): 0 when the rule is off."""
        c = self.clusters.get(w.cluster)
        if c is None or not self.own_project_spared:
            return 0
        mask = c.fits(w.gpu_model, w.partition, whole_gpus) & (c.rank < rank)
        return int(np.count_nonzero(mask & (c.project == c.project_code.get(w.project, -1))))

    def hold_back(self, c: _Cluster | None, at: np.ndarray, words: str, policy, notes
                  ) -> tuple[np.ndarray, int, str | None]:
        """(the positions that may go now, how many others are held back, why the first of those
        is). A funded one whose preemption would lose more than ``max_lost_minutes`` of work waits
        for its checkpoint; the others are held by the stale-data guard, the live view, the
        cool-down or, one that cannot checkpoint, its project's being behind what it is owed
        (``spare_behind_owed``). Each held job is noted once per cycle."""
        if c is None or not len(at):
            return at, 0, None
        kept = c.kept[at]
        for i in at[kept & ~c.short[at]]:  # costly and held are apart (held: not costly)
            c.short[i] = True
            notes[c.jobs[i].key].append(
                f"ranks below waiting {words}, but a preemption now would lose {c.lost[i]:.0f} min of work (more "
                f"than max_lost_minutes {policy.max_lost_minutes:g})" if c.costly[i]
                else f"ranks below waiting {words}, but {c.why[i]}")
        held = c.held[at]
        n_held = int(np.count_nonzero(held))
        return at[~kept], n_held, c.why[at[np.argmax(held)]] if n_held else None

    @staticmethod
    def within(c: _Cluster | None, at: np.ndarray, need: float) -> np.ndarray:
        """Those holding no more GPUs than ``need`` (a larger victim leaves GPUs idle)."""
        return at if c is None else at[c.gpus[at] <= need + TOL]

    @staticmethod
    def cheapest(c: _Cluster | None, at: np.ndarray, n: int) -> list[JobFacts]:
        """The ``n`` that lose least work per GPU (then the larger, then by key)."""
        if c is None or not len(at):
            return []
        order = np.lexsort((c.key_order[at], -c.gpus[at], c.cost_per_gpu[at]))
        return [c.jobs[i] for i in at[order[:n]]]

    @staticmethod
    def jobs(c: _Cluster | None, at: np.ndarray) -> list[JobFacts]:
        return [] if c is None else [c.jobs[i] for i in at]

    @staticmethod
    def gpus(c: _Cluster | None, at: np.ndarray) -> float:
        """Their GPUs, summed left to right (as ``sum`` over the jobs would)."""
        return 0.0 if c is None or not len(at) else float(np.cumsum(c.gpus[at])[-1])

    @staticmethod
    def not_noted(c: _Cluster | None, at: np.ndarray) -> list[JobFacts]:
        """Those not noted yet this cycle, now marked noted."""
        if c is None:
            return []
        fresh = at[~c.short[at]]
        c.short[fresh] = True
        return [c.jobs[i] for i in fresh]

    def take(self, chosen: Iterable[JobFacts]) -> None:
        for j in chosen:
            c = self.clusters.get(j.cluster)
            if c is not None and j.key in c.at:
                c.take(c.at[j.key])
