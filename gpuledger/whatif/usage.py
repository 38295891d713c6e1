"""Usage per project as the simulation runs: the same two modes as gpuledger.analytics.usage
(sliding window W, exponential decay with half-life H), kept incrementally so each cycle costs
O(projects) instead of a pass over the whole history. tests/whatif/test_whatif.py checks it against
analytics.usage.project_usage on the run's own allocations (the plain path).

Units: allocated GPU-hours. Between two events every project's allocation rate r (GPUs held) is
constant, so over Δt: decayed u ← u·2^(−Δt/H) + r·(H/ln 2)(1 − 2^(−Δt/H)) (the exact integral of
r·2^(−age/H)); the window keeps GPU-hours per clock hour and sums the buckets inside
[now − W, now), the oldest bucket pro rata.
"""

from __future__ import annotations

import math
from collections import defaultdict, deque

from gpuledger.analytics.delivery_balance import next_balance, open_credit


class UsageTracker:
    def __init__(
        self, projects: list[str], *, mode: str, window_s: float, half_life_s: float, origin_s: float = 0
    ):
        self.mode = mode
        self.window_s = window_s
        self.half_life_s = half_life_s
        self.now = origin_s
        self.decayed = dict.fromkeys(projects, 0.0)  # GPU-hours
        self.buckets: deque[tuple[int, dict[str, float]]] = deque()  # (hour index, project -> GPU-hours)
        self.rate: dict[str, float] = defaultdict(float)  # GPUs held now

    def advance(self, t: float) -> None:
        """Accumulate the current rates up to ``t`` (seconds)."""
        dt = t - self.now
        if dt <= 0:
            return
        f = 2.0 ** (-dt / self.half_life_s)
        gain = self.half_life_s / math.log(2) * (1 - f) / 3600.0  # GPU-hours per GPU held
        for p in self.decayed:
            self.decayed[p] *= f
        for p, r in self.rate.items():
            if r > 0:
                self.decayed[p] = self.decayed.get(p, 0.0) + r * gain
        if self.mode == "window" and any(r > 0 for r in self.rate.values()):
            t0 = self.now
            while t0 < t:
                hour = int(t0 // 3600)
                edge = min(t, (hour + 1) * 3600)
                if not self.buckets or self.buckets[-1][0] != hour:
                    self.buckets.append((hour, defaultdict(float)))
                bucket = self.buckets[-1][1]
                for p, r in self.rate.items():
                    if r > 0:
                        bucket[p] += r * (edge - t0) / 3600.0
                t0 = edge
        self.now = t
        oldest = (t - self.window_s) // 3600
        while self.buckets and self.buckets[0][0] < oldest:
            self.buckets.popleft()

    def hold(self, project: str, gpus: float) -> None:
        self.rate[project] += gpus

    def release(self, project: str, gpus: float) -> None:
        self.rate[project] -= gpus
        if abs(self.rate[project]) < 1e-9:
            self.rate[project] = 0.0

    def usage(self) -> dict[str, float]:
        """GPU-hours per project in the configured mode at ``now``."""
        if self.mode != "window":
            return dict(self.decayed)
        lo = self.now - self.window_s
        out = dict.fromkeys(self.decayed, 0.0)
        for hour, bucket in self.buckets:
            start = hour * 3600
            keep = 1.0
            if start < lo:  # the oldest bucket: the part inside the window, pro rata
                keep = max(0.0, (start + 3600 - lo) / 3600)
            for p, v in bucket.items():
                out[p] = out.get(p, 0.0) + v * keep
        return out


class BalanceTracker:
    """The delivery balance (analytics.delivery_balance) as the simulation runs, for ranking fair
    share on usage less what the cluster still owes each project (policy.usage.delivery_balance).

    Per project it accrues, within the running settlement period (``period_s`` from time 0, as the
    what-if settles delivery): owed = ∫ min(entitled rate, demand rate) dt, entitled rate = the
    project's global share x installed GPUs, demand rate = GPUs of its jobs submitted and not done
    (waiting or running); allocated = ∫ GPUs held dt. At each period's end the balance carries by
    delivery_balance.next_balance. The owed here takes the minimum instant by instant, the
    analytics hour by hour: within an hour it can only be lower (it ranks; the metrics are
    computed by the analytics after the run)."""

    def __init__(self, entitled: dict[str, float], rate: dict[str, float], *, period_s: float,
                 origin_s: float = 0):
        self.entitled = entitled  # project -> GPUs its share promises
        self.rate = rate  # project -> GPUs held now (UsageTracker.rate: one record of it)
        self.period_s = period_s
        self.now = origin_s
        self.period = int(origin_s // period_s)
        self.demand: dict[str, float] = defaultdict(float)  # GPUs wanted now
        self.owed: dict[str, float] = defaultdict(float)  # GPU-hours, running period
        self.allocated: dict[str, float] = defaultdict(float)
        self.carried: dict[str, float] = defaultdict(float)  # balance carried into the running period

    def advance(self, t: float) -> None:
        while self.now < t:
            edge = min(t, (self.period + 1) * self.period_s)
            hours = (edge - self.now) / 3600.0
            for p in set(self.demand) | set(self.rate):
                self.owed[p] += min(self.entitled.get(p, 0.0), max(0.0, self.demand.get(p, 0.0))) * hours
                self.allocated[p] += max(0.0, self.rate.get(p, 0.0)) * hours
            self.now = edge
            if edge == (self.period + 1) * self.period_s:  # the period ends: settle and carry
                for p in set(self.owed) | set(self.carried):
                    self.carried[p] = next_balance(self.carried[p], self.owed[p], self.allocated[p])
                self.owed.clear()
                self.allocated.clear()
                self.period += 1

    def credit(self) -> dict[str, float]:
        """Project -> what is still open of its carried balance (delivery_balance.open_credit)."""
        return {p: open_credit(c, self.owed.get(p, 0.0), self.allocated.get(p, 0.0))
                for p, c in self.carried.items() if c > 0}
